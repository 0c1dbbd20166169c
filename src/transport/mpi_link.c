/* mpi_link.c — a mesh over MPI (mpi_internal.h): attaching to a
 * communicator and leaving.  Waiting, the failure notices and the liveness
 * watch are mpi_watch.c's; point-to-point mpi_p2p.c's, the collective wire
 * mpi_xfer.c's.
 *
 * Why spmd never waits inside a blocking MPI call: MPI has no deadline, and
 * a peer that is frozen (or dead, where the launcher lets survivors run)
 * would hold the caller forever.  Every operation is non-blocking and tested
 * in a loop that also looks at the group's failure state, the notices other
 * ranks sent, the peers' processes, and the deadline.
 *
 * Failure: MPI itself reports nothing when a peer dies (Open MPI 4.1's mpirun
 * kills the whole job by default; with --enable-recovery the survivors run on
 * and their requests simply never complete).  So each rank watches the ranks
 * under its own kernel through pidfds.  In an MPI job no process exits while
 * another still runs (MPI_Finalize waits for every rank; a process that exits
 * without it takes the job down), so a watched process that is gone died:
 * the rank that sees it fails the group and tells every other rank (a notice
 * on the ctrl communicator), which names the dead rank everywhere.  A rank
 * alone on its host has no watcher: its death is seen at the deadline.
 *
 * Leaving never frees the three communicators: Open MPI gives a freed
 * communicator's id to the next one made, and a message still on its way to
 * the freed one (a failure notice, a collective's message from a rank that
 * had not failed yet) would then be matched in the new one and throw its
 * ordering off.  Each group over MPI so keeps three communicators until MPI
 * is finalized. */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#include "common/fnv.h"
#include "mpi_internal.h"

/* ---- attaching ---------------------------------------------------------------------- */

/* What each rank tells the others at attach time. */
enum { ID_BOOT, ID_PIDNS, ID_PID, ID_NONCE, ID_N };

/* Wait for requests of the attach under the deadline (no group failure yet). */
static spmd_status wait_setup(spmd__mesh *m, MPI_Request *reqs, int n, int64_t deadline, const char *what,
                              char *err, size_t errlen) {
    spmd__mpi_idle idle;
    spmd__mpi_idle_init(&idle, m);
    for (;;) {
        int done = 0;
        spmd__mpi_lock();
        int rc = MPI_Testall(n, reqs, &done, MPI_STATUSES_IGNORE);
        spmd__mpi_unlock();
        if (rc != MPI_SUCCESS) {
            char e[256];
            spmd__mpi_errstr(rc, e, sizeof e);
            return spmd__fail(err, errlen, SPMD_ERR_SYSTEM, "rank %d: %s: %s", m->rank, what, e);
        }
        if (done) return SPMD_OK;
        if (spmd__remaining_ms(deadline) == 0)
            return spmd__fail(err, errlen, SPMD_ERR_TIMEOUT,
                              "rank %d: %s: not every rank of the communicator joined within the deadline", m->rank,
                              what);
        spmd__mpi_idle_step(&idle, m);
    }
}

static void link_free(spmd__mpi_link *l) {
    if (!l) return;
    for (int r = 0; l->pidfd && r < l->m->world; r++)
        if (l->pidfd[r] >= 0) close(l->pidfd[r]);
    free(l->pidfd);
    free(l->pid);
    free(l->exit_seen_ms);
    for (int i = 0; i < l->nout; i++) free(l->out[i].buf);
    free(l->out);
    pthread_mutex_destroy(&l->ctrl_mu);
    free(l);
}

spmd_status spmd__mpi_attach(spmd__mesh *m, MPI_Comm comm, int64_t deadline, char *err, size_t errlen) {
    spmd__mpi_link *l = calloc(1, sizeof *l);
    if (!l) return spmd__fail(err, errlen, SPMD_ERR_NOMEM, "out of memory");
    l->m = m;
    l->p2p = l->coll = l->ctrl = MPI_COMM_NULL;
    l->ctrl_req = MPI_REQUEST_NULL;
    pthread_mutex_init(&l->ctrl_mu, NULL);
    const int w = m->world;
    l->pid = calloc((size_t)w, sizeof *l->pid);
    l->pidfd = malloc(sizeof *l->pidfd * (size_t)w);
    l->exit_seen_ms = calloc((size_t)w, sizeof *l->exit_seen_ms);
    uint64_t *ids = calloc((size_t)w * ID_N, sizeof *ids);
    if (!l->pid || !l->pidfd || !l->exit_seen_ms || !ids) {
        free(ids);
        link_free(l);
        return spmd__fail(err, errlen, SPMD_ERR_NOMEM, "out of memory");
    }
    for (int r = 0; r < w; r++) l->pidfd[r] = -1;

    int *ub = NULL, flag = 0;
    MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &ub, &flag);
    l->tag_ub = flag && ub ? *ub : 32767;
    l->wide_tags = l->tag_ub >= 0x7fffffff;

    /* Three private communicators; idup so a missing rank costs a timeout,
     * not a hang. */
    MPI_Request r[3];
    spmd__mpi_lock();
    int rc = MPI_Comm_idup(comm, &l->p2p, &r[0]);
    if (rc == MPI_SUCCESS) rc = MPI_Comm_idup(comm, &l->coll, &r[1]);
    if (rc == MPI_SUCCESS) rc = MPI_Comm_idup(comm, &l->ctrl, &r[2]);
    spmd__mpi_unlock();
    spmd_status st;
    if (rc != MPI_SUCCESS) {
        char e[256];
        spmd__mpi_errstr(rc, e, sizeof e);
        st = spmd__fail(err, errlen, SPMD_ERR_SYSTEM, "rank %d: MPI_Comm_idup: %s", m->rank, e);
        goto fail_ids;
    }
    if ((st = wait_setup(m, r, 3, deadline, "duplicating the communicator", err, errlen))) goto fail_ids;
    spmd__mpi_lock();
    MPI_Comm_set_errhandler(l->p2p, MPI_ERRORS_RETURN);
    MPI_Comm_set_errhandler(l->coll, MPI_ERRORS_RETURN);
    MPI_Comm_set_errhandler(l->ctrl, MPI_ERRORS_RETURN);
    spmd__mpi_unlock();

    /* Who runs under this kernel (same boot id and pid namespace): those
     * ranks' processes are watched. */
    char boot[SPMD__BOOT_ID_LEN];
    uint64_t pidns = 0, mine[ID_N] = {0};
    if (spmd__kernel_identity(boot, &pidns)) {
        mine[ID_BOOT] = spmd__fnv1a64(SPMD__FNV64_OFFSET, boot, strlen(boot));
        mine[ID_PIDNS] = pidns;
    }
    mine[ID_PID] = (uint64_t)getpid();
    if (getrandom(&mine[ID_NONCE], sizeof mine[ID_NONCE], 0) != (ssize_t)sizeof mine[ID_NONCE])
        mine[ID_NONCE] = spmd__now_ns() ^ mine[ID_PID];
    MPI_Request ar;
    spmd__mpi_lock();
    rc = MPI_Iallgather(mine, ID_N, MPI_UINT64_T, ids, ID_N, MPI_UINT64_T, l->coll, &ar);
    spmd__mpi_unlock();
    if (rc != MPI_SUCCESS) {
        char e[256];
        spmd__mpi_errstr(rc, e, sizeof e);
        st = spmd__fail(err, errlen, SPMD_ERR_SYSTEM, "rank %d: MPI_Iallgather: %s", m->rank, e);
        goto fail_comms;
    }
    if ((st = wait_setup(m, &ar, 1, deadline, "exchanging process identities", err, errlen))) goto fail_comms;
    l->instance = ids[ID_NONCE];
    int local = 0;
    for (int p = 0; p < w; p++) {
        const uint64_t *id = ids + (size_t)p * ID_N;
        if (!mine[ID_BOOT] || id[ID_BOOT] != mine[ID_BOOT] || id[ID_PIDNS] != mine[ID_PIDNS]) continue;
        if (p < m->rank) l->local_rank++;
        local++;
        if (p == m->rank) continue;
        l->pid[p] = (int)id[ID_PID];
        l->pidfd[p] = (int)syscall(SYS_pidfd_open, l->pid[p], 0);
    }
    m->local_world = local > 0 ? local : 1;
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    m->oversubscribed = ncpu > 0 && m->local_world > ncpu;
    free(ids);
    ids = NULL;

    if ((rc = spmd__mpi_post_notice_recv(l)) != MPI_SUCCESS) {
        st = spmd__fail(err, errlen, SPMD_ERR_SYSTEM, "rank %d: MPI_Irecv of the group's notices failed", m->rank);
        goto fail_comms;
    }
    if ((st = spmd__mpi_p2p_init(l))) {
        spmd__mpi_abandon(&l->ctrl_req, 1);
        spmd__fail(err, errlen, st, "out of memory");
        goto fail_comms;
    }
    m->ext_state = l;
    m->caller_thread_only = spmd__mpi_level() != MPI_THREAD_MULTIPLE;
    m->ext = &spmd__mpi_ext;
    m->fail_pending = spmd__mpi_fail_all;
    m->tell_peers = spmd__mpi_tell_peers;
    return SPMD_OK;
fail_comms: /* communicators a failed attach made are left alone (see the top) */
fail_ids:
    free(ids);
    link_free(l);
    return st;
}

/* ---- leaving ------------------------------------------------------------------------ */

static void stop(spmd__mesh *m) {
    spmd__mpi_link *l = spmd__mpi_of(m);
    if (!l) return;
    int fin = 0;
    MPI_Finalized(&fin);
    if (fin) {
        /* the application finalized MPI before destroying the group: nothing
         * of MPI may be called any more, only our memory is freed */
        spmd__mpi_fail_all(m, SPMD_ERR_ABORTED, "MPI was finalized");
    } else {
        spmd__mpi_p2p_stop(l);
        /* our notices go out on their own; the communicators stay (above) */
        pthread_mutex_lock(&l->ctrl_mu);
        int64_t until = spmd__now_ms() + 1000;
        while (l->nout && spmd__now_ms() < until) {
            spmd__mpi_reap_notices(l);
            if (l->nout) sched_yield();
        }
        for (int i = 0; i < l->nout; i++) {
            spmd__mpi_lock();
            MPI_Request_free(&l->out[i].req); /* MPI sends it anyway: its buffer is left to it */
            spmd__mpi_unlock();
        }
        l->nout = 0;
        pthread_mutex_unlock(&l->ctrl_mu);
        spmd__mpi_abandon(&l->ctrl_req, 1);
    }
    spmd__mpi_p2p_free(l);
    m->ext_state = NULL;
    link_free(l);
}

const spmd__mesh_ext spmd__mpi_ext = {
    "mpi",          spmd__mpi_xfer,     spmd__mpi_post_send,  spmd__mpi_post_recv, spmd__mpi_poll,
    spmd__mpi_wait, spmd__mpi_cancel, stop,
};
