/* test_ckpt_async.c — async saves (spmd_dcp_saver) by 3 real ranks:
 * - the caller's buffers are overwritten and collectives run on the same
 *   group right after spmd_dcp_save_async returns: the checkpoint holds the
 *   staged values, bit-exact, and the collectives their own results;
 * - deferred staging: the buffers change after spmd_dcp_save_staged;
 * - a second save started while one runs waits for it: both load;
 * - rank 1 cannot create its file: every rank's wait returns SPMD_ERR_IO
 *   naming rank 1 and the cause, no .metadata; the saver then saves again;
 * - a failure not waited for (rank 0: the directory lies under a regular
 *   file) is returned by the next save_async on every rank, which starts
 *   nothing;
 * - a bad box on rank 2 only: its save_async says so at once, every rank's
 *   wait names rank 2;
 * and one process without a group (g NULL).
 * Ranks are forked processes meeting through a file:// rendezvous. */
#include <signal.h>
#include <stdint.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include "harness.h"
#include "spmd/auth.h"
#include "spmd/ckpt.h"

#define WORLD 3
#define K (1 << 16) /* floats per rank */

#define RREQUIRE(cond)                                                                                  \
    do {                                                                                                \
        if (!(cond)) {                                                                                  \
            fprintf(stderr, "rank %d: %s:%d: failed: %s (%s)\n", rank, __FILE__, __LINE__, #cond, err); \
            return 1;                                                                                   \
        }                                                                                               \
    } while (0)

static char root[256];

static float val(int gen, int64_t i) { return (float)gen * 65536.0f + (float)(i % 65521); }

static void path(char *buf, size_t len, const char *name) { snprintf(buf, len, "%s/%s", root, name); }

/* Every element of w in dir is of generation gen, and step is gen. */
static int holds(const char *dir, int gen, int world, char *err) {
    int64_t n = (int64_t)world * K, step = -1;
    float *w = malloc(sizeof(float) * (size_t)n);
    if (!w) return 0;
    spmd_dcp_shard s[2] = {{"w", "float32", 1, {n}, {0}, {n}, w}, {"step", "int64", 0, {0}, {0}, {0}, &step}};
    int ok = spmd_dcp_load(dir, s, 2, err, 512) == SPMD_OK && step == gen;
    for (int64_t i = 0; ok && i < n; i++) ok = w[i] == val(gen, i);
    free(w);
    return ok;
}

static int has_metadata(const char *dir) {
    char p[400];
    snprintf(p, sizeof p, "%s/.metadata", dir);
    return access(p, F_OK) == 0;
}

static int rank_body(int rank) {
    char rdzv[400], err[512] = "", d1[300], d2[300], d3[300], d4[300], d5[300], d6[300], d7[300], d8[300], dbad[300];
    snprintf(rdzv, sizeof rdzv, "file://%s/rdzv", root);
    spmd_group_opts o = SPMD_GROUP_OPTS_DEFAULT;
    o.init_method = rdzv, o.rank = rank, o.world_size = WORLD, o.timeout_ms = 60000;
    spmd_group *g = NULL;
    RREQUIRE(spmd_group_init(&o, &g, err, sizeof err) == SPMD_OK);
    spmd_dcp_saver *sv = NULL;
    RREQUIRE(spmd_dcp_saver_new(g, &sv, err, sizeof err) == SPMD_OK);
    path(d1, sizeof d1, "step-1"), path(d2, sizeof d2, "step-2"), path(d3, sizeof d3, "step-3");
    path(d4, sizeof d4, "step-4"), path(d5, sizeof d5, "step-5"), path(d6, sizeof d6, "step-6"), path(d7, sizeof d7, "step-7"), path(d8, sizeof d8, "step-8");
    path(dbad, sizeof dbad, "plain-file/ck");
    int64_t lo = (int64_t)rank * K, step = 0;
    float *w = malloc(sizeof(float) * K);
    RREQUIRE(w);
    spmd_dcp_shard s[2] = {{"w", "float32", 1, {WORLD * K}, {lo}, {K}, w}, {"step", "int64", 0, {0}, {0}, {0}, &step}};
    char rng[32];
    snprintf(rng, sizeof rng, "rng-of-%d", rank);
    char rng_key[32];
    snprintf(rng_key, sizeof rng_key, "rng.%d", rank);
    spmd_dcp_bytes b = {rng_key, rng, strlen(rng), 0};
#define FILL(gen)                                                 \
    do {                                                          \
        for (int64_t i = 0; i < K; i++) w[i] = val((gen), lo + i); \
        step = (gen);                                             \
    } while (0)

    /* Staged: the buffers change and collectives run on g at once. */
    FILL(1);
    RREQUIRE(spmd_dcp_save_async(sv, d1, s, 2, &b, 1, err, sizeof err) == SPMD_OK);
    FILL(99);
    memset(rng, 'x', strlen(rng));
    for (int k = 0; k < 50; k++) {
        int64_t x = rank + k, sum = 0;
        RREQUIRE(spmd_all_reduce(g, &x, &sum, 1, SPMD_I64, SPMD_SUM) == SPMD_OK);
        RREQUIRE(sum == 3 * k + 3);
    }
    RREQUIRE(spmd_dcp_save_wait(sv, err, sizeof err) == SPMD_OK);
    RREQUIRE(holds(d1, 1, WORLD, err));
    void *got = NULL;
    size_t glen = 0;
    RREQUIRE(spmd_dcp_load_bytes(d1, "rng.2", &got, &glen, err, sizeof err) == SPMD_OK);
    RREQUIRE(glen == 8 && !memcmp(got, "rng-of-2", 8));
    free(got);
    snprintf(rng, sizeof rng, "rng-of-%d", rank);

    /* Deferred staging: the buffers stay until save_staged, then change. */
    FILL(6);
    RREQUIRE(spmd_dcp_save_async_deferred(sv, d6, s, 2, &b, 1, err, sizeof err) == SPMD_OK);
    spmd_dcp_save_staged(sv);
    FILL(98);
    for (int k = 0; k < 10; k++) RREQUIRE(spmd_barrier(g) == SPMD_OK);
    RREQUIRE(spmd_dcp_save_wait(sv, err, sizeof err) == SPMD_OK);
    RREQUIRE(holds(d6, 6, WORLD, err));
    spmd_dcp_save_staged(sv); /* nothing running: returns */

    /* A second save while the first runs waits for it. */
    FILL(2);
    RREQUIRE(spmd_dcp_save_async(sv, d2, s, 2, &b, 1, err, sizeof err) == SPMD_OK);
    FILL(3);
    RREQUIRE(spmd_dcp_save_async(sv, d3, s, 2, &b, 1, err, sizeof err) == SPMD_OK);
    RREQUIRE(spmd_dcp_save_wait(sv, err, sizeof err) == SPMD_OK);
    RREQUIRE(holds(d2, 2, WORLD, err) && holds(d3, 3, WORLD, err));
    RREQUIRE(spmd_dcp_save_wait(sv, err, sizeof err) == SPMD_OK); /* nothing pending */

    /* Rank 1 cannot create its temporary (a directory stands there). */
    if (rank == 0) {
        char tmp[400];
        snprintf(tmp, sizeof tmp, "%s/__1_0.distcp.tmp", d4);
        RREQUIRE(mkdir(d4, 0755) == 0 && mkdir(tmp, 0755) == 0);
    }
    RREQUIRE(spmd_barrier(g) == SPMD_OK);
    FILL(4);
    RREQUIRE(spmd_dcp_save_async(sv, d4, s, 2, &b, 1, err, sizeof err) == SPMD_OK);
    RREQUIRE(spmd_dcp_save_wait(sv, err, sizeof err) == SPMD_ERR_IO);
    RREQUIRE(strstr(err, "rank 1: ") && strstr(err, "__1_0.distcp.tmp") && strstr(err, "Is a directory"));
    RREQUIRE(!has_metadata(d4));
    /* The failure was taken: the saver saves again. */
    FILL(5);
    RREQUIRE(spmd_dcp_save_async(sv, d5, s, 2, &b, 1, err, sizeof err) == SPMD_OK);
    RREQUIRE(spmd_dcp_save_wait(sv, err, sizeof err) == SPMD_OK);
    RREQUIRE(holds(d5, 5, WORLD, err));

    /* A failure nobody waited for stops the next save on every rank. */
    RREQUIRE(spmd_dcp_save_async(sv, dbad, s, 2, &b, 1, err, sizeof err) == SPMD_OK);
    RREQUIRE(spmd_dcp_save_async(sv, d8, s, 2, &b, 1, err, sizeof err) == SPMD_ERR_IO);
    RREQUIRE(strstr(err, "not waited for") && strstr(err, "rank 0: ") && strstr(err, "Not a directory"));
    RREQUIRE(spmd_dcp_save_wait(sv, err, sizeof err) == SPMD_OK);
    RREQUIRE(access(d8, F_OK) != 0); /* never started */
    RREQUIRE(spmd_barrier(g) == SPMD_OK); /* every rank looked before the next save */

    /* A bad box on rank 2 only. */
    spmd_dcp_shard bad[2];
    memcpy(bad, s, sizeof s);
    if (rank == 2) bad[0].sizes[0] = K + 1; /* past the tensor's end */
    spmd_status st = spmd_dcp_save_async(sv, d7, bad, 2, &b, 1, err, sizeof err);
    RREQUIRE(rank == 2 ? st == SPMD_ERR_INVALID && strstr(err, "w: bad dtype, ndim or box") : st == SPMD_OK);
    RREQUIRE(spmd_dcp_save_wait(sv, err, sizeof err) == SPMD_ERR_INVALID);
    RREQUIRE(strstr(err, "rank 2: ") && strstr(err, "w: bad dtype, ndim or box"));
    RREQUIRE(!has_metadata(d7));

    spmd_dcp_saver_free(sv);
    RREQUIRE(spmd_barrier(g) == SPMD_OK);
    spmd_group_destroy(g);
    free(w);
    return 0;
#undef FILL
}

/* One process, no group. */
static int single(void) {
    int rank = 0;
    char err[512] = "", d[300];
    path(d, sizeof d, "single");
    spmd_dcp_saver *sv = NULL;
    RREQUIRE(spmd_dcp_saver_new(NULL, &sv, err, sizeof err) == SPMD_OK);
    float *w = malloc(sizeof(float) * K);
    RREQUIRE(w);
    int64_t step = 7;
    for (int64_t i = 0; i < K; i++) w[i] = val(7, i);
    spmd_dcp_shard s[2] = {{"w", "float32", 1, {K}, {0}, {K}, w}, {"step", "int64", 0, {0}, {0}, {0}, &step}};
    RREQUIRE(spmd_dcp_save_async(sv, d, s, 2, NULL, 0, err, sizeof err) == SPMD_OK);
    memset(w, 0, sizeof(float) * K);
    RREQUIRE(spmd_dcp_save_wait(sv, err, sizeof err) == SPMD_OK);
    RREQUIRE(holds(d, 7, 1, err));
    RREQUIRE(spmd_dcp_save_async(NULL, d, s, 2, NULL, 0, err, sizeof err) == SPMD_ERR_INVALID);
    spmd_dcp_saver_free(sv);
    free(w);
    return 0;
}

int main(void) {
    char token[SPMD_AUTH_TOKEN_CHARS + 1];
    REQUIRE(spmd_auth_new_token(token) == SPMD_OK);
    setenv("SPMD_AUTH_TOKEN", token, 1);
    const char *t = getenv("TMPDIR");
    snprintf(root, sizeof root, "%s/spmd-ckasync-XXXXXX", t && *t ? t : "/tmp");
    REQUIRE(mkdtemp(root));
    char plain[300];
    path(plain, sizeof plain, "plain-file");
    FILE *f = fopen(plain, "w");
    REQUIRE(f && fclose(f) == 0);
    CHECK(single() == 0);
    pid_t pids[WORLD];
    fflush(NULL);
    for (int r = 0; r < WORLD; r++) {
        pids[r] = fork();
        REQUIRE(pids[r] >= 0);
        if (pids[r] == 0) {
            prctl(PR_SET_PDEATHSIG, SIGKILL);
            alarm(200); /* never outlive a hung test */
            int rc = rank_body(r);
            fflush(NULL);
            _exit(rc);
        }
    }
    for (int r = 0; r < WORLD; r++) {
        int status = 0;
        CHECK_MSG(waitpid(pids[r], &status, 0) == pids[r] && WIFEXITED(status) && WEXITSTATUS(status) == 0,
                  "rank %d", r);
    }
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    CHECK(system(cmd) == 0);
    TEST_MAIN_END();
}
