/* test_prefetch.c — the prefetching batch iterator (spmd_prefetch, src/data/prefetch.c):
 *   - the same batches, bit for bit, as filling them on the caller's thread,
 *     over a DistributedSampler's epochs, for depths 1, 2 and 8, with a short
 *     last batch and with batches skipped at the start (a resume);
 *   - a CIFAR-10 augmentation (random from the batch number) is the same too;
 *   - an error of the loader reaches the consumer after every batch before it,
 *     with the batch number and the fill's cause;
 *   - stopping early (after one batch, before any, with a slow consumer)
 *     joins the loader: run under TSan and ASan, nothing leaks or races;
 *   - bad options are refused with the reason;
 *   - spmd_prefetch_dataset (over an image dataset, the examples' loader):
 *     the batches of spmd_dataset_batch, in order, the last one short; an
 *     index beyond the dataset fails that batch, naming the cause; a dataset
 *     not loaded or std <= 0 is refused. */
#include <stdlib.h>
#include <string.h>
#include "harness.h"
#include "spmd/data.h"

#define PIX 3072

typedef struct {
    spmd_cifar ds;
    int augment;
    long fail_at;   /* batch number that fails, -1: none */
    int calls;
} ctx;

static spmd_status fill(void *c_, const size_t *idx, size_t count, uint64_t batch_no, float *x, int *y, char *err,
                        size_t errlen) {
    ctx *c = c_;
    c->calls++;
    if ((long)batch_no == c->fail_at) {
        snprintf(err, errlen, "the disk went away");
        return SPMD_ERR_IO;
    }
    return spmd_cifar_batch(&c->ds, idx, count, c->augment, 77 + batch_no, x, y);
}

static void make_data(spmd_cifar *ds, size_t n) {
    ds->n = n;
    ds->images = malloc(n * PIX);
    ds->labels = malloc(n);
    for (size_t i = 0; i < n * PIX; i++) ds->images[i] = (uint8_t)(i * 2654435761u >> 13);
    for (size_t i = 0; i < n; i++) ds->labels[i] = (uint8_t)(i % 10);
}

/* Every batch of the prefetcher equals the synchronous fill. */
static int same_batches(ctx *c, const size_t *indices, size_t n, size_t B, size_t skip, int depth) {
    spmd_prefetch_opts o = {indices, n, B, 0, skip, PIX, depth, fill, c};
    spmd_prefetch *p = NULL;
    char err[256];
    if (spmd_prefetch_start(&o, &p, err, sizeof err) != SPMD_OK) return 0;
    float *x = malloc(sizeof(float) * PIX * B);
    int *y = malloc(sizeof(int) * B);
    size_t k = skip, seen = 0;
    int ok = 1;
    const float *px;
    const int *py;
    const size_t *pidx;
    size_t cnt;
    int rc;
    while ((rc = spmd_prefetch_next(p, &px, &py, &pidx, &cnt)) == 1) {
        size_t start = k * B, want = n - start < B ? n - start : B;
        ok &= cnt == want && pidx == indices + start;
        spmd_cifar_batch(&c->ds, indices + start, want, c->augment, 77 + k, x, y);
        ok &= memcmp(x, px, sizeof(float) * PIX * want) == 0 && memcmp(y, py, sizeof(int) * want) == 0;
        k++, seen++;
    }
    ok &= rc == 0 && k == (n + B - 1) / B && spmd_prefetch_status(p) == SPMD_OK;
    ok &= spmd_prefetch_next(p, &px, &py, NULL, &cnt) == 0;   /* stays at the end */
    spmd_prefetch_stop(p);
    free(x), free(y);
    return ok && seen == (n + B - 1) / B - skip;
}

/* spmd_prefetch_dataset against spmd_dataset_batch on the caller's thread. */
static void check_dataset_loader(void) {
    enum { N = 23, R = 3, C = 5, B = 4 };
    static uint8_t images[N * R * C], labels[N];
    for (int i = 0; i < N * R * C; i++) images[i] = (uint8_t)(i * 37 + 11);
    for (int i = 0; i < N; i++) labels[i] = (uint8_t)(i % 10);
    spmd_dataset ds = {N, R, C, 10, images, labels};
    size_t idx[N + 1];
    for (size_t i = 0; i < N; i++) idx[i] = (i * 7) % N;
    spmd_prefetch *p = NULL;
    CHECK_OK(spmd_prefetch_dataset(&ds, 0.25f, 0.5f, idx, N, B, 2, &p, NULL, 0));
    const float *x;
    const int *y;
    size_t cnt, k = 0;
    float want[B * R * C];
    int wy[B], rc;
    while ((rc = spmd_prefetch_next(p, &x, &y, NULL, &cnt)) == 1) {
        size_t n = N - k < B ? N - k : B;
        CHECK(cnt == n);
        CHECK_OK(spmd_dataset_batch(&ds, idx + k, n, 0.25f, 0.5f, want, wy));
        CHECK_MSG(!memcmp(x, want, sizeof(float) * n * R * C) && !memcmp(y, wy, sizeof(int) * n),
                  "batch at %zu differs", k);
        k += n;
    }
    CHECK(rc == 0 && k == N);
    spmd_prefetch_stop(p);
    /* example 23 does not exist: batch 1 fails, batch 0 is delivered first */
    idx[5] = N;
    CHECK_OK(spmd_prefetch_dataset(&ds, 0.25f, 0.5f, idx, N, B, 1, &p, NULL, 0));
    CHECK(spmd_prefetch_next(p, &x, &y, NULL, &cnt) == 1);
    CHECK(spmd_prefetch_next(p, &x, &y, NULL, &cnt) == -1);
    CHECK_MSG(strstr(spmd_prefetch_errmsg(p), "batch 1") && strstr(spmd_prefetch_errmsg(p), "23 examples"), "%s",
              spmd_prefetch_errmsg(p));
    spmd_prefetch_stop(p);
    char err[256] = "";
    CHECK(spmd_prefetch_dataset(&ds, 0.25f, 0.0f, idx, N, B, 1, &p, err, sizeof err) == SPMD_ERR_INVALID &&
          strstr(err, "std > 0"));
    spmd_dataset empty = SPMD_DATASET_INIT;
    CHECK(spmd_prefetch_dataset(&empty, 0.25f, 0.5f, idx, N, B, 1, &p, err, sizeof err) == SPMD_ERR_INVALID);
}

int main(void) {
    ctx c = {{0}, 1, -1, 0};
    make_data(&c.ds, 203);
    spmd_sampler_opts so = SPMD_SAMPLER_OPTS_DEFAULT;
    so.dataset_len = 203;
    so.num_replicas = 2;
    so.rank = 1;
    so.seed = 5;
    spmd_sampler *s = NULL;
    CHECK_OK(spmd_sampler_init(&so, &s, NULL, 0));
    for (uint64_t epoch = 0; epoch < 2; epoch++) {
        CHECK_OK(spmd_sampler_set_epoch(s, epoch));
        const size_t *idx = spmd_sampler_indices(s);
        size_t n = spmd_sampler_num_samples(s);   /* 102: a short last batch of 6 */
        CHECK_MSG(same_batches(&c, idx, n, 16, 0, 1), "epoch %d depth 1", (int)epoch);
        CHECK_MSG(same_batches(&c, idx, n, 16, 0, 2), "epoch %d depth 2", (int)epoch);
        CHECK_MSG(same_batches(&c, idx, n, 16, 3, 8), "epoch %d depth 8, 3 skipped", (int)epoch);
        CHECK_MSG(same_batches(&c, idx, n, 16, 7, 2), "epoch %d: every batch skipped", (int)epoch);
    }
    c.augment = 0;
    CHECK_MSG(same_batches(&c, spmd_sampler_indices(s), spmd_sampler_num_samples(s), 5, 1, 3), "no augmentation");

    /* an error: every batch before it, then -1 with the cause */
    const size_t *idx = spmd_sampler_indices(s);
    c.fail_at = 4;
    spmd_prefetch_opts o = {idx, 100, 10, 0, 0, PIX, 2, fill, &c};
    spmd_prefetch *p = NULL;
    CHECK_OK(spmd_prefetch_start(&o, &p, NULL, 0));
    const float *px;
    const int *py;
    size_t cnt;
    int got = 0, rc;
    while ((rc = spmd_prefetch_next(p, &px, &py, NULL, &cnt)) == 1) got++;
    CHECK(rc == -1 && got == 4);
    CHECK(spmd_prefetch_status(p) == SPMD_ERR_IO);
    CHECK_MSG(strstr(spmd_prefetch_errmsg(p), "batch 4") && strstr(spmd_prefetch_errmsg(p), "the disk went away"),
              "errmsg: %s", spmd_prefetch_errmsg(p));
    CHECK(spmd_prefetch_next(p, &px, &py, NULL, &cnt) == -1);
    spmd_prefetch_stop(p);

    /* early stops: after one batch, before any; the loader is bounded by its depth */
    c.fail_at = -1;
    c.calls = 0;
    CHECK_OK(spmd_prefetch_start(&o, &p, NULL, 0));
    CHECK(spmd_prefetch_next(p, &px, &py, NULL, &cnt) == 1 && cnt == 10);
    spmd_prefetch_stop(p);
    CHECK_MSG(c.calls <= 1 + 3, "the loader filled %d batches for a consumer that took 1 (depth 2)", c.calls);
    CHECK_OK(spmd_prefetch_start(&o, &p, NULL, 0));
    spmd_prefetch_stop(p);
    spmd_prefetch_stop(NULL);

    /* bad options */
    char err[256] = "";
    spmd_prefetch_opts bad = o;
    bad.depth = 0;
    CHECK(spmd_prefetch_start(&bad, &p, err, sizeof err) == SPMD_ERR_INVALID && strstr(err, "depth 0"));
    bad = o;
    bad.first_batch = 11;
    CHECK(spmd_prefetch_start(&bad, &p, err, sizeof err) == SPMD_ERR_INVALID && strstr(err, "skipping 11 of 10"));
    bad = o;
    bad.fill = NULL;
    CHECK(spmd_prefetch_start(&bad, &p, err, sizeof err) == SPMD_ERR_INVALID);
    spmd_sampler_free(s);
    spmd_cifar_free(&c.ds);
    check_dataset_loader();
    TEST_MAIN_END();
}
