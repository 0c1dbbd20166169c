/* test_ckpt_write.c — how spmd_dcp_save writes a rank's data file: straight
 * from the caller's memory (a 96 MiB tensor's save raises the peak resident
 * memory by far less than the tensor: no copy of the file is built), and
 * the bytes are the format's as before this writer (a golden FNV-1a hash of
 * a file with small and large items: tensors across the writer's buffer and
 * CRC chunk sizes, a 0-d int64, a bytes item); the data loads back.  What
 * torch makes of these files: test_ckpt_torch_load_spmd. */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>
#include "common/fnv.h"
#include "harness.h"
#include "spmd/ckpt.h"

static char dir[] = "/tmp/spmd_ckptwrite_XXXXXX";

static long max_rss_kib(void) {
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    return u.ru_maxrss;
}

static uint64_t file_hash(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    uint64_t h = SPMD__FNV64_OFFSET;
    unsigned char buf[1 << 16];
    size_t n;
    *len = 0;
    while (f && (n = fread(buf, 1, sizeof buf, f)) > 0) h = spmd__fnv1a64(h, buf, n), *len += n;
    if (f) fclose(f);
    return h;
}

int main(void) {
    char err[512], sub[300], path[400];
    CHECK(mkdtemp(dir) != NULL);

    /* the golden file: every size class the writer treats apart */
    const int64_t big_n = (5 << 20) / 4 + 17; /* > one 4 MiB CRC chunk */
    float w[12], *big = malloc(sizeof(float) * (size_t)big_n), *mid = malloc(sizeof(float) * 20000);
    int64_t step = 42;
    CHECK(big && mid);
    for (int i = 0; i < 12; i++) w[i] = (float)i * 0.5f;
    for (int64_t i = 0; i < big_n; i++) big[i] = (float)(i % 1000) - 3.25f;
    for (int i = 0; i < 20000; i++) mid[i] = (float)i;
    spmd_dcp_shard s[4] = {{"w", "float32", 2, {4, 3}, {0, 0}, {4, 3}, w},
                           {"big", "float32", 1, {big_n}, {0}, {big_n}, big},
                           {"mid", "float32", 2, {100, 200}, {0, 0}, {100, 200}, mid},
                           {"step", "int64", 0, {0}, {0}, {0}, &step}};
    spmd_dcp_bytes b = {"note", "hello", 5, 0};
    snprintf(sub, sizeof sub, "%s/golden", dir);
    CHECK_MSG(spmd_dcp_save(NULL, sub, s, 4, &b, 1, err, sizeof err) == SPMD_OK, "%s", err);
    snprintf(path, sizeof path, "%s/__0_0.distcp", sub);
    size_t len;
    uint64_t h = file_hash(path, &len);
    CHECK_MSG(h == 0x43f0188a80b6bdbdULL && len == 5326026, "the data file's bytes changed: %zu bytes, hash %016llx", len,
              (unsigned long long)h);
    float *back = malloc(sizeof(float) * (size_t)big_n);
    CHECK(back);
    spmd_dcp_shard l = {"big", "float32", 1, {big_n}, {0}, {big_n}, back};
    CHECK_MSG(spmd_dcp_load(sub, &l, 1, err, sizeof err) == SPMD_OK, "%s", err);
    CHECK(back && memcmp(back, big, sizeof(float) * (size_t)big_n) == 0);
    free(back);
    free(big);
    free(mid);

    /* the large save: no file-sized buffer (the old writer built the whole
     * file in memory, raising the peak by the tensor's size) */
    const size_t n = (size_t)96 << 18; /* 96 MiB of floats */
    float *t = malloc(n * sizeof(float));
    CHECK(t);
    for (size_t i = 0; t && i < n; i++) t[i] = (float)(i & 0xffff);
    long before = max_rss_kib();
    spmd_dcp_shard L = {"t", "float32", 1, {(int64_t)n}, {0}, {(int64_t)n}, t};
    snprintf(sub, sizeof sub, "%s/large", dir);
    CHECK_MSG(spmd_dcp_save(NULL, sub, &L, 1, NULL, 0, err, sizeof err) == SPMD_OK, "%s", err);
    long grew = max_rss_kib() - before;
    CHECK_MSG(grew < 24 * 1024, "the save of a 96 MiB tensor raised the peak resident memory by %ld KiB", grew);
    free(t);

    if (!test_failures) {
        char cmd[400];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
        if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    }
    TEST_MAIN_END();
}
