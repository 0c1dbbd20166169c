/* one_param — seed 004's toy model: one parameter p = 2.0, input x = rank,
 * output x - p, loss (x - p)^2, SGD with lr 0.1, two ranks.
 *
 * Gradients dL/dp = 2(p - x): rank 0 has 4, rank 1 has 2.
 *   - The seed's hand-written step all-reduces the gradient with SUM: 6, so
 *     the new parameter is 2.0 - 0.1 * 6 = 1.4 on both ranks.
 *   - DDP (the seed's "Bonus - DDP", here spmd/ddp.h) averages instead, as
 *     torch's DistributedDataParallel does: 3, so the new parameter is 1.7.
 * Both are printed and checked.  Run: ./one_param  (spawns 2 ranks) */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include "spmd/spmd.h"

static int run(int rank, int size, void *arg) {
    (void)size;
    (void)arg;
    spmd_group *g = NULL;
    char err[256];
    if (spmd_group_init(NULL, &g, err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    rank = spmd_group_rank(g);
    const float lr = 0.1f, x = (float)rank;
    int rc = 0;

    /* 1. The seed's manual step: backward, all_reduce(SUM) the gradient, step. */
    float p = 2.0f, grad = 2.0f * (p - x);
    printf("Rank %d, before all_reduce, grads: %g\n", rank, grad);
    if (spmd_all_reduce(g, &grad, &grad, 1, SPMD_F32, SPMD_SUM)) rc = 1;
    printf("Rank %d, after all_reduce, synced grads (summed over processes): %g\n", rank, grad);
    p -= lr * grad;
    printf("Rank %d, new param: %.4f\n", rank, p);
    if (fabsf(p - 1.4f) > 1e-6f) rc = 1;

    /* 2. The same step through the DDP reducer (averaged gradients). */
    float q = 2.0f, qgrad = 0.0f;
    spmd_ddp *d = NULL;
    if (spmd_ddp_create(g, NULL, &d) || spmd_ddp_add_param(d, "param", &q, &qgrad, 1) ||
        spmd_ddp_finalize(d) || spmd_ddp_prepare(d)) {
        fprintf(stderr, "rank %d: ddp: %s\n", rank, d ? spmd_ddp_errmsg(d) : "create");
        rc = 1;
    } else {
        qgrad = 2.0f * (q - x);                      /* backward */
        if (spmd_ddp_grad_ready(d, 0) || spmd_ddp_finish(d)) rc = 1;
        q -= lr * qgrad;                             /* optimizer step */
        printf("Rank %d, DDP: averaged grad %g, new param: %.4f\n", rank, qgrad, q);
        if (fabsf(q - 1.7f) > 1e-6f) rc = 1;
    }
    spmd_ddp_free(d);
    spmd_group_destroy(g);
    return rc;
}

int main(void) {
    if (getenv("WORLD_SIZE")) return run(-1, -1, NULL);
    char report[256];
    if (spmd_spawn(2, run, NULL, report, sizeof report)) {
        fprintf(stderr, "one_param: %s\n", report);
        return 1;
    }
    return 0;
}
