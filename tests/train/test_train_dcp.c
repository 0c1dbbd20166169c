/* test_train_dcp.c — spmd-train's checkpoints (DCP layout) across world
 * sizes and layouts, real processes (spmd_spawn, each rank exec'ing
 * spmd-train) on small CIFAR-10 files written in the dataset's format:
 *   world 4 ZeRO-1 (Adam) saves at step 3; resumed at world 2 (plain DDP)
 *     and world 3 (ZeRO-1) the state they write at step 3 is bit-identical
 *     to the saved one (every parameter, exp_avg, exp_avg_sq, step); training
 *     continues from world 2's to step 5 at world 3;
 *   world 4 = dp 2 x tp 2 (SGD momentum) the same, resumed at world 2 =
 *     dp 1 x tp 2 and at world 3 (plain DDP);
 *   world 2 = pp 2 saves; resumed in one process without pipeline, the
 *     same; --save-model of pp 2 x tp 2 at world 4 writes the whole model,
 *     equal to its checkpoint's model.* tensors; that file --load-model'ed
 *     in one process, at dp 1 x tp 2 and at dp 2 x pp 2 and saved again is
 *     the same bytes (another model's file is refused naming the tensor);
 *   both trainers (ZeRO-1 with AdamW; pp 2; DDP; all with dropout) continue bit
 *     for bit in the same layout: 3 steps + --resume + 3 == 6 straight (written
 *     with --async-checkpoint: its deferred step-4 save equals the resumed
 *     run's), across an epoch's end; the data-parallel trainer reports the
 *     saves' stall;
 *   a checkpoint of another model is refused naming both; a rank file cut
 *     short stops every rank, the one that reads it naming it, the others
 *     naming that rank. */
#include <fcntl.h>
#include <stdarg.h>
#include <sys/wait.h>
#include <unistd.h>
#include "harness.h"
#include "spmd/data.h"
#include "spmd/group.h"
#include "dcp_compare.h"

#ifndef SPMD_TRAIN_EXE
#error "SPMD_TRAIN_EXE must name the spmd-train binary"
#endif

static char dir[] = "/tmp/spmd_traindcp_XXXXXX";
static char logpath[300];

static void write_file(const char *name, size_t n) {
    char path[256];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    for (size_t r = 0; f && r < n; r++) {
        fputc((int)(r % 10), f);
        for (int i = 0; i < 3072; i++) fputc((int)((r % 10) * 20 + (i * 7 + r) % 13), f);
    }
    if (f) fclose(f);
}

static int rank_exec(int rank, int world, void *arg) {
    (void)rank, (void)world;
    int fd = open(logpath, O_WRONLY | O_APPEND | O_CREAT, 0600);
    if (fd >= 0) dup2(fd, 2), dup2(fd, 1);   /* rank 0's summary (the checkpoint stall line) too */
    execv(SPMD_TRAIN_EXE, (char *const *)arg);
    _exit(127);
}

/* spmd-train at `world` with the common arguments, then extra (NULL-ended). */
static int train(int world, ...) {
    char *args[64];
    int n = 0;
    static const char *const common[] = {SPMD_TRAIN_EXE, "--dataset", "cifar10", "--model", "cnn", "--batch-size", "4",
                                         "--no-eval", "--quiet", "--epochs", "3"};
    for (size_t i = 0; i < sizeof common / sizeof common[0]; i++) args[n++] = (char *)common[i];
    args[n++] = "--data";
    args[n++] = dir;
    va_list ap;
    va_start(ap, world);
    for (char *a; n < 63 && (a = va_arg(ap, char *));) args[n++] = a;
    va_end(ap);
    args[n] = NULL;
    char report[512] = "";
    unlink(logpath);
    spmd_status st = spmd_spawn_timeout(world, rank_exec, args, 200000, report, sizeof report);
    if (st != SPMD_OK) {
        fprintf(stderr, "world %d: %s\n", world, report);
        FILE *f = fopen(logpath, "r");
        char line[512];
        while (f && fgets(line, sizeof line, f)) fputs(line, stderr);
        if (f) fclose(f);
    }
    return st == SPMD_OK ? 0 : 1;
}

static int log_has(const char *s) {
    FILE *f = fopen(logpath, "r");
    static char buf[1 << 16];
    size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
    buf[n] = '\0';
    if (f) fclose(f);
    if (!strstr(buf, s)) fprintf(stderr, "log lacks '%s':\n%s\n", s, buf);
    return strstr(buf, s) != NULL;
}

static const char *const STATE[] = {"model.", "optim.", NULL};

/* The parameters and optimizer state in a/step-N and b/step-N are the same bits. */
static int same_state(const char *a, const char *b, long step) {
    char da[400], db[400];
    snprintf(da, sizeof da, "%s/%s/step-%ld", dir, a, step);
    snprintf(db, sizeof db, "%s/%s/step-%ld", dir, b, step);
    double d;
    int same = 0;
    if (dcp_compare(da, db, STATE, &d, &same) != 0) return 0;
    if (!same) fprintf(stderr, "%s and %s differ, by up to %g\n", da, db, d);
    return same;
}

static char *path(const char *name) {
    static char p[8][400];
    static int k;
    char *out = p[k++ % 8];
    snprintf(out, 400, "%s/%s", dir, name);
    return out;
}

/* Every tensor of the safetensors file equals model.<name> of the checkpoint. */
static int model_matches(const char *file, const char *ckdir) {
    spmd_ckpt *c = NULL;
    char err[512];
    if (spmd_ckpt_open(file, &c, err, sizeof err) != SPMD_OK) {
        fprintf(stderr, "%s\n", err);
        return 0;
    }
    int ok = spmd_ckpt_count(c) > 0;
    for (size_t i = 0; ok && i < spmd_ckpt_count(c); i++) {
        spmd_ckpt_info in;
        spmd_ckpt_info_at(c, i, &in);
        spmd_ckpt_tensor t = {in.name, in.dtype, in.ndim, {0}, malloc(in.nbytes + 4)};
        memcpy(t.shape, in.shape, sizeof t.shape);
        char fqn[300];
        snprintf(fqn, sizeof fqn, "model.%s", in.name);
        spmd_dcp_shard s = {fqn, "float32", in.ndim, {0}, {0}, {0}, malloc(in.nbytes + 4)};
        for (int d = 0; d < in.ndim; d++) s.global[d] = s.sizes[d] = in.shape[d];
        ok = t.data && s.data && spmd_ckpt_read(c, &t, err, sizeof err) == SPMD_OK &&
             spmd_dcp_load(ckdir, &s, 1, err, sizeof err) == SPMD_OK && memcmp(t.data, s.data, in.nbytes) == 0;
        if (!ok) fprintf(stderr, "%s: %s differs from the checkpoint's (%s)\n", file, in.name, err);
        free(t.data);
        free(s.data);
    }
    spmd_ckpt_close(c);
    return ok;
}

int main(void) {
    setenv("SPMD_TIMEOUT", "120", 1);
    setenv("OMP_NUM_THREADS", "1", 1);
    if (!mkdtemp(dir)) return 1;
    snprintf(logpath, sizeof logpath, "%s/stderr.log", dir);
    for (int b = 1; b <= 5; b++) {
        char name[64];
        snprintf(name, sizeof name, "data_batch_%d.bin", b);
        write_file(name, 16);
    }
    write_file("test_batch.bin", 16);

    /* ZeRO-1 at world 4 -> plain DDP at 2, ZeRO-1 at 3 */
    CHECK_MSG(train(4, "--zero", "--optimizer", "adam", "--lr", "0.001", "--steps", "3", "--checkpoint-dir",
                    path("z4"), NULL) == 0, "world 4 ZeRO-1 run");
    CHECK_MSG(train(2, "--optimizer", "adam", "--lr", "0.001", "--steps", "3", "--resume", path("z4"),
                    "--checkpoint-dir", path("z4to2"), NULL) == 0, "resume of ZeRO-1 at world 2 (DDP)");
    CHECK_MSG(same_state("z4", "z4to2", 3), "ZeRO-1 world 4 -> DDP world 2 changed the state");
    CHECK_MSG(train(3, "--zero", "--optimizer", "adam", "--lr", "0.001", "--steps", "3", "--resume", path("z4"),
                    "--checkpoint-dir", path("z4to3"), NULL) == 0, "resume of ZeRO-1 at world 3 (ZeRO-1)");
    CHECK_MSG(same_state("z4", "z4to3", 3), "ZeRO-1 world 4 -> ZeRO-1 world 3 changed the state");
    CHECK_MSG(train(3, "--optimizer", "adam", "--lr", "0.001", "--steps", "5", "--resume", path("z4to2"),
                    "--checkpoint-dir", path("z4to2"), NULL) == 0, "training on at world 3");
    {
        char d5[400];
        double d;
        int same;
        snprintf(d5, sizeof d5, "%s/z4to2/step-5", dir);
        CHECK_MSG(dcp_compare(d5, path("z4to2/step-3"), STATE, &d, &same) == 0 && !same && isfinite(d),
                  "steps 4 and 5 at world 3 changed nothing, or diverged");
    }

    /* a rank file cut short: only rank 3 reads it (its ZeRO-1 slices and RNG
     * row); every rank stops, the others naming rank 3 */
    {
        char cmd[1200];
        snprintf(cmd, sizeof cmd,
                 "mkdir -p '%s/bad' && cp -r '%s/z4/step-3' '%s/bad/' && truncate -s 300 '%s/bad/step-3/__3_0.distcp'",
                 dir, dir, dir, dir);
        CHECK(system(cmd) == 0);
        CHECK(train(4, "--zero", "--optimizer", "adam", "--lr", "0.001", "--steps", "4", "--resume", path("bad"),
                    NULL) != 0 &&
              log_has("rank 3 could not load") && log_has("__3_0.distcp"));
    }

    /* dp 2 x tp 2 -> dp 1 x tp 2, and plain DDP at world 3 */
    CHECK_MSG(train(4, "--tp", "2", "--momentum", "0.9", "--steps", "3", "--checkpoint-dir", path("t4"), NULL) == 0,
              "world 4 = dp 2 x tp 2 run");
    CHECK_MSG(train(2, "--tp", "2", "--momentum", "0.9", "--steps", "3", "--resume", path("t4"), "--checkpoint-dir",
                    path("t4to2"), NULL) == 0, "resume of dp 2 x tp 2 as dp 1 x tp 2");
    CHECK_MSG(same_state("t4", "t4to2", 3), "dp 2 x tp 2 -> dp 1 x tp 2 changed the state");
    CHECK_MSG(train(3, "--momentum", "0.9", "--steps", "4", "--resume", path("t4"), "--checkpoint-dir",
                    path("t4to3"), NULL) == 0, "resume of dp 2 x tp 2 at world 3 (DDP), one more step");

    /* a pipeline's stages -> one process; --save-model of pp 2 x tp 2 */
    CHECK_MSG(train(2, "--pp", "2", "--microbatches", "2", "--momentum", "0.9", "--steps", "2", "--checkpoint-dir",
                    path("p2"), NULL) == 0, "world 2 = pp 2 run");
    CHECK_MSG(train(1, "--momentum", "0.9", "--steps", "2", "--resume", path("p2"), "--checkpoint-dir",
                    path("p2to1"), NULL) == 0, "resume of pp 2 in one process");
    CHECK_MSG(same_state("p2", "p2to1", 2), "pp 2 -> one process changed the state");
    CHECK_MSG(train(4, "--pp", "2", "--tp", "2", "--microbatches", "2", "--steps", "2", "--checkpoint-dir",
                    path("pt"), "--save-model", path("pt.safetensors"), NULL) == 0, "pp 2 x tp 2 --save-model");
    CHECK_MSG(model_matches(path("pt.safetensors"), path("pt/step-2")),
              "--save-model of pp 2 x tp 2 differs from its checkpoint");
    /* --load-model of that whole state_dict into every layout: each rank
     * takes its part, and re-saving writes the same bytes */
    static const char *const load_in[][6] = {{"1", "--pp", "1", "--quiet", "--quiet", "one process"},
                                             {"2", "--tp", "2", "--quiet", "--quiet", "dp 1 x tp 2"},
                                             {"4", "--pp", "2", "--microbatches", "2", "dp 2 x pp 2"}};
    for (int k = 0; k < 3; k++) {
        char out[64], cmd[700];
        snprintf(out, sizeof out, "load%d.safetensors", k);
        const char *const *l = load_in[k];
        CHECK_MSG(train(atoi(l[0]), l[1], l[2], l[3], l[4], "--epochs", "0", "--load-model", path("pt.safetensors"),
                        "--save-model", path(out), NULL) == 0,
                  "--load-model in %s", l[5]);
        snprintf(cmd, sizeof cmd, "cmp -s '%s/pt.safetensors' '%s/%s'", dir, dir, out);
        CHECK_MSG(system(cmd) == 0, "--load-model then --save-model in %s changed the model", l[5]);
    }
    /* a state_dict of another model: refused naming the tensor and both shapes */
    CHECK(train(2, "--model", "mlp", "--tp", "2", "--epochs", "0", "--load-model", path("pt.safetensors"), NULL) != 0 &&
          log_has("--load-model") && log_has("the file holds"));

    /* both trainers continue exactly in the same layout, mid-epoch and across
     * an epoch's end (32 samples: 4 steps each): 3 + resume + 3 == 6 straight;
     * the straight run's step-4 checkpoint, deferred (its copy overlaps step
     * 5's forward, the DDP reducer's sharded step writes every rank's
     * parameters in backward), equals the one the resumed run writes */
    static const char *const ALL[] = {"model.", "optim.", "trainer.", NULL};
    for (int pp = 0; pp < 3; pp++) {
        char straight[64], split[64], a[400], b[400];
        double d;
        int same = 0;
        snprintf(straight, sizeof straight, "straight%d", pp);
        snprintf(split, sizeof split, "split%d", pp);
        /* all with dropout: the RNG words are saved (the pipeline's: every
         * micro-batch slot's stream, trainer.pipe_rng) */
        static const char *const how[3][5] = {{"--zero", "--optimizer", "adamw", "--lr", "0.001"},
                                              {"--pp", "2", "--microbatches", "2", "--quiet"},
                                              {"--momentum", "0.9", "--weight-decay", "0.0001", "--quiet"}};
        static const char *const names[3] = {"ZeRO-1", "pp 2", "DDP"};
        const char *const *h = how[pp];
        /* the straight run writes in the background: the same checkpoints */
        CHECK(train(2, h[0], h[1], h[2], h[3], h[4], "--train-samples", "32", "--steps", "6", "--checkpoint-dir",
                    path(straight), "--async-checkpoint", NULL) == 0);
        if (pp == 2)   /* the data-parallel trainer says what the saves cost the steps */
            CHECK_MSG(log_has("checkpoint stall: 2 save(s) in the background, "), "no checkpoint stall line");
        CHECK(train(2, h[0], h[1], h[2], h[3], h[4], "--train-samples", "32", "--steps", "3", "--checkpoint-dir",
                    path(split), NULL) == 0);
        CHECK(train(2, h[0], h[1], h[2], h[3], h[4], "--train-samples", "32", "--steps", "6", "--checkpoint-dir",
                    path(split), "--resume", NULL) == 0);
        snprintf(a, sizeof a, "%s/%s/step-6", dir, straight);
        snprintf(b, sizeof b, "%s/%s/step-6", dir, split);
        CHECK_MSG(dcp_compare(a, b, ALL, &d, &same) == 0 && same, "%s: 3 + resume + 3 differs from 6 steps by %g",
                  names[pp], d);
        snprintf(a, sizeof a, "%s/%s/step-4", dir, straight);
        snprintf(b, sizeof b, "%s/%s/step-4", dir, split);
        /* (pp 2 at world 2 is one replica: 8 steps an epoch, no save at 4) */
        CHECK_MSG(pp == 1 || (dcp_compare(a, b, ALL, &d, &same) == 0 && same),
                  "%s: the deferred save of step 4 differs by %g", names[pp], d);
        snprintf(a, sizeof a, "%s/%s/step-6", dir, straight);
        snprintf(b, sizeof b, "%s/%s/step-3", dir, split);
        CHECK_MSG(dcp_compare(a, b, ALL, &d, &same) == 0 && !same, "3 and 6 steps gave the same state");
    }

    /* another model's checkpoint */
    CHECK(train(1, "--model", "mlp", "--steps", "1", "--resume", path("p2"), NULL) != 0 &&
          log_has("holds a cnn model; this run trains mlp"));
    if (!test_failures) {
        char cmd[400];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
        if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    }
    TEST_MAIN_END();
}
