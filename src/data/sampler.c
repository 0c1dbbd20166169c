/* sampler.c — torch.utils.data.DistributedSampler: every rank sees a
 * disjoint strided slice of one (padded or cut) epoch-dependent order. */
#include <stdlib.h>
#include <string.h>
#include "data_internal.h"

struct spmd_sampler {
    spmd_sampler_opts o;
    size_t num_samples, total_size;
    uint64_t epoch;
    size_t offset;   /* spmd_sampler_reshard: entries of the epoch's list already consumed */
    size_t *order;   /* scratch: the full list of dataset_len entries */
    size_t *indices; /* this rank's num_samples entries */
    size_t cap;      /* entries allocated at indices */
};

/* Room for ns indices (a deal over fewer ranks needs more). */
static spmd_status reserve(spmd_sampler *s, size_t ns) {
    if (ns <= s->cap) return SPMD_OK;
    size_t *p = realloc(s->indices, ns * sizeof(size_t));
    if (!p) return SPMD_ERR_NOMEM;
    s->indices = p;
    s->cap = ns;
    return SPMD_OK;
}

static void compute(spmd_sampler *s) {
    size_t n = s->o.dataset_len, w = (size_t)s->o.num_replicas, r = (size_t)s->o.rank;
    if (s->o.shuffle)
        spmd_permutation(n, s->o.seed + s->epoch, s->order);
    else
        for (size_t i = 0; i < n; i++) s->order[i] = i;
    /* Position p of the padded list is order[p % n] (padding repeats the list
     * from its start, cyclically); with drop_last, total_size <= n. */
    /* After a reshard the rest of the list, order[offset..n), is dealt (and
     * padded, cyclically) the same way over the new world. */
    size_t m = n - s->offset;
    for (size_t k = 0; k < s->num_samples; k++) s->indices[k] = s->order[s->offset + (r + k * w) % m];
}

/* The counts of a list of m entries dealt over w ranks (torch's rule). */
static size_t count_per_rank(size_t m, size_t w, int drop_last) {
    return (drop_last && m % w) ? m / w : (m + w - 1) / w;
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
    size_t ns = count_per_rank(n, w, opts->drop_last);
    if (n > (size_t)-1 / sizeof(size_t) / 2)
        return spmd__fail(err, errlen, SPMD_ERR_INVALID, "sampler: dataset_len %zu too large", n);
    spmd_sampler *s = calloc(1, sizeof *s);
    if (!s) return spmd__fail(err, errlen, SPMD_ERR_NOMEM, "sampler: out of memory");
    s->o = *opts;
    s->num_samples = ns;
    s->total_size = ns * w;
    s->order = malloc((n ? n : 1) * sizeof(size_t));
    s->indices = malloc((ns ? ns : 1) * sizeof(size_t));
    s->cap = ns ? ns : 1;
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
    /* a reshard lasts for its epoch: a new one deals the whole list */
    size_t ns = count_per_rank(s->o.dataset_len, (size_t)s->o.num_replicas, s->o.drop_last);
    if (reserve(s, ns)) return SPMD_ERR_NOMEM;
    s->epoch = epoch;
    s->offset = 0;
    s->num_samples = ns;
    s->total_size = ns * (size_t)s->o.num_replicas;
    compute(s);
    return SPMD_OK;
}

spmd_status spmd_sampler_reshard(spmd_sampler *s, int rank, int world, size_t consumed, char *err,
                                 size_t errlen) {
    if (!s) return spmd__fail(err, errlen, SPMD_ERR_INVALID, "sampler: NULL argument");
    if (world < 1 || rank < 0 || rank >= world)
        return spmd__fail(err, errlen, SPMD_ERR_INVALID, "sampler: reshard to rank %d of world %d", rank, world);
    size_t n = s->o.dataset_len;
    if (consumed > n) consumed = n;   /* the last steps may have taken padding */
    size_t ns = consumed == n ? 0 : count_per_rank(n - consumed, (size_t)world, s->o.drop_last);
    if (reserve(s, ns)) return spmd__fail(err, errlen, SPMD_ERR_NOMEM, "sampler: out of memory for %zu indices", ns);
    s->o.rank = rank;
    s->o.num_replicas = world;
    s->offset = consumed;
    s->num_samples = ns;
    s->total_size = ns * (size_t)world;
    compute(s);
    return SPMD_OK;
}

size_t spmd_sampler_consumed(const spmd_sampler *s, size_t steps, size_t batch) {
    if (!s) return 0;
    size_t per_rank = steps * batch < s->num_samples ? steps * batch : s->num_samples;
    size_t c = s->offset + per_rank * (size_t)s->o.num_replicas;
    return c < s->o.dataset_len ? c : s->o.dataset_len;
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
