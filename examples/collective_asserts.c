/* collective_asserts — seed 001's "communication primitives" at world size
 * 4, with its assertions, over spmd:
 *
 *   all_reduce:     t = ones(5,5) * rank; SUM            -> mean(t) == 6
 *   reduce:         same t, SUM to rank 0                -> rank 0: 6, others keep rank
 *                   (the seed notes gloo got the non-root case wrong; spmd
 *                   leaves non-root buffers untouched)
 *   broadcast:      t = ones(5,5) * rank from rank 3     -> mean(t) == 3
 *   all_gather:     into a list of 4 tensors of 5x5      -> concat is 20x5, mean 1.5
 *   reduce_scatter: t = ones(20,5) * rank split in 4x(5x5), SUM -> mean 6
 *
 * Run: ./collective_asserts   (spawns its 4 ranks).  Exit status 0 when every
 * assertion holds on every rank. */
#include <stdio.h>
#include <stdlib.h>
#include "spmd/group.h"

#define ASSERT(cond)                                                                  \
    do {                                                                              \
        if (!(cond)) {                                                                \
            fprintf(stderr, "rank %d: assertion failed: %s (%s)\n", rank, #cond,        \
                    spmd_group_errmsg(g));                                            \
            return 1;                                                                 \
        }                                                                             \
    } while (0)

static double mean(const float *t, int n) {
    double s = 0;
    for (int i = 0; i < n; i++) s += t[i];
    return s / n;
}

static void ones_times(float *t, int n, int rank) {
    for (int i = 0; i < n; i++) t[i] = (float)rank;
}

static int checks(spmd_group *g, int rank, int world) {
    float t[25];
    ones_times(t, 25, rank);
    ASSERT(spmd_all_reduce(g, t, t, 25, SPMD_F32, SPMD_SUM) == SPMD_OK);
    ASSERT(mean(t, 25) == 6);

    ones_times(t, 25, rank);
    ASSERT(spmd_reduce(g, t, t, 25, SPMD_F32, SPMD_SUM, 0) == SPMD_OK);
    if (rank == 0) ASSERT(mean(t, 25) == 6);
    else ASSERT(mean(t, 25) == rank);

    ones_times(t, 25, rank);
    ASSERT(spmd_broadcast(g, t, 25, SPMD_F32, 3) == SPMD_OK);
    ASSERT(mean(t, 25) == 3);

    ones_times(t, 25, rank);
    float outputs[4][25];
    void *list[4] = {outputs[0], outputs[1], outputs[2], outputs[3]};
    ASSERT(spmd_all_gather_list(g, t, list, 25, SPMD_F32) == SPMD_OK);
    /* torch.concat(outputs, dim=0): 4 blocks of 5x5 rows -> 20 x 5 */
    const int rows = world * 5, cols = 5;
    ASSERT(rows == 20 && cols == 5);
    ASSERT(mean(&outputs[0][0], rows * cols) == 1.5);

    float big[100], rst[25];
    ones_times(big, 100, rank); /* ones(20, 5) * rank, split into 4 blocks of 5 rows */
    ASSERT(spmd_reduce_scatter(g, big, rst, 25, SPMD_F32, SPMD_SUM) == SPMD_OK);
    ASSERT(mean(rst, 25) == 6);
    return 0;
}

static int main_process(int rank, int world, void *arg) {
    (void)arg;
    spmd_group *g = NULL;
    char err[256];
    if (spmd_group_init(NULL, &g, err, sizeof err) != SPMD_OK) {
        fprintf(stderr, "rank %d: %s\n", rank, err);
        return 1;
    }
    int rc = checks(g, rank, world);
    if (!rc) printf("rank %d: all_reduce, reduce, broadcast, all_gather, reduce_scatter assertions hold\n", rank);
    spmd_group_destroy(g);
    return rc;
}

int main(void) {
    char report[256];
    if (spmd_spawn(4, main_process, NULL, report, sizeof report) != SPMD_OK) {
        fprintf(stderr, "collective_asserts: %s\n", report);
        return 1;
    }
    return 0;
}
