/* connect.c — bringing a mesh up: the TCP connections (mesh.c, with their
 * handshake), then what the pairs under one kernel can do besides (cma.c:
 * read each other's memory; shm_link.c: shared-memory rings), then one path
 * per channel and peer. */
#include <stdio.h>
#include <unistd.h>
#include "mesh.h"
#include "path.h"
#include "transport.h"

spmd_status spmd__mesh_connect(spmd__mesh *m, spmd_store *store, const char *bind_host, int64_t deadline,
                               char *err, size_t errlen) {
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    m->oversubscribed = ncpu > 0 && m->local_world > ncpu;
    /* Busy-polling pays when every rank of the host has a core; when ranks
     * outnumber cores a spinning rank steals the core its peer needs. */
    long spin_us = m->oversubscribed ? 5 : 200;
    if (spmd__env_int("SPMD_SPIN_US", 0, 1000000, &spin_us) != SPMD_OK) spin_us = m->oversubscribed ? 5 : 200;
    m->spin_ns = (uint64_t)spin_us * 1000u;
    spmd_status st = spmd__mesh_build(store, m->rank, m->world, m->job_id, SPMD__NCHAN, bind_host, m->fd, deadline,
                                      err, errlen);
    if (st) return st;
    for (int c = 0; c < SPMD__NCHAN; c++)
        for (int p = 0; p < m->world; p++) {
            if (p == m->rank) continue;
            if (!(m->path[c][p] = spmd__path_tcp(m->fd[c][p], p)))
                return spmd__fail(err, errlen, SPMD_ERR_NOMEM, "out of memory");
        }
    if ((st = spmd__cma_negotiate(m, deadline, err, errlen))) return st;
    int mode = spmd__transport_mode();
    return spmd__shm_link_setup(m, spmd__transport_wants_shm() ? mode : SPMD__TRANSPORT_TCP, deadline, err, errlen);
}
