/* options.c — spmd-train's command line: one set of options for the
 * data-parallel and the model-parallel trainer, and the refusal (with the
 * reason) of the few combinations that cannot exist. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "train.h"

static void usage(FILE *f) {
    fprintf(f,
        "usage: spmd-train [options]\n"
        "Train a model on Fashion-MNIST or CIFAR-10, in one process or as one rank of a\n"
        "group started by a launcher (spmdrun, torchrun-style environment, mpirun, srun).\n"
        "\n"
        "  --model NAME         mlp | cnn | resnet18 | resnet34          (cnn)\n"
        "  --dataset NAME       fashion-mnist | cifar10                  (fashion-mnist)\n"
        "  --data DIR           fashion-mnist: MNIST-layout IDX files (.gz or raw) (%s);\n"
        "                       cifar10: data_batch_1..5.bin, test_batch.bin (the binary version)\n"
        "  --epochs N           passes over the training set; 0: evaluate only (1)\n"
        "  --steps N            stop after N optimizer steps in total    (no limit)\n"
        "  --batch-size B       examples per replica per step            (16)\n"
        "  --lr X               learning rate of one replica's batch     (0.01)\n"
        "  --lr-scaling S       none: lr as given at every world size, as torch; linear: the\n"
        "                       step uses lr x replicas, as the global batch is replicas x\n"
        "                       batch (Goyal et al.)                     (none)\n"
        "  --momentum X         SGD momentum                             (0.5)\n"
        "  --optimizer NAME     sgd | adam | adamw                       (sgd)\n"
        "  --weight-decay X     L2 (sgd, adam) or decoupled (adamw)      (0)\n"
        "  --seed N             initialisation, shuffling and dropout    (1234)\n"
        "  --threads N          BLAS threads per process                 (1, or OPENBLAS_NUM_THREADS)\n"
        "  --prefetch N         batches a loader thread prepares ahead (torch's DataLoader\n"
        "                       worker and prefetch_factor); 0: on the training thread (2)\n"
        "  --no-prefetch        the same as --prefetch 0\n"
        "  --checkpoint-dir DIR save a sharded checkpoint in torch.distributed.checkpoint's\n"
        "                       format, DIR/step-N (N: steps done), after every epoch and at the\n"
        "                       end, in every mode: each rank writes the part it holds (ZeRO-1\n"
        "                       moment slices, tensor-parallel blocks, its pipeline stage)\n"
        "  --resume [DIR]       continue from the newest complete DIR/step-N (or from DIR itself\n"
        "                       when it is one; default DIR: --checkpoint-dir), at any world\n"
        "                       size and --pp/--tp/--zero layout: the tensors are resharded; the\n"
        "                       epoch's samples already seen are skipped; no checkpoint: start\n"
        "                       from scratch\n"
        "  --async-checkpoint   a thread of its own copies the state while the next step's\n"
        "                       forward runs, then writes the checkpoint (not with MPI)\n"
        "  --allow-nonfinite-checkpoint  resume even when the checkpoint holds NaN or infinite\n"
        "                       values (refused by default, naming the tensor)\n"
        "  --metrics FILE       append JSON lines: steps (loss, samples/s) and epochs (test accuracy)\n"
        "  --plot FILE.png      draw loss and accuracy curves with gnuplot at the end\n"
        "  --save-model FILE    write the trained model's state_dict (safetensors, torch's\n"
        "                       names and shapes: model.load_state_dict() reads it; with\n"
        "                       --pp/--tp > 1 gathered to rank 0, which writes it)\n"
        "  --load-model FILE    start from a state_dict (e.g. saved by torch); with --epochs 0\n"
        "                       only evaluate it (with --pp/--tp > 1 every rank reads the\n"
        "                       whole file and keeps its stage's tensors, its TP blocks)\n"
        "  --log-every N        steps per metrics record and progress update  (10)\n"
        "  --train-samples N    train on the first N examples only (quick runs, tests)\n"
        "  --test-samples N     evaluate on the first N test examples only\n"
        "  --no-eval            skip the test-set evaluation\n"
        "  --no-dropout         dropout layers become the identity\n"
        "  --quiet              only errors and the final summary\n"
        "  --help               this text\n"
        "\n"
        "Data parallelism (the default; every rank holds the whole model):\n"
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
        "  --elastic            a lost rank costs at most one step: the others shrink and go on\n"
        "                       (spmdrun --on-failure shrink; docs/RELIABILITY.md); with --zero the\n"
        "                       optimizer state is sharded, each shard also kept by the next rank\n"
        "\n"
        "Model parallelism (--pp or --tp > 1, or --zero; the world is dp x pp x tp, docs/PARALLEL.md):\n"
        "  --pp N               pipeline stages                          (1)\n"
        "  --schedule S         gpipe | 1f1b (with --pp 2 or more)        (1f1b)\n"
        "  --microbatches M     micro-batches per step, must divide --batch-size  (4)\n"
        "  --tp N               tensor-parallel ranks (mlp, cnn: fc1 column-, fc2 row-parallel) (1)\n"
        "  --zero               ZeRO-1: optimizer state sharded over the data-parallel group\n"
        "  Gradients are averaged over the data-parallel group by one all_reduce after the\n"
        "  step's backward (or the ZeRO-1 step), so --sync and the DDP options above are\n"
        "  refused, as is --check-sync; with --sync-bn each stage's BatchNorm layers reduce\n"
        "  over its data-parallel replicas, per micro-batch; --save-model gathers the stages\n"
        "  and blocks to rank 0, which writes the whole model.\n"
        "\n"
        "Defaults follow seed 000's recipe: the CNN, SGD lr 0.01 momentum 0.5, batch 16 per rank,\n"
        "inputs normalised with mean %.4f std %.4f (CIFAR-10: per channel, training batches\n"
        "randomly cropped and flipped); the learning rate is the one given at every world size\n"
        "(--lr-scaling linear multiplies it by the number of replicas).\n",
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

static int parse_int(const char *opt, const char *s, long lo, long hi, int *out) {
    long v;
    if (parse_long(opt, s, lo, hi, &v)) return -1;
    *out = (int)v;
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

/* (--zero with --elastic stays in the data-parallel trainer: elastic_zero.c) */
int train_is_parallel(const options *o) { return o->pp > 1 || o->tp > 1 || (o->zero && !o->elastic); }

/* The options the model-parallel trainer cannot honour, and why. */
static int check_parallel(const options *o, int seen_sync) {
    const char *ddp = seen_sync ? "--sync" : o->no_overlap ? "--no-overlap" : o->no_shared_grads ? "--no-shared-grads"
                    : o->no_shard_step ? "--no-shard-step" : o->bucket_cap_mb > 0.0f ? "--bucket-cap-mb"
                    : o->compression ? "--grad-compression" : NULL;
    const char *bad = NULL, *why = NULL;
    if (ddp) bad = ddp, why = "the model-parallel trainer averages gradients over the data-parallel group itself "
                              "(one all_reduce, or the ZeRO-1 step), not through the DDP reducer";
    else if (o->check_sync) bad = "--check-sync", why = "the ranks hold different parts of the model or of its "
                                                       "optimizer state";
    if (!bad) return 0;
    fprintf(stderr, "spmd-train: %s cannot be combined with --pp %d / --tp %d%s: %s (see --help)\n", bad, o->pp,
            o->tp, o->zero ? " / --zero" : "", why);
    return -1;
}

int train_parse_args(int argc, char **argv, options *o) {
    memset(o, 0, sizeof *o);
    o->model = "cnn";
    o->dataset = "fashion-mnist";
    o->epochs = 1;
    o->batch = 16;
    o->lr = 0.01f;
    o->momentum = 0.5f;
    o->optimizer = SPMD_OPTIM_SGD;
    o->seed = 1234;
    o->dropout = 1;
    o->log_every = 10;
    o->eval = 1;
    o->prefetch = 2;
    o->compression = SPMD_DDP_COMPRESS_NONE;
    o->pp = o->tp = 1;
    o->microbatches = 4;
    o->schedule = SPMD_SCHEDULE_1F1B;
    int seen_sync = 0, seen_mb = 0, seen_schedule = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        long n;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage(stdout);
            return 1;
        } else if (strcmp(a, "--resume") == 0) {
            o->resume = 1;
            if (v && v[0] != '-') o->resume_dir = v, i++;   /* --resume DIR */
        }
        else if (strcmp(a, "--allow-nonfinite-checkpoint") == 0) o->allow_nonfinite = 1;
        else if (strcmp(a, "--quiet") == 0) o->quiet = 1;
        else if (strcmp(a, "--no-dropout") == 0) o->dropout = 0;
        else if (strcmp(a, "--no-eval") == 0) o->eval = 0;
        else if (strcmp(a, "--no-prefetch") == 0) o->prefetch = 0;
        else if (strcmp(a, "--no-overlap") == 0) o->no_overlap = 1;
        else if (strcmp(a, "--no-shared-grads") == 0) o->no_shared_grads = 1;
        else if (strcmp(a, "--no-shard-step") == 0) o->no_shard_step = 1;
        else if (strcmp(a, "--sync-bn") == 0) o->sync_bn = 1;
        else if (strcmp(a, "--check-sync") == 0) o->check_sync = 1;
        else if (strcmp(a, "--zero") == 0) o->zero = 1;
        else if (strcmp(a, "--async-checkpoint") == 0) o->async_ckpt = 1;
        else if (strcmp(a, "--elastic") == 0) o->elastic = 1;
        else if (!v) {
            fprintf(stderr, "spmd-train: unknown option or missing value: %s (see --help)\n", a);
            return -1;
        } else {
            i++;
            int bad = 0;
            if (strcmp(a, "--model") == 0) o->model = v;
            else if (strcmp(a, "--data") == 0) o->data = v;
            else if (strcmp(a, "--checkpoint-dir") == 0) o->ckpt_dir = v;
            else if (strcmp(a, "--metrics") == 0) o->metrics = v;
            else if (strcmp(a, "--plot") == 0) o->plot = v;
            else if (strcmp(a, "--save-model") == 0) o->save_model = v;
            else if (strcmp(a, "--load-model") == 0) o->load_model = v;
            else if (strcmp(a, "--dataset") == 0) {
                static const char *const names[] = {"fashion-mnist", "cifar10"};
                int c = 0;
                bad = parse_choice(a, v, names, 2, &c);
                o->dataset = names[c];
            } else if (strcmp(a, "--epochs") == 0) bad = parse_int(a, v, 0, 1000000, &o->epochs);
            else if (strcmp(a, "--steps") == 0) bad = parse_long(a, v, 1, 1L << 40, &o->steps);
            else if (strcmp(a, "--batch-size") == 0) bad = parse_int(a, v, 1, 65536, &o->batch);
            else if (strcmp(a, "--threads") == 0) bad = parse_int(a, v, 1, 1024, &o->threads);
            else if (strcmp(a, "--log-every") == 0) bad = parse_int(a, v, 1, 1000000, &o->log_every);
            else if (strcmp(a, "--prefetch") == 0) bad = parse_int(a, v, 0, 64, &o->prefetch);
            else if (strcmp(a, "--train-samples") == 0) bad = parse_long(a, v, 1, 1L << 40, &o->train_samples);
            else if (strcmp(a, "--test-samples") == 0) bad = parse_long(a, v, 1, 1L << 40, &o->test_samples);
            else if (strcmp(a, "--pp") == 0) bad = parse_int(a, v, 1, 1024, &o->pp);
            else if (strcmp(a, "--tp") == 0) bad = parse_int(a, v, 1, 1024, &o->tp);
            else if (strcmp(a, "--microbatches") == 0) {
                bad = parse_int(a, v, 1, 1 << 20, &o->microbatches);
                seen_mb = 1;
            }
            else if (strcmp(a, "--seed") == 0) {
                bad = parse_long(a, v, 0, 0x7fffffffffffffffL, &n);
                o->seed = (uint64_t)n;
            } else if (strcmp(a, "--lr") == 0) bad = parse_float(a, v, &o->lr);
            else if (strcmp(a, "--lr-scaling") == 0) {
                static const char *const names[] = {"linear", "none"};
                int c = 1;
                bad = parse_choice(a, v, names, 2, &c);
                o->lr_linear = c == 0;
            } else if (strcmp(a, "--momentum") == 0) bad = parse_float(a, v, &o->momentum);
            else if (strcmp(a, "--weight-decay") == 0) bad = parse_float(a, v, &o->weight_decay);
            else if (strcmp(a, "--bucket-cap-mb") == 0) {
                bad = parse_float(a, v, &o->bucket_cap_mb);
                if (!bad && (!(o->bucket_cap_mb > 0.0f) || o->bucket_cap_mb > 65536.0f)) {
                    fprintf(stderr, "spmd-train: --bucket-cap-mb needs a size in (0, 65536] MiB, got '%s'\n", v);
                    bad = -1;
                }
            } else if (strcmp(a, "--sync") == 0) {
                static const char *const names[] = {"ddp", "average"};
                bad = parse_choice(a, v, names, 2, &o->sync_average);
                seen_sync = 1;
            } else if (strcmp(a, "--grad-compression") == 0) {
                /* in the order of spmd_ddp_compression */
                static const char *const names[] = {"none", "fp16", "bf16"};
                int c = 0;
                bad = parse_choice(a, v, names, 3, &c);
                o->compression = (spmd_ddp_compression)c;
            } else if (strcmp(a, "--optimizer") == 0) {
                if (spmd_optim_parse(v, &o->optimizer) != SPMD_OK) {
                    fprintf(stderr, "spmd-train: --optimizer must be sgd, adam or adamw, got '%s'\n", v);
                    bad = -1;
                }
            } else if (strcmp(a, "--schedule") == 0) {
                seen_schedule = 1;
                if (spmd_schedule_parse(v, &o->schedule) != SPMD_OK) {
                    fprintf(stderr, "spmd-train: --schedule must be gpipe or 1f1b, got '%s'\n", v);
                    bad = -1;
                }
            } else {
                fprintf(stderr, "spmd-train: unknown option %s (see --help)\n", a);
                bad = -1;
            }
            if (bad) return -1;
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
    if (o->async_ckpt && !o->ckpt_dir) {
        fprintf(stderr, "spmd-train: --async-checkpoint needs --checkpoint-dir (see --help)\n");
        return -1;
    }
    if (o->resume && !o->resume_dir && !(o->resume_dir = o->ckpt_dir)) {
        fprintf(stderr, "spmd-train: --resume needs a directory: --resume DIR, or --checkpoint-dir DIR (see --help)\n");
        return -1;
    }
    if (o->batch % o->microbatches != 0 && (o->pp > 1 || seen_mb)) {
        fprintf(stderr, "spmd-train: --microbatches %d does not divide --batch-size %d\n", o->microbatches, o->batch);
        return -1;
    }
    if ((seen_mb || seen_schedule) && o->pp == 1) {
        fprintf(stderr, "spmd-train: %s schedules a pipeline: it needs --pp 2 or more (see --help)\n",
                seen_mb ? "--microbatches" : "--schedule");
        return -1;
    }
    if (train_is_parallel(o) && check_parallel(o, seen_sync)) return -1;
    if (elastic_check_options(o)) return -1;
    /* files written at the end: refuse now, not after the training */
    if (check_output_file("--plot", o->plot) || check_output_file("--save-model", o->save_model)) return -1;
    return 0;
}

/* --elastic (elastic.c): its refusals and what it implies. */
int elastic_check_options(options *o) {
    const char *j = getenv("SPMD_JOIN");
    if (!o->elastic && j && strcmp(j, "1") == 0) { /* a group init would not find the running ranks */
        fprintf(stderr, "spmd-train: started to join a running job (SPMD_JOIN=1: spmdrun --on-failure replace, "
                        "or a node joining in place), which only --elastic can do\n");
        return -1;
    }
    if (!o->elastic) return 0;
    const char *bad = train_is_parallel(o) ? "--pp and --tp (their parts of the model are not re-formed)"
                      : o->ckpt_dir        ? "--checkpoint-dir (the survivors keep the state in memory)"
                      : o->compression     ? "--grad-compression"
                                           : NULL;
    if (bad) {
        fprintf(stderr, "spmd-train: --elastic does not go with %s\n", bad);
        return -1;
    }
    /* every rank keeps its whole optimizer state and its own gradients: the
     * reducer's shared memory and sharded step are bound to one group */
    o->no_shared_grads = 1;
    o->no_shard_step = 1;
    return 0;
}

int elastic_joining(const options *o) {
    const char *j = getenv("SPMD_JOIN");
    return o->elastic && j && strcmp(j, "1") == 0;
}
