/* dp_pp_cnn.c — seed 000's CNN trained with data x pipeline parallelism
 * (seed 004's hybrid), e.g. DP 2 x PP 2 at world 4:
 *
 *   spmdrun --nproc-per-node 4 build/examples/dp_pp_cnn --dp 2 --pp 2
 *
 * The world is cut by spmd_mesh_create; each pipeline (pp ranks) runs the
 * CNN cut into pp stages balanced by parameter count over micro-batches with
 * the chosen schedule; each data-parallel replica trains on its share of the
 * global batch, gradients averaged over the data-parallel group (by ZeRO-1
 * with --zero).  --pp 1 is plain data parallelism, for comparison.  Rank 0
 * prints the loss, and at the end the per-step breakdown of the first stage
 * and the last: compute, bubble (idle) time and its fraction against GPipe's
 * (stages - 1) / (microbatches + stages - 1), and samples per second. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "spmd/data.h"
#include "spmd/parallel.h"

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

int main(int argc, char **argv) {
    int dp = 2, pp = 2, M = 4, steps = 40, B = 64, zero = 0;   /* B: the global batch */
    const char *data = NULL, *sched = "1f1b";
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--zero") == 0) { zero = 1; continue; }
        if (!v) { fprintf(stderr, "%s needs a value\n", a); return 2; }
        if (strcmp(a, "--dp") == 0) dp = atoi(v);
        else if (strcmp(a, "--pp") == 0) pp = atoi(v);
        else if (strcmp(a, "--microbatches") == 0) M = atoi(v);
        else if (strcmp(a, "--steps") == 0) steps = atoi(v);
        else if (strcmp(a, "--batch") == 0) B = atoi(v);
        else if (strcmp(a, "--schedule") == 0) sched = v;
        else if (strcmp(a, "--data") == 0) data = v;
        else { fprintf(stderr, "unknown option %s\n", a); return 2; }
        i++;
    }
    if (dp < 1 || pp < 1 || M < 1 || steps < 1 || B < 1) {
        fprintf(stderr, "--dp, --pp, --microbatches, --steps and --batch must be >= 1\n");
        return 2;
    }
    char err[512];
    spmd_nn_set_threads(spmd_nn_default_threads());   /* 1 unless OPENBLAS/OMP_NUM_THREADS say */
    spmd_group *g = NULL;
    if (spmd_group_init(NULL, &g, err, sizeof err)) { fprintf(stderr, "init: %s\n", err); return 1; }
    int rank = spmd_group_rank(g), rc = 1;
    spmd_mesh mesh = {0};
    spmd_layers *L = NULL;
    spmd_pipe *pipe = NULL;
    spmd_model *model = NULL;
    spmd_zero *z = NULL;
    spmd_optim *opt = NULL;
    spmd_dataset ds = SPMD_DATASET_INIT;
    float *dl = NULL;
    size_t *idx = NULL;
    spmd_prefetch *loader = NULL;
    spmd_schedule_kind kind;
    if (spmd_schedule_parse(sched, &kind)) { fprintf(stderr, "unknown schedule %s (gpipe, 1f1b)\n", sched); goto out; }
    if (B % dp) { fprintf(stderr, "batch %d is not divisible by dp %d\n", B, dp); goto out; }
    if (spmd_mesh_create(g, dp, pp, 1, &mesh, err, sizeof err)) { fprintf(stderr, "rank %d: %s\n", rank, err); goto out; }
    if (spmd_layers_arch("cnn", 10, 0, 0, 0, &L, err, sizeof err)) goto fail;
    if (pp > 1) {
        spmd_pipe_opts po = SPMD_PIPE_OPTS_DEFAULT;
        po.schedule = kind;
        po.microbatches = M;
        if (spmd_pipe_create(mesh.pp_group, L, &po, &pipe, err, sizeof err)) goto fail;
        model = spmd_pipe_model(pipe);
    } else {
        spmd_build_opts bo = {"cnn", 1234, 1, 0, 0};
        if (spmd_model_build(L, &bo, &model, err, sizeof err)) goto fail;
    }
    if (pipe) spmd_pipe_seed_dropout(pipe, 1, (uint64_t)rank);
    else spmd_model_seed_dropout(model, 1, (uint64_t)rank);
    size_t np;
    float *params = spmd_model_params(model, &np), *grads = spmd_model_grads(model, NULL);
    spmd_optim_opts oo = SPMD_OPTIM_OPTS_ADAM;
    if (zero ? spmd_zero_create(mesh.dp_group, &oo, np, 1, &z, err, sizeof err)
             : spmd_optim_create(&oo, np, &opt)) goto fail;
    spmd_status dst = spmd_dataset_load_dir(data, SPMD_SPLIT_TRAIN, &ds, err, sizeof err);
    if (dst == SPMD_ERR_NOTFOUND) {   /* "skipped" for the test suite */
        fprintf(stderr, "rank %d: %s (install dataset-fashion-mnist or pass --data)\n", rank, err);
        rc = 77;
        goto out;
    }
    if (dst) goto fail;
    const int per = B / dp;
    dl = malloc(sizeof(float) * (size_t)per * 10);
    idx = malloc(sizeof(size_t) * (size_t)per * (size_t)steps);
    if (!dl || !idx) goto fail;
    for (int s = 0; s < steps; s++)   /* replica d's share of global batch s */
        for (int i = 0; i < per; i++)
            idx[(size_t)s * per + i] = ((size_t)s * B + (size_t)mesh.d * per + (size_t)i) % ds.n;
    /* a loader thread fills the next two batches while this one trains */
    if (spmd_prefetch_dataset(&ds, SPMD_FASHION_MNIST_MEAN, SPMD_FASHION_MNIST_STD, idx, (size_t)per * steps,
                              (size_t)per, 2, &loader, err, sizeof err))
        goto fail;
    int first = pp == 1 || mesh.p == 0, last = pp == 1 || mesh.p == pp - 1;
    double t_steps = 0, compute = 0, bubble = 0;
    int timed = 0;
    for (int s = 0; s < steps; s++) {
        const float *x;
        const int *y;
        if (spmd_prefetch_next(loader, &x, &y, NULL, NULL) != 1) {
            fprintf(stderr, "rank %d: %s\n", rank, spmd_prefetch_errmsg(loader));
            goto out;
        }
        double t0 = now();
        float loss = 0;
        spmd_model_zero_grad(model);
        if (pipe) {
            if (spmd_pipe_step(pipe, first ? x : NULL, last ? y : NULL, per, &loss, NULL)) {
                fprintf(stderr, "rank %d: %s\n", rank, spmd_pipe_errmsg(pipe));
                goto out;
            }
        } else {
            const float *lg;
            spmd_model_forward(model, x, per, &lg);
            loss = spmd_cross_entropy(dl, lg, y, per, 10, NULL);
            spmd_model_backward(model, dl, NULL, NULL);
        }
        double tc = now() - t0;
        if (z) {
            if (spmd_zero_step(z, params, grads)) { fprintf(stderr, "%s\n", spmd_zero_errmsg(z)); goto out; }
        } else {
            if (dp > 1) {
                spmd_all_reduce(mesh.dp_group, grads, grads, np, SPMD_F32, SPMD_SUM);
                for (size_t i = 0; i < np; i++) grads[i] *= 1.0f / (float)dp;
            }
            spmd_optim_step(opt, params, grads);
        }
        double dt = now() - t0;
        if (s >= 3) {   /* after warm-up */
            t_steps += dt;
            timed++;
            if (pipe) {
                spmd_pipe_stats st;
                spmd_pipe_last_stats(pipe, &st);
                compute += st.compute_s;
                bubble += st.bubble_s;
            } else {
                compute += tc;
            }
        }
        if (rank == pp - 1 && (s % 10 == 0 || s == steps - 1))
            printf("step %3d  loss %.4f (replica 0, last stage)\n", s, loss);
    }
    if (timed == 0) timed = 1, t_steps = 1e-9;   /* fewer than 4 steps: nothing timed */
    double row[4] = {t_steps / timed, compute / timed, bubble / timed, (double)B * timed / t_steps};
    if (pp > 1 && (rank == 0 || rank == pp - 1))
        printf("rank %d (stage %d of %d, %s, %d micro-batches): step %.2f ms, compute %.2f ms, bubble %.2f ms "
               "(%.3f of the pipeline step; GPipe formula (S-1)/(M+S-1) = %.3f)\n",
               rank, mesh.p, pp, sched, M, 1e3 * row[0], 1e3 * row[1], 1e3 * row[2],
               row[2] / (row[2] + row[1]), (double)(pp - 1) / (M + pp - 1));
    if (rank == 0)
        printf("dp %d x pp %d, global batch %d: %.0f samples/s\n", dp, pp, B, row[3]);
    rc = 0;
    goto out;
fail:
    fprintf(stderr, "rank %d: %s\n", rank, err);
out:
    spmd_prefetch_stop(loader);
    free(idx); free(dl);
    spmd_dataset_free(&ds);
    spmd_zero_free(z);
    spmd_optim_free(opt);
    if (pipe) spmd_pipe_free(pipe);
    else spmd_model_free(model);
    spmd_layers_free(L);
    spmd_mesh_destroy(&mesh);
    spmd_group_destroy(g);
    return rc;
}
