/* rng.c — the documented generator behind the sampler's permutations:
 * xoshiro256** (Blackman & Vigna) seeded by splitmix64, bounded draws by
 * Lemire's multiply-and-reject, and Fisher–Yates.  Specified in data.h so any
 * language can reproduce a run's data order. */
#include "data_internal.h"

void spmd__rng_seed(spmd__rng *r, uint64_t seed) {
    uint64_t st = seed;
    for (int i = 0; i < 4; i++) r->s[i] = spmd__splitmix64(&st);
}

uint64_t spmd__rng_next(spmd__rng *r) { return spmd__xoshiro_next(r->s); }

/* The high word of x * bound is uniform in [0, bound) once draws whose low
 * word falls below 2^64 mod bound are rejected. */
uint64_t spmd__rng_below(spmd__rng *r, uint64_t bound) {
    unsigned __int128 m = (unsigned __int128)spmd__rng_next(r) * bound;
    uint64_t low = (uint64_t)m;
    if (low < bound) {
        uint64_t threshold = (0 - bound) % bound;
        while (low < threshold) {
            m = (unsigned __int128)spmd__rng_next(r) * bound;
            low = (uint64_t)m;
        }
    }
    return (uint64_t)(m >> 64);
}

void spmd_permutation(size_t n, uint64_t seed, size_t *perm) {
    if (!perm) return;
    for (size_t i = 0; i < n; i++) perm[i] = i;
    spmd__rng r;
    spmd__rng_seed(&r, seed);
    for (size_t i = n; i-- > 1;) {
        size_t j = (size_t)spmd__rng_below(&r, (uint64_t)i + 1);
        size_t t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
}
