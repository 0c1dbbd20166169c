/* src/common/xoshiro.h — the tree's one pseudo-random generator:
 * xoshiro256** (Blackman & Vigna), seeded through splitmix64.  Inline, since
 * hot loops (dropout, initialisation) keep the state in locals.  The data
 * order built on it is specified in spmd/data.h. */
#ifndef SPMD_COMMON_XOSHIRO_H
#define SPMD_COMMON_XOSHIRO_H

#include <stdint.h>

/* Advance *state and return the next splitmix64 value. */
static inline uint64_t spmd__splitmix64(uint64_t *state) {
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* One xoshiro256** step on the four words s[0..3]. */
static inline uint64_t spmd__xoshiro_next(uint64_t *s) {
    uint64_t x = s[1] * 5;
    uint64_t result = ((x << 7) | (x >> 57)) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = (s[3] << 45) | (s[3] >> 19);
    return result;
}

#endif
