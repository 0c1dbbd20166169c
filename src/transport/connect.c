/* connect.c — bringing a mesh up: the TCP connections (mesh.c, with their
 * handshake), one path per channel and peer (encrypted when the handshake
 * said so: path_sealed.c), then what the pairs under one kernel can do
 * besides (cma.c: read each other's memory; shm_link.c sets up the
 * shared-memory rings of shm_ring.c, which replace those pairs' paths).  The
 * set-up exchanges of cma.c and shm_link.c go on the raw connections before
 * any path moves a byte: they carry process ids, boot ids and random tokens,
 * never job data. */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include "mesh.h"
#include "path.h"
#include "transport.h"

spmd_status spmd__mesh_connect(spmd__mesh *m, spmd_store *store, const char *bind_host, int64_t deadline,
                               char *err, size_t errlen) {
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    m->oversubscribed = ncpu > 0 && m->local_world > ncpu;
    /* Busy-polling pays when every rank of the host has a core.  When ranks
     * outnumber cores a waiting rank yields at every few looks, so its core
     * goes to a rank that has work; sleeping sooner than ~100 µs made small
     * collectives at 8 ranks on 2 cores 2-3x slower (a futex sleep and wake,
     * plus the slow fence, per wait) than polling by turns. */
    const long spin_default = m->oversubscribed ? 100 : 200;
    long spin_us = spin_default;
    if (spmd__env_int("SPMD_SPIN_US", 0, 1000000, &spin_us) != SPMD_OK) spin_us = spin_default;
    m->spin_ns = (uint64_t)spin_us * 1000u;
    spmd__link_keys *keys = calloc((size_t)SPMD__NCHAN * (size_t)m->world, sizeof *keys);
    if (!keys) return spmd__fail(err, errlen, SPMD_ERR_NOMEM, "out of memory");
    spmd_status st = spmd__mesh_build(store, m->rank, m->world, m->job_id, SPMD__NCHAN, bind_host, m->fd, keys,
                                      &m->watch, deadline, err, errlen);
    for (int c = 0; c < SPMD__NCHAN && !st; c++)
        for (int p = 0; p < m->world && !st; p++) {
            if (p == m->rank) continue;
            const spmd__link_keys *k = &keys[c * m->world + p];
            m->path[c][p] = k->on ? spmd__path_sealed(m->fd[c][p], p, k->tx, k->rx) : spmd__path_tcp(m->fd[c][p], p);
            if (!m->path[c][p]) st = spmd__fail(err, errlen, SPMD_ERR_NOMEM, "out of memory");
        }
    spmd__auth_wipe(keys, sizeof *keys * (size_t)SPMD__NCHAN * (size_t)m->world);
    free(keys);
    if (st) return st;
    if ((st = spmd__cma_negotiate(m, deadline, err, errlen))) return st;
    int mode = spmd__transport_mode();
    return spmd__shm_link_setup(m, spmd__transport_wants_shm() ? mode : SPMD__TRANSPORT_TCP, deadline, err, errlen);
}
