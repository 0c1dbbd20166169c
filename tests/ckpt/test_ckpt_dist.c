/* test_ckpt_dist.c — sharded DCP-format saves by real ranks, loaded at other
 * world sizes.  World 4 saves: w [8,3] row slices (TP rows), v [4,6] column
 * slices (TP columns), m [10] uneven flat slices (a ZeRO-1 moment), b
 * bfloat16 [5] and step held whole by every rank (replicas, written once), a
 * pipeline stage's parameter held by the last rank only,
 * per-rank RNG bytes and a replicated sampler position.  Worlds 2 and 3 then
 * load their own slices by chunk overlap: bit-identical to the saved values.
 * A later world-2 save into the same directory removes the world-4 files.
 * Ranks are forked processes meeting through a file:// rendezvous.
 * Usage: test_ckpt_dist [DIR]  (DIR kept: for tests/ckpt/check_torch_load). */
#include <signal.h>
#include <stdint.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include "harness.h"
#include "spmd/auth.h"
#include "spmd/ckpt.h"

#define RREQUIRE(cond)                                                                                  \
    do {                                                                                                \
        if (!(cond)) {                                                                                  \
            fprintf(stderr, "rank %d/%d: %s:%d: failed: %s (%s)\n", rank, world, __FILE__, __LINE__, #cond, \
                    err);                                                                               \
            return 1;                                                                                   \
        }                                                                                               \
    } while (0)

static char root[256], ck[300];

static float wv(int64_t i) { return (float)i * 0.25f - 3.0f; }
static float vv(int64_t i) { return (float)i * 1.5f + 0.125f; }
static float mv(int64_t i) { return 1.0f / (float)(i + 1); }

/* Rank r of world n holds [lo, hi) of len elements, the first len % n ranks one more. */
static void split(int64_t len, int r, int n, int64_t *lo, int64_t *cnt) {
    int64_t q = len / n, e = len % n;
    *lo = r * q + (r < e ? r : e);
    *cnt = q + (r < e);
}

/* Rank's boxes of the five tensors over the buffers given (the same layout
 * rule for the savers and the loaders, at any world size). */
typedef struct {
    int64_t wlo, wn, vlo, vn, mlo, mn;
    float w[24], v[24], m[10];
    uint16_t b[5];
    int64_t step;
    spmd_dcp_shard s[5];
} layout;

static void lay_out(layout *l, int rank, int world) {
    split(8, rank, world, &l->wlo, &l->wn);
    split(6, rank, world, &l->vlo, &l->vn);
    split(10, rank, world, &l->mlo, &l->mn);
    spmd_dcp_shard s[5] = {{"w", "float32", 2, {8, 3}, {l->wlo, 0}, {l->wn, 3}, l->w},
                           {"v", "float32", 2, {4, 6}, {0, l->vlo}, {4, l->vn}, l->v},
                           {"m", "float32", 1, {10}, {l->mlo}, {l->mn}, l->m},
                           {"b", "bfloat16", 1, {5}, {0}, {5}, l->b},
                           {"step", "int64", 0, {0}, {0}, {0}, &l->step}};
    memcpy(l->s, s, sizeof s);
}

static int join(int rank, int world, spmd_group **g, char *err) {
    char rdzv[400];
    snprintf(rdzv, sizeof rdzv, "file://%s/rdzv-%d", root, world);
    spmd_group_opts o = SPMD_GROUP_OPTS_DEFAULT;
    o.init_method = rdzv, o.rank = rank, o.world_size = world, o.timeout_ms = 60000;
    return spmd_group_init(&o, g, err, 512) == SPMD_OK;
}

static int saver(int rank, int world) {
    spmd_group *g = NULL;
    char err[512] = "";
    RREQUIRE(join(rank, world, &g, err));
    static layout l;
    lay_out(&l, rank, world);
    for (int64_t i = 0; i < l.wn * 3; i++) l.w[i] = wv(l.wlo * 3 + i);
    for (int64_t r = 0; r < 4; r++)
        for (int64_t c = 0; c < l.vn; c++) l.v[r * l.vn + c] = vv(r * 6 + l.vlo + c);
    for (int64_t i = 0; i < l.mn; i++) l.m[i] = mv(l.mlo + i);
    for (int i = 0; i < 5; i++) {
        float f = (float)i / 4;
        uint32_t u;
        memcpy(&u, &f, 4);
        l.b[i] = (uint16_t)(u >> 16);
    }
    l.step = 7;
    char rng_key[32], rng[16];
    snprintf(rng_key, sizeof rng_key, "rng.%d", rank);
    snprintf(rng, sizeof rng, "state-of-%d", rank);
    spmd_dcp_bytes by[2] = {{rng_key, rng, strlen(rng), 0}, {"sampler", "epoch=2,index=640", 17, 0}};
    /* A pipeline stage's parameter: only the last rank holds it. */
    float head[3] = {0.5f, -1.0f, (float)world};
    spmd_dcp_shard all[6];
    memcpy(all, l.s, sizeof l.s);
    all[5] = (spmd_dcp_shard){"stage.head.bias", "float32", 1, {3}, {0}, {3}, head};
    RREQUIRE(spmd_dcp_save(g, ck, all, rank == world - 1 ? 6 : 5, by, 2, err, sizeof err) == SPMD_OK);
    /* Disagreeing ranks fail everywhere, naming both shapes. */
    if (world > 1) {
        spmd_dcp_shard bad = {"x", "float32", 1, {rank == 1 ? 9 : 8}, {0}, {1}, l.w};
        char other[320];
        snprintf(other, sizeof other, "%s-bad", ck);
        RREQUIRE(spmd_dcp_save(g, other, &bad, 1, NULL, 0, err, sizeof err) == SPMD_ERR_MISMATCH);
        RREQUIRE(strstr(err, "x:") && strstr(err, "[8]") && strstr(err, "[9]"));
        if (rank == 0) {
            char meta[400];
            snprintf(meta, sizeof meta, "%s/.metadata", other);
            RREQUIRE(access(meta, F_OK) != 0); /* nothing that looks complete */
        }
    }
    spmd_group_destroy(g);
    return 0;
}

static int loader(int rank, int world) {
    spmd_group *g = NULL;
    char err[512] = "";
    RREQUIRE(join(rank, world, &g, err));
    static layout l;
    lay_out(&l, rank, world);
    RREQUIRE(spmd_dcp_load(ck, l.s, 5, err, sizeof err) == SPMD_OK);
    for (int64_t i = 0; i < l.wn * 3; i++) RREQUIRE(memcmp(&l.w[i], &(float){wv(l.wlo * 3 + i)}, 4) == 0);
    for (int64_t r = 0; r < 4; r++)
        for (int64_t c = 0; c < l.vn; c++)
            RREQUIRE(memcmp(&l.v[r * l.vn + c], &(float){vv(r * 6 + l.vlo + c)}, 4) == 0);
    for (int64_t i = 0; i < l.mn; i++) RREQUIRE(memcmp(&l.m[i], &(float){mv(l.mlo + i)}, 4) == 0);
    RREQUIRE(l.step == 7 && l.b[4] == 0x3f80); /* 1.0 in bfloat16 */
    float head[3] = {0};
    spmd_dcp_shard hs = {"stage.head.bias", "float32", 1, {3}, {0}, {3}, head};
    RREQUIRE(spmd_dcp_load(ck, &hs, 1, err, sizeof err) == SPMD_OK);
    RREQUIRE(head[0] == 0.5f && head[1] == -1.0f && (head[2] == 4.0f || head[2] == 2.0f));
    void *d = NULL;
    size_t len = 0;
    RREQUIRE(spmd_dcp_load_bytes(ck, "sampler", &d, &len, err, sizeof err) == SPMD_OK);
    RREQUIRE(len == 17 && !memcmp(d, "epoch=2,index=640", 17));
    free(d);
    RREQUIRE(spmd_dcp_load_bytes(ck, "rng.1", &d, &len, err, sizeof err) == SPMD_OK);
    RREQUIRE(len == 10 && !memcmp(d, "state-of-1", 10));
    free(d);
    RREQUIRE(spmd_barrier(g) == SPMD_OK);
    spmd_group_destroy(g);
    return 0;
}

static int run(int world, int (*body)(int, int)) {
    pid_t pids[8];
    fflush(NULL);
    for (int r = 0; r < world; r++) {
        pids[r] = fork();
        if (pids[r] < 0) return 0;
        if (pids[r] == 0) {
            prctl(PR_SET_PDEATHSIG, SIGKILL);
            alarm(120); /* never outlive a hung test */
            int rc = body(r, world);
            fflush(NULL);
            _exit(rc);
        }
    }
    int ok = 1;
    for (int r = 0; r < world; r++) {
        int status = 0;
        ok &= waitpid(pids[r], &status, 0) == pids[r] && WIFEXITED(status) && WEXITSTATUS(status) == 0;
    }
    char path[400];
    snprintf(path, sizeof path, "%s/rdzv-%d", root, world);
    unlink(path);
    return ok;
}

int main(int argc, char **argv) {
    char token[SPMD_AUTH_TOKEN_CHARS + 1];
    REQUIRE(spmd_auth_new_token(token) == SPMD_OK);
    setenv("SPMD_AUTH_TOKEN", token, 1);
    const char *t = getenv("TMPDIR");
    snprintf(root, sizeof root, "%s/spmd-ckpt-XXXXXX", t && *t ? t : "/tmp");
    REQUIRE(mkdtemp(root));
    snprintf(ck, sizeof ck, "%s/ck", root);
    CHECK(run(4, saver));
    CHECK(run(2, loader));
    CHECK(run(3, loader));
    CHECK(run(1, loader));
    char path[400];
    snprintf(path, sizeof path, "%s/__3_0.distcp", ck);
    CHECK(access(path, F_OK) == 0);
    CHECK(run(2, saver)); /* the world-4 files go */
    CHECK(access(path, F_OK) != 0);
    CHECK(run(3, loader));
    if (argc > 1) { /* keep a world-2 save for a torch check */
        char cmd[1200];
        snprintf(cmd, sizeof cmd, "rm -rf '%s' && cp -r '%s' '%s'", argv[1], ck, argv[1]);
        CHECK(system(cmd) == 0);
    }
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    CHECK(system(cmd) == 0);
    TEST_MAIN_END();
}
