/* A rank that leaves a failed group tells why before its goodbye.
 *
 * The rank that detects a failure tells every other rank, each over its own
 * connection; a rank that heard it first may finish, destroy its group and
 * say goodbye before the notice reaches a third rank, which then took the
 * goodbye for the cause ("rank 0 destroyed the group while rank 1 was still
 * in it", SPMD_ERR_REMOTE, instead of the mismatch every rank must report:
 * seen once in test_coll_agree under load).  Here rank 0's group fails
 * without a notice to anyone (as when the notice is still on its way), then
 * rank 0 destroys the group while the others wait in an all_reduce with it:
 * they must end it with rank 0's status and reason.  Rank 0 may finish the
 * barrier before the others do (its last message already sent, theirs still
 * to be matched); a rank that then learns of the failure inside the barrier
 * must end the barrier the same way, with rank 0's status and reason.
 *
 * Usage: test_leave_failed [world ...] (default 2 3), under SPMD_TRANSPORT
 * if set, else under tcp and then the default (shared memory on one host). */
#include "coll_common.h"
#include "group/group_internal.h"

#define REASON "test: a mismatch only rank 0 saw"

static int leave_failed(int rank, int w, void *arg) {
    (void)arg;
    spmd_group *g = join_group(rank);
    if (!g) return 1;
    spmd_status st = spmd_barrier(g);
    if (rank == 0) {
        RREQUIRE(st == SPMD_OK);
        spmd__group_fail(g, SPMD_ERR_MISMATCH, 0, "rank 0: %s", REASON); /* 0: tell nobody */
        spmd_group_destroy(g);
        return 0;
    }
    const char *where = "spmd_barrier";
    if (st == SPMD_OK) {
        float v[4] = {1, 2, 3, 4};
        st = spmd_all_reduce(g, v, v, 4, SPMD_F32, SPMD_SUM);
        where = "spmd_all_reduce";
    }
    const char *msg = spmd_group_errmsg(g);
    if (st != SPMD_ERR_MISMATCH || !strstr(msg, REASON)) {
        fprintf(stderr, "rank %d (%s, world %d): %s: %s, wanted SPMD_ERR_MISMATCH naming rank 0's reason (%s)\n", rank,
                spmd_group_backend(g), w, where, spmd_status_name(st), msg);
        spmd_group_destroy(g);
        return 1;
    }
    spmd_group_destroy(g);
    return 0;
}

int main(int argc, char **argv) {
    run_worlds_transports(argc, argv, (const int[]){2, 3}, 2, "leave failed", leave_failed, NULL, 60);
    TEST_MAIN_END();
}
