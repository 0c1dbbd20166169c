/* pipe_bubble.c — measured pipeline bubble against the GPipe formula.
 *
 *   build/bench/pipe_bubble [stages] [width] [steps]
 *
 * A list of 2*stages Linear(width, width) + ReLU pairs (equal stages), one
 * stage per process (spmd_spawn), micro-batches of 16 samples, M = 1, 2, 4,
 * 8, 16, GPipe and 1F1B.  Per configuration: the median step time and the
 * bubble fraction (idle / step time, averaged over the stages) against
 * (S - 1) / (M + S - 1), the idle share of a schedule whose stages and
 * micro-batches take equal time and whose transfers are free. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "spmd/parallel.h"

static int S_arg = 2, W = 512, STEPS = 6;

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static int body(int rank, int world, void *arg) {
    (void)arg;
    spmd_nn_set_threads(1);
    spmd_group *g = NULL;
    char err[256];
    if (spmd_group_init(NULL, &g, err, sizeof err)) return 1;
    spmd_layers *L = NULL;
    spmd_layers_create(W, 1, 1, 1, &L);
    char nm[32];
    for (int i = 0; i < 2 * world; i++) {
        snprintf(nm, sizeof nm, "fc%d", i);
        spmd_layers_linear(L, i == 2 * world - 1 ? 10 : W, 1, nm);
        if (i < 2 * world - 1) spmd_layers_relu(L);
    }
    static const int Ms[] = {1, 2, 4, 8, 16};
    if (rank == 0) printf("stages  schedule  M   step ms  bubble  (S-1)/(M+S-1)\n");
    for (int k = 0; k < 2; k++)
        for (int mi = 0; mi < 5; mi++) {
            int M = Ms[mi], B = 16 * M;
            spmd_pipe_opts po = SPMD_PIPE_OPTS_DEFAULT;
            po.schedule = (spmd_schedule_kind)k;
            po.microbatches = M;
            spmd_pipe *p = NULL;
            if (spmd_pipe_create(g, L, &po, &p, err, sizeof err)) { fprintf(stderr, "%s\n", err); return 1; }
            float *x = calloc((size_t)B * W, sizeof(float));
            int *y = calloc((size_t)B, sizeof(int));
            for (size_t i = 0; i < (size_t)B * W; i++) x[i] = (float)(i % 7) * 0.1f;
            double t[32], bub[32];
            for (int s = 0; s < STEPS; s++) {
                spmd_model_zero_grad(spmd_pipe_model(p));
                spmd_barrier(g);
                if (spmd_pipe_step(p, x, y, B, NULL, NULL)) { fprintf(stderr, "%s\n", spmd_pipe_errmsg(p)); return 1; }
                spmd_pipe_stats st;
                spmd_pipe_last_stats(p, &st);
                double v[2] = {st.total_s, st.bubble_s / st.total_s};
                spmd_all_reduce(g, v, v, 2, SPMD_F64, SPMD_SUM);
                t[s] = v[0] / world;
                bub[s] = v[1] / world;
            }
            qsort(t + 1, STEPS - 1, sizeof(double), cmp);   /* the first step allocates */
            qsort(bub + 1, STEPS - 1, sizeof(double), cmp);
            if (rank == 0)
                printf("%6d  %-8s %2d  %8.2f  %6.3f  %6.3f\n", world, spmd_schedule_name(po.schedule), M,
                       1e3 * t[1 + (STEPS - 1) / 2], bub[1 + (STEPS - 1) / 2],
                       (double)(world - 1) / (M + world - 1));
            free(x);
            free(y);
            spmd_pipe_free(p);
        }
    spmd_layers_free(L);
    spmd_group_destroy(g);
    return 0;
}

int main(int argc, char **argv) {
    if (argc > 1) S_arg = atoi(argv[1]);
    if (argc > 2) W = atoi(argv[2]);
    if (argc > 3) STEPS = atoi(argv[3]);
    if (S_arg < 1 || W < 10 || STEPS < 2 || STEPS > 32) {
        fprintf(stderr, "usage: pipe_bubble [stages >= 1] [width >= 10] [steps 2..32]\n");
        return 2;
    }
    char report[256];
    spmd_status st = spmd_spawn(S_arg, body, NULL, report, sizeof report);
    if (st != SPMD_OK) fprintf(stderr, "%s\n", report);
    return st == SPMD_OK ? 0 : 1;
}
