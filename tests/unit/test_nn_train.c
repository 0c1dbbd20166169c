/* test_nn_train.c — spmd-train end to end (needs Fashion-MNIST; exits 77,
 * "skipped", with a message when the dataset is not installed).
 *
 *   resume   N steps straight == N/2 steps, stop, --resume, N/2 more: the
 *            checkpoints (parameters, optimizer state, dropout RNG, position)
 *            are bit-identical.  The seed CNN with dropout on a 48-example
 *            prefix, so the runs cross epoch boundaries; world 1 and world 2
 *            (ranks forked by spmd_spawn, each exec'ing spmd-train).
 *   mlp      (argument "mlp", labelled slow) one epoch of the seed MLP,
 *            batch 64, SGD lr 0.01 momentum 0.5, reaches >= 0.80 test accuracy.
 */
#include <stdint.h>
#include <sys/wait.h>
#include <unistd.h>
#include "harness.h"
#include "train_util.h"
#include "../train/dcp_compare.h"
#include "spmd/data.h"
#include "spmd/group.h"

#ifndef SPMD_TRAIN_EXE
#error "SPMD_TRAIN_EXE must name the spmd-train binary"
#endif

static char tmpdir[256];

/* Run spmd-train with the arguments (NULL-terminated) in this process's
 * environment; returns its exit status (or -1). */
static int run_train(char *const *args) {
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        execv(SPMD_TRAIN_EXE, args);
        _exit(127);
    }
    int status;
    while (waitpid(pid, &status, 0) < 0) {}
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

typedef struct {
    char *const *args;
} spawn_arg;

/* Each spawned rank becomes spmd-train (RANK, WORLD_SIZE, MASTER_* are set). */
static int rank_exec(int rank, int world, void *arg) {
    (void)rank;
    (void)world;
    spawn_arg *a = arg;
    execv(SPMD_TRAIN_EXE, a->args);
    return 127;
}

static int run_world(int world, char *const *args) {
    if (world == 1) return run_train(args);
    spawn_arg a = {args};
    char report[512] = "";
    spmd_status st = spmd_spawn_timeout(world, rank_exec, &a, 120000, report, sizeof report);
    if (st != SPMD_OK) fprintf(stderr, "spawn: %s: %s\n", spmd_status_str(st), report);
    return st == SPMD_OK ? 0 : 1;
}

/* Compare every tensor of two checkpoints (DCP folders) byte for byte. */
static int same_checkpoints(const char *a, const char *b, int verbose) {
    double d;
    int same;
    if (dcp_compare(a, b, NULL, &d, &same) != 0) return 0;
    if (!same && verbose) fprintf(stderr, "%s and %s differ (largest difference %g)\n", a, b, d);
    return same;
}

static void test_resume(int world) {
    char straight[300], split[300], fa[400], fb[400];
    snprintf(straight, sizeof straight, "%s/straight%d", tmpdir, world);
    snprintf(split, sizeof split, "%s/split%d", tmpdir, world);
    /* 48 examples / (4 per rank * world) steps per epoch: 15 steps cross one
     * (world 1) or two (world 2) epoch boundaries, the split at 7 falls mid-epoch */
    char *a_args[] = {"spmd-train", "--model", "cnn", "--batch-size", "4", "--train-samples",
                      "48", "--epochs", "4", "--steps", "15", "--no-eval", "--quiet",
                      "--checkpoint-dir", straight, NULL};
    char *b1_args[] = {"spmd-train", "--model", "cnn", "--batch-size", "4", "--train-samples",
                       "48", "--epochs", "4", "--steps", "7", "--no-eval", "--quiet",
                       "--checkpoint-dir", split, NULL};
    char *b2_args[] = {"spmd-train", "--model", "cnn", "--batch-size", "4", "--train-samples",
                       "48", "--epochs", "4", "--steps", "15", "--no-eval", "--quiet",
                       "--checkpoint-dir", split, "--resume", NULL};
    CHECK(run_world(world, a_args) == 0);
    CHECK(run_world(world, b1_args) == 0);
    snprintf(fa, sizeof fa, "%s/step-15", straight);
    snprintf(fb, sizeof fb, "%s/step-7", split);
    /* halfway the runs must differ, else the comparison below proves nothing */
    CHECK_MSG(!same_checkpoints(fa, fb, 0), "world %d: 7 and 15 steps gave the same state", world);
    CHECK(run_world(world, b2_args) == 0);
    snprintf(fb, sizeof fb, "%s/step-15", split);
    CHECK_MSG(same_checkpoints(fa, fb, 1), "world %d: resumed run differs from the straight one", world);
    printf("resume at world %d: bit-identical\n", world);
}

static void test_mlp(void) {
    char metrics[300];
    snprintf(metrics, sizeof metrics, "%s/mlp.jsonl", tmpdir);
    char *args[] = {"spmd-train", "--model", "mlp", "--batch-size", "64", "--epochs", "1",
                    "--lr", "0.01", "--momentum", "0.5", "--quiet", "--metrics", metrics, NULL};
    CHECK(run_train(args) == 0);
    FILE *f = fopen(metrics, "r");
    CHECK(f != NULL);
    if (!f) return;
    char line[512];
    double acc = -1;
    while (fgets(line, sizeof line, f)) {
        const char *p = strstr(line, "\"test_accuracy\": ");
        if (p) acc = atof(p + strlen("\"test_accuracy\": "));
    }
    fclose(f);
    printf("mlp, 1 epoch: test accuracy %.4f\n", acc);
    CHECK_MSG(acc >= 0.80, "accuracy %.4f < 0.80", acc);
}

int main(int argc, char **argv) {
    if (!train_data_present()) return 77;
    snprintf(tmpdir, sizeof tmpdir, "/tmp/spmd-nn-train-XXXXXX");
    REQUIRE(mkdtemp(tmpdir) != NULL);
    if (argc > 1 && strcmp(argv[1], "mlp") == 0) {
        test_mlp();
    } else {
        test_resume(1);
        test_resume(2);
    }
    train_rm_rf(tmpdir);
    TEST_MAIN_END();
}
