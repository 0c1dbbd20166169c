/* sendrecv — seed 000's blocking point-to-point: rank 0 sends a one-element
 * tensor holding 1 to rank 1, which starts with 0.
 *
 *   torch:  tensor = torch.zeros(1) + int(rank == 0)
 *           if rank == 0: dist.send(tensor=tensor, dst=1)
 *           else:         dist.recv(tensor=tensor, src=0)
 *
 * Prints "Rank r has data x" before and after.  Run: ./sendrecv */
#include <stdio.h>
#include <stdlib.h>
#include "spmd/group.h"

static int run(int rank, int size, void *arg) {
    (void)arg;
    (void)size;
    spmd_group *g = NULL;
    char err[256];
    if (spmd_group_init(NULL, &g, err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    rank = spmd_group_rank(g);
    float tensor = rank == 0 ? 1.0f : 0.0f;
    printf("Rank %d has data %g\n", rank, tensor);
    spmd_status st = SPMD_OK;
    if (rank == 0) st = spmd_send(g, &tensor, 1, SPMD_F32, 1, 0);
    else if (rank == 1) st = spmd_recv(g, &tensor, 1, SPMD_F32, 0, 0, NULL);
    if (st) fprintf(stderr, "rank %d: %s\n", rank, spmd_group_errmsg(g));
    printf("Rank %d has data %g\n", rank, tensor);
    spmd_group_destroy(g);
    return st || tensor != 1.0f;
}

int main(void) {
    if (getenv("WORLD_SIZE")) return run(-1, -1, NULL);
    char report[256];
    if (spmd_spawn(2, run, NULL, report, sizeof report)) {
        fprintf(stderr, "sendrecv: %s\n", report);
        return 1;
    }
    return 0;
}
