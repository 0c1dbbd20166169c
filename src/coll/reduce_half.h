/* src/coll/reduce_half.h — the f16/bf16 <-> f32 conversions as static inline
 * functions, so the scalar kernels (reduce_scalar.c) run them without a call
 * per element.  half.c exports them as spmd__f16_to_f32() etc.
 *
 * These are the reference the vector kernels must agree with bit for bit:
 * f16 <-> f32 matches the F16C instructions (vcvtph2ps / vcvtps2ph with
 * round-to-nearest-even), including quieting of signalling NaNs; bf16 is the
 * upper half of an f32, rounded to nearest-even on the way down. */
#ifndef SPMD_COLL_REDUCE_HALF_H
#define SPMD_COLL_REDUCE_HALF_H

#include <stdint.h>
#include <string.h>

static inline uint32_t spmd__h_f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static inline float spmd__h_bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline float spmd__h_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t mant = h & 0x3ffu;
    if (exp == 0x1f) /* inf, or NaN made quiet (bit 22) with its payload kept */
        return spmd__h_bits_f32(sign | 0x7f800000u | (mant ? 0x400000u | (mant << 13) : 0));
    if (exp != 0) /* normal: rebias 15 -> 127 */
        return spmd__h_bits_f32(sign | ((exp + 112u) << 23) | (mant << 13));
    if (mant == 0)
        return spmd__h_bits_f32(sign);
    /* subnormal mant * 2^-24: normalise so the leading 1 becomes implicit */
    int e = -14;
    while (!(mant & 0x400u)) {
        mant <<= 1;
        e--;
    }
    return spmd__h_bits_f32(sign | ((uint32_t)(e + 127) << 23) | ((mant & 0x3ffu) << 13));
}

/* Round m >> shift to nearest, ties to even (shift in 1..31). */
static inline uint32_t spmd__h_shift_rne(uint32_t m, unsigned shift) {
    uint32_t q = m >> shift;
    uint32_t rem = m & ((1u << shift) - 1);
    uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (q & 1u)))
        q++;
    return q;
}

static inline uint16_t spmd__h_f32_to_f16(float f) {
    uint32_t u = spmd__h_f32_bits(f);
    uint32_t sign = (u >> 16) & 0x8000u;
    uint32_t abs = u & 0x7fffffffu;
    if (abs > 0x7f800000u) /* NaN: quiet, top 10 payload bits kept */
        return (uint16_t)(sign | 0x7e00u | ((abs >> 13) & 0x3ffu));
    if (abs >= 0x47800000u) /* >= 2^16 (and inf): beyond any rounding of 65504 */
        return (uint16_t)(sign | 0x7c00u);
    int e = (int)(abs >> 23) - 127;
    if (e >= -14) {
        /* normal: keep 10 mantissa bits; a carry out of the mantissa moves
         * into the exponent, and past 65504 it lands exactly on inf (0x7c00) */
        uint32_t h = ((uint32_t)(e + 15) << 10) | ((abs & 0x7fffffu) >> 13);
        uint32_t rem = abs & 0x1fffu;
        if (rem > 0x1000u || (rem == 0x1000u && (h & 1u)))
            h++;
        return (uint16_t)(sign | h);
    }
    /* subnormal result: round(value / 2^-24) = round(m * 2^(e+1)), m 24 bits */
    unsigned shift = (unsigned)(-(e + 1));
    if (shift >= 25) /* below 2^-25: rounds to zero (f32 subnormals land here) */
        return (uint16_t)sign;
    uint32_t m = (abs & 0x7fffffu) | 0x800000u;
    return (uint16_t)(sign | spmd__h_shift_rne(m, shift));
}

static inline float spmd__h_bf16_to_f32(uint16_t h) {
    return spmd__h_bits_f32((uint32_t)h << 16);
}

static inline uint16_t spmd__h_f32_to_bf16(float f) {
    uint32_t u = spmd__h_f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) /* NaN: keep sign and payload top, make quiet */
        return (uint16_t)((u >> 16) | 0x40u);
    /* adding 0x7fff (+1 when the kept lsb is odd) rounds to nearest-even; the
     * carry may walk into the exponent, and from the largest finite to inf */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

#endif
