/* spmd-train-parallel.c — spmd-train with pipeline and tensor parallelism,
 * ZeRO-1 and CIFAR-10 (seed 004).
 *
 * The world is cut into dp x pp x tp (spmd_mesh_create, dp = world / (pp x
 * tp)).  Each data-parallel replica takes its share of the global batch
 * (batch-size per replica); the model is the layer list of --model (with its
 * Linear layers sharded when --tp > 1), cut into --pp stages balanced by
 * parameter count and run with --schedule over --microbatches; gradients are
 * averaged over the data-parallel group, by the ZeRO-1 step with --zero.
 * The rank holding the last stage of replica 0 (tensor rank 0) prints the
 * per-step breakdown: data, compute (forward + backward), bubble (pipeline
 * idle), step (optimizer + gradient averaging) in ms, and samples/s. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "spmd-train-parallel.h"
#include "spmd/data.h"
#include "spmd/parallel.h"

const char spmd_train_parallel_usage[] =
    "\nModel parallelism (any of these selects the model-parallel trainer; docs/PARALLEL.md):\n"
    "  --dataset NAME       fashion-mnist | cifar10 (CIFAR-10 binary files in --data:\n"
    "                       data_batch_1..5.bin, test_batch.bin)     (fashion-mnist)\n"
    "  --pp N               pipeline stages (the world is dp x pp x tp)  (1)\n"
    "  --schedule S         gpipe | 1f1b                             (1f1b)\n"
    "  --microbatches M     micro-batches per step, must divide --batch-size  (4)\n"
    "  --tp N               tensor-parallel ranks (mlp, cnn: fc1 column-, fc2 row-parallel) (1)\n"
    "  --zero               ZeRO-1: optimizer state sharded over the data-parallel group\n";

typedef struct {
    const char *model, *dataset, *data;
    int epochs, batch, pp, tp, M, zero, seed, log_every, eval, dropout, quiet, threads;
    long steps, train_samples;
    float lr, momentum, wd;
    spmd_optim_kind optim;
    spmd_schedule_kind schedule;
} popts;

static const char *const PAR_FLAGS[] = {"--pp", "--tp", "--zero", "--schedule", "--microbatches", "--dataset"};

int spmd_train_wants_parallel(int argc, char **argv) {
    for (int i = 1; i < argc; i++)
        for (size_t k = 0; k < sizeof PAR_FLAGS / sizeof *PAR_FLAGS; k++)
            if (strcmp(argv[i], PAR_FLAGS[k]) == 0) return 1;
    return 0;
}

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int num(const char *opt, const char *v, long lo, long hi, long *out) {
    char *end;
    errno = 0;
    long x = v ? strtol(v, &end, 10) : 0;
    if (!v || errno || *end || end == v || x < lo || x > hi) {
        fprintf(stderr, "spmd-train: %s needs an integer in [%ld, %ld], got '%s'\n", opt, lo, hi, v ? v : "");
        return -1;
    }
    *out = x;
    return 0;
}

static int fnum(const char *opt, const char *v, float *out) {
    char *end;
    float x = v ? strtof(v, &end) : 0;
    if (!v || *end || end == v || !(x >= 0)) {
        fprintf(stderr, "spmd-train: %s needs a number >= 0, got '%s'\n", opt, v ? v : "");
        return -1;
    }
    *out = x;
    return 0;
}

static int parse(int argc, char **argv, popts *o) {
    *o = (popts){"cnn", "fashion-mnist", NULL, 1, 16, 1, 1, 4, 0, 1234, 10, 1, 1, 0, 1, 0, 0,
                 0.01f, 0.5f, 0.0f, SPMD_OPTIM_SGD, SPMD_SCHEDULE_1F1B};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        long x = 0;
        if (strcmp(a, "--zero") == 0) { o->zero = 1; continue; }
        if (strcmp(a, "--no-eval") == 0) { o->eval = 0; continue; }
        if (strcmp(a, "--no-dropout") == 0) { o->dropout = 0; continue; }
        if (strcmp(a, "--quiet") == 0) { o->quiet = 1; continue; }
        int bad = 0;
        if (strcmp(a, "--model") == 0) o->model = v;
        else if (strcmp(a, "--dataset") == 0) {
            o->dataset = v;
            if (!v || (strcmp(v, "fashion-mnist") && strcmp(v, "cifar10"))) {
                fprintf(stderr, "spmd-train: --dataset '%s' (fashion-mnist, cifar10)\n", v ? v : "");
                return -1;
            }
        } else if (strcmp(a, "--data") == 0) o->data = v;
        else if (strcmp(a, "--epochs") == 0) bad = num(a, v, 1, 100000, &x), o->epochs = (int)x;
        else if (strcmp(a, "--steps") == 0) bad = num(a, v, 1, 1L << 40, &o->steps);
        else if (strcmp(a, "--train-samples") == 0) bad = num(a, v, 1, 1L << 40, &o->train_samples);
        else if (strcmp(a, "--batch-size") == 0) bad = num(a, v, 1, 1 << 20, &x), o->batch = (int)x;
        else if (strcmp(a, "--pp") == 0) bad = num(a, v, 1, 1024, &x), o->pp = (int)x;
        else if (strcmp(a, "--tp") == 0) bad = num(a, v, 1, 1024, &x), o->tp = (int)x;
        else if (strcmp(a, "--microbatches") == 0) bad = num(a, v, 1, 1 << 20, &x), o->M = (int)x;
        else if (strcmp(a, "--seed") == 0) bad = num(a, v, 0, 1L << 40, &x), o->seed = (int)x;
        else if (strcmp(a, "--log-every") == 0) bad = num(a, v, 1, 1 << 30, &x), o->log_every = (int)x;
        else if (strcmp(a, "--threads") == 0) bad = num(a, v, 1, 1024, &x), o->threads = (int)x;
        else if (strcmp(a, "--lr") == 0) bad = fnum(a, v, &o->lr);
        else if (strcmp(a, "--momentum") == 0) bad = fnum(a, v, &o->momentum);
        else if (strcmp(a, "--weight-decay") == 0) bad = fnum(a, v, &o->wd);
        else if (strcmp(a, "--optimizer") == 0) {
            if (spmd_optim_parse(v ? v : "", &o->optim)) {
                fprintf(stderr, "spmd-train: --optimizer '%s' (sgd, adam, adamw)\n", v ? v : "");
                return -1;
            }
        } else if (strcmp(a, "--schedule") == 0) {
            if (spmd_schedule_parse(v ? v : "", &o->schedule)) {
                fprintf(stderr, "spmd-train: --schedule '%s' (gpipe, 1f1b)\n", v ? v : "");
                return -1;
            }
        } else {
            fprintf(stderr, "spmd-train: %s is not an option of the model-parallel trainer (see --help)\n", a);
            return -1;
        }
        if (bad) return -1;
        if (!v) {
            fprintf(stderr, "spmd-train: %s needs a value\n", a);
            return -1;
        }
        i++;
    }
    if (o->batch % o->M != 0) {
        fprintf(stderr, "spmd-train: --microbatches %d does not divide --batch-size %d\n", o->M, o->batch);
        return -1;
    }
    return 0;
}

typedef struct {
    int cifar;
    spmd_dataset fm[2];
    spmd_cifar cf[2];
} data;

static size_t data_n(const data *d, int split) { return d->cifar ? d->cf[split].n : d->fm[split].n; }

static void fill(const data *d, int split, const size_t *idx, int n, int augment, uint64_t seed,
                 float *x, int *y) {
    if (d->cifar) spmd_cifar_batch(&d->cf[split], idx, (size_t)n, augment, seed, x, y);
    else spmd_dataset_batch(&d->fm[split], idx, (size_t)n, SPMD_FASHION_MNIST_MEAN, SPMD_FASHION_MNIST_STD, x, y);
}

typedef struct {
    popts o;
    spmd_group *g;
    spmd_mesh mesh;
    spmd_tp *tp;
    spmd_layers *L;
    spmd_pipe *pipe;
    spmd_model *model;   /* owned when !pipe */
    spmd_optim *optim;
    spmd_zero *zero;
    data d;
    size_t in_size;
    int first, last, reporter;
} ptrainer;

/* Test accuracy: each replica evaluates its share in whole batches. */
static int evaluate(ptrainer *t, float *x, int *y, float *logits, double *acc) {
    const int B = t->o.batch, dp = t->mesh.dp;
    size_t n = data_n(&t->d, 1), batches = n / ((size_t)B * dp);
    double hits[2] = {0, 0};
    size_t *idx = malloc(sizeof(size_t) * (size_t)B);
    if (!idx) return -1;
    if (t->pipe) spmd_pipe_train(t->pipe, 0);
    else spmd_model_train(t->model, 0);
    for (size_t b = 0; b < batches; b++) {
        for (int i = 0; i < B; i++) idx[i] = (b * dp + (size_t)t->mesh.d) * B + (size_t)i;
        fill(&t->d, 1, idx, B, 0, 0, x, y);
        const float *lg = logits;
        if (t->pipe) {
            if (spmd_pipe_forward(t->pipe, x, B, logits)) {
                fprintf(stderr, "spmd-train: rank %d: %s\n", spmd_group_rank(t->g), spmd_pipe_errmsg(t->pipe));
                free(idx);
                return -1;
            }
        } else if (spmd_model_forward(t->model, x, B, &lg)) {
            free(idx);
            return -1;
        }
        if (t->last) {
            int c = 0;
            spmd_cross_entropy(NULL, lg, y, B, 10, &c);
            hits[0] += c;
            hits[1] += B;
        }
    }
    free(idx);
    if (t->pipe) spmd_pipe_train(t->pipe, 1);
    else spmd_model_train(t->model, 1);
    if (t->last && dp > 1) spmd_all_reduce(t->mesh.dp_group, hits, hits, 2, SPMD_F64, SPMD_SUM);
    *acc = hits[1] > 0 ? hits[0] / hits[1] : 0;
    return 0;
}

static void shuffle(size_t *perm, size_t n, uint64_t seed, int epoch) {
    spmd_rng r;
    spmd_rng_seed(&r, seed, 7000 + (uint64_t)epoch);
    for (size_t i = 0; i < n; i++) perm[i] = i;
    for (size_t i = n; i > 1; i--) {
        size_t j = (size_t)(spmd_rng_next(&r) % i), tmp = perm[i - 1];
        perm[i - 1] = perm[j];
        perm[j] = tmp;
    }
}

static int train(ptrainer *t) {
    const popts *o = &t->o;
    const int B = o->batch, dp = t->mesh.dp;
    size_t ntrain = data_n(&t->d, 0);
    if (o->train_samples > 0 && (size_t)o->train_samples < ntrain) ntrain = (size_t)o->train_samples;
    size_t steps_per_epoch = ntrain / ((size_t)B * dp);
    if (steps_per_epoch == 0) {
        fprintf(stderr, "spmd-train: %zu training samples make no global batch of %d x %d\n", ntrain, B, dp);
        return 1;
    }
    size_t np;
    float *params = spmd_model_params(t->model, &np), *grads = spmd_model_grads(t->model, NULL);
    float *x = malloc(sizeof(float) * t->in_size * (size_t)B), *dl = malloc(sizeof(float) * (size_t)B * 10);
    float *logits = malloc(sizeof(float) * (size_t)B * 10);
    int *y = malloc(sizeof(int) * (size_t)B);
    size_t *perm = malloc(sizeof(size_t) * ntrain);
    int rc = 1;
    if (!x || !dl || !logits || !y || !perm) goto out;
    long step = 0;
    double acc = 0, t_data = 0, t_comp = 0, t_bub = 0, t_opt = 0, t_win = now();
    double t_warm = 0, bub_all = 0, comp_all = 0;   /* from step 10 on: the summary */
    long warm_step = -1;
    int win = 0;
    for (int ep = 0; ep < o->epochs && (o->steps == 0 || step < o->steps); ep++) {
        shuffle(perm, ntrain, (uint64_t)o->seed, ep);
        for (size_t s = 0; s < steps_per_epoch && (o->steps == 0 || step < o->steps); s++, step++) {
            double t0 = now();
            if (step == 10 || (warm_step < 0 && o->steps && o->steps <= 10)) t_warm = t0, warm_step = step;
            const size_t *idx = perm + (s * dp + (size_t)t->mesh.d) * B;
            fill(&t->d, 0, idx, B, 1, (uint64_t)o->seed * 1000003u + (uint64_t)step, x, y);
            double t1 = now();
            float loss = 0;
            spmd_model_zero_grad(t->model);
            spmd_pipe_stats ps = {0};
            if (t->pipe) {
                if (spmd_pipe_step(t->pipe, x, y, B, &loss, NULL)) {
                    fprintf(stderr, "spmd-train: rank %d: %s\n", spmd_group_rank(t->g), spmd_pipe_errmsg(t->pipe));
                    goto out;
                }
                spmd_pipe_last_stats(t->pipe, &ps);
            } else {
                const float *lg;
                spmd_status st = spmd_model_forward(t->model, x, B, &lg);
                if (!st) loss = spmd_cross_entropy(dl, lg, y, B, 10, NULL);
                if (!st) st = spmd_model_backward(t->model, dl, NULL, NULL);
                if (st) {
                    fprintf(stderr, "spmd-train: rank %d: step %ld: %s\n", spmd_group_rank(t->g), step, spmd_status_str(st));
                    goto out;
                }
            }
            double t2 = now();
            spmd_status st = SPMD_OK;
            if (t->zero) st = spmd_zero_step(t->zero, params, grads);
            else {
                if (dp > 1) st = spmd_all_reduce(t->mesh.dp_group, grads, grads, np, SPMD_F32, SPMD_SUM);
                for (size_t i = 0; dp > 1 && i < np; i++) grads[i] *= 1.0f / (float)dp;
                if (!st) spmd_optim_step(t->optim, params, grads);
            }
            if (st) {
                fprintf(stderr, "spmd-train: rank %d: gradient averaging / step failed: %s\n",
                        spmd_group_rank(t->g), t->zero ? spmd_zero_errmsg(t->zero) : spmd_group_errmsg(t->mesh.dp_group));
                goto out;
            }
            double t3 = now();
            t_data += t1 - t0;
            t_comp += t->pipe ? ps.compute_s : t2 - t1;
            t_bub += t->pipe ? ps.bubble_s : 0;
            if (warm_step >= 0) {
                bub_all += t->pipe ? ps.bubble_s : 0;
                comp_all += t->pipe ? ps.compute_s : t2 - t1;
            }
            t_opt += t3 - t2;
            win++;
            if (t->last && dp > 1) spmd_all_reduce(t->mesh.dp_group, &loss, &loss, 1, SPMD_F32, SPMD_SUM);
            loss /= (float)dp;
            if (t->reporter && !o->quiet && ((step + 1) % o->log_every == 0)) {
                double el = now() - t_win;
                printf("step %ld  loss %.4f  %.0f samples/s  per step: data %.2f ms  compute %.2f ms  "
                       "bubble %.2f ms  step %.2f ms\n",
                       step + 1, loss, (double)B * dp * win / el, 1e3 * t_data / win, 1e3 * t_comp / win,
                       1e3 * t_bub / win, 1e3 * t_opt / win);
                fflush(stdout);
            }
            if ((step + 1) % o->log_every == 0) t_data = t_comp = t_bub = t_opt = 0, win = 0, t_win = now();
        }
        if (o->eval) {
            if (evaluate(t, x, y, logits, &acc)) goto out;
            if (t->reporter) printf("epoch %d  test accuracy %.4f\n", ep + 1, acc);
        }
    }
    if (t->reporter) {
        printf("done: %ld steps, dp %d x pp %d x tp %d%s%s", step, t->mesh.dp, t->mesh.pp, t->mesh.tp,
               t->pipe ? (o->schedule == SPMD_SCHEDULE_GPIPE ? ", gpipe" : ", 1f1b") : "",
               t->zero ? ", zero-1" : "");
        long n = step - warm_step;
        if (warm_step >= 0 && n > 0)
            printf(": %.0f samples/s from step %ld, last stage per step: compute %.2f ms, bubble %.2f ms",
                   (double)B * dp * n / (now() - t_warm), warm_step, 1e3 * comp_all / n, 1e3 * bub_all / n);
        printf("\n");
    }
    rc = 0;
out:
    free(x); free(dl); free(logits); free(y); free(perm);
    return rc;
}

static int setup(ptrainer *t) {
    const popts *o = &t->o;
    char err[512] = "";
    spmd_nn_set_threads(o->threads > 0 ? o->threads : spmd_nn_default_threads());
    if (spmd_group_init(NULL, &t->g, err, sizeof err)) {
        fprintf(stderr, "spmd-train: %s\n", err);
        return 1;
    }
    int world = spmd_group_size(t->g), rank = spmd_group_rank(t->g);
    if (world % (o->pp * o->tp) != 0) {
        fprintf(stderr, "spmd-train: the world of %d ranks is not divisible by --pp %d x --tp %d\n", world, o->pp, o->tp);
        return 1;
    }
    if (spmd_mesh_create(t->g, world / (o->pp * o->tp), o->pp, o->tp, &t->mesh, err, sizeof err)) goto fail;
    t->d.cifar = strcmp(o->dataset, "cifar10") == 0;
    int c = t->d.cifar ? 3 : 0, hw = t->d.cifar ? 32 : 0;
    if (o->tp > 1) {
        if (spmd_tp_create(t->mesh.tp_group, &t->tp) ||
            spmd_tp_arch(t->tp, o->model, 10, c, hw, hw, &t->L, err, sizeof err)) goto fail;
    } else if (spmd_layers_arch(o->model, 10, c, hw, hw, &t->L, err, sizeof err)) {
        goto fail;
    }
    int ic, ih, iw;
    spmd_layers_shape(t->L, -1, &ic, &ih, &iw, NULL);
    t->in_size = (size_t)ic * ih * iw;
    if (o->pp > 1) {
        spmd_pipe_opts po = {o->schedule, o->M, NULL, (uint64_t)o->seed, o->dropout};
        if (spmd_pipe_create(t->mesh.pp_group, t->L, &po, &t->pipe, err, sizeof err)) goto fail;
        t->model = spmd_pipe_model(t->pipe);
    } else {
        spmd_build_opts bo = {o->model, (uint64_t)o->seed, o->dropout, 0, 0};
        if (spmd_model_build(t->L, &bo, &t->model, err, sizeof err)) goto fail;
    }
    /* the ranks of a tensor-parallel group share the dropout stream: the
     * activations before a column-parallel layer are replicated and must be
     * masked alike (the masks after it then repeat per shard) */
    uint64_t stream = (uint64_t)t->mesh.d * (uint64_t)o->pp + (uint64_t)t->mesh.p;
    if (t->pipe) spmd_pipe_seed_dropout(t->pipe, (uint64_t)o->seed, stream);
    else spmd_model_seed_dropout(t->model, (uint64_t)o->seed, stream);
    t->first = t->mesh.p == 0;
    t->last = t->mesh.p == o->pp - 1;
    t->reporter = t->last && t->mesh.d == 0 && t->mesh.t == 0;
    spmd_optim_opts oo = SPMD_OPTIM_OPTS_SGD;
    if (o->optim == SPMD_OPTIM_ADAM) oo = (spmd_optim_opts)SPMD_OPTIM_OPTS_ADAM;
    if (o->optim == SPMD_OPTIM_ADAMW) oo = (spmd_optim_opts)SPMD_OPTIM_OPTS_ADAMW;
    oo.lr = o->lr;
    if (o->optim == SPMD_OPTIM_SGD) oo.momentum = o->momentum;
    oo.weight_decay = o->wd;
    size_t np;
    spmd_model_params(t->model, &np);
    if (o->zero ? spmd_zero_create(t->mesh.dp_group, &oo, np, 1, &t->zero, err, sizeof err)
                : spmd_optim_create(&oo, np, &t->optim)) {
        if (!err[0]) snprintf(err, sizeof err, "invalid optimizer options");
        goto fail;
    }
    spmd_status st;
    if (t->d.cifar) {
        if (!o->data) {
            snprintf(err, sizeof err, "--dataset cifar10 needs --data DIR with the CIFAR-10 binary files "
                                      "(cifar-10-binary.tar.gz from https://www.cs.toronto.edu/~kriz/cifar.html)");
            goto fail;
        }
        st = spmd_cifar_load_dir(o->data, SPMD_SPLIT_TRAIN, &t->d.cf[0], err, sizeof err);
        if (!st && o->eval) st = spmd_cifar_load_dir(o->data, SPMD_SPLIT_TEST, &t->d.cf[1], err, sizeof err);
    } else {
        st = spmd_dataset_load_dir(o->data, SPMD_SPLIT_TRAIN, &t->d.fm[0], err, sizeof err);
        if (!st && o->eval) st = spmd_dataset_load_dir(o->data, SPMD_SPLIT_TEST, &t->d.fm[1], err, sizeof err);
    }
    if (st) goto fail;
    if (t->reporter && !o->quiet)
        printf("spmd-train: %s on %s, world %d = dp %d x pp %d x tp %d, batch %d per replica%s\n", o->model,
               o->dataset, world, t->mesh.dp, o->pp, o->tp, o->batch, o->zero ? ", ZeRO-1" : "");
    return 0;
fail:
    fprintf(stderr, "spmd-train: rank %d: %s\n", rank, err);
    return 1;
}

int spmd_train_parallel_main(int argc, char **argv) {
    ptrainer t;
    memset(&t, 0, sizeof t);
    if (parse(argc, argv, &t.o)) return 2;
    int rc = setup(&t);
    if (rc == 0) rc = train(&t);
    spmd_zero_free(t.zero);
    spmd_optim_free(t.optim);
    if (t.pipe) spmd_pipe_free(t.pipe);
    else spmd_model_free(t.model);
    spmd_layers_free(t.L);
    spmd_tp_free(t.tp);
    for (int s = 0; s < 2; s++) {
        spmd_dataset_free(&t.d.fm[s]);
        spmd_cifar_free(&t.d.cf[s]);
    }
    spmd_mesh_destroy(&t.mesh);
    spmd_group_destroy(t.g);
    return rc;
}
