/* IDX reader and datasets: small files generated here (raw and gzip), every
 * validation rule with its message, every truncation, normalised batches. */
#include <dirent.h>
#include <stdint.h>
#include <unistd.h>
#include <zlib.h>
#include "harness.h"
#include "spmd/data.h"

/* An IDX image in a malloc()ed buffer: header of ndims dims then payload
 * bytes i*7+3 (mod 256), `extra` trailing bytes. */
static uint8_t *make_idx(uint8_t dtype, int ndims, const uint32_t *dims, size_t extra,
                         size_t *len) {
    size_t count = 1;
    for (int d = 0; d < ndims; d++) count *= dims[d];
    size_t n = 4 + 4 * (size_t)ndims + count + extra;
    uint8_t *b = malloc(n);
    b[0] = 0, b[1] = 0, b[2] = dtype, b[3] = (uint8_t)ndims;
    for (int d = 0; d < ndims; d++) {
        uint8_t *p = b + 4 + 4 * d;
        p[0] = (uint8_t)(dims[d] >> 24), p[1] = (uint8_t)(dims[d] >> 16);
        p[2] = (uint8_t)(dims[d] >> 8), p[3] = (uint8_t)dims[d];
    }
    for (size_t i = 0; i < count + extra; i++) b[4 + 4 * ndims + i] = (uint8_t)(i * 7 + 3);
    *len = n;
    return b;
}

static uint8_t *make_labels(size_t n, int num_classes, size_t *len) {
    uint32_t d = (uint32_t)n;
    uint8_t *b = make_idx(0x08, 1, &d, 0, len);
    for (size_t i = 0; i < n; i++) b[8 + i] = (uint8_t)(i % (size_t)num_classes);
    return b;
}

static char tmpdir[256];

static void write_file(const char *name, const void *buf, size_t len, int gz) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", tmpdir, name);
    if (gz) {
        gzFile f = gzopen(path, "wb");
        if (!f) { perror(path); exit(1); }
        if (len) gzwrite(f, buf, (unsigned)len);
        gzclose(f);
    } else {
        FILE *f = fopen(path, "wb");
        if (!f) { perror(path); exit(1); }
        fwrite(buf, 1, len, f);
        fclose(f);
    }
}

static uint8_t *read_whole(const char *name, size_t *len) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", tmpdir, name);
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = malloc((size_t)n + 1);
    *len = fread(b, 1, (size_t)n, f);
    fclose(f);
    return b;
}

static void rm_tmpdir(void) {
    DIR *d = opendir(tmpdir);
    if (!d) return;
    struct dirent *e;
    char path[600];
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        snprintf(path, sizeof path, "%s/%s", tmpdir, e->d_name);
        unlink(path);
    }
    closedir(d);
    rmdir(tmpdir);
}

/* Parse with an expectation on status and message fragments. */
static void expect_parse(const uint8_t *b, size_t len, int ndims, spmd_status want,
                         const char *frag1, const char *frag2, int line) {
    spmd_idx x;
    char err[512] = "";
    spmd_status st = spmd_idx_parse(b, len, ndims, "f.idx", &x, err, sizeof err);
    if (st != want) {
        fprintf(stderr, "line %d: status %s, wanted %s (%s)\n", line, spmd_status_name(st),
                spmd_status_name(want), err);
        test_failures++;
    }
    if (st == SPMD_OK) spmd_idx_free(&x);
    if (frag1 && !strstr(err, frag1)) {
        fprintf(stderr, "line %d: message \"%s\" lacks \"%s\"\n", line, err, frag1);
        test_failures++;
    }
    if (frag2 && !strstr(err, frag2)) {
        fprintf(stderr, "line %d: message \"%s\" lacks \"%s\"\n", line, err, frag2);
        test_failures++;
    }
}
#define EXPECT(b, len, nd, st, f1, f2) expect_parse(b, len, nd, st, f1, f2, __LINE__)

static void test_parse_rules(void) {
    uint32_t dims[3] = {5, 3, 4};
    size_t len;
    uint8_t *b = make_idx(0x08, 3, dims, 0, &len);
    CHECK(len == 16 + 60);
    spmd_idx x;
    char err[512];
    CHECK_OK(spmd_idx_parse(b, len, 3, "ok", &x, err, sizeof err));
    CHECK(x.ndims == 3 && x.dims[0] == 5 && x.dims[1] == 3 && x.dims[2] == 4 && x.count == 60);
    CHECK(x.data[0] == 3 && x.data[59] == (uint8_t)(59 * 7 + 3));
    spmd_idx_free(&x);
    CHECK(x.data == NULL);
    spmd_idx_free(&x); /* twice is fine */
    EXPECT(b, len, 0, SPMD_OK, NULL, NULL);
    EXPECT(b, len, 1, SPMD_ERR_FORMAT, "byte offset 3", "expected 1");

    /* every truncation: format error naming the offset where the data stops */
    for (size_t k = 0; k < len; k++) {
        char want[64];
        snprintf(want, sizeof want, "truncated at byte offset %zu", k);
        EXPECT(b, k, 3, SPMD_ERR_FORMAT, "f.idx", want);
    }
    /* trailing garbage */
    size_t len2;
    uint8_t *b2 = make_idx(0x08, 3, dims, 1, &len2);
    EXPECT(b2, len2, 3, SPMD_ERR_FORMAT, "trailing bytes at byte offset 76", NULL);
    free(b2);

    uint8_t *c = malloc(len);
    memcpy(c, b, len);
    c[0] = 8;
    EXPECT(c, len, 3, SPMD_ERR_FORMAT, "byte offset 0", "bad magic");
    memcpy(c, b, len);
    c[1] = 1;
    EXPECT(c, len, 3, SPMD_ERR_FORMAT, "byte offset 0", "bad magic");
    memcpy(c, b, len);
    c[2] = 0x0D;
    EXPECT(c, len, 3, SPMD_ERR_FORMAT, "byte offset 2", "float32");
    c[2] = 0x42;
    EXPECT(c, len, 3, SPMD_ERR_FORMAT, "byte offset 2", "unknown IDX dtype byte 0x42");
    memcpy(c, b, len);
    c[3] = 0;
    EXPECT(c, len, 0, SPMD_ERR_FORMAT, "byte offset 3", "0 dimensions");
    c[3] = 9;
    EXPECT(c, len, 0, SPMD_ERR_FORMAT, "byte offset 3", "9 dimensions");
    memcpy(c, b, len);
    c[8] = c[9] = c[10] = c[11] = 0; /* second dimension 0 */
    EXPECT(c, len, 3, SPMD_ERR_FORMAT, "byte offset 8", "dimension 1 is 0");
    memcpy(c, b, len);
    c[12] = 0xFF; /* third dimension huge */
    EXPECT(c, len, 3, SPMD_ERR_FORMAT, "byte offset 12", "dimension 2");
    memcpy(c, b, len);
    c[4] = 0x00, c[5] = 0x10; /* 2^20 * 12: fits dims, payload bigger than the data */
    EXPECT(c, len, 3, SPMD_ERR_FORMAT, "truncated at byte offset 76", "12582972 payload bytes");
    c[4] = 0x0F, c[5] = 0xFF; /* (2^28 - 2^16 + 5) * 12 bytes: over the 1 GiB limit */
    EXPECT(c, len, 3, SPMD_ERR_FORMAT, "byte offset 12", "limit");
    free(c);
    free(b);
    EXPECT(NULL, 0, 0, SPMD_ERR_FORMAT, "truncated at byte offset 0", NULL);
    CHECK(spmd_idx_parse(NULL, 5, 0, NULL, &x, NULL, 0) == SPMD_ERR_INVALID);
    CHECK(spmd_idx_parse("", 0, 0, NULL, NULL, NULL, 0) == SPMD_ERR_INVALID);
}

static void test_dataset_parse(void) {
    uint32_t dims[3] = {12, 2, 3};
    size_t il, ll;
    uint8_t *img = make_idx(0x08, 3, dims, 0, &il);
    uint8_t *lbl = make_labels(12, 10, &ll);
    spmd_dataset ds = SPMD_DATASET_INIT;
    char err[512];
    CHECK_OK(spmd_dataset_parse(img, il, lbl, ll, 10, &ds, err, sizeof err));
    CHECK(ds.n == 12 && ds.rows == 2 && ds.cols == 3 && ds.num_classes == 10);
    CHECK(ds.labels[11] == 1 && ds.images[6] == (uint8_t)(6 * 7 + 3));

    /* batch: float32 arithmetic in torchvision's order, labels as int */
    size_t idx[3] = {11, 0, 5};
    float x[3 * 6];
    int y[3];
    CHECK_OK(spmd_dataset_batch(&ds, idx, 3, 0.5f, 0.25f, x, y));
    for (int i = 0; i < 3; i++) {
        CHECK(y[i] == (int)(idx[i] % 10));
        for (int p = 0; p < 6; p++) {
            float want = ((float)ds.images[idx[i] * 6 + p] / 255.0f - 0.5f) / 0.25f;
            CHECK(memcmp(&x[i * 6 + p], &want, 4) == 0);
        }
    }
    CHECK(x[0] == ((float)((66 * 7 + 3) % 256) / 255.0f - 0.5f) / 0.25f); /* example 11, pixel 0 */
    x[0] = 123.0f;
    size_t bad[2] = {1, 12};
    CHECK(spmd_dataset_batch(&ds, bad, 2, 0.5f, 0.25f, x, y) == SPMD_ERR_INVALID);
    CHECK(x[0] == 123.0f); /* nothing written */
    CHECK(spmd_dataset_batch(&ds, idx, 3, 0.5f, 0.0f, x, y) == SPMD_ERR_INVALID);
    CHECK_OK(spmd_dataset_batch(&ds, idx, 3, 0.5f, 0.25f, NULL, y));
    CHECK_OK(spmd_dataset_batch(&ds, idx, 0, 0.5f, 0.25f, x, y));
    float *all = NULL;
    CHECK_OK(spmd_dataset_to_float(&ds, SPMD_MNIST_MEAN, SPMD_MNIST_STD, &all));
    if (all) {
        CHECK(all[71] == ((float)ds.images[71] / 255.0f - SPMD_MNIST_MEAN) / SPMD_MNIST_STD);
        free(all);
    }
    spmd_dataset_free(&ds);
    CHECK(ds.images == NULL && ds.n == 0);

    /* label out of range: the message names the labels file and the offset */
    lbl[8 + 7] = 10;
    CHECK(spmd_dataset_parse(img, il, lbl, ll, 10, &ds, err, sizeof err) == SPMD_ERR_FORMAT);
    CHECK_MSG(strstr(err, "<labels>: byte offset 15: label 10 of example 7"), "%s", err);
    CHECK(ds.images == NULL); /* untouched on failure */
    CHECK_OK(spmd_dataset_parse(img, il, lbl, ll, 11, &ds, err, sizeof err));
    spmd_dataset_free(&ds);
    free(lbl);

    /* counts differ */
    lbl = make_labels(11, 10, &ll);
    CHECK(spmd_dataset_parse(img, il, lbl, ll, 10, &ds, err, sizeof err) == SPMD_ERR_FORMAT);
    CHECK_MSG(strstr(err, "12 images") && strstr(err, "11 labels"), "%s", err);
    /* labels given as idx3, images as idx1 */
    CHECK(spmd_dataset_parse(lbl, ll, img, il, 10, &ds, err, sizeof err) == SPMD_ERR_FORMAT);
    CHECK_MSG(strstr(err, "<images>: byte offset 3"), "%s", err);
    CHECK(spmd_dataset_parse(img, il, lbl, ll, 0, &ds, err, sizeof err) == SPMD_ERR_INVALID);
    free(lbl);
    free(img);
}

static void test_files(void) {
    uint32_t dims[3] = {20, 4, 5};
    size_t il, ll;
    uint8_t *img = make_idx(0x08, 3, dims, 0, &il);
    uint8_t *lbl = make_labels(20, 10, &ll);
    uint32_t tdims[3] = {7, 4, 5};
    size_t til, tll;
    uint8_t *timg = make_idx(0x08, 3, tdims, 0, &til);
    uint8_t *tlbl = make_labels(7, 10, &tll);
    /* train raw, test gzip: load_dir finds both spellings */
    write_file("train-images-idx3-ubyte", img, il, 0);
    write_file("train-labels-idx1-ubyte", lbl, ll, 0);
    write_file("t10k-images-idx3-ubyte.gz", timg, til, 1);
    write_file("t10k-labels-idx1-ubyte.gz", tlbl, tll, 1);
    spmd_dataset tr = SPMD_DATASET_INIT, te = SPMD_DATASET_INIT;
    char err[512];
    CHECK_OK(spmd_dataset_load_dir(tmpdir, SPMD_SPLIT_TRAIN, &tr, err, sizeof err));
    CHECK_OK(spmd_dataset_load_dir(tmpdir, SPMD_SPLIT_TEST, &te, err, sizeof err));
    CHECK(tr.n == 20 && tr.rows == 4 && tr.cols == 5 && memcmp(tr.images, img + 16, 400) == 0);
    CHECK(te.n == 7 && memcmp(te.images, timg + 16, 140) == 0 && te.labels[6] == 6);
    spmd_dataset_free(&tr);
    spmd_dataset_free(&te);

    /* a gzip file truncated in the middle of its stream */
    size_t zl;
    uint8_t *z = read_whole("t10k-images-idx3-ubyte.gz", &zl);
    if (!z) {
        CHECK(z != NULL);
        return;
    }
    write_file("cut.gz", z, zl / 2, 0);
    char path[512];
    snprintf(path, sizeof path, "%s/cut.gz", tmpdir);
    spmd_idx x;
    spmd_status st = spmd_idx_load(path, 3, &x, err, sizeof err);
    CHECK_MSG(st == SPMD_ERR_FORMAT || st == SPMD_ERR_IO, "%s", spmd_status_name(st));
    CHECK_MSG(strstr(err, "cut.gz") && strstr(err, "byte offset"), "%s", err);
    /* corrupted compressed bytes (the CRC or the deflate stream catches it) */
    for (size_t k = 12; k < zl; k += 5) {
        uint8_t save = z[k];
        z[k] ^= 0x5A;
        write_file("bad.gz", z, zl, 0);
        snprintf(path, sizeof path, "%s/bad.gz", tmpdir);
        st = spmd_idx_load(path, 3, &x, err, sizeof err);
        if (st == SPMD_OK) {
            /* only acceptable if the payload happens to decode identically */
            CHECK(x.count == 140 && memcmp(x.data, timg + 16, 140) == 0);
            spmd_idx_free(&x);
        } else {
            CHECK_MSG(st == SPMD_ERR_FORMAT || st == SPMD_ERR_IO, "%s", err);
        }
        z[k] = save;
    }
    free(z);
    /* a raw file with trailing garbage, through the file path */
    uint8_t *g = malloc(ll + 3);
    memcpy(g, lbl, ll);
    memset(g + ll, 0xEE, 3);
    write_file("garbage", g, ll + 3, 0);
    snprintf(path, sizeof path, "%s/garbage", tmpdir);
    CHECK(spmd_idx_load(path, 1, &x, err, sizeof err) == SPMD_ERR_FORMAT);
    CHECK_MSG(strstr(err, "garbage: trailing bytes at byte offset 28"), "%s", err);
    free(g);
    /* missing files */
    snprintf(path, sizeof path, "%s/nope", tmpdir);
    CHECK(spmd_idx_load(path, 1, &x, err, sizeof err) == SPMD_ERR_NOTFOUND);
    unlink(path);
    char sub[512];
    snprintf(sub, sizeof sub, "%s/none", tmpdir);
    CHECK(spmd_dataset_load_dir(sub, SPMD_SPLIT_TRAIN, &tr, err, sizeof err) == SPMD_ERR_NOTFOUND);
    CHECK_MSG(strstr(err, "train-images-idx3-ubyte"), "%s", err);
    free(img), free(lbl), free(timg), free(tlbl);
}

int main(void) {
    const char *t = getenv("TMPDIR");
    snprintf(tmpdir, sizeof tmpdir, "%s/spmd-idx-XXXXXX", t && *t ? t : "/tmp");
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    test_parse_rules();
    test_dataset_parse();
    test_files();
    rm_tmpdir();
    TEST_MAIN_END();
}
