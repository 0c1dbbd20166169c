/* elastic_sgd — data-parallel SGD that survives a lost rank in place
 * (docs/RELIABILITY.md, "Recovery in place").  Fit y = 3x by one weight over
 * N samples dealt round-robin to the ranks; when a step fails (a rank died),
 * the survivors shrink, take new rank 0's weight and step (so the step in
 * flight counts everywhere or nowhere), re-deal the samples and go on.
 *   RANK=r WORLD_SIZE=4 SPMD_AUTH_TOKEN=... ./elastic_sgd file:///tmp/rdv [victim step [stop]]
 * The victim rank SIGKILLs (or SIGSTOPs) itself at that step (a demonstration). */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include "spmd/spmd.h"

#define N 1000
#define STEPS 40

int main(int argc, char **argv) {
    spmd_group_opts o = SPMD_GROUP_OPTS_DEFAULT;
    o.init_method = argc > 1 ? argv[1] : NULL;
    int victim = argc > 3 ? atoi(argv[2]) : -1, die_at = argc > 3 ? atoi(argv[3]) : -1;
    spmd_group *g = NULL;
    char err[512];
    if (spmd_group_init(&o, &g, err, sizeof err)) return fprintf(stderr, "%s\n", err), 1;
    const int me0 = spmd_group_rank(g);
    double w = 0.0, lr = 0.5;
    int64_t step = 0;
    while (step < STEPS) {
        if (me0 == victim && step == die_at) raise(argc > 4 ? SIGSTOP : SIGKILL);
        int rank = spmd_group_rank(g), world = spmd_group_size(g);
        double grad = 0.0; /* d/dw of the mean of (w*x - 3x)^2 over my samples */
        for (int i = rank; i < N; i += world) {
            double x = (double)i / N;
            grad += 2.0 * (w * x - 3.0 * x) * x / N;
        }
        if (spmd_all_reduce(g, &grad, &grad, 1, SPMD_F64, SPMD_SUM) == SPMD_OK) {
            w -= lr * grad; /* the gradient is the full sum: no division by world */
            step++;
            continue;
        }
        /* The group is revoked: agree on the survivors and go on with them. */
        int failed[8], nf = spmd_group_failed_ranks(g, failed, 8);
        fprintf(stderr, "rank %d: step %lld failed (%s); %d rank(s) known failed\n", rank, (long long)step,
                spmd_group_errmsg(g), nf);
        spmd_group *s = NULL;
        if (spmd_group_shrink(g, &s, err, sizeof err)) return fprintf(stderr, "shrink: %s\n", err), 1;
        spmd_group_destroy(g);
        g = s;
        /* Some survivors may have finished the failed step: take rank 0's state. */
        if (spmd_broadcast(g, &w, 1, SPMD_F64, 0) || spmd_broadcast(g, &step, 1, SPMD_I64, 0))
            return fprintf(stderr, "%s\n", spmd_group_errmsg(g)), 1;
        fprintf(stderr, "rank %d is rank %d of %d (epoch %d) from step %lld\n", me0, spmd_group_rank(g),
                spmd_group_size(g), spmd_group_epoch(g), (long long)step);
    }
    printf("rank %d: w = %.9f after %lld steps at world %d (%a)\n", me0, w, (long long)step, spmd_group_size(g), w);
    spmd_group_destroy(g);
    return w > 2.99 && w < 3.01 ? 0 : 1;
}
