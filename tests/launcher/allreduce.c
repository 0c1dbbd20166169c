/* tests/launcher/allreduce.c — a worker for the two-node test: form the group
 * from spmdrun's environment (the agent hosts the store; spmd_group_init
 * connects to it), all_reduce every rank's contribution, check it exactly,
 * print one line.  Exit 0 only when everything matched. */
#include <stdio.h>
#include <stdlib.h>

#include "spmd/group.h"

int main(void) {
    spmd_group_opts o = SPMD_GROUP_OPTS_DEFAULT;
    o.timeout_ms = 30000;
    spmd_group *g = NULL;
    char err[512];
    if (spmd_group_init(&o, &g, err, sizeof err) != SPMD_OK) {
        fprintf(stderr, "group init failed: %s\n", err);
        return 1;
    }
    int rank = spmd_group_rank(g), world = spmd_group_size(g);
    const char *env_rank = getenv("RANK"), *env_world = getenv("WORLD_SIZE");
    int bad = (env_rank && atoi(env_rank) != rank) || (env_world && atoi(env_world) != world);
    if (bad) fprintf(stderr, "group says rank %d of %d, the launcher RANK=%s WORLD_SIZE=%s\n", rank,
                     world, env_rank, env_world);
    enum { N = 4099 }; /* not a multiple of the world size */
    static int32_t v[N];
    for (int i = 0; i < N; i++) v[i] = (rank + 1) * (i % 7 + 1);
    if (spmd_all_reduce(g, v, v, N, SPMD_I32, SPMD_SUM) != SPMD_OK) {
        fprintf(stderr, "all_reduce failed: %s\n", spmd_group_errmsg(g));
        bad = 1;
    }
    int32_t total = world * (world + 1) / 2;
    for (int i = 0; i < N && !bad; i++)
        if (v[i] != total * (i % 7 + 1)) {
            fprintf(stderr, "rank %d: element %d is %d, expected %d\n", rank, i, v[i],
                    total * (i % 7 + 1));
            bad = 1;
        }
    if (!bad && spmd_barrier(g) != SPMD_OK) bad = 1;
    if (!bad) printf("allreduce ok rank %d of %d sum %d\n", rank, world, total);
    spmd_group_destroy(g);
    return bad;
}
