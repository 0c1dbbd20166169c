/* An async collective nobody waits for still runs.
 *
 * A small async collective issued to an idle group may be left in the queue
 * for its waiter to run (group/executor.c: waking the executor thread for a
 * call that is waited for at once costs two context switches).  Here rank 0
 * issues one and then blocks outside spmd — reading a pipe — until rank 1's
 * blocking all_reduce, which needs rank 0's, has finished: the executor must
 * start it on its own.  Then once more with rank 0 polling (spmd_work_test)
 * instead, and the usual issue-and-wait calls between, so that the executor
 * is napping (the state in which it is not woken) when each is issued.
 * No timing is assumed: a collective left in the queue hangs the test.
 *
 * Usage: test_coll_unwaited [world ...] (default 2 3), under SPMD_TRANSPORT
 * if set, else under tcp and then the default (shared memory on one host). */
#include <sched.h>
#include <unistd.h>
#include "coll_common.h"

#define ROUNDS 12

typedef struct {
    int fd[2]; /* rank 1 -> rank 0: "my all_reduce is done" */
} pipe_arg;

static int sum_is(const float *v, int w, int round) {
    return v[0] == (float)(w * round) && v[1] == (float)w;
}

static int unwaited(int rank, int w, void *arg) {
    pipe_arg *p = arg;
    spmd_group *g = join_group(rank);
    if (!g) return 1;
    for (int round = 1; round <= ROUNDS; round++) {
        float v[2];
        /* issue-and-wait calls: the executor naps after these */
        for (int k = 0; k < 4; k++) {
            spmd_work *h = NULL;
            v[0] = (float)round, v[1] = 1;
            RREQUIRE(spmd_all_reduce_async(g, v, v, 2, SPMD_F32, SPMD_SUM, NULL, &h) == SPMD_OK);
            RREQUIRE(spmd_work_wait(h, -1) == SPMD_OK);
            spmd_work_free(h);
            RREQUIRE(sum_is(v, w, round));
        }
        const int polled = round % 2 == 0;
        v[0] = (float)round, v[1] = 1;
        if (rank == 0) {
            spmd_work *h = NULL;
            RREQUIRE(spmd_all_reduce_async(g, v, v, 2, SPMD_F32, SPMD_SUM, NULL, &h) == SPMD_OK);
            if (polled) {
                spmd_status st;
                while ((st = spmd_work_test(h)) == SPMD_ERR_AGAIN) sched_yield();
                RREQUIRE(st == SPMD_OK);
            }
            char c;
            RREQUIRE(read(p->fd[0], &c, 1) == 1); /* rank 1's all_reduce needed ours */
            RREQUIRE(spmd_work_wait(h, -1) == SPMD_OK);
            spmd_work_free(h);
        } else {
            RREQUIRE(spmd_all_reduce(g, v, v, 2, SPMD_F32, SPMD_SUM) == SPMD_OK);
            if (rank == 1) RREQUIRE(write(p->fd[1], "x", 1) == 1);
        }
        RREQUIRE(sum_is(v, w, round));
    }
    spmd_group_destroy(g);
    return 0;
}

int main(int argc, char **argv) {
    pipe_arg p; /* one pipe for every run: each reads exactly what it wrote */
    CHECK(pipe(p.fd) == 0);
    run_worlds_transports(argc, argv, (const int[]){2, 3}, 2, "unwaited", unwaited, &p, 120);
    TEST_MAIN_END();
}
