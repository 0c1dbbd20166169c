/* test_ckpt_kill.c — SIGKILL every rank of a save at a random point: the
 * previous checkpoint (its own directory) still loads intact, the killed one
 * either has no .metadata (so it cannot be loaded: NOTFOUND) or is complete
 * (every element of the new generation, or of the one the directory held
 * when the kill came before the save began); a following save into the killed
 * directory succeeds and leaves no temporary behind.
 * With "async" the ranks save through spmd_dcp_save_async + _wait, so kills
 * land in the background thread's writes and commit too.
 * Usage: test_ckpt_kill [TRIALS [SEED [async]]]  (default 3 trials, SEED -1:
 * the clock; bench/ckpt_kill_trials.sh runs 70). */
#include <dirent.h>
#include <signal.h>
#include <stdint.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "harness.h"
#include "spmd/auth.h"
#include "spmd/ckpt.h"

#define N (1 << 20) /* floats in the whole tensor: a save takes some milliseconds */
#define WORLD 2

static char root[256];
static int attempt, use_async;

static float val(int gen, int64_t i) { return (float)gen * 4096.0f + (float)(i % 4093); }

static int save_rank(int rank, const char *dir, int gen) {
    char rdzv[400], err[512] = "";
    snprintf(rdzv, sizeof rdzv, "file://%s/rdzv-%d", root, attempt);
    spmd_group_opts o = SPMD_GROUP_OPTS_DEFAULT;
    o.init_method = rdzv, o.rank = rank, o.world_size = WORLD, o.timeout_ms = 60000;
    spmd_group *g = NULL;
    if (spmd_group_init(&o, &g, err, sizeof err) != SPMD_OK) return 1;
    int64_t lo = (int64_t)rank * (N / WORLD), n = N / WORLD;
    float *w = malloc(sizeof(float) * (size_t)n);
    if (!w) return 1;
    for (int64_t i = 0; i < n; i++) w[i] = val(gen, lo + i);
    spmd_dcp_shard s = {"w", "float32", 1, {N}, {lo}, {n}, w};
    int rc;
    if (use_async) {
        spmd_dcp_saver *sv = NULL;
        rc = spmd_dcp_saver_new(g, &sv, err, sizeof err) != SPMD_OK ||
             spmd_dcp_save_async(sv, dir, &s, 1, NULL, 0, err, sizeof err) != SPMD_OK;
        memset(w, 0, sizeof(float) * (size_t)n); /* staged: the caller's buffer is free */
        rc = rc || spmd_dcp_save_wait(sv, err, sizeof err) != SPMD_OK;
        spmd_dcp_saver_free(sv);
    } else {
        rc = spmd_dcp_save(g, dir, &s, 1, NULL, 0, err, sizeof err) != SPMD_OK;
    }
    if (rc) fprintf(stderr, "rank %d: %s\n", rank, err);
    free(w);
    spmd_group_destroy(g);
    return rc;
}

/* Fork a world-2 save of generation gen into dir; kill_after_us >= 0: SIGKILL
 * every rank after that long.  Returns 1 when the ranks all exited 0. */
static int save(const char *dir, int gen, long kill_after_us) {
    attempt++;
    pid_t pids[WORLD];
    fflush(NULL);
    for (int r = 0; r < WORLD; r++) {
        pids[r] = fork();
        if (pids[r] < 0) return 0;
        if (pids[r] == 0) {
            prctl(PR_SET_PDEATHSIG, SIGKILL);
            alarm(120);
            _exit(save_rank(r, dir, gen));
        }
    }
    if (kill_after_us >= 0) {
        struct timespec ts = {kill_after_us / 1000000, (kill_after_us % 1000000) * 1000};
        nanosleep(&ts, NULL); /* a random kill point, not a synchronisation */
        for (int r = 0; r < WORLD; r++) kill(pids[r], SIGKILL);
    }
    int ok = 1;
    for (int r = 0; r < WORLD; r++) {
        int st = 0;
        ok &= waitpid(pids[r], &st, 0) == pids[r] && WIFEXITED(st) && WEXITSTATUS(st) == 0;
    }
    char path[400];
    snprintf(path, sizeof path, "%s/rdzv-%d", root, attempt);
    unlink(path);
    return ok;
}

/* 1: loads and every element is of generation gen; 0: NOTFOUND (no
 * metadata); -1: anything else (a half checkpoint taken as complete). */
static int load_gen(const char *dir, int *gen_out) {
    float *w = malloc(sizeof(float) * N);
    char err[512];
    if (!w) return -1;
    spmd_dcp_shard s = {"w", "float32", 1, {N}, {0}, {N}, w};
    spmd_status st = spmd_dcp_load(dir, &s, 1, err, sizeof err);
    int rc = st == SPMD_ERR_NOTFOUND ? 0 : -1;
    if (st == SPMD_OK) {
        int gen = (int)(w[0] / 4096.0f);
        rc = 1;
        for (int64_t i = 0; i < N && rc == 1; i++)
            if (w[i] != val(gen, i)) rc = -1;
        *gen_out = gen;
    } else if (rc) {
        fprintf(stderr, "load %s: %s\n", dir, err);
    }
    free(w);
    return rc;
}

static int no_tmp(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return 0;
    struct dirent *de;
    int ok = 1;
    while ((de = readdir(d))) {
        size_t n = strlen(de->d_name);
        if (n > 4 && !strcmp(de->d_name + n - 4, ".tmp")) ok = 0;
    }
    closedir(d);
    return ok;
}

int main(int argc, char **argv) {
    int trials = argc > 1 ? atoi(argv[1]) : 3;
    unsigned seed = argc > 2 && atoi(argv[2]) >= 0 ? (unsigned)atoi(argv[2]) : (unsigned)time(NULL);
    use_async = argc > 3 && !strcmp(argv[3], "async");
    char token[SPMD_AUTH_TOKEN_CHARS + 1];
    REQUIRE(spmd_auth_new_token(token) == SPMD_OK);
    setenv("SPMD_AUTH_TOKEN", token, 1);
    const char *t = getenv("TMPDIR");
    snprintf(root, sizeof root, "%s/spmd-ckkill-XXXXXX", t && *t ? t : "/tmp");
    REQUIRE(mkdtemp(root));
    char prev[300], next[300];
    snprintf(prev, sizeof prev, "%s/step1", root);
    snprintf(next, sizeof next, "%s/step2", root);
    fprintf(stderr, "test_ckpt_kill: %d trials, seed %u%s\n", trials, seed, use_async ? ", async saves" : "");
    srand(seed);
    /* Kill points spread over a whole save: uniform in [0, 1.2 x the time
     * an unkilled save takes here, start-up included]. */
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    REQUIRE(save(prev, 1, -1));
    clock_gettime(CLOCK_MONOTONIC, &t1);
    long span_us = (long)((t1.tv_sec - t0.tv_sec) * 1000000L + (t1.tv_nsec - t0.tv_nsec) / 1000) * 6 / 5 + 1;
    int complete = 0, absent = 0, untouched = 0, before = -1; /* before: next's last complete generation */
    for (int k = 0; k < trials; k++) {
        long us = (long)(((unsigned long)rand() * (unsigned long)RAND_MAX + (unsigned long)rand()) % (unsigned long)span_us);
        save(next, 2 + k, us);
        int g1 = 0, g2 = 0;
        CHECK_MSG(load_gen(prev, &g1) == 1 && g1 == 1, "trial %d (%ld us): the previous checkpoint", k, us);
        int r = load_gen(next, &g2);
        /* Killed before it removed the old .metadata, the directory still
         * holds its previous complete checkpoint, untouched. */
        CHECK_MSG(r == 0 || (r == 1 && (g2 == 2 + k || g2 == before)), "trial %d (%ld us): killed save loads as %d gen %d",
                  k, us, r, g2);
        complete += r == 1 && g2 == 2 + k;
        untouched += r == 1 && g2 == before;
        absent += r == 0;
        /* The next save into the killed directory works and cleans up. */
        CHECK_MSG(save(next, 100 + k, -1), "trial %d: save after the kill", k);
        CHECK(load_gen(next, &g2) == 1 && g2 == 100 + k);
        before = 100 + k;
        CHECK(no_tmp(next));
    }
    fprintf(stderr, "test_ckpt_kill: of %d killed saves %d left no metadata, %d had completed, %d had not begun\n",
            trials, absent, complete, untouched);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    CHECK(system(cmd) == 0);
    TEST_MAIN_END();
}
