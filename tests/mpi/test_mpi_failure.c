/* Failure on the MPI backend, at world 3 under `mpirun --enable-recovery`
 * (Open MPI then lets the survivors run; by default mpirun kills the whole
 * job when a rank dies):
 *   kill    rank 2 dies (SIGKILL) while rank 0 waits in MPI's own all_reduce
 *           and rank 1 in a receive from it: both fail with an error naming
 *           rank 2, long before the deadline (60 s).
 *   freeze  rank 2 stops calling MPI for longer than the deadline (2 s):
 *           ranks 0 and 1 fail with SPMD_ERR_TIMEOUT at the deadline instead
 *           of hanging in MPI, and rank 2 learns of the failure when it comes
 *           back.
 * Usage (tests/mpi.cmake): MPIRUN_ARGS=--enable-recovery run.sh 3 <btl> test_mpi_failure kill|freeze */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "common/common.h"
#include "spmd/group.h"

#define REQ(cond)                                                                                           \
    do {                                                                                                    \
        if (!(cond)) {                                                                                      \
            fprintf(stderr, "rank %d: %s:%d: failed: %s (%s)\n", rank, __FILE__, __LINE__, #cond,           \
                    spmd_group_errmsg(g));                                                                  \
            return 1;                                                                                       \
        }                                                                                                   \
    } while (0)

static int kill_case(spmd_group *g, int rank) {
    float v[1024] = {0};
    REQ(spmd_barrier(g) == SPMD_OK);
    if (rank == 2) {
        fflush(NULL);
        raise(SIGKILL);
    }
    int64_t t0 = spmd__now_ms();
    spmd_status st;
    if (rank == 0) {
        spmd_coll_opts o = {"mpi"}; /* waiting inside MPI's own collective */
        spmd_work *w = NULL;
        REQ(spmd_all_reduce_async(g, v, v, 1024, SPMD_F32, SPMD_SUM, &o, &w) == SPMD_OK);
        st = spmd_work_wait(w, -1);
        fprintf(stderr, "rank 0: all_reduce: %s after %lld ms: %s\n", spmd_status_name(st),
                (long long)(spmd__now_ms() - t0), spmd_work_errmsg(w));
        REQ(st == SPMD_ERR_REMOTE && strstr(spmd_work_errmsg(w), "rank 2 died"));
        spmd_work_free(w);
    } else {
        st = spmd_recv(g, v, 4, SPMD_F32, 2, 0, NULL);
        fprintf(stderr, "rank 1: recv: %s after %lld ms: %s\n", spmd_status_name(st),
                (long long)(spmd__now_ms() - t0), spmd_group_errmsg(g));
        REQ(st == SPMD_ERR_REMOTE && strstr(spmd_group_errmsg(g), "rank 2 died"));
    }
    REQ(spmd__now_ms() - t0 < 20000); /* found by the watch, not at the deadline */
    REQ(spmd_barrier(g) != SPMD_OK);   /* the group stays broken */
    return 0;
}

static int freeze_case(spmd_group *g, int rank) {
    float v[64] = {0};
    REQ(spmd_barrier(g) == SPMD_OK);
    spmd_group_set_timeout(g, 2000);
    int64_t t0 = spmd__now_ms();
    if (rank == 2) {
        struct timespec ts = {5, 0};
        nanosleep(&ts, NULL); /* frozen: no MPI call at all */
        spmd_status st = spmd_all_reduce(g, v, v, 64, SPMD_F32, SPMD_SUM);
        fprintf(stderr, "rank 2: back after 5 s: %s: %s\n", spmd_status_name(st), spmd_group_errmsg(g));
        REQ(st != SPMD_OK);
        return 0;
    }
    spmd_status st = spmd_all_reduce(g, v, v, 64, SPMD_F32, SPMD_SUM);
    int64_t took = spmd__now_ms() - t0;
    fprintf(stderr, "rank %d: all_reduce: %s after %lld ms: %s\n", rank, spmd_status_name(st), (long long)took,
            spmd_group_errmsg(g));
    REQ(st == SPMD_ERR_TIMEOUT || (st == SPMD_ERR_REMOTE && strstr(spmd_group_errmsg(g), "timed out")));
    REQ(took >= 1900 && took < 4500);
    return 0;
}

int main(int argc, char **argv) {
    const char *what = argc > 1 ? argv[1] : "kill";
    spmd_group *g = NULL;
    char err[512];
    int rank = -1;
    spmd_status st = spmd_group_init(NULL, &g, err, sizeof err);
    if (st) {
        fprintf(stderr, "init: %s\n", err);
        return 1;
    }
    rank = spmd_group_rank(g);
    REQ(spmd_group_size(g) == 3 && !strcmp(spmd_group_backend(g), "mpi"));
    int rc = !strcmp(what, "freeze") ? freeze_case(g, rank) : kill_case(g, rank);
    spmd_group_destroy(g);
    return rc;
}
