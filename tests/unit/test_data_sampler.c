/* DistributedSampler: torch's index arithmetic over many (N, W) pairs,
 * disjointness and coverage, epochs and seeds, the documented generator
 * (vectors from tests/data/sampler_reference.py), and the batch iterator. */
#include <stdint.h>
#include "data/data_internal.h"
#include "harness.h"
#include "spmd/data.h"

/* torch/utils/data/distributed.py written out with spmd_permutation standing
 * in for randperm: the expected list of `rank`. */
static size_t reference(size_t n, int w, int rank, int shuffle, uint64_t seed, uint64_t epoch,
                        int drop_last, size_t *out) {
    size_t W = (size_t)w;
    size_t ns = (drop_last && n % W) ? (n - W + W - 1) / W : (n + W - 1) / W;
    if (drop_last && n % W && n < W) ns = 0; /* ceil of a negative fraction in torch */
    size_t total = ns * W;
    size_t *list = malloc((total + n + 1) * sizeof *list);
    if (shuffle) spmd_permutation(n, seed + epoch, list);
    else for (size_t i = 0; i < n; i++) list[i] = i;
    size_t len = n;
    if (!drop_last) {
        while (len < total) { /* indices += indices[:pad], repeated as needed */
            size_t pad = total - len, take = pad < n ? pad : n;
            for (size_t i = 0; i < take; i++) list[len + i] = list[i];
            len += take;
        }
    }
    size_t k = 0;
    for (size_t i = (size_t)rank; i < total; i += W) out[k++] = list[i];
    free(list);
    return k;
}

static void test_against_reference(void) {
    const size_t ns[] = {0, 1, 2, 3, 5, 10, 11, 13, 64, 100, 1001};
    const int ws[] = {1, 2, 3, 4, 7, 9, 16};
    for (size_t a = 0; a < sizeof ns / sizeof ns[0]; a++)
        for (size_t b = 0; b < sizeof ws / sizeof ws[0]; b++)
            for (int shuffle = 0; shuffle < 2; shuffle++)
                for (int dl = 0; dl < 2; dl++) {
                    size_t n = ns[a];
                    int w = ws[b];
                    size_t expect_ns = dl ? n / (size_t)w : (n + (size_t)w - 1) / (size_t)w;
                    size_t *seen = calloc(n + 1, sizeof *seen);
                    size_t *ref = malloc((n / (size_t)w + 2) * sizeof *ref);
                    size_t total = 0;
                    for (int r = 0; r < w; r++) {
                        spmd_sampler_opts o = SPMD_SAMPLER_OPTS_DEFAULT;
                        o.dataset_len = n, o.num_replicas = w, o.rank = r;
                        o.shuffle = shuffle, o.seed = 1234, o.drop_last = dl;
                        spmd_sampler *s = NULL;
                        CHECK_OK(spmd_sampler_init(&o, &s, NULL, 0));
                        if (!s) continue;
                        CHECK_OK(spmd_sampler_set_epoch(s, 3));
                        size_t k = spmd_sampler_num_samples(s);
                        CHECK_MSG(k == expect_ns, "n=%zu w=%d dl=%d: %zu samples", n, w, dl, k);
                        CHECK(spmd_sampler_total_size(s) == k * (size_t)w);
                        size_t rk = reference(n, w, r, shuffle, 1234, 3, dl, ref);
                        CHECK(rk == k);
                        const size_t *ix = spmd_sampler_indices(s);
                        for (size_t i = 0; i < k && i < rk; i++) {
                            CHECK_MSG(ix[i] == ref[i], "n=%zu w=%d r=%d sh=%d dl=%d i=%zu", n, w,
                                      r, shuffle, dl, i);
                            CHECK(ix[i] < n);
                            if (ix[i] < n) seen[ix[i]]++;
                            if (!shuffle && i * (size_t)w + (size_t)r < n)
                                CHECK(ix[i] == i * (size_t)w + (size_t)r); /* r, r+W, ... */
                        }
                        total += k;
                        spmd_sampler_free(s);
                    }
                    /* disjoint but for padding; coverage */
                    size_t distinct = 0, dup = 0;
                    for (size_t i = 0; i < n; i++) {
                        if (seen[i]) distinct++;
                        if (seen[i] > 1) dup += seen[i] - 1;
                    }
                    if (dl) {
                        CHECK(total == (n / (size_t)w) * (size_t)w);
                        CHECK(dup == 0 && distinct == total);
                    } else {
                        CHECK(total == expect_ns * (size_t)w);
                        CHECK(distinct == n);        /* every example is seen */
                        CHECK(dup == total - n);     /* only the padding repeats */
                    }
                    free(seen);
                    free(ref);
                }
}

static void rank_list(size_t n, int w, int r, uint64_t seed, uint64_t epoch, size_t *out,
                      size_t *k) {
    spmd_sampler_opts o = {n, w, r, 1, seed, 0};
    spmd_sampler *s;
    if (spmd_sampler_init(&o, &s, NULL, 0)) {
        *k = 0;
        return;
    }
    spmd_sampler_set_epoch(s, epoch);
    CHECK(spmd_sampler_epoch(s) == epoch);
    *k = spmd_sampler_num_samples(s);
    memcpy(out, spmd_sampler_indices(s), *k * sizeof *out);
    spmd_sampler_free(s);
}

static void test_epochs_and_seeds(void) {
    size_t a[50], b[50], k1, k2;
    rank_list(100, 2, 1, 9, 0, a, &k1);
    rank_list(100, 2, 1, 9, 0, b, &k2);
    CHECK(k1 == 50 && k2 == 50 && memcmp(a, b, sizeof a) == 0); /* same seed/epoch */
    rank_list(100, 2, 1, 9, 1, b, &k2);
    CHECK(memcmp(a, b, sizeof a) != 0); /* set_epoch changes the order */
    rank_list(100, 2, 1, 10, 0, b, &k2);
    CHECK(memcmp(a, b, sizeof a) != 0); /* so does the seed */

    /* one sampler: epoch 1 then back to 0 reproduces epoch 0 */
    spmd_sampler_opts o = {100, 2, 1, 1, 9, 0};
    spmd_sampler *s;
    CHECK_OK(spmd_sampler_init(&o, &s, NULL, 0));
    CHECK(memcmp(spmd_sampler_indices(s), a, sizeof a) == 0); /* epoch 0 at init */
    spmd_sampler_set_epoch(s, 1);
    spmd_sampler_set_epoch(s, 0);
    CHECK(memcmp(spmd_sampler_indices(s), a, sizeof a) == 0);
    spmd_sampler_free(s);

    /* shuffle off: epochs do not matter */
    o.shuffle = 0;
    CHECK_OK(spmd_sampler_init(&o, &s, NULL, 0));
    spmd_sampler_set_epoch(s, 5);
    CHECK(spmd_sampler_indices(s)[0] == 1 && spmd_sampler_indices(s)[49] == 99);
    spmd_sampler_free(s);

    char err[200];
    o.rank = 2;
    CHECK(spmd_sampler_init(&o, &s, err, sizeof err) == SPMD_ERR_INVALID);
    CHECK_MSG(strstr(err, "invalid rank 2"), "%s", err);
    o.rank = -1;
    CHECK(spmd_sampler_init(&o, &s, err, sizeof err) == SPMD_ERR_INVALID);
    o.rank = 0, o.num_replicas = 0;
    CHECK(spmd_sampler_init(&o, &s, err, sizeof err) == SPMD_ERR_INVALID);
    CHECK(spmd_sampler_set_epoch(NULL, 1) == SPMD_ERR_INVALID);
    spmd_sampler_free(NULL);
}

static void test_generator(void) {
    /* Vectors printed by tests/data/sampler_reference.py (an independent
     * Python implementation of the generator documented in data.h). */
    static const size_t p10[] = {9, 1, 4, 2, 8, 7, 6, 5, 3, 0};
    static const size_t p16[] = {2, 3, 13, 14, 12, 0, 7, 6, 15, 4, 10, 8, 5, 1, 11, 9};
    size_t p[16];
    spmd_permutation(10, 42, p);
    CHECK(memcmp(p, p10, sizeof p10) == 0);
    spmd_permutation(16, 0, p);
    CHECK(memcmp(p, p16, sizeof p16) == 0);
    uint64_t st = 0;
    CHECK(spmd__splitmix64(&st) == 0xe220a8397b1dcdafull); /* the published first value */
    spmd__rng r;
    spmd__rng_seed(&r, 0);
    CHECK(spmd__rng_next(&r) == 0x99ec5f36cb75f2b4ull);

    static const size_t s3[3][4] = {{4, 8, 5, 0}, {9, 3, 1, 4}, {7, 6, 2, 9}};
    static const size_t s4[4][2] = {{4, 3}, {9, 6}, {7, 5}, {8, 1}};
    for (int rank = 0; rank < 3; rank++) {
        spmd_sampler_opts o = {10, 3, rank, 1, 7, 0};
        spmd_sampler *s;
        CHECK_OK(spmd_sampler_init(&o, &s, NULL, 0));
        spmd_sampler_set_epoch(s, 2);
        CHECK(spmd_sampler_num_samples(s) == 4 && memcmp(spmd_sampler_indices(s), s3[rank], 4 * sizeof(size_t)) == 0);
        spmd_sampler_free(s);
    }
    for (int rank = 0; rank < 4; rank++) {
        spmd_sampler_opts o = {10, 4, rank, 1, 7, 1};
        spmd_sampler *s;
        CHECK_OK(spmd_sampler_init(&o, &s, NULL, 0));
        spmd_sampler_set_epoch(s, 2);
        CHECK(spmd_sampler_num_samples(s) == 2 && memcmp(spmd_sampler_indices(s), s4[rank], 2 * sizeof(size_t)) == 0);
        spmd_sampler_free(s);
    }

    /* every permutation of 3 elements about equally often over 6000 seeds */
    int hist[6] = {0};
    for (uint64_t seed = 0; seed < 6000; seed++) {
        spmd_permutation(3, seed, p);
        int code = (int)(p[0] * 2 + (p[1] > p[2]));
        hist[code]++;
    }
    for (int i = 0; i < 6; i++) CHECK_MSG(hist[i] > 850 && hist[i] < 1150, "perm %d: %d", i, hist[i]);
    /* bounded draws stay in range, including bounds near 2^64 */
    spmd__rng_seed(&r, 5);
    for (int i = 0; i < 1000; i++) {
        CHECK(spmd__rng_below(&r, 7) < 7);
        CHECK(spmd__rng_below(&r, 1) == 0);
        CHECK(spmd__rng_below(&r, UINT64_MAX - 3) < UINT64_MAX - 3);
    }
}

static void test_batches(void) {
    size_t idx[10];
    for (int i = 0; i < 10; i++) idx[i] = (size_t)(100 + i);
    spmd_batch_iter it;
    CHECK_OK(spmd_batch_iter_init(&it, idx, 10, 4, 0));
    CHECK(spmd_batch_iter_count(&it) == 3);
    const size_t *b;
    size_t c, seen = 0, nb = 0;
    while (spmd_batch_iter_next(&it, &b, &c)) {
        CHECK(b[0] == 100 + seen);
        seen += c;
        nb++;
        CHECK(c == (nb < 3 ? 4u : 2u));
    }
    CHECK(seen == 10 && nb == 3);
    CHECK(!spmd_batch_iter_next(&it, &b, &c));
    spmd_batch_iter_reset(&it);
    CHECK(spmd_batch_iter_next(&it, &b, &c) && b == idx && c == 4);
    CHECK_OK(spmd_batch_iter_init(&it, idx, 10, 4, 1));
    CHECK(spmd_batch_iter_count(&it) == 2);
    nb = 0;
    while (spmd_batch_iter_next(&it, &b, &c)) {
        nb++;
        CHECK(c == 4);
    }
    CHECK(nb == 2);
    CHECK_OK(spmd_batch_iter_init(&it, NULL, 0, 4, 0));
    CHECK(spmd_batch_iter_count(&it) == 0 && !spmd_batch_iter_next(&it, &b, &c));
    CHECK(spmd_batch_iter_init(&it, idx, 10, 0, 0) == SPMD_ERR_INVALID);
}

int main(void) {
    test_against_reference();
    test_epochs_and_seeds();
    test_generator();
    test_batches();
    TEST_MAIN_END();
}
