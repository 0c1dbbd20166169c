/* spmd-train — data-parallel training of the seeds' models on Fashion-MNIST.
 *
 *   spmd-train --model cnn --epochs 3                  one process
 *   spmdrun -n 2 spmd-train --model cnn --epochs 3     two ranks
 *   mpirun -n 2 spmd-train --model cnn --epochs 3      two ranks over MPI
 *
 * One process when no launcher variables are set (world 1, no socket); under
 * a launcher (WORLD_SIZE set, or mpirun/srun --mpi) the ranks form a group
 * (over MPI when an MPI launcher started them) and every rank trains on
 * its DistributedSampler shard.  Gradients cross ranks through the DDP
 * reducer (spmd/ddp.h: rank 0's parameters and buffers broadcast at
 * construction, gradient buckets all-reduced while backward is still running)
 * or, with --sync average, seed 000's average_gradients (one all_reduce of the
 * whole gradient buffer after backward).  --sync-bn makes BatchNorm layers
 * SyncBatchNorm.  After each epoch the test set is evaluated sharded across
 * ranks and the counts all-reduced (seed 004).  Checkpoints (safetensors,
 * torch state_dict names) hold everything an exact continuation needs.
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <cblas.h>
#include "spmd-train-parallel.h"
#include "spmd/data.h"
#include "spmd/ddp.h"
#include "spmd/group.h"
#include "spmd/nn.h"
#include "spmd/syncbn.h"

#define ERRLEN 512

/* DDP bucket cap.  torch's 25 MiB puts the seed CNN's 2.4 MB of gradients in
 * one bucket that can only start when backward ends; at 1 MiB its fc1 weight
 * gradient (2.36 MB) is reduced while the convolutions' backward runs.  Over
 * a 2 Gbit/s link 1 MiB was 12-20 % faster; on loopback, where both cores are
 * busy anyway, 2-3 % slower (docs/PERFORMANCE.md, DDP training). */
#define DEFAULT_BUCKET_CAP_MB 1.0

/* ---- options ------------------------------------------------------------- */

typedef struct {
    const char *model;
    const char *data;
    int epochs;
    long steps;          /* 0: no limit */
    int batch;
    float lr, momentum, weight_decay;
    spmd_optim_kind optimizer;
    uint64_t seed;
    int threads;
    const char *ckpt_dir;
    int resume;
    const char *metrics;
    const char *plot;
    int quiet;
    int dropout;
    int log_every;
    int eval;
    long train_samples;  /* 0: the whole training set */
    int sync_average;    /* 1: --sync average (seed 000's average_gradients) */
    int no_overlap;      /* DDP: reduce every bucket after backward */
    int no_shared_grads; /* DDP: gradients in private memory, buckets through all_reduce */
    int no_shard_step;   /* DDP: every rank runs the whole optimizer step */
    float bucket_cap_mb; /* DDP: 0 = DEFAULT_BUCKET_CAP_MB */
    spmd_ddp_compression compression;
    int sync_bn;
    int check_sync;
    int lr_linear;       /* the learning rate scales with the world size */
    const char *save_model; /* --save-model: the trained state_dict (spmd_model_save) */
    const char *load_model; /* --load-model: start from this state_dict (spmd_model_load) */
    long test_samples;   /* 0: the whole test set */
} options;

static void usage(FILE *f) {
    fprintf(f,
        "usage: spmd-train [options]\n"
        "Train a seed model on Fashion-MNIST, in one process or as one rank of a\n"
        "group started by a launcher (spmdrun, torchrun-style environment, mpirun, srun).\n"
        "\n"
        "  --model NAME         mlp | cnn | resnet18 | resnet34          (cnn)\n"
        "  --data DIR           MNIST-layout IDX files (.gz or raw)      (%s)\n"
        "  --epochs N           passes over the training set; 0: evaluate only (1)\n"
        "  --steps N            stop after N optimizer steps in total    (no limit)\n"
        "  --batch-size B       examples per rank per step               (16)\n"
        "  --lr X               learning rate of one rank's batch        (0.01)\n"
        "  --lr-scaling S       none: lr as given at every world size, as torch; linear: the\n"
        "                       step uses lr x world size, as the global batch is world x\n"
        "                       batch (Goyal et al.)                     (none)\n"
        "  --momentum X         SGD momentum                             (0.5)\n"
        "  --optimizer NAME     sgd | adam | adamw                       (sgd)\n"
        "  --weight-decay X     L2 (sgd, adam) or decoupled (adamw)      (0)\n"
        "  --seed N             initialisation, shuffling and dropout    (1234)\n"
        "  --threads N          BLAS threads per process                 (1, or OPENBLAS_NUM_THREADS)\n"
        "  --checkpoint-dir DIR save DIR/checkpoint.safetensors after every epoch and at the end\n"
        "  --resume             continue from DIR/checkpoint.safetensors when it exists\n"
        "  --metrics FILE       append JSON lines: steps (loss, samples/s) and epochs (test accuracy)\n"
        "  --plot FILE.png      draw loss and accuracy curves with gnuplot at the end\n"
        "  --save-model FILE    write the trained model's state_dict (safetensors, torch's\n"
        "                       names and shapes: model.load_state_dict() reads it)\n"
        "  --load-model FILE    start from a state_dict (e.g. saved by torch); with --epochs 0\n"
        "                       only evaluate it\n"
        "  --log-every N        steps per metrics record and progress update  (10)\n"
        "  --train-samples N    train on the first N examples only (quick runs, tests)\n"
        "  --test-samples N     evaluate on the first N test examples only\n"
        "  --no-eval            skip the test-set evaluation\n"
        "  --no-dropout         dropout layers become the identity\n"
        "  --sync ddp|average   gradient synchronisation (world > 1): the DDP reducer, or seed\n"
        "                       000's average_gradients after backward    (ddp)\n"
        "  --no-overlap         DDP: reduce all buckets after backward instead of during it\n"
        "  --no-shared-grads    DDP: keep gradients private and reduce them by all_reduce even\n"
        "                       when every rank is on this host (default: summed in shared memory)\n"
        "  --no-shard-step      DDP: every rank applies the optimizer to every parameter (default\n"
        "                       with shared gradients: each rank steps the share it sums)\n"
        "  --bucket-cap-mb X    DDP: bucket size cap in MiB (torch: 25)  (1; first bucket <= 1)\n"
        "  --grad-compression C DDP: none | fp16 | bf16 on the wire      (none)\n"
        "  --sync-bn            BatchNorm layers use the global batch's statistics (SyncBatchNorm)\n"
        "  --check-sync         at the end, fail unless every rank holds identical parameters\n"
        "                       and optimizer state (and BatchNorm buffers with --sync-bn)\n"
        "  --quiet              only errors and the final summary\n"
        "  --help               this text\n"
        "\n"
        "Defaults follow seed 000's recipe: the CNN, SGD lr 0.01 momentum 0.5, batch 16 per rank,\n"
        "inputs normalised with mean %.4f std %.4f; the learning rate is the one given at every\n"
        "world size (--lr-scaling linear multiplies it by the number of ranks).\n",
        SPMD_DATASET_DEFAULT_DIR, (double)SPMD_FASHION_MNIST_MEAN, (double)SPMD_FASHION_MNIST_STD);
}

static int parse_long(const char *opt, const char *s, long lo, long hi, long *out) {
    char *end;
    errno = 0;
    long v = s ? strtol(s, &end, 10) : 0;
    if (!s || errno || *end || end == s || v < lo || v > hi) {
        fprintf(stderr, "spmd-train: %s needs an integer in [%ld, %ld], got '%s' (see --help)\n", opt, lo, hi,
                s ? s : "");
        return -1;
    }
    *out = v;
    return 0;
}

static int parse_float(const char *opt, const char *s, float *out) {
    char *end;
    errno = 0;
    double v = s ? strtod(s, &end) : 0;
    if (!s || errno || *end || end == s || !isfinite(v) || v < 0) {
        fprintf(stderr, "spmd-train: %s needs a non-negative number, got '%s'\n", opt, s ? s : "");
        return -1;
    }
    *out = (float)v;
    return 0;
}

/* s must be one of names[0..n) ("a, b or c" in the error); *out = its index. */
static int parse_choice(const char *opt, const char *s, const char *const *names, int n, int *out) {
    for (int i = 0; i < n; i++)
        if (s && strcmp(s, names[i]) == 0) {
            *out = i;
            return 0;
        }
    fprintf(stderr, "spmd-train: %s must be ", opt);
    for (int i = 0; i < n; i++) fprintf(stderr, "%s%s", i == 0 ? "" : i + 1 < n ? ", " : " or ", names[i]);
    fprintf(stderr, ", got '%s'\n", s ? s : "");
    return -1;
}

/* A file the run will write at its end: its folder must exist and be
 * writable now (gnuplot would otherwise dump the PNG on the terminal). */
static int check_output_file(const char *opt, const char *path) {
    if (!path) return 0;
    const char *slash = strrchr(path, '/');
    char dir[4096];
    if (!*path || (slash && !slash[1])) {
        fprintf(stderr, "spmd-train: %s needs a file name, got '%s'\n", opt, path);
        return -1;
    }
    if (!slash) snprintf(dir, sizeof dir, ".");
    else if (slash == path) snprintf(dir, sizeof dir, "/");
    else snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);
    struct stat sb;
    if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode)) {
        fprintf(stderr, "spmd-train: %s %s: the folder %s does not exist\n", opt, path, dir);
        return -1;
    }
    if (access(dir, W_OK) != 0) {
        fprintf(stderr, "spmd-train: %s %s: cannot write in %s: %s\n", opt, path, dir, strerror(errno));
        return -1;
    }
    return 0;
}

/* Returns 0 to run, 1 for --help, -1 on a usage error. */
static int parse_args(int argc, char **argv, options *o) {
    *o = (options){"cnn", NULL, 1, 0, 16, 0.01f, 0.5f, 0.0f, SPMD_OPTIM_SGD, 1234, 0,
                   NULL, 0, NULL, NULL, 0, 1, 10, 1, 0, 0, 0, 0, 0, 0.0f, SPMD_DDP_COMPRESS_NONE, 0, 0, 0, NULL, NULL, 0};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        long n;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) return 1;
        else if (strcmp(a, "--resume") == 0) o->resume = 1;
        else if (strcmp(a, "--quiet") == 0) o->quiet = 1;
        else if (strcmp(a, "--no-dropout") == 0) o->dropout = 0;
        else if (strcmp(a, "--no-eval") == 0) o->eval = 0;
        else if (strcmp(a, "--no-overlap") == 0) o->no_overlap = 1;
        else if (strcmp(a, "--no-shared-grads") == 0) o->no_shared_grads = 1;
        else if (strcmp(a, "--no-shard-step") == 0) o->no_shard_step = 1;
        else if (strcmp(a, "--sync-bn") == 0) o->sync_bn = 1;
        else if (strcmp(a, "--check-sync") == 0) o->check_sync = 1;
        else if (!v) {
            fprintf(stderr, "spmd-train: unknown option or missing value: %s (see --help)\n", a);
            return -1;
        } else {
            i++;
            if (strcmp(a, "--model") == 0) o->model = v;
            else if (strcmp(a, "--data") == 0) o->data = v;
            else if (strcmp(a, "--checkpoint-dir") == 0) o->ckpt_dir = v;
            else if (strcmp(a, "--metrics") == 0) o->metrics = v;
            else if (strcmp(a, "--plot") == 0) o->plot = v;
            else if (strcmp(a, "--save-model") == 0) o->save_model = v;
            else if (strcmp(a, "--load-model") == 0) o->load_model = v;
            else if (strcmp(a, "--epochs") == 0) {
                if (parse_long(a, v, 0, 1000000, &n)) return -1;
                o->epochs = (int)n;
            } else if (strcmp(a, "--steps") == 0) {
                if (parse_long(a, v, 1, 1L << 40, &n)) return -1;
                o->steps = n;
            } else if (strcmp(a, "--batch-size") == 0) {
                if (parse_long(a, v, 1, 65536, &n)) return -1;
                o->batch = (int)n;
            } else if (strcmp(a, "--threads") == 0) {
                if (parse_long(a, v, 1, 1024, &n)) return -1;
                o->threads = (int)n;
            } else if (strcmp(a, "--log-every") == 0) {
                if (parse_long(a, v, 1, 1000000, &n)) return -1;
                o->log_every = (int)n;
            } else if (strcmp(a, "--train-samples") == 0) {
                if (parse_long(a, v, 1, 1L << 40, &n)) return -1;
                o->train_samples = n;
            } else if (strcmp(a, "--test-samples") == 0) {
                if (parse_long(a, v, 1, 1L << 40, &n)) return -1;
                o->test_samples = n;
            } else if (strcmp(a, "--seed") == 0) {
                if (parse_long(a, v, 0, 0x7fffffffffffffffL, &n)) return -1;
                o->seed = (uint64_t)n;
            } else if (strcmp(a, "--lr") == 0) {
                if (parse_float(a, v, &o->lr)) return -1;
            } else if (strcmp(a, "--lr-scaling") == 0) {
                static const char *const names[] = {"linear", "none"};
                int c;
                if (parse_choice(a, v, names, 2, &c)) return -1;
                o->lr_linear = c == 0;
            } else if (strcmp(a, "--momentum") == 0) {
                if (parse_float(a, v, &o->momentum)) return -1;
            } else if (strcmp(a, "--weight-decay") == 0) {
                if (parse_float(a, v, &o->weight_decay)) return -1;
            } else if (strcmp(a, "--bucket-cap-mb") == 0) {
                if (parse_float(a, v, &o->bucket_cap_mb)) return -1;
                if (!(o->bucket_cap_mb > 0.0f) || o->bucket_cap_mb > 65536.0f) {
                    fprintf(stderr, "spmd-train: --bucket-cap-mb needs a size in (0, 65536] MiB, got '%s'\n", v);
                    return -1;
                }
            } else if (strcmp(a, "--sync") == 0) {
                static const char *const names[] = {"ddp", "average"};
                if (parse_choice(a, v, names, 2, &o->sync_average)) return -1;
            } else if (strcmp(a, "--grad-compression") == 0) {
                /* in the order of spmd_ddp_compression */
                static const char *const names[] = {"none", "fp16", "bf16"};
                int c;
                if (parse_choice(a, v, names, 3, &c)) return -1;
                o->compression = (spmd_ddp_compression)c;
            } else if (strcmp(a, "--optimizer") == 0) {
                if (spmd_optim_parse(v, &o->optimizer) != SPMD_OK) {
                    fprintf(stderr, "spmd-train: --optimizer must be sgd, adam or adamw, got '%s'\n", v);
                    return -1;
                }
            } else {
                fprintf(stderr, "spmd-train: unknown option %s (see --help)\n", a);
                return -1;
            }
        }
    }
    if (strcmp(o->model, "mlp") && strcmp(o->model, "cnn") && strcmp(o->model, "resnet18") &&
        strcmp(o->model, "resnet34")) {
        fprintf(stderr, "spmd-train: --model must be mlp, cnn, resnet18 or resnet34, got '%s' (see --help)\n",
                o->model);
        return -1;
    }
    if (o->sync_average &&
        (o->no_overlap || o->no_shared_grads || o->no_shard_step || o->bucket_cap_mb > 0.0f || o->compression)) {
        fprintf(stderr, "spmd-train: --no-overlap, --no-shared-grads, --no-shard-step, --bucket-cap-mb and "
                        "--grad-compression belong to --sync ddp, not --sync average\n");
        return -1;
    }
    if (o->resume && !o->ckpt_dir) {
        fprintf(stderr, "spmd-train: --resume needs --checkpoint-dir (see --help)\n");
        return -1;
    }
    /* files written at the end: refuse now, not after the training */
    if (check_output_file("--plot", o->plot) || check_output_file("--save-model", o->save_model)) return -1;
    return 0;
}

/* ---- the trainer's state --------------------------------------------------- */

typedef struct {
    double data, fwd, bwd, comm, opt;   /* seconds summed over steps */
    double prep;                        /* DDP: spmd_ddp_prepare (buffer broadcast) */
    long steps;
} timing;

typedef struct {
    long step;
    float loss;
} loss_point;

typedef struct {
    options o;
    spmd_group *g;          /* NULL for a single process */
    spmd_ddp *ddp;          /* the reducer (world > 1 and --sync ddp) */
    int rank, world;
    spmd_model *model;
    spmd_optim *optim;
    spmd_dataset train, test;
    spmd_sampler *train_sampler, *test_sampler;
    float *x, *dlogits;
    int *y;
    float *params, *grads, *buffers;
    size_t nparams, nbuffers;
    /* position: the next step is step_in_epoch of epoch; global_step steps done */
    int epoch;
    long step_in_epoch, global_step;
    timing t;
    FILE *metrics;
    loss_point *losses;
    size_t nlosses, cap_losses;
    double *accs;
    int naccs;
    int tty;
    char err[ERRLEN];
} trainer;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Messages from rank 0 only (every rank prints its own errors). */
static void say(const trainer *t, const char *fmt, ...) {
    if (t->rank != 0 || t->o.quiet) return;
    va_list ap;
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    fflush(stdout);
}

static int fail(trainer *t, const char *what, spmd_status st) {
    fprintf(stderr, "spmd-train: rank %d: %s: %s%s%s\n", t->rank, what, spmd_status_str(st),
            t->err[0] ? ": " : "", t->err);
    return 1;
}

/* ---- gradient synchronisation ---------------------------------------------
 * The only place gradients cross ranks, in three calls around backward:
 * grad_sync_prepare (before forward), grad_sync_hook (handed to backward as
 * its grad_ready callback) and grad_sync_finish (after backward, before the
 * optimizer).  With the DDP reducer these are spmd_ddp_prepare,
 * spmd_ddp_grad_ready_hook (buckets start while earlier layers are still in
 * backward) and spmd_ddp_finish.  With --sync average they are seed 000's
 * average_gradients: nothing until backward ends, then one all_reduce(SUM) of
 * the whole contiguous gradient buffer and a division by the world size. */

static void set_err_group(trainer *t) {
    snprintf(t->err, sizeof t->err, "%s", t->g ? spmd_group_errmsg(t->g) : "");
}

static void set_err_ddp(trainer *t) { snprintf(t->err, sizeof t->err, "%s", spmd_ddp_errmsg(t->ddp)); }

/* The reducer's sharded step: this rank's share of the optimizer step. */
static void shard_step(void *ctx, size_t offset, size_t count, const float *avg) {
    trainer *t = ctx;
    spmd_optim_update(t->optim, t->params, avg, offset, count);
}

/* model = DistributedDataParallel(model, bucket_cap_mb=...): every parameter
 * in model order, the BatchNorm buffers, then finalize (which checks the
 * ranks agree and broadcasts rank 0's parameters and buffers). */
static spmd_status ddp_setup(trainer *t) {
    spmd_ddp_opts o = SPMD_DDP_OPTS_DEFAULT;
    o.overlap = !t->o.no_overlap;
    o.compression = t->o.compression;
    double cap_mb = t->o.bucket_cap_mb > 0.0f ? (double)t->o.bucket_cap_mb : DEFAULT_BUCKET_CAP_MB;
    o.bucket_cap_bytes = (size_t)(cap_mb * 1048576.0);
    if (o.bucket_cap_bytes < sizeof(float)) o.bucket_cap_bytes = sizeof(float);
    /* torch keeps its 1 MiB first bucket; a smaller cap applies to it too */
    if (o.first_bucket_bytes > o.bucket_cap_bytes) o.first_bucket_bytes = o.bucket_cap_bytes;
    spmd_status st = spmd_ddp_create(t->g, &o, &t->ddp);
    if (st != SPMD_OK) {
        snprintf(t->err, sizeof t->err, "cannot create the reducer");
        return st;
    }
    if (!t->o.no_shared_grads) {
        /* gradient_as_bucket_view: the model's gradients live in the reducer's
         * memory, which ranks on one host share */
        float *shared = NULL;
        st = spmd_ddp_alloc_grads(t->ddp, t->nparams, &shared);
        if (st == SPMD_OK) {
            spmd_model_use_grad_memory(t->model, shared);
            t->grads = shared;
        }
        /* and the sharded step: parameters and optimizer state shared too */
        float *params = NULL, *state = NULL;
        if (st == SPMD_OK && !t->o.no_shard_step &&
            (st = spmd_ddp_alloc_step(t->ddp, (size_t)spmd_optim_state_arrays(t->optim), shard_step, t,
                                      &params, &state)) == SPMD_OK) {
            spmd_model_use_param_memory(t->model, params);
            t->params = params;
            if (state) spmd_optim_use_state_memory(t->optim, state);
        }
    }
    for (int i = 0; i < spmd_model_num_params(t->model) && st == SPMD_OK; i++) {
        const spmd_tensor_info *p = spmd_model_param(t->model, i);
        st = spmd_ddp_add_param(t->ddp, p->name, t->params + p->offset, t->grads + p->offset, p->count);
    }
    for (int i = 0; i < spmd_model_num_buffers(t->model) && st == SPMD_OK; i++) {
        const spmd_tensor_info *b = spmd_model_buffer(t->model, i);
        st = spmd_ddp_add_buffer(t->ddp, b->name, t->buffers + b->offset, b->count);
    }
    if (st == SPMD_OK) st = spmd_ddp_finalize(t->ddp);
    if (st != SPMD_OK) set_err_ddp(t);
    return st;
}

static spmd_status grad_sync_prepare(trainer *t) {
    if (!t->ddp) return SPMD_OK;
    spmd_status st = spmd_ddp_prepare(t->ddp);
    if (st != SPMD_OK) set_err_ddp(t);
    return st;
}

static void grad_sync_hook(void *ctx, int param_index) {
    trainer *t = ctx;
    /* the plain all_reduce waits for the whole buffer */
    if (t->ddp) spmd_ddp_grad_ready_hook(t->ddp, param_index);
}

static spmd_status grad_sync_finish(trainer *t) {
    if (!t->g || t->world == 1) return SPMD_OK;
    if (t->ddp) {
        spmd_status st = spmd_ddp_finish(t->ddp);
        if (st != SPMD_OK) set_err_ddp(t);
        return st;
    }
    spmd_status st = spmd_all_reduce(t->g, t->grads, t->grads, t->nparams, SPMD_F32, SPMD_SUM);
    if (st != SPMD_OK) {
        set_err_group(t);
        return st;
    }
    /* blocks of 16 with a fixed trip count vectorise at -O2 (GCC's cheap
     * cost model refuses a loop that needs a remainder) */
    const float inv = 1.0f / (float)t->world;
    size_t i = 0;
    for (; i + 16 <= t->nparams; i += 16)
        for (size_t k = 0; k < 16; k++) t->grads[i + k] *= inv;
    for (; i < t->nparams; i++) t->grads[i] *= inv;
    return SPMD_OK;
}

/* --check-sync: data parallelism keeps every rank's replica identical.  A
 * 64-bit hash of the parameters and the optimizer state (and of the
 * BatchNorm buffers under SyncBatchNorm, the only mode in which they agree
 * after a local forward) is all-reduced as {MAX(h), MAX(~h)} = {max, ~min}. */
static uint64_t fnv1a(uint64_t h, const void *p, size_t n) {
    const unsigned char *b = p;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {   /* a word at a time: resnet18 has 90 MB to hash */
        uint64_t w;
        memcpy(&w, b + i, 8);
        h = (h ^ w) * 1099511628211ull;
    }
    for (; i < n; i++) h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

/* The whole optimizer state on this rank (after sharded steps each rank
 * keeps only its slices current). */
static spmd_status whole_state(trainer *t) {
    if (!t->ddp) return SPMD_OK;
    spmd_status st = spmd_ddp_gather_state(t->ddp);
    if (st != SPMD_OK) set_err_ddp(t);
    return st;
}

static spmd_status check_sync(trainer *t) {
    spmd_status st0 = whole_state(t);
    if (st0 != SPMD_OK) return st0;
    uint64_t h = 1469598103934665603ull;
    h = fnv1a(h, t->params, t->nparams * sizeof(float));
    size_t ns;
    float *os = spmd_optim_state(t->optim, &ns);
    h = fnv1a(h, os, ns * sizeof(float));
    int with_buffers = t->nbuffers && spmd_model_is_syncbn(t->model);
    if (with_buffers) h = fnv1a(h, t->buffers, t->nbuffers * sizeof(float));
    int64_t v[2] = {(int64_t)h, (int64_t)~h};
    if (t->g) {
        spmd_status st = spmd_all_reduce(t->g, v, v, 2, SPMD_I64, SPMD_MAX);
        if (st != SPMD_OK) {
            set_err_group(t);
            return st;
        }
    }
    uint64_t hi = (uint64_t)v[0], lo = ~(uint64_t)v[1];
    if (hi != lo) {
        snprintf(t->err, sizeof t->err,
                 "the ranks' replicas differ (hash here %016llx, min %016llx, max %016llx over %d ranks)",
                 (unsigned long long)h, (unsigned long long)lo, (unsigned long long)hi, t->world);
        return SPMD_ERR_MISMATCH;
    }
    say(t, "check-sync: parameters, optimizer state%s identical on all %d rank(s) (hash %016llx)\n",
        with_buffers ? " and BatchNorm buffers" : "", t->world, (unsigned long long)h);
    return SPMD_OK;
}

/* ---- checkpoints ------------------------------------------------------------ */

#define CKPT_NAME "checkpoint.safetensors"

typedef struct {
    spmd_ckpt_tensor *t;
    size_t n;
    int64_t state[5];    /* epoch, step_in_epoch, global_step, optimizer steps, world */
    int64_t *rng;        /* world x 4 xoshiro words, one row per rank */
} ckpt_list;

static void tensor_from_info(spmd_ckpt_tensor *ct, const spmd_tensor_info *ti, float *base) {
    memset(ct, 0, sizeof *ct);
    ct->name = ti->name;
    ct->dtype = SPMD_F32;
    ct->ndim = ti->ndim;
    for (int d = 0; d < ti->ndim; d++) ct->shape[d] = ti->shape[d];
    ct->data = base + ti->offset;
}

/* Everything an exact continuation needs, in torch state_dict names where
 * torch has one: parameters, BatchNorm buffers, the optimizer state, the
 * position in the data, and every rank's dropout RNG. */
static int ckpt_list_build(trainer *t, ckpt_list *c) {
    int np = spmd_model_num_params(t->model), nb = spmd_model_num_buffers(t->model);
    c->t = calloc((size_t)np + nb + 3, sizeof(spmd_ckpt_tensor));
    c->rng = calloc((size_t)t->world * 4, sizeof(int64_t));
    if (!c->t || !c->rng) return -1;
    c->n = 0;
    for (int i = 0; i < np; i++)
        tensor_from_info(&c->t[c->n++], spmd_model_param(t->model, i), t->params);
    for (int i = 0; i < nb; i++)
        tensor_from_info(&c->t[c->n++], spmd_model_buffer(t->model, i), t->buffers);
    size_t ns;
    float *os = spmd_optim_state(t->optim, &ns);
    if (ns) {
        spmd_ckpt_tensor *ct = &c->t[c->n++];
        memset(ct, 0, sizeof *ct);
        ct->name = "optimizer.state";
        ct->dtype = SPMD_F32;
        ct->ndim = 1;
        ct->shape[0] = (int64_t)ns;
        ct->data = os;
    }
    spmd_ckpt_tensor *st = &c->t[c->n++];
    memset(st, 0, sizeof *st);
    st->name = "trainer.state";
    st->dtype = SPMD_I64;
    st->ndim = 1;
    st->shape[0] = 5;
    st->data = c->state;
    spmd_ckpt_tensor *rt = &c->t[c->n++];
    memset(rt, 0, sizeof *rt);
    rt->name = "trainer.rng";
    rt->dtype = SPMD_I64;
    rt->ndim = 2;
    rt->shape[0] = t->world;
    rt->shape[1] = 4;
    rt->data = c->rng;
    return 0;
}

static void ckpt_list_free(ckpt_list *c) {
    free(c->t);
    free(c->rng);
}

static void ckpt_path(const trainer *t, char *out, size_t len) {
    snprintf(out, len, "%s/%s", t->o.ckpt_dir, CKPT_NAME);
}

static spmd_status save_checkpoint(trainer *t) {
    ckpt_list c;
    spmd_status st = whole_state(t);
    if (st != SPMD_OK) return st;
    if (ckpt_list_build(t, &c)) {
        ckpt_list_free(&c);
        return SPMD_ERR_NOMEM;
    }
    c.state[0] = t->epoch;
    c.state[1] = t->step_in_epoch;
    c.state[2] = t->global_step;
    c.state[3] = spmd_optim_steps(t->optim);
    c.state[4] = t->world;
    int64_t mine[4];
    memcpy(mine, spmd_model_rng(t->model)->s, sizeof mine);
    if (t->g) st = spmd_all_gather(t->g, mine, c.rng, 4, SPMD_I64);
    else memcpy(c.rng, mine, sizeof mine);
    if (st != SPMD_OK) {
        snprintf(t->err, sizeof t->err, "%s", spmd_group_errmsg(t->g));
        ckpt_list_free(&c);
        return st;
    }
    char path[4096], epoch[32], step[32], world[16];
    ckpt_path(t, path, sizeof path);
    snprintf(epoch, sizeof epoch, "%d", t->epoch);
    snprintf(step, sizeof step, "%ld", t->global_step);
    snprintf(world, sizeof world, "%d", t->world);
    spmd_ckpt_kv meta[] = {{"format", "spmd-train"}, {"model", t->o.model},
                           {"optimizer", spmd_optim_name(t->optim)}, {"epoch", epoch},
                           {"step", step}, {"world_size", world}};
    size_t nmeta = sizeof meta / sizeof meta[0];
    if (t->rank == 0 && mkdir(t->o.ckpt_dir, 0777) != 0 && errno != EEXIST) {
        snprintf(t->err, sizeof t->err, "cannot create %s: %s", t->o.ckpt_dir, strerror(errno));
        st = SPMD_ERR_IO;
    }
    if (t->g) {
        /* every rank takes part even if rank 0 failed to create the folder:
         * the collective then reports the failure everywhere */
        spmd_status st2 = spmd_ckpt_save_dist(t->g, path, c.t, c.n, meta, nmeta, t->err,
                                              sizeof t->err);
        if (st == SPMD_OK) st = st2;
    } else if (st == SPMD_OK) {
        st = spmd_ckpt_save(path, c.t, c.n, meta, nmeta, t->err, sizeof t->err);
    }
    ckpt_list_free(&c);
    return st;
}

/* trainer.state and trainer.rng of a checkpoint must describe a position
 * this run can continue from (every rank sees the same file, so every rank
 * decides the same). */
static spmd_status check_state(trainer *t, const char *path, const int64_t *s, const int64_t *rng) {
    size_t n = spmd_sampler_num_samples(t->train_sampler);
    int64_t per_epoch = (int64_t)((n + (size_t)t->o.batch - 1) / (size_t)t->o.batch);
    const char *bad = NULL;
    if (s[0] < 0 || s[0] > 1000000) bad = "epoch out of range [0, 1000000]";
    else if (s[1] < 0 || s[1] >= per_epoch) bad = "step in the epoch out of range";
    else if (s[2] < s[1] || s[2] > ((int64_t)1 << 40)) bad = "global step out of range";
    else if (s[3] < 0 || s[3] > s[2]) bad = "optimizer step count out of range [0, global step]";
    else if (s[4] != t->world) bad = "world size differs from the metadata's";
    for (int r = 0; r < t->world && !bad; r++)
        if (!(rng[4 * r] | rng[4 * r + 1] | rng[4 * r + 2] | rng[4 * r + 3])) bad = "a rank's RNG state is all zero";
    if (!bad) return SPMD_OK;
    snprintf(t->err, sizeof t->err,
             "%s: trainer.state is not a position this run can continue from: %s (epoch %lld, step in "
             "epoch %lld of %lld, global step %lld, optimizer steps %lld, world %lld)",
             path, bad, (long long)s[0], (long long)s[1], (long long)per_epoch, (long long)s[2],
             (long long)s[3], (long long)s[4]);
    return SPMD_ERR_FORMAT;
}

/* Load the checkpoint if present (rank 0's view decides for everyone).
 * *loaded tells whether one was found. */
static spmd_status load_checkpoint(trainer *t, int *loaded) {
    char path[4096];
    ckpt_path(t, path, sizeof path);
    int32_t exists = access(path, R_OK) == 0;
    spmd_status st;
    if (t->g && (st = spmd_broadcast(t->g, &exists, 1, SPMD_I32, 0)) != SPMD_OK) {
        snprintf(t->err, sizeof t->err, "%s", spmd_group_errmsg(t->g));
        return st;
    }
    *loaded = 0;
    /* the temporaries of saves killed earlier (only dead writers' go) */
    if (t->rank == 0) (void)spmd_ckpt_remove_stale(path, NULL, NULL, 0);
    if (!exists) return SPMD_OK;
    ckpt_list c;
    if (ckpt_list_build(t, &c)) {
        ckpt_list_free(&c);
        return SPMD_ERR_NOMEM;
    }
    /* the saved world size must match: check it before reading the rng rows */
    /* what is wrong with the file, if anything, before what differs */
    spmd_ckpt *ck = NULL;
    long saved_world = -1;
    char saved_model[32] = "";
    if ((st = spmd_ckpt_open(path, &ck, t->err, sizeof t->err)) != SPMD_OK) {
        ckpt_list_free(&c);
        return st;
    }
    /* (copied: the strings belong to the open checkpoint) */
    const char *w = spmd_ckpt_meta(ck, "world_size"), *mdl = spmd_ckpt_meta(ck, "model");
    char world_text[32] = "";
    char *end = NULL;
    if (w) {
        snprintf(world_text, sizeof world_text, "%s", w);
        saved_world = strtol(w, &end, 10);
    }
    int world_ok = w && *w && !*end && saved_world >= 1 && saved_world <= (1L << 24);
    if (mdl) snprintf(saved_model, sizeof saved_model, "%s", mdl);
    spmd_ckpt_close(ck);
    st = SPMD_OK;
    if (!world_ok) {
        snprintf(t->err, sizeof t->err, "%s: metadata world_size is missing or not a rank count ('%s')", path,
                 world_text);
        st = SPMD_ERR_FORMAT;
    } else if (saved_model[0] && strcmp(saved_model, t->o.model) != 0) {
        snprintf(t->err, sizeof t->err, "%s holds a %s model; this run trains %s", path, saved_model, t->o.model);
        st = SPMD_ERR_MISMATCH;
    } else if (saved_world != t->world) {
        snprintf(t->err, sizeof t->err,
                 "%s was written by %ld rank(s); an exact continuation needs the same world "
                 "size (this run has %d)", path, saved_world, t->world);
        st = SPMD_ERR_MISMATCH;
    }
    if (st != SPMD_OK) {
        ckpt_list_free(&c);
        return st;
    }
    if (t->g) st = spmd_ckpt_load_dist(t->g, path, c.t, c.n, t->err, sizeof t->err);
    else st = spmd_ckpt_load(path, c.t, c.n, t->err, sizeof t->err);
    if (st == SPMD_OK) st = check_state(t, path, c.state, c.rng);
    if (st == SPMD_OK) {
        t->epoch = (int)c.state[0];
        t->step_in_epoch = (long)c.state[1];
        t->global_step = (long)c.state[2];
        spmd_optim_set_steps(t->optim, c.state[3]);
        memcpy(spmd_model_rng(t->model)->s, c.rng + 4 * t->rank, 4 * sizeof(int64_t));
        *loaded = 1;
    }
    ckpt_list_free(&c);
    return st;
}

/* ---- metrics, progress, plot ------------------------------------------------ */

static void record_loss(trainer *t, long step, float loss) {
    if (t->nlosses == t->cap_losses) {
        size_t nc = t->cap_losses ? 2 * t->cap_losses : 256;
        loss_point *p = realloc(t->losses, nc * sizeof *p);
        if (!p) return;   /* the plot loses points, training goes on */
        t->losses = p;
        t->cap_losses = nc;
    }
    t->losses[t->nlosses++] = (loss_point){step, loss};
}

/* "1:02:03" or "2:03"; "--:--" when not known yet. */
static void format_eta(double sec, char *out, size_t len) {
    if (!(sec >= 0) || sec > 359999) {
        snprintf(out, len, "--:--");
        return;
    }
    long s = (long)(sec + 0.5);
    if (s >= 3600) snprintf(out, len, "%ld:%02ld:%02ld", s / 3600, s / 60 % 60, s % 60);
    else snprintf(out, len, "%ld:%02ld", s / 60, s % 60);
}

/* One progress line.  On a terminal it is rewritten in place and kept
 * narrower than the terminal (80 columns when unknown), the bar shrinking
 * or going first, so it never wraps and scrolls; otherwise one line per
 * report.  eta_s: seconds the remaining steps should take (< 0: unknown). */
static void progress(trainer *t, long steps_per_epoch, float loss, double sps, double eta_s, int final) {
    if (t->rank != 0 || t->o.quiet) return;
    char eta[24], text[160];
    format_eta(eta_s, eta, sizeof eta);
    if (t->tty) {
        int cols = 80;
        struct winsize ws;
        if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) cols = ws.ws_col;
        int room = cols - 1;
        int n = snprintf(text, sizeof text, " %ld/%ld loss %.4f %.0f/s ETA %s", t->step_in_epoch,
                         steps_per_epoch, (double)loss, sps, eta);
        char head[32];
        int hn = snprintf(head, sizeof head, "epoch %d/%d", t->epoch + 1, t->o.epochs);
        int width = room - hn - n - 3;   /* " [" and "]" around the bar */
        if (width > 20) width = 20;
        char bar[24] = "";
        if (width >= 5) {
            int filled = steps_per_epoch ? (int)(width * t->step_in_epoch / steps_per_epoch) : width;
            for (int i = 0; i < width; i++) bar[i] = i < filled ? '#' : '.';
            bar[width] = 0;
        }
        char line[256];
        if (bar[0]) snprintf(line, sizeof line, "%s [%s]%s", head, bar, text);
        else snprintf(line, sizeof line, "%s%s", head, text);
        if ((int)strlen(line) > room && room > 0) line[room] = 0;
        /* \033[K clears what a longer previous line left */
        printf("\r%s\033[K%s", line, final ? "\n" : "");
    } else {
        printf("epoch %d step %ld/%ld (total %ld) loss %.4f %.0f samples/s ETA %s\n", t->epoch + 1,
               t->step_in_epoch, steps_per_epoch, t->global_step, (double)loss, sps, eta);
    }
    fflush(stdout);
}

static int find_in_path(const char *prog) {
    const char *p = getenv("PATH");
    if (!p) p = "/usr/bin:/bin";
    while (*p) {
        const char *e = strchr(p, ':');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        char full[4096];
        if (n && n < sizeof full - strlen(prog) - 2) {
            snprintf(full, sizeof full, "%.*s/%s", (int)n, p, prog);
            if (access(full, X_OK) == 0) return 1;
        }
        p += n + (e ? 1 : 0);
    }
    return 0;
}

/* 0, or -1 (said why) when the plot could not be written. */
static int plot(trainer *t) {
    if (t->rank != 0 || !t->o.plot) return 0;
    if (!find_in_path("gnuplot")) {
        fprintf(stderr, "spmd-train: --plot needs gnuplot, which is not installed (Debian: apt-get "
                        "install gnuplot-nox)%s%s\n",
                t->o.metrics ? "; the curves are in " : "", t->o.metrics ? t->o.metrics : "");
        return -1;
    }
    /* gnuplot writes the image to its stdout when it cannot open the file:
     * never onto the terminal */
    FILE *gp = popen("gnuplot >/dev/null", "w");
    if (!gp) {
        fprintf(stderr, "spmd-train: cannot start gnuplot: %s\n", strerror(errno));
        return -1;
    }
    (void)remove(t->o.plot);   /* so a missing file below means gnuplot failed */
    fprintf(gp, "$loss << EOD\n");
    for (size_t i = 0; i < t->nlosses; i++)
        fprintf(gp, "%ld %.6g\n", t->losses[i].step, (double)t->losses[i].loss);
    fprintf(gp, "EOD\n$acc << EOD\n");
    for (int i = 0; i < t->naccs; i++) fprintf(gp, "%d %.6g\n", i + 1, t->accs[i]);
    fprintf(gp, "EOD\n");
    fprintf(gp, "set terminal pngcairo size 1100,420\nset output '%s'\n", t->o.plot);
    fprintf(gp, "set multiplot layout 1,2 title 'spmd-train %s, world %d, batch %d per rank'\n",
            t->o.model, t->world, t->o.batch);
    fprintf(gp, "set grid\nset xlabel 'step'\nset ylabel 'loss'\nset title 'training loss'\n");
    fprintf(gp, "plot $loss using 1:2 with lines notitle\n");
    fprintf(gp, "set xlabel 'epoch'\nset ylabel 'accuracy'\nset title 'test accuracy'\n");
    fprintf(gp, "set xrange [0:%d]\nset yrange [0:1]\n", t->naccs + 1);
    if (t->naccs) fprintf(gp, "plot $acc using 1:2 with linespoints pt 7 notitle\n");
    else fprintf(gp, "set label 1 'no epoch evaluated' at graph 0.5,0.5 center\nplot NaN notitle\n");
    fprintf(gp, "unset multiplot\n");
    int rc = pclose(gp);
    struct stat sb;
    if (rc != 0 || stat(t->o.plot, &sb) != 0 || sb.st_size == 0) {
        fprintf(stderr, "spmd-train: gnuplot failed (status %d) writing %s\n", rc, t->o.plot);
        return -1;
    }
    say(t, "plot written to %s\n", t->o.plot);
    return 0;
}

/* ---- evaluation ------------------------------------------------------------ */

/* Test accuracy, sharded: each rank evaluates its DistributedSampler share
 * (no shuffle; padded like torch's), then (correct, total) are summed. */
static spmd_status evaluate(trainer *t, double *acc) {
    spmd_model_train(t->model, 0);
    const size_t *idx = spmd_sampler_indices(t->test_sampler);
    size_t n = spmd_sampler_num_samples(t->test_sampler);
    int64_t counts[2] = {0, 0};
    spmd_status st = SPMD_OK;
    for (size_t i = 0; i < n && st == SPMD_OK; i += (size_t)t->o.batch) {
        size_t b = n - i < (size_t)t->o.batch ? n - i : (size_t)t->o.batch;
        st = spmd_dataset_batch(&t->test, idx + i, b, SPMD_FASHION_MNIST_MEAN,
                                SPMD_FASHION_MNIST_STD, t->x, t->y);
        const float *logits;
        if (st == SPMD_OK) st = spmd_model_forward(t->model, t->x, (int)b, &logits);
        if (st == SPMD_OK) {
            int correct;
            spmd_cross_entropy(NULL, logits, t->y, (int)b, spmd_model_num_outputs(t->model),
                               &correct);
            counts[0] += correct;
            counts[1] += (int64_t)b;
        }
    }
    spmd_model_train(t->model, 1);
    if (st != SPMD_OK) return st;
    if (t->g && (st = spmd_all_reduce(t->g, counts, counts, 2, SPMD_I64, SPMD_SUM)) != SPMD_OK) {
        snprintf(t->err, sizeof t->err, "%s", spmd_group_errmsg(t->g));
        return st;
    }
    *acc = counts[1] ? (double)counts[0] / (double)counts[1] : 0.0;
    if (t->metrics && t->rank == 0) {
        fprintf(t->metrics,
                "{\"epoch\": %d, \"step\": %ld, \"test_accuracy\": %.6f, \"test_correct\": %lld, "
                "\"test_total\": %lld}\n",
                t->epoch, t->global_step, *acc, (long long)counts[0], (long long)counts[1]);
        fflush(t->metrics);
    }
    double *a = realloc(t->accs, (size_t)(t->naccs + 1) * sizeof(double));
    if (a) {
        t->accs = a;
        t->accs[t->naccs++] = *acc;
    }
    return SPMD_OK;
}

/* ---- training ---------------------------------------------------------------- */

/* Uneven inputs.  Every rank must run the same number of steps, or the ranks
 * with more batches wait forever in a collective the others never join.
 * spmd-train's DistributedSampler pads the data set to a multiple of the world
 * size (as torch's does), so every rank has the same number of samples and
 * so of batches, and --steps counts global steps: the counts are always
 * equal and the reducer's join (spmd_ddp_join) is not needed.  This check
 * (one small all_reduce per epoch) turns a future violation into an error
 * instead of a hang. */
static spmd_status check_equal_batches(trainer *t, long batches) {
    if (!t->g || t->world == 1) return SPMD_OK;
    int64_t v[2] = {batches, ~(int64_t)batches};
    spmd_status st = spmd_all_reduce(t->g, v, v, 2, SPMD_I64, SPMD_MAX);
    if (st != SPMD_OK) {
        set_err_group(t);
        return st;
    }
    if (v[0] != ~v[1]) {
        snprintf(t->err, sizeof t->err, "ranks have between %lld and %lld batches left this epoch (here %ld)",
                 (long long)~v[1], (long long)v[0], batches);
        return SPMD_ERR_MISMATCH;
    }
    return SPMD_OK;
}

/* One optimizer step on the batch idx[0..b): forward, loss, backward,
 * gradient sync, update.  Returns the rank-local loss in *loss. */
static spmd_status train_step(trainer *t, const size_t *idx, size_t b, float *loss) {
    double t0 = now_s();
    spmd_status st = spmd_dataset_batch(&t->train, idx, b, SPMD_FASHION_MNIST_MEAN,
                                        SPMD_FASHION_MNIST_STD, t->x, t->y);
    if (st != SPMD_OK) return st;
    double t1 = now_s();
    if ((st = grad_sync_prepare(t)) != SPMD_OK) return st;
    double t1b = now_s();
    spmd_model_zero_grad_lazy(t->model);
    const float *logits;
    st = spmd_model_forward(t->model, t->x, (int)b, &logits);
    if (st != SPMD_OK) {   /* SyncBatchNorm's all_reduce is the only way forward fails mid-way */
        if (t->g && spmd_model_is_syncbn(t->model)) set_err_group(t);
        return st;
    }
    *loss = spmd_cross_entropy(t->dlogits, logits, t->y, (int)b,
                               spmd_model_num_outputs(t->model), NULL);
    double t2 = now_s();
    st = spmd_model_backward(t->model, t->dlogits, grad_sync_hook, t);
    if (st != SPMD_OK) {
        if (t->g && spmd_model_is_syncbn(t->model)) set_err_group(t);
        return st;
    }
    double t3 = now_s();
    st = grad_sync_finish(t);
    if (st != SPMD_OK) return st;
    double t4 = now_s();
    if (t->ddp && spmd_ddp_stepped(t->ddp)) spmd_optim_step_done(t->optim);   /* the reducer did it */
    else spmd_optim_step(t->optim, t->params, t->grads);
    double t5 = now_s();
    t->t.data += t1 - t0;
    t->t.prep += t1b - t1;
    t->t.fwd += t2 - t1b;
    t->t.bwd += t3 - t2;
    t->t.comm += t4 - t3;
    t->t.opt += t5 - t4;
    t->t.steps++;
    return SPMD_OK;
}

/* One rank of a group: a launcher set WORLD_SIZE (spmdrun, torchrun), or an
 * MPI launcher started us (mpirun, srun --mpi: the group is then over MPI
 * unless SPMD_BACKEND says otherwise). */
static int launched(void) {
    static const char *const vars[] = {"WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_SIZE"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++)
        if (getenv(vars[i]) && *getenv(vars[i])) return 1;
    return 0;
}

static int setup(trainer *t) {
    spmd_status st;
    if (launched()) {
        spmd_group_opts go = SPMD_GROUP_OPTS_DEFAULT;
        go.name = "spmd-train";
        st = spmd_group_init(&go, &t->g, t->err, sizeof t->err);
        if (st != SPMD_OK) return fail(t, "cannot join the group", st);
        t->rank = spmd_group_rank(t->g);
        t->world = spmd_group_size(t->g);
    } else {
        t->rank = 0;
        t->world = 1;
    }
    int threads = t->o.threads ? t->o.threads : spmd_nn_default_threads();
    spmd_nn_set_threads(threads);

    /* the test split only when it will be evaluated */
    if ((st = spmd_dataset_load_dir(t->o.data, SPMD_SPLIT_TRAIN, &t->train, t->err, sizeof t->err)) ||
        (t->o.eval &&
         (st = spmd_dataset_load_dir(t->o.data, SPMD_SPLIT_TEST, &t->test, t->err, sizeof t->err))))
        return fail(t, "cannot load Fashion-MNIST (install dataset-fashion-mnist or pass --data)", st);
    if (t->o.train_samples && (size_t)t->o.train_samples < t->train.n)
        t->train.n = (size_t)t->o.train_samples;
    if (t->o.test_samples && (size_t)t->o.test_samples < t->test.n)
        t->test.n = (size_t)t->o.test_samples;

    spmd_model_opts mo = SPMD_MODEL_OPTS_DEFAULT;
    mo.arch = t->o.model;
    mo.seed = t->o.seed;
    mo.dropout = t->o.dropout;
    mo.num_classes = t->train.num_classes;
    if ((st = spmd_model_create(&mo, &t->model, t->err, sizeof t->err)) != SPMD_OK)
        return fail(t, "cannot build the model", st);
    spmd_model_seed_dropout(t->model, t->o.seed, (uint64_t)t->rank);
    /* the data must be the model's input before anything reads it */
    const spmd_dataset *sets[2] = {&t->train, t->o.eval ? &t->test : NULL};
    for (int k = 0; k < 2; k++) {
        char e[300];
        if (!sets[k] || spmd_model_check_input(t->model, 1, sets[k]->rows, sets[k]->cols, e, sizeof e) == SPMD_OK)
            continue;
        snprintf(t->err, sizeof t->err, "the %s images in %s: %s", k ? "test" : "training",
                 t->o.data ? t->o.data : SPMD_DATASET_DEFAULT_DIR, e);
        return fail(t, "the data set does not fit the model", SPMD_ERR_MISMATCH);
    }
    if (t->o.load_model &&
        (st = spmd_model_load(t->model, t->o.load_model, t->err, sizeof t->err)) != SPMD_OK)
        return fail(t, "--load-model", st);
    t->params = spmd_model_params(t->model, &t->nparams);
    t->grads = spmd_model_grads(t->model, NULL);
    t->buffers = spmd_model_buffers(t->model, &t->nbuffers);

    spmd_optim_opts oo = SPMD_OPTIM_OPTS_SGD;
    if (t->o.optimizer == SPMD_OPTIM_ADAM) oo = (spmd_optim_opts)SPMD_OPTIM_OPTS_ADAM;
    if (t->o.optimizer == SPMD_OPTIM_ADAMW) oo = (spmd_optim_opts)SPMD_OPTIM_OPTS_ADAMW;
    oo.lr = t->o.lr_linear ? t->o.lr * (float)t->world : t->o.lr;
    oo.momentum = t->o.momentum;
    oo.weight_decay = t->o.weight_decay;
    if ((st = spmd_optim_create(&oo, t->nparams, &t->optim)) != SPMD_OK)
        return fail(t, "cannot create the optimizer", st);

    spmd_sampler_opts so = SPMD_SAMPLER_OPTS_DEFAULT;
    so.dataset_len = t->train.n;
    so.num_replicas = t->world;
    so.rank = t->rank;
    so.shuffle = 1;
    so.seed = t->o.seed;
    if ((st = spmd_sampler_init(&so, &t->train_sampler, t->err, sizeof t->err)) != SPMD_OK)
        return fail(t, "train sampler", st);
    so.dataset_len = t->test.n;
    so.shuffle = 0;
    if (t->o.eval && (st = spmd_sampler_init(&so, &t->test_sampler, t->err, sizeof t->err)) != SPMD_OK)
        return fail(t, "test sampler", st);

    size_t px = (size_t)t->train.rows * t->train.cols;
    t->x = malloc(sizeof(float) * px * (size_t)t->o.batch);
    t->y = malloc(sizeof(int) * (size_t)t->o.batch);
    t->dlogits = malloc(sizeof(float) * (size_t)t->o.batch * (size_t)mo.num_classes);
    if (!t->x || !t->y || !t->dlogits) return fail(t, "batch buffers", SPMD_ERR_NOMEM);

    /* SyncBatchNorm needs other ranks: at world 1 it is plain BatchNorm */
    if (t->o.sync_bn && t->world > 1 &&
        (st = spmd_model_set_syncbn(t->model, spmd_syncbn_group_reduce, t->g)) != SPMD_OK)
        return fail(t, "SyncBatchNorm", st);
    /* every rank starts from rank 0's weights: the reducer broadcasts them at
     * construction (as DDP's constructor does), the plain path by hand */
    if (t->g && t->world > 1 && !t->o.sync_average) {
        if ((st = ddp_setup(t)) != SPMD_OK) return fail(t, "DDP reducer", st);
    } else if (t->g) {
        if ((st = spmd_broadcast(t->g, t->params, t->nparams, SPMD_F32, 0)) != SPMD_OK ||
            (t->nbuffers &&
             (st = spmd_broadcast(t->g, t->buffers, t->nbuffers, SPMD_F32, 0)) != SPMD_OK)) {
            set_err_group(t);
            return fail(t, "broadcast of the initial parameters", st);
        }
    }
    if (t->o.resume) {
        int loaded;
        if ((st = load_checkpoint(t, &loaded)) != SPMD_OK) return fail(t, "resume", st);
        if (loaded)
            say(t, "resumed from %s/%s: epoch %d, step %ld\n", t->o.ckpt_dir, CKPT_NAME,
                t->epoch + 1, t->global_step);
        else
            say(t, "no checkpoint in %s yet: starting from scratch\n", t->o.ckpt_dir);
    }
    if (t->o.metrics && t->rank == 0) {
        t->metrics = fopen(t->o.metrics, "a");
        if (!t->metrics) {
            snprintf(t->err, sizeof t->err, "%s: %s", t->o.metrics, strerror(errno));
            return fail(t, "cannot open the metrics file", SPMD_ERR_IO);
        }
    }
    t->tty = isatty(STDOUT_FILENO);
    return 0;
}

static int run(trainer *t) {
    spmd_status st;
    double train_time = 0.0;
    long samples = 0;   /* all ranks */
    double last_acc = -1.0;
    int stopped = 0;
    char limit[48] = "";
    if (t->o.steps) snprintf(limit, sizeof limit, ", at most %ld steps", t->o.steps);
    char lr[64];
    if (t->o.lr_linear && t->world > 1)
        snprintf(lr, sizeof lr, "%g (%g x %d ranks, linear scaling)", (double)(t->o.lr * (float)t->world),
                 (double)t->o.lr, t->world);
    else
        snprintf(lr, sizeof lr, "%g", (double)t->o.lr);
    say(t, "spmd-train: %s (%zu parameters), world %d%s%s%s, batch %d per rank, %s lr %s, %d epoch(s)%s\n"
           "BLAS: OpenBLAS %s kernels, %d thread(s) per rank\n",
        t->o.model, t->nparams, t->world, t->g ? " (backend " : "", t->g ? spmd_group_backend(t->g) : "",
        t->g ? ")" : "", t->o.batch, spmd_optim_name(t->optim), lr,
        t->o.epochs, limit, openblas_get_corename(), openblas_get_num_threads());
    if (t->ddp)
        say(t, "gradient sync: DDP reducer, %d bucket(s) (cap %g MiB), %s, %s, compression %s%s\n",
            spmd_ddp_num_buckets(t->ddp),
            t->o.bucket_cap_mb > 0.0f ? (double)t->o.bucket_cap_mb : DEFAULT_BUCKET_CAP_MB,
            t->o.no_overlap ? "all reduced after backward" : "overlapped with backward",
            !spmd_ddp_grads_shared(t->ddp) ? "all_reduce" :
            spmd_ddp_step_shared(t->ddp) && !t->o.compression ? "summed in shared memory, optimizer step sharded" :
            "summed in shared memory",
            t->o.compression == SPMD_DDP_COMPRESS_FP16 ? "fp16" :
            t->o.compression == SPMD_DDP_COMPRESS_BF16 ? "bf16" : "none",
            spmd_model_is_syncbn(t->model) ? ", SyncBatchNorm" : "");
    else if (t->world > 1)
        say(t, "gradient sync: average_gradients (one all_reduce of the whole buffer after backward)%s\n",
            spmd_model_is_syncbn(t->model) ? ", SyncBatchNorm" : "");
    if (t->o.steps && t->global_step >= t->o.steps) stopped = 1;
    if (t->o.epochs == 0 && t->o.eval) {   /* --epochs 0: evaluate the model as it is */
        if ((st = evaluate(t, &last_acc)) != SPMD_OK) return fail(t, "evaluation", st);
        say(t, "test accuracy %.4f\n", last_acc);
    }
    for (; t->epoch < t->o.epochs && !stopped; t->epoch++) {
        if ((st = spmd_sampler_set_epoch(t->train_sampler, (uint64_t)t->epoch)) != SPMD_OK)
            return fail(t, "sampler", st);
        spmd_batch_iter it;
        spmd_batch_iter_init(&it, spmd_sampler_indices(t->train_sampler),
                             spmd_sampler_num_samples(t->train_sampler), (size_t)t->o.batch, 0);
        long per_epoch = (long)spmd_batch_iter_count(&it);
        if ((st = check_equal_batches(t, per_epoch - t->step_in_epoch)) != SPMD_OK)
            return fail(t, "uneven inputs", st);
        const size_t *bi;
        size_t bn;
        for (long s = 0; s < t->step_in_epoch && spmd_batch_iter_next(&it, &bi, &bn); s++) {}
        double mark = now_s(), interval_start = mark;
        const long first_step = t->step_in_epoch;
        double loss_sum = 0.0;
        long interval_steps = 0, interval_samples = 0;
        while (spmd_batch_iter_next(&it, &bi, &bn)) {
            float loss;
            if ((st = train_step(t, bi, bn, &loss)) != SPMD_OK) return fail(t, "training step", st);
            t->step_in_epoch++;
            t->global_step++;
            loss_sum += loss;
            interval_steps++;
            interval_samples += (long)bn * t->world;
            int last = t->step_in_epoch == per_epoch;
            stopped = t->o.steps && t->global_step >= t->o.steps;
            if (interval_steps == t->o.log_every || last || stopped) {
                double tn = now_s();
                float mean = (float)(loss_sum / interval_steps);
                double sps = interval_samples / (tn - interval_start);
                record_loss(t, t->global_step, mean);
                if (t->metrics)
                    fprintf(t->metrics,
                            "{\"step\": %ld, \"epoch\": %d, \"loss\": %.6f, \"samples_per_s\": %.1f}\n",
                            t->global_step, t->epoch, (double)mean, sps);
                if (t->tty || last || stopped || t->global_step % (10L * t->o.log_every) == 0) {
                    /* the rest of the run at this epoch's pace so far */
                    long left = per_epoch - t->step_in_epoch + (long)(t->o.epochs - t->epoch - 1) * per_epoch;
                    if (t->o.steps && t->o.steps - t->global_step < left) left = t->o.steps - t->global_step;
                    long done = t->step_in_epoch - first_step;
                    double eta = done > 0 ? (tn - mark) / (double)done * (double)left : -1.0;
                    progress(t, per_epoch, mean, sps, eta, last || stopped);
                }
                loss_sum = 0.0;
                interval_steps = 0;
                interval_samples = 0;
                interval_start = tn;
            }
            samples += (long)bn * t->world;
            if (stopped) break;
        }
        train_time += now_s() - mark;
        int finished_epoch = t->step_in_epoch == per_epoch;
        if (t->o.eval && (finished_epoch || stopped)) {
            double acc;
            if ((st = evaluate(t, &acc)) != SPMD_OK) return fail(t, "evaluation", st);
            last_acc = acc;
            say(t, "epoch %d%s: test accuracy %.4f\n", t->epoch + 1,
                finished_epoch ? "" : " (partial)", acc);
        }
        if (finished_epoch) {
            t->step_in_epoch = 0;
            if (t->o.ckpt_dir) {
                t->epoch++;   /* the checkpoint names the next position */
                st = save_checkpoint(t);
                t->epoch--;
                if (st != SPMD_OK) return fail(t, "checkpoint", st);
            }
        } else if (stopped && t->o.ckpt_dir) {
            if ((st = save_checkpoint(t)) != SPMD_OK) return fail(t, "checkpoint", st);
        }
        if (stopped && !finished_epoch) break;
    }
    if (t->rank == 0) {
        double n = t->t.steps ? (double)t->t.steps : 1.0;
        printf("spmd-train: %s, world %d: %ld steps, %ld samples in %.2f s: %.0f samples/s%s",
               t->o.model, t->world, t->t.steps, samples, train_time,
               train_time > 0 ? samples / train_time : 0.0, last_acc >= 0 ? "" : "\n");
        if (last_acc >= 0) printf(", test accuracy %.4f\n", last_acc);
        /* communication: for DDP the wait inside spmd_ddp_finish (what
         * overlap did not hide), for average_gradients the whole all_reduce */
        printf("time per step: data %.3f ms, forward %.3f ms, backward %.3f ms, communication "
               "%.3f ms, optimizer %.3f ms",
               1e3 * t->t.data / n, 1e3 * t->t.fwd / n, 1e3 * t->t.bwd / n, 1e3 * t->t.comm / n,
               1e3 * t->t.opt / n);
        if (t->ddp && t->nbuffers) printf(", buffer broadcast %.3f ms", 1e3 * t->t.prep / n);
        printf("\n");
        fflush(stdout);
    }
    if (t->o.check_sync && (st = check_sync(t)) != SPMD_OK) return fail(t, "check-sync", st);
    if (t->o.save_model && t->rank == 0) {
        if ((st = spmd_model_save(t->model, t->o.save_model, t->err, sizeof t->err)) != SPMD_OK)
            return fail(t, "--save-model", st);
        say(t, "model state_dict written to %s\n", t->o.save_model);
    }
    return plot(t) == 0 ? 0 : 1;
}

int main(int argc, char **argv) {
    /* --pp / --tp / --zero / --schedule / --microbatches / --dataset: spmd-train-parallel.c */
    if (spmd_train_wants_parallel(argc, argv)) return spmd_train_parallel_main(argc, argv);
    trainer t;
    memset(&t, 0, sizeof t);
    int rc = parse_args(argc, argv, &t.o);
    if (rc > 0) {
        usage(stdout);
        fputs(spmd_train_parallel_usage, stdout);
        return 0;
    }
    if (rc < 0) return 2;   /* parse_args named the problem */
    rc = setup(&t);
    if (rc == 0) rc = run(&t);
    if (t.metrics) fclose(t.metrics);
    free(t.x);
    free(t.y);
    free(t.dlogits);
    free(t.losses);
    free(t.accs);
    spmd_sampler_free(t.train_sampler);
    spmd_sampler_free(t.test_sampler);
    spmd_optim_free(t.optim);
    spmd_ddp_free(t.ddp);
    spmd_model_free(t.model);
    spmd_dataset_free(&t.train);
    spmd_dataset_free(&t.test);
    spmd_group_destroy(t.g);
    return rc;
}
