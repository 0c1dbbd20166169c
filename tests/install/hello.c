/* A program of another project, built against an installed spmd. */
#include <spmd/spmd.h>
#include <stdio.h>

static int run(int rank, int world, void *arg) {
    (void)arg;
    spmd_group *g;
    char err[256];
    if (spmd_group_init(NULL, &g, err, sizeof err)) { fprintf(stderr, "%s\n", err); return 1; }
    float x = 1.0f;
    int rc = spmd_all_reduce(g, &x, &x, 1, SPMD_F32, SPMD_SUM) != SPMD_OK || x != (float)world;
    printf("rank %d of %d: %g\n", rank, world, x);
    spmd_group_destroy(g);
    return rc;
}

int main(void) {
    char report[256];
    if (spmd_spawn(2, run, NULL, report, sizeof report)) { fprintf(stderr, "%s\n", report); return 1; }
    return 0;
}
