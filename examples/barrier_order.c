/* barrier_order — seed 000's first program: rank 0 prints first, every other
 * rank prints only after rank 0 has reached the barrier.
 *
 *   torch:  if rank != 0: dist.barrier()
 *           print(f'Started {rank}')
 *           if rank == 0: dist.barrier()
 *
 * Run: ./barrier_order [world_size]  (default 4, spawns its own ranks), or
 *      spmdrun --nproc-per-node 4 ./barrier_order */
#include <stdio.h>
#include <stdlib.h>
#include "spmd/group.h"

static int run(int rank, int size, void *arg) {
    (void)size;
    (void)arg;
    spmd_group *g = NULL;
    char err[256];
    if (spmd_group_init(NULL, &g, err, sizeof err)) {
        fprintf(stderr, "rank %d: %s\n", rank, err);
        return 1;
    }
    rank = spmd_group_rank(g);
    int rc = 0;
    if (rank != 0) rc |= spmd_barrier(g) != SPMD_OK;
    printf("Started %d\n", rank);
    fflush(stdout); /* the line is out before rank 0 enters the barrier */
    if (rank == 0) rc |= spmd_barrier(g) != SPMD_OK;
    if (rc) fprintf(stderr, "rank %d: barrier: %s\n", rank, spmd_group_errmsg(g));
    spmd_group_destroy(g);
    return rc;
}

int main(int argc, char **argv) {
    if (getenv("WORLD_SIZE")) return run(-1, -1, NULL); /* under a launcher */
    int size = argc > 1 ? atoi(argv[1]) : 4;
    char report[256];
    if (spmd_spawn(size, run, NULL, report, sizeof report)) {
        fprintf(stderr, "barrier_order: %s\n", report);
        return 1;
    }
    return 0;
}
