/* test_ddp_train.c — spmd-train's gradient synchronisation end to end, at
 * world 2 under spmdrun (needs Fashion-MNIST; exits 77, "skipped", without it).
 *
 *   paths        the DDP reducer (overlapped, --no-overlap, --bucket-cap-mb
 *                0.1; gradients summed in shared memory and the optimizer
 *                step sharded, the default here, --no-shard-step, and
 *                --no-shared-grads through the all_reduce) and --sync
 *                average give bit-identical checkpoints after
 *                a few CNN steps (at world 2 every path sums the same two
 *                numbers per element and divides by 2), and every run passes
 *                --check-sync (identical replicas on both ranks)
 *   compression  --grad-compression fp16 / bf16: --check-sync passes and the
 *                parameters stay within the format's precision of the fp32 run
 *   syncbn       resnet18 with --sync-bn at world 2, batch 1 per rank, equals
 *                world 1 with batch 2 within 1e-4 (after one step:
 *                parameters, gradients, BatchNorm running statistics; after
 *                two: parameters and statistics); without --sync-bn it does
 *                not (so the comparison has teeth); resnet18 with plain
 *                BatchNorm under DDP passes --check-sync
 *   resume       with the non-default DDP options (bf16 compression, 0.1 MiB
 *                buckets, no overlap), 13 steps straight and 7 + --resume + 6
 *                end bit-identical (the default path is covered by
 *                test_nn_train_resume, whose world-2 run goes through DDP)
 *   check_sync   ranks that train with different learning rates diverge, and
 *                --check-sync must fail: the check can see a difference
 */
#include <math.h>
#include <stdint.h>
#include <sys/wait.h>
#include <unistd.h>
#include "harness.h"
#include "train_util.h"
#include "../train/dcp_compare.h"
#include "spmd/data.h"

#if !defined(SPMD_TRAIN_EXE) || !defined(SPMDRUN_EXE)
#error "SPMD_TRAIN_EXE and SPMDRUN_EXE must name the binaries"
#endif

static char tmpdir[256];

/* Run argv (NULL-terminated); world 1 runs spmd-train itself, world 2 runs it
 * under spmdrun.  Returns the exit status (-1 for a signal). */
static int run(int world, char **args) {
    char *argv[64];
    int n = 0;
    if (world > 1) {
        static char nproc[8];
        snprintf(nproc, sizeof nproc, "%d", world);
        argv[n++] = "spmdrun";
        argv[n++] = "--standalone";   /* a free port and its own run id: tests run in parallel */
        argv[n++] = "--nproc-per-node";
        argv[n++] = nproc;
        argv[n++] = SPMD_TRAIN_EXE;
    } else {
        argv[n++] = "spmd-train";
    }
    for (int i = 1; args[i] && n < 63; i++) argv[n++] = args[i];
    argv[n] = NULL;
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        unsetenv("WORLD_SIZE");   /* world 1 must really be one process */
        execv(world > 1 ? SPMDRUN_EXE : SPMD_TRAIN_EXE, argv);
        _exit(127);
    }
    int status;
    while (waitpid(pid, &status, 0) < 0) {}
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* Largest |a - b| / (|b| + 1) over the model and (with_optim) optimizer
 * tensors of two runs' newest checkpoints (the trainer's own items —
 * position, per-rank RNGs — differ with the world size and are skipped); -1
 * when they cannot be compared. */
static double max_diff_sel(const char *a, const char *b, int with_optim) {
    static const char *const all[] = {"model.", "optim.", NULL}, *const model[] = {"model.", NULL};
    char da[1100], db[1100];
    double d;
    int same;
    if (dcp_newest(a, da, sizeof da) || dcp_newest(b, db, sizeof db)) {
        fprintf(stderr, "no checkpoint in %s or %s\n", a, b);
        return -1;
    }
    return dcp_compare_rel(da, db, with_optim ? all : model, 1, &d, &same) == 0 ? d : -1;
}

static double max_diff(const char *a, const char *b) { return max_diff_sel(a, b, 1); }

/* A run's checkpoint folder (its newest step-N is compared). */
static void ckpt_file(char *out, size_t len, const char *run_name) {
    snprintf(out, len, "%s/%s", tmpdir, run_name);
}

/* The CNN on a small prefix with dropout (each rank its own stream), with
 * the extra flags; writes tmpdir/<name>/step-N. */
static int cnn_run4(const char *name, const char *f1, const char *f2, const char *f3, const char *f4) {
    char dir[400];
    snprintf(dir, sizeof dir, "%s/%s", tmpdir, name);
    char *args[] = {"spmd-train", "--model", "cnn", "--batch-size", "8", "--train-samples", "160",
                    "--steps", "8", "--no-eval", "--quiet", "--check-sync", "--checkpoint-dir", dir,
                    (char *)f1, (char *)f2, (char *)f3, (char *)f4, NULL};
    return run(2, args);
}

static int cnn_run(const char *name, const char *f1, const char *f2) { return cnn_run4(name, f1, f2, NULL, NULL); }

static void test_paths(void) {
    CHECK_MSG(cnn_run("ddp", NULL, NULL) == 0, "DDP run failed");
    CHECK_MSG(cnn_run("average", "--sync", "average") == 0, "--sync average run failed");
    CHECK_MSG(cnn_run("nooverlap", "--no-overlap", NULL) == 0, "--no-overlap run failed");
    CHECK_MSG(cnn_run("smallbuckets", "--bucket-cap-mb", "0.1") == 0, "--bucket-cap-mb 0.1 run failed");
    CHECK_MSG(cnn_run("private", "--no-shared-grads", NULL) == 0, "--no-shared-grads run failed");
    CHECK_MSG(cnn_run("unsharded", "--no-shard-step", NULL) == 0, "--no-shard-step run failed");
    /* the learning rate is the one given (torch's behaviour); --lr-scaling
     * linear at world 2 is the same run as --lr 0.02 */
    CHECK_MSG(cnn_run("linear", "--lr-scaling", "linear") == 0, "--lr-scaling linear run failed");
    CHECK_MSG(cnn_run("doubled", "--lr", "0.02") == 0, "--lr 0.02 run failed");
    char a[512], b[512];
    ckpt_file(a, sizeof a, "linear");
    ckpt_file(b, sizeof b, "doubled");
    double dl = max_diff(b, a);
    printf("--lr 0.02 vs --lr-scaling linear: max relative difference %g\n", dl);
    CHECK_MSG(dl == 0.0, "--lr 0.02 at world 2 should equal --lr-scaling linear (lr 0.01 x 2), differs by %g", dl);
    ckpt_file(a, sizeof a, "ddp");
    double dh = max_diff(b, a);
    printf("default (lr as given) vs --lr 0.02: max relative difference %g\n", dh);
    CHECK_MSG(dh > 1e-4, "the default should use lr 0.01 as given, not scaled, got %g", dh);
    const char *others[] = {"average", "nooverlap", "smallbuckets", "private", "unsharded"};
    for (int i = 0; i < 5; i++) {
        ckpt_file(b, sizeof b, others[i]);
        double d = max_diff(b, a);
        printf("%-12s vs ddp: max relative difference %g\n", others[i], d);
        CHECK_MSG(d == 0.0, "%s differs from the overlapped DDP run by %g", others[i], d);
    }
}

static void test_compression(void) {
    CHECK_MSG(cnn_run("ddp01", "--lr-scaling", "none") == 0, "DDP run failed");
    CHECK_MSG(cnn_run4("fp16", "--grad-compression", "fp16", "--lr-scaling", "none") == 0, "fp16 run failed");
    CHECK_MSG(cnn_run4("bf16", "--grad-compression", "bf16", "--lr-scaling", "none") == 0, "bf16 run failed");
    char a[512], b[512];
    ckpt_file(a, sizeof a, "ddp01");
    /* 8 SGD steps at lr 0.01 of gradients rounded to 11 (fp16) or 8 (bf16)
     * significant bits: far below these bounds, yet not exact */
    const char *names[] = {"fp16", "bf16"};
    const double tol[] = {1e-4, 3e-3}; /* bf16 keeps 8 significant bits: 2^-9 ~ 2e-3 per element */
    for (int i = 0; i < 2; i++) {
        ckpt_file(b, sizeof b, names[i]);
        double d = max_diff(b, a);
        printf("%s vs fp32: max relative difference %g\n", names[i], d);
        CHECK_MSG(d > 0.0 && d <= tol[i], "%s vs fp32: %g not in (0, %g]", names[i], d, tol[i]);
    }
}

/* resnet18, batch 1 per rank at world 2 or 2 in one process, SGD lr 0.001
 * momentum 0.5, `steps` steps. */
static int resnet_run(const char *name, int world, int steps, const char *f1) {
    char dir[400], st[16];
    snprintf(dir, sizeof dir, "%s/%s", tmpdir, name);
    snprintf(st, sizeof st, "%d", steps);
    char *args[] = {"spmd-train", "--model", "resnet18", "--batch-size", world == 1 ? "2" : "1",
                    "--train-samples", "40", "--steps", st, "--lr", "0.001", "--lr-scaling", "none",
                    "--no-eval", "--quiet",
                    "--no-dropout", "--checkpoint-dir", dir, "--check-sync", (char *)f1, NULL};
    return run(world, args);
}

/* Step 1 compares everything, the momentum buffer included (after one step
 * it IS the averaged gradient).  Step 2 compares parameters and BatchNorm
 * statistics: resnet18's gradients on a handful of images turn chaotic after
 * a step or two (measured in one process with 4 images and lr 0.01: changing
 * the learning rate by 1e-6 moved second-step gradient elements by 5e-3), so
 * a gradient comparison there could not tell SyncBatchNorm's rounding from
 * one process's own; the parameters move by only lr x that. */
static void test_syncbn(void) {
    CHECK_MSG(resnet_run("one1", 1, 1, NULL) == 0, "world 1 run failed");
    CHECK_MSG(resnet_run("sync1", 2, 1, "--sync-bn") == 0, "--sync-bn run failed");
    CHECK_MSG(resnet_run("local1", 2, 1, NULL) == 0, "plain BatchNorm DDP run failed");
    CHECK_MSG(resnet_run("one2", 1, 2, NULL) == 0, "world 1 run failed");
    CHECK_MSG(resnet_run("sync2", 2, 2, "--sync-bn") == 0, "--sync-bn run failed");
    char a[512], b[512];
    ckpt_file(a, sizeof a, "one1");
    ckpt_file(b, sizeof b, "sync1");
    double d = max_diff(b, a);
    printf("resnet18, 1 step: --sync-bn world 2 x batch 1 vs world 1 x batch 2: max relative difference %g\n", d);
    CHECK_MSG(d >= 0 && d <= 1e-4, "SyncBatchNorm at world 2 differs from one process by %g", d);
    ckpt_file(b, sizeof b, "local1");
    d = max_diff(b, a);
    printf("resnet18, 1 step: plain BatchNorm world 2 vs world 1: max relative difference %g\n", d);
    CHECK_MSG(d > 1e-3, "per-rank BatchNorm should differ from the global batch, got %g", d);
    ckpt_file(a, sizeof a, "one2");
    ckpt_file(b, sizeof b, "sync2");
    d = max_diff_sel(b, a, 0);
    printf("resnet18, 2 steps: --sync-bn world 2 vs world 1, parameters and buffers: max relative difference %g\n", d);
    CHECK_MSG(d >= 0 && d <= 1e-4, "SyncBatchNorm at world 2 differs from one process by %g after 2 steps", d);
}

/* spmdrun argv...; its exit status (-1 for a signal or no start). */
static int spmdrun(char **argv) {
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        execv(SPMDRUN_EXE, argv);
        _exit(127);
    }
    int status;
    while (waitpid(pid, &status, 0) < 0) {}
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* The CNN with dropout on 96 examples, batch 8 per rank: 6 steps per epoch,
 * so 13 steps cross two epoch boundaries and the split at 7 falls mid-epoch. */
static int resume_run(const char *name, const char *steps, int resume) {
    char dir[400];
    snprintf(dir, sizeof dir, "%s/%s", tmpdir, name);
    char *args[] = {"spmd-train", "--model", "cnn", "--batch-size", "8", "--train-samples", "96",
                    "--epochs", "5", "--steps", (char *)steps, "--no-eval", "--quiet",
                    "--grad-compression", "bf16", "--bucket-cap-mb", "0.1", "--no-overlap",
                    "--checkpoint-dir", dir, resume ? "--resume" : NULL, NULL};
    return run(2, args);
}

static void test_resume(void) {
    CHECK_MSG(resume_run("straight", "13", 0) == 0, "straight run failed");
    CHECK_MSG(resume_run("split", "7", 0) == 0, "first half failed");
    char a[512], b[512];
    ckpt_file(a, sizeof a, "straight");
    ckpt_file(b, sizeof b, "split");
    CHECK_MSG(max_diff(b, a) > 0, "7 and 13 steps gave the same state: the comparison proves nothing");
    CHECK_MSG(resume_run("split", "13", 1) == 0, "resumed run failed");
    double d = max_diff(b, a);
    printf("DDP (bf16, 0.1 MiB buckets, no overlap): 7 + resume + 6 vs 13 steps: max difference %g\n", d);
    CHECK_MSG(d == 0.0, "the resumed run differs from the straight one by %g", d);
}

static void test_check_sync(void) {
    /* rank r trains with lr 0.01 * (r + 1): the replicas part after step 1.
     * (Not with the sharded step: there each rank steps its share of every
     * replica with its own lr, and the replicas stay equal.) */
    char *differ[] = {"spmdrun", "--standalone", "--nproc-per-node", "2", "/bin/sh", "-c",
                      "exec \"$0\" --model mlp --batch-size 8 --train-samples 64 --steps 2 --no-eval "
                      "--quiet --check-sync --no-shard-step --lr 0.0$((RANK + 1))",
                      SPMD_TRAIN_EXE, NULL};
    int rc = spmdrun(differ);
    printf("diverged replicas: spmdrun exit status %d\n", rc);
    CHECK_MSG(rc > 0 && rc != 127, "--check-sync did not notice different replicas (exit %d)", rc);
    /* the same command with equal learning rates passes */
    char *same[] = {"spmdrun", "--standalone", "--nproc-per-node", "2", "/bin/sh", "-c",
                    "exec \"$0\" --model mlp --batch-size 8 --train-samples 64 --steps 2 --no-eval "
                    "--quiet --check-sync --lr 0.01",
                    SPMD_TRAIN_EXE, NULL};
    rc = spmdrun(same);
    CHECK_MSG(rc == 0, "equal replicas failed --check-sync (exit %d)", rc);
}

int main(int argc, char **argv) {
    if (!train_data_present()) return 77;
    const char *mode = argc > 1 ? argv[1] : "";
    snprintf(tmpdir, sizeof tmpdir, "/tmp/spmd-ddp-train-XXXXXX");
    REQUIRE(mkdtemp(tmpdir) != NULL);
    if (strcmp(mode, "paths") == 0) test_paths();
    else if (strcmp(mode, "compression") == 0) test_compression();
    else if (strcmp(mode, "syncbn") == 0) test_syncbn();
    else if (strcmp(mode, "check_sync") == 0) test_check_sync();
    else if (strcmp(mode, "resume") == 0) test_resume();
    else {
        fprintf(stderr, "usage: test_ddp_train paths|compression|syncbn|resume|check_sync\n");
        test_failures++;
    }
    train_rm_rf(tmpdir);
    TEST_MAIN_END();
}
