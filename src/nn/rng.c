/* rng.c — xoshiro256** seeded through splitmix64.  The whole state is four
 * words, so dropout masks can be reproduced exactly after a checkpoint. */
#include "nn/internal.h"

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

void spmd_rng_seed(spmd_rng *r, uint64_t seed, uint64_t stream) {
    uint64_t x = seed ^ (stream * 0xd1342543de82ef95ULL + 0x2545f4914f6cdd1dULL);
    for (int i = 0; i < 4; i++) r->s[i] = splitmix64(&x);
}

uint64_t spmd_rng_next(spmd_rng *r) { return spmd__xoshiro_next(r->s); }

float spmd_rng_uniform(spmd_rng *r) {
    return (float)(spmd_rng_next(r) >> 40) * (1.0f / 16777216.0f);
}
