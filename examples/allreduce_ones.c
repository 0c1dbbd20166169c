/* allreduce_ones — seed 000's first collective: ten processes each hold a
 * tensor of one element equal to 1 and all_reduce it with SUM; every rank
 * prints "Rank r has data 10".
 *
 *   torch:  tensor = torch.ones(1); dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
 *   spmd:   float t = 1; spmd_all_reduce(g, &t, &t, 1, SPMD_F32, SPMD_SUM);
 *
 * Run: ./allreduce_ones [world_size]   (default 10; spawns its own ranks the
 * way torch.multiprocessing.spawn does).  Exit status 0 when every rank got
 * world_size. */
#include <stdio.h>
#include <stdlib.h>
#include "spmd/group.h"

static int run_allreduce(int rank, int size, void *arg) {
    (void)arg;
    spmd_group *g = NULL;
    char err[256];
    if (spmd_group_init(NULL, &g, err, sizeof err) != SPMD_OK) {
        fprintf(stderr, "rank %d: %s\n", rank, err);
        return 1;
    }
    float tensor = 1.0f;
    spmd_status st = spmd_all_reduce(g, &tensor, &tensor, 1, SPMD_F32, SPMD_SUM);
    if (st != SPMD_OK) {
        fprintf(stderr, "rank %d: all_reduce: %s\n", rank, spmd_group_errmsg(g));
        spmd_group_destroy(g);
        return 1;
    }
    printf("Rank %d has data %g\n", rank, tensor);
    spmd_group_destroy(g);
    return tensor == (float)size ? 0 : 1;
}

int main(int argc, char **argv) {
    int size = argc > 1 ? atoi(argv[1]) : 10;
    if (size < 1 || size > 256) {
        fprintf(stderr, "usage: %s [world_size 1..256]\n", argv[0]);
        return 2;
    }
    char report[256];
    spmd_status st = spmd_spawn(size, run_allreduce, NULL, report, sizeof report);
    if (st != SPMD_OK) {
        fprintf(stderr, "allreduce_ones: %s\n", report);
        return 1;
    }
    return 0;
}
