/* rng.c — xoshiro256** seeded through splitmix64.  The whole state is four
 * words, so dropout masks can be reproduced exactly after a checkpoint. */
#include <math.h>
#include "nn/internal.h"

void spmd_rng_seed(spmd_rng *r, uint64_t seed, uint64_t stream) {
    uint64_t x = seed ^ (stream * 0xd1342543de82ef95ULL + 0x2545f4914f6cdd1dULL);
    for (int i = 0; i < 4; i++) r->s[i] = spmd__splitmix64(&x);
}

uint64_t spmd_rng_next(spmd_rng *r) { return spmd__xoshiro_next(r->s); }

float spmd_rng_uniform(spmd_rng *r) {
    return (float)(spmd_rng_next(r) >> 40) * (1.0f / 16777216.0f);
}

/* (0, 1] and [0, 1) with 53 bits: the logarithm never sees 0. */
static double open_unit(spmd_rng *r) { return (double)((spmd_rng_next(r) >> 11) + 1) * 0x1p-53; }
static double half_open_unit(spmd_rng *r) { return (double)(spmd_rng_next(r) >> 11) * 0x1p-53; }

/* One Box–Muller pair. */
static void box_muller(spmd_rng *r, double *z0, double *z1) {
    const double two_pi = 6.283185307179586476925286766559;
    double radius = sqrt(-2.0 * log(open_unit(r)));
    double angle = two_pi * half_open_unit(r);
    *z0 = radius * cos(angle);
    *z1 = radius * sin(angle);
}

float spmd_rng_normal(spmd_rng *r) {
    double z0, z1;
    box_muller(r, &z0, &z1);
    return (float)z0;
}

void spmd_rng_normal_fill(spmd_rng *r, float *out, size_t n, float mean, float std) {
    size_t i = 0;
    for (; i + 2 <= n; i += 2) {
        double z0, z1;
        box_muller(r, &z0, &z1);
        out[i] = (float)(mean + std * z0);
        out[i + 1] = (float)(mean + std * z1);
    }
    if (i < n) out[i] = mean + std * spmd_rng_normal(r);
}
