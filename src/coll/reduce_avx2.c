/* src/coll/reduce_avx2.c — the AVX2 kernel family (256-bit; F16C for f16).
 *
 * Only the functions here carry __attribute__((target("avx2,f16c"))), so the
 * rest of the library stays baseline x86-64 and this code runs only after the
 * dispatcher has seen the CPU support it.  Each kernel runs 4 vectors per
 * iteration, then single vectors, and hands the last few elements (fewer than
 * one vector) to the scalar family, which defines the same results.
 *
 * f16 is widened with vcvtph2ps and narrowed with vcvtps2ph (nearest-even);
 * bf16 is widened by a 16-bit shift and narrowed with the nearest-even
 * integer rounding of half.c, so every value is computed in f32 registers. */
#include "coll/reduce.h"

#if defined(__x86_64__)
#include <immintrin.h>

#define T2 __attribute__((target("avx2,f16c")))

/* The scalar family, for tails and for what has no vector kernel here.  Set
 * once inside the dispatcher's pthread_once, before any kernel can run. */
static const spmd__reduce_table *sc;

/* ---- loads and stores ------------------------------------------------------ */

static inline T2 __m256 ld_f32(const float *p) { return _mm256_loadu_ps(p); }
static inline T2 void st_f32(float *p, __m256 v) { _mm256_storeu_ps(p, v); }
static inline T2 __m256d ld_f64(const double *p) { return _mm256_loadu_pd(p); }
static inline T2 void st_f64(double *p, __m256d v) { _mm256_storeu_pd(p, v); }
static inline T2 __m256i ld_int(const void *p) { return _mm256_loadu_si256((const __m256i *)p); }
static inline T2 void st_int(void *p, __m256i v) { _mm256_storeu_si256((__m256i *)p, v); }

static inline T2 __m256 ld_f16(const uint16_t *p) {
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
}
static inline T2 void st_f16(uint16_t *p, __m256 v) {
    _mm_storeu_si128((__m128i *)p, _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}

static inline T2 __m256 ld_bf16(const uint16_t *p) {
    __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
}
/* Nearest-even: add 0x7fff + lsb of the kept half, keep the top 16 bits; a
 * NaN keeps its top bits with the quiet bit set. */
static inline T2 void st_bf16(uint16_t *p, __m256 v) {
    __m256i b = _mm256_castps_si256(v);
    __m256i top = _mm256_srli_epi32(b, 16);
    __m256i lsb = _mm256_and_si256(top, _mm256_set1_epi32(1));
    __m256i r = _mm256_add_epi32(b, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff)));
    r = _mm256_srli_epi32(r, 16);
    __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    r = _mm256_blendv_epi8(r, _mm256_or_si256(top, _mm256_set1_epi32(0x40)), nan);
    /* packus works per 128-bit lane: [r0..3 r0..3 | r4..7 r4..7]; qwords 0 and 2 */
    __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0x08);
    _mm_storeu_si128((__m128i *)p, _mm256_castsi256_si128(packed));
}

/* ---- operations ------------------------------------------------------------ */

/* min_ps(a, b) returns b on ties and on NaN; OR-ing both orders turns a
 * -0/+0 tie into -0 (AND into +0 for max), and the unordered mask turns any
 * NaN into the all-ones NaN, exactly as reduce_scalar.c defines. */
static inline T2 __m256 vmin_ps(__m256 a, __m256 b) {
    __m256 m = _mm256_or_ps(_mm256_min_ps(a, b), _mm256_min_ps(b, a));
    return _mm256_or_ps(m, _mm256_cmp_ps(a, b, _CMP_UNORD_Q));
}
static inline T2 __m256 vmax_ps(__m256 a, __m256 b) {
    __m256 m = _mm256_and_ps(_mm256_max_ps(a, b), _mm256_max_ps(b, a));
    return _mm256_or_ps(m, _mm256_cmp_ps(a, b, _CMP_UNORD_Q));
}
static inline T2 __m256d vmin_pd(__m256d a, __m256d b) {
    __m256d m = _mm256_or_pd(_mm256_min_pd(a, b), _mm256_min_pd(b, a));
    return _mm256_or_pd(m, _mm256_cmp_pd(a, b, _CMP_UNORD_Q));
}
static inline T2 __m256d vmax_pd(__m256d a, __m256d b) {
    __m256d m = _mm256_and_pd(_mm256_max_pd(a, b), _mm256_max_pd(b, a));
    return _mm256_or_pd(m, _mm256_cmp_pd(a, b, _CMP_UNORD_Q));
}

/* No 8-bit multiply: even bytes from a 16-bit multiply (low byte is right),
 * odd bytes from multiplying the high bytes shifted down. */
static inline T2 __m256i vmul_epi8(__m256i a, __m256i b) {
    __m256i even = _mm256_mullo_epi16(a, b);
    __m256i odd = _mm256_mullo_epi16(_mm256_srli_epi16(a, 8), _mm256_srli_epi16(b, 8));
    return _mm256_or_si256(_mm256_slli_epi16(odd, 8),
                           _mm256_and_si256(even, _mm256_set1_epi16(0xff)));
}
/* 64-bit low product from 32-bit pieces: lo*lo + ((hi*lo + lo*hi) << 32). */
static inline T2 __m256i vmul_epi64(__m256i a, __m256i b) {
    __m256i lolo = _mm256_mul_epu32(a, b);
    __m256i cross = _mm256_add_epi64(_mm256_mul_epu32(_mm256_srli_epi64(a, 32), b),
                                     _mm256_mul_epu32(a, _mm256_srli_epi64(b, 32)));
    return _mm256_add_epi64(lolo, _mm256_slli_epi64(cross, 32));
}
static inline T2 __m256i vmin_epi64(__m256i a, __m256i b) {
    return _mm256_blendv_epi8(a, b, _mm256_cmpgt_epi64(a, b));
}
static inline T2 __m256i vmax_epi64(__m256i a, __m256i b) {
    return _mm256_blendv_epi8(b, a, _mm256_cmpgt_epi64(a, b));
}

/* ---- kernel generators ------------------------------------------------------ */

/* All loads of an iteration come before its stores, so dst == a or dst == b
 * is safe. */
#define VKERNEL(name, DT, OP, ET, W, VT, LOAD, STORE, VOP)                          \
    static T2 void name(void *dst, const void *pa, const void *pb, size_t n) {      \
        ET *d = dst;                                                                \
        const ET *a = pa, *b = pb;                                                  \
        size_t i = 0;                                                               \
        for (; i + 4 * (W) <= n; i += 4 * (W)) {                                    \
            VT x0 = LOAD(a + i), x1 = LOAD(a + i + (W));                            \
            VT x2 = LOAD(a + i + 2 * (W)), x3 = LOAD(a + i + 3 * (W));              \
            VT y0 = LOAD(b + i), y1 = LOAD(b + i + (W));                            \
            VT y2 = LOAD(b + i + 2 * (W)), y3 = LOAD(b + i + 3 * (W));              \
            STORE(d + i, VOP(x0, y0));                                              \
            STORE(d + i + (W), VOP(x1, y1));                                        \
            STORE(d + i + 2 * (W), VOP(x2, y2));                                    \
            STORE(d + i + 3 * (W), VOP(x3, y3));                                    \
        }                                                                           \
        for (; i + (W) <= n; i += (W))                                              \
            STORE(d + i, VOP(LOAD(a + i), LOAD(b + i)));                            \
        if (i < n)                                                                  \
            sc->fn[DT][OP](d + i, a + i, b + i, n - i);                             \
    }

#define FLOAT_KERNELS(sfx, DT, ET, W, VT, LOAD, STORE, ADD, MUL, MIN, MAX)          \
    VKERNEL(sum_##sfx, DT, SPMD_SUM, ET, W, VT, LOAD, STORE, ADD)                   \
    VKERNEL(prod_##sfx, DT, SPMD_PROD, ET, W, VT, LOAD, STORE, MUL)                 \
    VKERNEL(min_##sfx, DT, SPMD_MIN, ET, W, VT, LOAD, STORE, MIN)                   \
    VKERNEL(max_##sfx, DT, SPMD_MAX, ET, W, VT, LOAD, STORE, MAX)

#define INT_KERNELS(sfx, DT, ET, ADD, MUL, MIN, MAX)                                \
    FLOAT_KERNELS(sfx, DT, ET, 32 / sizeof(ET), __m256i, ld_int, st_int, ADD, MUL,  \
                  MIN, MAX)                                                         \
    VKERNEL(band_##sfx, DT, SPMD_BAND, ET, 32 / sizeof(ET), __m256i, ld_int,        \
            st_int, _mm256_and_si256)                                               \
    VKERNEL(bor_##sfx, DT, SPMD_BOR, ET, 32 / sizeof(ET), __m256i, ld_int, st_int,  \
            _mm256_or_si256)                                                        \
    VKERNEL(bxor_##sfx, DT, SPMD_BXOR, ET, 32 / sizeof(ET), __m256i, ld_int,        \
            st_int, _mm256_xor_si256)

FLOAT_KERNELS(f32, SPMD_F32, float, 8, __m256, ld_f32, st_f32, _mm256_add_ps, _mm256_mul_ps,
              vmin_ps, vmax_ps)
FLOAT_KERNELS(f64, SPMD_F64, double, 4, __m256d, ld_f64, st_f64, _mm256_add_pd, _mm256_mul_pd,
              vmin_pd, vmax_pd)
FLOAT_KERNELS(f16, SPMD_F16, uint16_t, 8, __m256, ld_f16, st_f16, _mm256_add_ps, _mm256_mul_ps,
              vmin_ps, vmax_ps)
FLOAT_KERNELS(bf16, SPMD_BF16, uint16_t, 8, __m256, ld_bf16, st_bf16, _mm256_add_ps,
              _mm256_mul_ps, vmin_ps, vmax_ps)
INT_KERNELS(i8, SPMD_I8, int8_t, _mm256_add_epi8, vmul_epi8, _mm256_min_epi8, _mm256_max_epi8)
INT_KERNELS(u8, SPMD_U8, uint8_t, _mm256_add_epi8, vmul_epi8, _mm256_min_epu8, _mm256_max_epu8)
INT_KERNELS(i32, SPMD_I32, int32_t, _mm256_add_epi32, _mm256_mullo_epi32, _mm256_min_epi32,
            _mm256_max_epi32)
INT_KERNELS(i64, SPMD_I64, int64_t, _mm256_add_epi64, vmul_epi64, vmin_epi64, vmax_epi64)

/* ---- AVG finish --------------------------------------------------------------- */

/* int32 through double: the quotient of two int32 values in double truncates
 * to the same integer as C's division (it cannot round up to an integer). */
static inline T2 __m256d ld_i32pd(const int32_t *p) {
    return _mm256_cvtepi32_pd(_mm_loadu_si128((const __m128i *)p));
}
static inline T2 void st_i32pd(int32_t *p, __m256d v) {
    _mm_storeu_si128((__m128i *)p, _mm256_cvttpd_epi32(v));
}

/* One division per element in the type's arithmetic (f16/bf16 in f32), as
 * reduce_scalar.c does; the scalar family finishes the tail.  A power-of-two
 * divisor multiplies by its exact reciprocal: same result, cheaper. */
#define VAVG(name, DT, ET, W, VT, LOAD, STORE, DIV, MUL, SET1, RCP)                 \
    static T2 void name(void *buf, size_t n, int divisor) {                         \
        ET *p = buf;                                                                \
        size_t i = 0;                                                               \
        const int pow2 = (divisor & (divisor - 1)) == 0; /* the loop is unswitched */ \
        VT dv = SET1(divisor), rv = RCP(divisor);                                   \
        for (; i + (W) <= n; i += (W)) {                                            \
            VT x = LOAD(p + i);                                                     \
            STORE(p + i, pow2 ? MUL(x, rv) : DIV(x, dv));                           \
        }                                                                           \
        if (i < n)                                                                  \
            sc->avg[DT](p + i, n - i, divisor);                                     \
    }

static inline T2 __m256 set1_ps_int(int d) { return _mm256_set1_ps((float)d); }
static inline T2 __m256d set1_pd_int(int d) { return _mm256_set1_pd((double)d); }
static inline T2 __m256 rcp_ps_int(int d) { return _mm256_set1_ps(1.0f / (float)d); }
static inline T2 __m256d rcp_pd_int(int d) { return _mm256_set1_pd(1.0 / (double)d); }

VAVG(avg_f32, SPMD_F32, float, 8, __m256, ld_f32, st_f32, _mm256_div_ps, _mm256_mul_ps, set1_ps_int, rcp_ps_int)
VAVG(avg_f64, SPMD_F64, double, 4, __m256d, ld_f64, st_f64, _mm256_div_pd, _mm256_mul_pd, set1_pd_int, rcp_pd_int)
VAVG(avg_f16, SPMD_F16, uint16_t, 8, __m256, ld_f16, st_f16, _mm256_div_ps, _mm256_mul_ps, set1_ps_int, rcp_ps_int)
VAVG(avg_bf16, SPMD_BF16, uint16_t, 8, __m256, ld_bf16, st_bf16, _mm256_div_ps, _mm256_mul_ps, set1_ps_int, rcp_ps_int)
VAVG(avg_i32, SPMD_I32, int32_t, 4, __m256d, ld_i32pd, st_i32pd, _mm256_div_pd, _mm256_mul_pd, set1_pd_int, rcp_pd_int)

/* ---- the table ------------------------------------------------------------- */

#define SET_FLOAT(t, DT, sfx)                                                       \
    do {                                                                            \
        (t)->fn[DT][SPMD_SUM] = sum_##sfx;                                          \
        (t)->fn[DT][SPMD_AVG] = sum_##sfx;                                          \
        (t)->fn[DT][SPMD_PROD] = prod_##sfx;                                        \
        (t)->fn[DT][SPMD_MIN] = min_##sfx;                                          \
        (t)->fn[DT][SPMD_MAX] = max_##sfx;                                          \
    } while (0)
#define SET_INT(t, DT, sfx)                                                         \
    do {                                                                            \
        SET_FLOAT(t, DT, sfx);                                                      \
        (t)->fn[DT][SPMD_BAND] = band_##sfx;                                        \
        (t)->fn[DT][SPMD_BOR] = bor_##sfx;                                          \
        (t)->fn[DT][SPMD_BXOR] = bxor_##sfx;                                        \
    } while (0)

void spmd__reduce_fill_avx2(spmd__reduce_table *t, const spmd__reduce_table *scalar) {
    sc = scalar;
    *t = *scalar; /* int8/uint8/int64 AVG finish stay scalar */
    t->name = "avx2";
    SET_FLOAT(t, SPMD_F32, f32);
    SET_FLOAT(t, SPMD_F64, f64);
    SET_FLOAT(t, SPMD_F16, f16);
    SET_FLOAT(t, SPMD_BF16, bf16);
    SET_INT(t, SPMD_I8, i8);
    SET_INT(t, SPMD_U8, u8);
    SET_INT(t, SPMD_I32, i32);
    SET_INT(t, SPMD_I64, i64);
    t->avg[SPMD_F32] = avg_f32;
    t->avg[SPMD_F64] = avg_f64;
    t->avg[SPMD_F16] = avg_f16;
    t->avg[SPMD_BF16] = avg_bf16;
    t->avg[SPMD_I32] = avg_i32;
}

#endif /* __x86_64__ */
