/* test_ckpt_load.c — loading torch 2.6's dcp.save checkpoints with
 * resharding (fixtures of tests/ckpt/make_dcp_fixtures.py): the world-2
 * save (w sharded by rows over two files) and the world-1 save loaded as
 * whole tensors, as 2 and 3 row slices, as column slices; and the errors:
 * missing key, other dtype, other global shape, a truncated data file. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "harness.h"
#include "spmd/ckpt.h"

static const char *fixtures;

static spmd_status load_w(const char *dir, int64_t r0, int64_t nr, int64_t c0, int64_t nc, float *out, char *err) {
    spmd_dcp_shard s = {"w", "float32", 2, {4, 3}, {r0, c0}, {nr, nc}, out};
    return spmd_dcp_load(dir, &s, 1, err, 512);
}

static void rows_and_cols(const char *dir) {
    char err[512];
    float w[12];
    /* Whole, then as world 2 and world 3 row slices, then column slices. */
    const int64_t cuts[][2] = {{0, 4}, {0, 2}, {2, 2}, {0, 1}, {1, 2}, {3, 1}, {1, 3}};
    for (size_t k = 0; k < sizeof cuts / sizeof cuts[0]; k++) {
        memset(w, 0xff, sizeof w);
        CHECK_MSG(load_w(dir, cuts[k][0], cuts[k][1], 0, 3, w, err) == SPMD_OK, "%s", err);
        for (int64_t i = 0; i < cuts[k][1] * 3; i++) CHECK(w[i] == (float)(cuts[k][0] * 3 + i));
    }
    for (int64_t c0 = 0; c0 < 3; c0++) {
        memset(w, 0xff, sizeof w);
        CHECK_MSG(load_w(dir, 1, 3, c0, 3 - c0, w, err) == SPMD_OK, "%s", err);
        for (int64_t r = 0; r < 3; r++)
            for (int64_t c = 0; c < 3 - c0; c++) CHECK(w[r * (3 - c0) + c] == (float)((1 + r) * 3 + c0 + c));
    }
    uint16_t b[5];
    int64_t step = 0;
    spmd_dcp_shard s[2] = {{"b", "bfloat16", 1, {5}, {0}, {5}, b}, {"step", "int64", 0, {0}, {0}, {0}, &step}};
    CHECK_MSG(spmd_dcp_load(dir, s, 2, err, sizeof err) == SPMD_OK, "%s", err);
    for (int i = 0; i < 5; i++) {
        float f = (float)i / 4;
        uint32_t u;
        memcpy(&u, &f, 4);
        CHECK(b[i] == (uint16_t)(u >> 16)); /* i/4 is exact in bfloat16 */
    }
    CHECK(step == 7);
}

static void errors(const char *dir) {
    char err[512];
    float w[16];
    spmd_dcp_shard s = {"nope", "float32", 1, {1}, {0}, {1}, w};
    CHECK(spmd_dcp_load(dir, &s, 1, err, sizeof err) == SPMD_ERR_NOTFOUND && strstr(err, "nope"));
    s = (spmd_dcp_shard){"w", "float32", 2, {4, 4}, {0, 0}, {4, 4}, w};
    CHECK_MSG(spmd_dcp_load(dir, &s, 1, err, sizeof err) == SPMD_ERR_MISMATCH && strstr(err, "w:") &&
                  strstr(err, "[4, 3]") && strstr(err, "[4, 4]"), "%s", err);
    s = (spmd_dcp_shard){"w", "float64", 2, {4, 3}, {0, 0}, {4, 3}, w};
    CHECK(spmd_dcp_load(dir, &s, 1, err, sizeof err) == SPMD_ERR_MISMATCH && strstr(err, "float32"));
    s = (spmd_dcp_shard){"extra.epoch", "float32", 0, {0}, {0}, {0}, w};
    CHECK(spmd_dcp_load(dir, &s, 1, err, sizeof err) == SPMD_ERR_MISMATCH && strstr(err, "bytes"));
}

/* A copy of dcp_w2 whose rank-1 file is cut short: loading rows of rank 1
 * fails naming the file and the tensor. */
static void truncated(void) {
    char tmpl[] = "/tmp/ckpt_load_XXXXXX", src[4096], dst[4096], err[512];
    if (!mkdtemp(tmpl)) {
        CHECK(0);
        return;
    }
    const char *files[] = {".metadata", "__0_0.distcp", "__1_0.distcp"};
    for (int i = 0; i < 3; i++) {
        snprintf(src, sizeof src, "%s/dcp_w2/%s", fixtures, files[i]);
        snprintf(dst, sizeof dst, "%s/%s", tmpl, files[i]);
        FILE *a = fopen(src, "rb"), *b = fopen(dst, "wb");
        char buf[8192];
        size_t n = a ? fread(buf, 1, sizeof buf, a) : 0;
        if (i == 2 && n > 100) n = 100;
        CHECK(a && b && fwrite(buf, 1, n, b) == n);
        if (a) fclose(a);
        if (b) fclose(b);
    }
    float w[12];
    spmd_status st = load_w(tmpl, 0, 4, 0, 3, w, err);
    CHECK_MSG(st != SPMD_OK && strstr(err, "__"), "%d %s", (int)st, err);
    for (int i = 0; i < 3; i++) {
        snprintf(dst, sizeof dst, "%s/%s", tmpl, files[i]);
        remove(dst);
    }
    rmdir(tmpl);
}

int main(int argc, char **argv) {
    if (argc < 2) return 2;
    fixtures = argv[1];
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/dcp_w2", fixtures);
    rows_and_cols(dir);
    errors(dir);
    snprintf(dir, sizeof dir, "%s/dcp_w1", fixtures);
    rows_and_cols(dir);
    truncated();
    return test_failures ? 1 : 0;
}
