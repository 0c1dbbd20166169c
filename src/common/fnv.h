/* src/common/fnv.h — FNV-1a (64-bit), the one non-cryptographic hash of the
 * tree: bucket names, store keys, rank lists, kernel identities, checksums.
 * Never for anything an attacker chooses to collide (the store seeds it). */
#ifndef SPMD_COMMON_FNV_H
#define SPMD_COMMON_FNV_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define SPMD__FNV64_OFFSET 1469598103934665603ull
#define SPMD__FNV64_PRIME 1099511628211ull

/* One FNV-1a step per byte of p[0..n), continuing from h (start at
 * SPMD__FNV64_OFFSET, or that value mixed with a seed). */
static inline uint64_t spmd__fnv1a64(uint64_t h, const void *p, size_t n) {
    const unsigned char *b = (const unsigned char *)p;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * SPMD__FNV64_PRIME;
    return h;
}

/* FNV-1a over 8-byte words (the tail byte by byte): a different value from
 * spmd__fnv1a64, eight times fewer multiplies, for checksums of large
 * buffers (the trainer's replica check hashes every parameter). */
static inline uint64_t spmd__fnv1a64_words(uint64_t h, const void *p, size_t n) {
    const unsigned char *b = (const unsigned char *)p;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, b + i, 8);
        h = (h ^ w) * SPMD__FNV64_PRIME;
    }
    for (; i < n; i++) h = (h ^ b[i]) * SPMD__FNV64_PRIME;
    return h;
}

/* The same over a NUL-terminated string. */
static inline uint64_t spmd__fnv1a64_str(uint64_t h, const char *s) {
    for (; *s; s++) h = (h ^ (unsigned char)*s) * SPMD__FNV64_PRIME;
    return h;
}

#endif
