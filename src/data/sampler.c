/* sampler.c — torch.utils.data.DistributedSampler: every rank sees a
 * disjoint strided slice of one (padded or cut) epoch-dependent order. */
#include <stdlib.h>
#include <string.h>
#include "data_internal.h"

struct spmd_sampler {
    spmd_sampler_opts o;
    size_t num_samples, total_size;
    uint64_t epoch;
    size_t *order;   /* scratch: the full list of dataset_len entries */
    size_t *indices; /* this rank's num_samples entries */
};

static void compute(spmd_sampler *s) {
    size_t n = s->o.dataset_len, w = (size_t)s->o.num_replicas, r = (size_t)s->o.rank;
    if (s->o.shuffle)
        spmd_permutation(n, s->o.seed + s->epoch, s->order);
    else
        for (size_t i = 0; i < n; i++) s->order[i] = i;
    /* Position p of the padded list is order[p % n] (padding repeats the list
     * from its start, cyclically); with drop_last, total_size <= n. */
    for (size_t k = 0; k < s->num_samples; k++) s->indices[k] = s->order[(r + k * w) % n];
}

spmd_status spmd_sampler_init(const spmd_sampler_opts *opts, spmd_sampler **out, char *err,
                              size_t errlen) {
    if (!opts || !out) return spmd__fail(err, errlen, SPMD_ERR_INVALID, "sampler: NULL argument");
    if (opts->num_replicas < 1)
        return spmd__fail(err, errlen, SPMD_ERR_INVALID, "sampler: num_replicas %d must be >= 1",
                          opts->num_replicas);
    if (opts->rank < 0 || opts->rank >= opts->num_replicas)
        return spmd__fail(err, errlen, SPMD_ERR_INVALID,
                          "sampler: invalid rank %d, rank should be in the interval [0, %d]",
                          opts->rank, opts->num_replicas - 1);
    size_t n = opts->dataset_len, w = (size_t)opts->num_replicas;
    size_t ns = (opts->drop_last && n % w) ? n / w : (n + w - 1) / w;
    if (n > (size_t)-1 / sizeof(size_t) / 2)
        return spmd__fail(err, errlen, SPMD_ERR_INVALID, "sampler: dataset_len %zu too large", n);
    spmd_sampler *s = calloc(1, sizeof *s);
    if (!s) return spmd__fail(err, errlen, SPMD_ERR_NOMEM, "sampler: out of memory");
    s->o = *opts;
    s->num_samples = ns;
    s->total_size = ns * w;
    s->order = malloc((n ? n : 1) * sizeof(size_t));
    s->indices = malloc((ns ? ns : 1) * sizeof(size_t));
    if (!s->order || !s->indices) {
        spmd_sampler_free(s);
        return spmd__fail(err, errlen, SPMD_ERR_NOMEM, "sampler: out of memory for %zu indices", n);
    }
    compute(s);
    *out = s;
    return SPMD_OK;
}

spmd_status spmd_sampler_set_epoch(spmd_sampler *s, uint64_t epoch) {
    if (!s) return SPMD_ERR_INVALID;
    s->epoch = epoch;
    compute(s);
    return SPMD_OK;
}

size_t spmd_sampler_num_samples(const spmd_sampler *s) { return s ? s->num_samples : 0; }
size_t spmd_sampler_total_size(const spmd_sampler *s) { return s ? s->total_size : 0; }
uint64_t spmd_sampler_epoch(const spmd_sampler *s) { return s ? s->epoch : 0; }
const size_t *spmd_sampler_indices(const spmd_sampler *s) { return s ? s->indices : NULL; }

void spmd_sampler_free(spmd_sampler *s) {
    if (!s) return;
    free(s->order);
    free(s->indices);
    free(s);
}
