/* test_train_parallel.c — spmd-train's model-parallel path end to end on
 * small CIFAR-10 files written in the dataset's exact format:
 *   world 4, the CNN on 3x32x32, DP 2 x PP 2 (1F1B) with ZeRO-1, evaluated
 *   world 4, DP 1 x PP 2 x TP 2 (GPipe)
 *   world 4, resnet18 with the CIFAR stem cut into 2 stages x dp 2, --sync-bn
 *     (each stage's BatchNorm over its replicas: test_pipe checks the statistics), one step
 *   world 2, --zero with the options of the data-parallel trainer: --save-model,
 *     --metrics, --test-samples, --lr-scaling, --sync-bn (one trainer, issue 23)
 *   the data-parallel trainer on CIFAR-10 (augmented) at world 2: the model it
 *     saves is the same, byte for byte, with and without --prefetch
 *   the combinations that cannot exist (--sync with --tp 2) refused with the reason
 * and bad input, each failing with a message naming the value: a CIFAR
 * file of the wrong size, micro-batches that do not divide the batch, a
 * world the mesh does not divide. */
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>
#include "harness.h"
#include "spmd/group.h"

#ifndef SPMD_TRAIN_EXE
#error "SPMD_TRAIN_EXE must name the spmd-train binary"
#endif

static char dir[] = "/tmp/spmd_trainpar_XXXXXX";
static char logpath[300];

static void write_file(const char *name, size_t n, size_t extra) {
    char path[256];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    for (size_t r = 0; r < n; r++) {
        fputc((int)(r % 10), f);
        for (int i = 0; i < 3072; i++) fputc((int)((r % 10) * 20 + (i % 7)), f);   /* learnable */
    }
    for (size_t i = 0; i < extra; i++) fputc(1, f);
    fclose(f);
}

typedef struct {
    char *const *args;
} spawn_arg;

/* Each rank becomes spmd-train, stderr appended to the log. */
static int rank_exec(int rank, int world, void *arg) {
    (void)rank, (void)world;
    spawn_arg *a = arg;
    int fd = open(logpath, O_WRONLY | O_APPEND | O_CREAT, 0600);
    if (fd >= 0) dup2(fd, 2);
    execv(SPMD_TRAIN_EXE, a->args);
    _exit(127);
}

static int run(int world, char *const *args) {
    spawn_arg a = {args};
    char report[512];
    unlink(logpath);
    return spmd_spawn_timeout(world, rank_exec, &a, 200000, report, sizeof report) == SPMD_OK ? 0 : 1;
}

static int log_has(const char *s) {
    FILE *f = fopen(logpath, "r");
    if (!f) return 0;
    static char buf[1 << 16];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = '\0';
    fclose(f);
    if (!strstr(buf, s)) fprintf(stderr, "log lacks '%s':\n%s\n", s, buf);
    return strstr(buf, s) != NULL;
}

static int same_file(const char *a, const char *b) {
    FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
    int same = fa && fb;
    while (same) {
        int ca = fgetc(fa), cb = fgetc(fb);
        if (ca != cb) same = 0;
        if (ca == EOF || cb == EOF) break;
    }
    if (fa) fclose(fa);
    if (fb) fclose(fb);
    return same;
}

int main(void) {
    setenv("SPMD_TIMEOUT", "120", 1);
    setenv("OMP_NUM_THREADS", "1", 1);
    if (!mkdtemp(dir)) return 1;
    snprintf(logpath, sizeof logpath, "%s/stderr.log", dir);
    char name[64];
    for (int b = 1; b <= 5; b++) {
        snprintf(name, sizeof name, "data_batch_%d.bin", b);
        write_file(name, 16, 0);
    }
    write_file("test_batch.bin", 16, 0);
    char *const hybrid[] = {SPMD_TRAIN_EXE, "--dataset", "cifar10", "--data", dir, "--model", "cnn",
                            "--pp", "2", "--schedule", "1f1b", "--microbatches", "2", "--batch-size", "4",
                            "--zero", "--optimizer", "adam", "--lr", "0.001", "--quiet", NULL};
    CHECK_MSG(run(4, hybrid) == 0, "dp 2 x pp 2 with ZeRO");
    char *const tp[] = {SPMD_TRAIN_EXE, "--dataset", "cifar10", "--data", dir, "--pp", "2", "--tp", "2",
                        "--schedule", "gpipe", "--microbatches", "2", "--batch-size", "4", "--steps", "4",
                        "--no-eval", "--quiet", NULL};
    CHECK_MSG(run(4, tp) == 0, "pp 2 x tp 2");
    char *const resnet[] = {SPMD_TRAIN_EXE, "--dataset", "cifar10", "--data", dir, "--model", "resnet18",
                            "--pp", "2", "--microbatches", "2", "--batch-size", "2", "--steps", "1",
                            "--no-eval", "--quiet", "--sync-bn", NULL};
    CHECK_MSG(run(4, resnet) == 0, "resnet18 on CIFAR, dp 2 x 2 stages, --sync-bn");
    char p1[300], p2[300], pz[300], mz[300];
    snprintf(pz, sizeof pz, "%s/zero.safetensors", dir);
    snprintf(mz, sizeof mz, "%s/zero.jsonl", dir);
    char *const zero[] = {SPMD_TRAIN_EXE, "--dataset", "cifar10", "--data", dir, "--zero", "--batch-size", "4",
                          "--steps", "4", "--log-every", "2", "--test-samples", "8", "--lr-scaling", "linear",
                          "--sync-bn", "--save-model", pz, "--metrics", mz, "--quiet", NULL};
    CHECK_MSG(run(2, zero) == 0, "--zero with --save-model, --metrics, --test-samples, --lr-scaling, --sync-bn");
    CHECK_MSG(access(pz, R_OK) == 0, "--zero --save-model wrote no model");
    FILE *mf = fopen(mz, "r");
    char line[512];
    int steps = 0, evals = 0;
    while (mf && fgets(line, sizeof line, mf)) {
        steps += strstr(line, "\"loss\"") != NULL;
        evals += strstr(line, "\"test_total\": 8") != NULL;   /* --test-samples 8 */
    }
    if (mf) fclose(mf);
    CHECK_MSG(steps == 2 && evals == 1, "metrics: %d step and %d evaluation records", steps, evals);
    /* prefetching changes nothing but the time */
    snprintf(p1, sizeof p1, "%s/sync.safetensors", dir);
    snprintf(p2, sizeof p2, "%s/prefetch.safetensors", dir);
    char *const nopf[] = {SPMD_TRAIN_EXE, "--dataset", "cifar10", "--data", dir, "--batch-size", "4", "--steps", "6",
                          "--no-eval", "--no-prefetch", "--save-model", p1, "--quiet", NULL};
    char *const pf[] = {SPMD_TRAIN_EXE, "--dataset", "cifar10", "--data", dir, "--batch-size", "4", "--steps", "6",
                        "--no-eval", "--prefetch", "3", "--save-model", p2, "--quiet", NULL};
    CHECK_MSG(run(2, nopf) == 0 && run(2, pf) == 0, "data-parallel CIFAR-10 with and without --prefetch");
    CHECK_MSG(same_file(p1, p2), "the model trained with --prefetch differs from the one without");
    char *const tp_syncbn[] = {SPMD_TRAIN_EXE, "--dataset", "cifar10", "--data", dir, "--tp", "2", "--sync",
                               "ddp", NULL};
    CHECK(run(2, tp_syncbn) != 0 && log_has("--sync cannot be combined with --pp 1 / --tp 2"));
    char *const nopipe[] = {SPMD_TRAIN_EXE, "--dataset", "cifar10", "--data", dir, "--schedule", "gpipe", NULL};
    CHECK(run(1, nopipe) != 0 && log_has("--schedule schedules a pipeline: it needs --pp 2 or more"));
    unlink(p1), unlink(p2), unlink(pz), unlink(mz);
    /* bad input */
    char *const mb[] = {SPMD_TRAIN_EXE, "--dataset", "cifar10", "--data", dir, "--microbatches", "3",
                        "--batch-size", "4", NULL};
    CHECK(run(1, mb) != 0 && log_has("--microbatches 3 does not divide --batch-size 4"));
    char *const mesh[] = {SPMD_TRAIN_EXE, "--dataset", "cifar10", "--data", dir, "--pp", "2", NULL};
    CHECK(run(3, mesh) != 0 && log_has("world of 3 ranks is not divisible by --pp 2 x --tp 1"));
    write_file("data_batch_4.bin", 2, 5);
    char *const bad[] = {SPMD_TRAIN_EXE, "--dataset", "cifar10", "--data", dir, "--steps", "1", NULL};
    CHECK(run(1, bad) != 0 && log_has("data_batch_4.bin: 6151 bytes is not a whole number"));
    for (int b = 1; b <= 5; b++) {
        snprintf(name, sizeof name, "%s/data_batch_%d.bin", dir, b);
        unlink(name);
    }
    snprintf(name, sizeof name, "%s/test_batch.bin", dir);
    unlink(name);
    unlink(logpath);
    rmdir(dir);
    TEST_MAIN_END();
}
