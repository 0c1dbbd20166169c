/* The DistributedSampler re-dealt mid-epoch (spmd_sampler_reshard, elastic
 * training): after s steps of B at world W the ranks consumed a prefix of the
 * epoch's list; the rest, dealt over the new world, holds every remaining
 * sample once (plus cyclic padding) and none consumed; a reshard to nothing
 * left deals nothing; the next epoch deals the whole list over the new world
 * exactly as a sampler made for it (even when that needs more room than the
 * sampler had); bad ranks are refused. */
#include <stdint.h>
#include <stdlib.h>
#include "harness.h"
#include "spmd/data.h"

/* set-up that cannot fail in a sound tree: stop the test at once */
#define MUST(c) do { if (!(c)) { fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, #c); exit(1); } } while (0)

static spmd_sampler *make(size_t n, int w, int r, uint64_t epoch) {
    spmd_sampler_opts o = SPMD_SAMPLER_OPTS_DEFAULT;
    o.dataset_len = n;
    o.num_replicas = w;
    o.rank = r;
    o.seed = 7;
    spmd_sampler *s = NULL;
    char err[200];
    MUST(spmd_sampler_init(&o, &s, err, sizeof err) == SPMD_OK);
    MUST(spmd_sampler_set_epoch(s, epoch) == SPMD_OK);
    return s;
}

static void check_case(size_t n, int w, size_t B, size_t steps, int w2) {
    size_t *perm = malloc(n * sizeof *perm), *seen = calloc(n, sizeof *seen);
    MUST(perm && seen);
    spmd_permutation(n, 7 + 3, perm);
    /* what the old world consumed in `steps` batches is the list's prefix */
    size_t consumed = 0;
    for (int r = 0; r < w; r++) {
        spmd_sampler *s = make(n, w, r, 3);
        size_t c = spmd_sampler_consumed(s, steps, B);
        CHECK(r == 0 || c == consumed);
        consumed = c;
        const size_t *idx = spmd_sampler_indices(s);
        size_t took = steps * B < spmd_sampler_num_samples(s) ? steps * B : spmd_sampler_num_samples(s);
        for (size_t k = 0; k < took; k++)
            for (size_t p = 0; p < n; p++)
                if (perm[p] == idx[k]) CHECK_MSG(p < consumed, "rank %d took list[%zu] beyond %zu", r, p, consumed);
        spmd_sampler_free(s);
    }
    CHECK(consumed == (w * steps * B < n ? w * steps * B : n));
    size_t rest = n - consumed, total = 0, per = 0;
    for (int r = 0; r < w2; r++) {
        spmd_sampler *s = make(n, w, r < w ? r : 0, 3);
        char err[200];
        CHECK(spmd_sampler_reshard(s, r, w2, consumed, err, sizeof err) == SPMD_OK);
        size_t ns = spmd_sampler_num_samples(s);
        CHECK(ns == (rest + (size_t)w2 - 1) / (size_t)w2);
        CHECK(r == 0 || ns == per);
        per = ns;
        const size_t *idx = spmd_sampler_indices(s);
        for (size_t k = 0; k < ns; k++) {
            size_t p = 0;
            while (p < n && perm[p] != idx[k]) p++;
            CHECK_MSG(p >= consumed && p < n, "rank %d of %d got a consumed sample (list[%zu])", r, w2, p);
            if (p < n) seen[p]++;
            total++;
        }
        /* the next epoch: the whole list over the new world, as a fresh sampler */
        CHECK(spmd_sampler_set_epoch(s, 4) == SPMD_OK);
        spmd_sampler *f = make(n, w2, r, 4);
        CHECK(spmd_sampler_num_samples(s) == spmd_sampler_num_samples(f));
        for (size_t k = 0; k < spmd_sampler_num_samples(f); k++)
            CHECK(spmd_sampler_indices(s)[k] == spmd_sampler_indices(f)[k]);
        spmd_sampler_free(f);
        spmd_sampler_free(s);
    }
    CHECK(total == per * (size_t)w2);
    size_t pad = total - rest;
    for (size_t p = consumed; p < n; p++) /* once each; the first `pad` of the rest twice at most */
        CHECK_MSG(seen[p] == 1 || (seen[p] == 2 && p - consumed < pad), "list[%zu] dealt %zu times", p, seen[p]);
    free(perm);
    free(seen);
}

int main(void) {
    check_case(103, 4, 5, 3, 3);  /* 60 consumed, 43 left over 3: 15 each, 2 padded */
    check_case(256, 4, 8, 2, 3);  /* spmd-train's test: 64 consumed */
    check_case(256, 4, 8, 2, 2);
    check_case(100, 2, 7, 0, 5);  /* a failure in the first step: the whole list, over more ranks */
    check_case(50, 3, 4, 5, 2);   /* everything consumed (the padded last batch): nothing left */
    spmd_sampler *s = make(10, 2, 0, 0);
    char err[200];
    CHECK(spmd_sampler_reshard(s, 2, 2, 0, err, sizeof err) == SPMD_ERR_INVALID);
    CHECK(spmd_sampler_reshard(s, 0, 0, 0, err, sizeof err) == SPMD_ERR_INVALID);
    CHECK(spmd_sampler_num_samples(s) == 5); /* nothing changed */
    spmd_sampler_free(s);
    TEST_MAIN_END();
}
