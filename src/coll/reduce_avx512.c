/* src/coll/reduce_avx512.c — the AVX-512 kernel family (F, BW, DQ, VL).
 *
 * Same structure as reduce_avx2.c with 512-bit vectors, except for the tail:
 * the last partial vector is done with masked loads and stores (masked-off
 * lanes are neither read nor written, so nothing past the buffers is touched).
 * f16 converts with vcvtph2ps/vcvtps2ph, bf16 by 16-bit shifts and
 * nearest-even integer rounding (not vcvtneps2bf16, which flushes
 * subnormals to zero and would disagree with the other families). */
#include "coll/reduce.h"

#if defined(__x86_64__)
#include <immintrin.h>

#define T5 __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl")))
#define RNE (_MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)

/* The scalar family, for the few entries without a kernel here. */
static const spmd__reduce_table *sc;

/* ---- loads and stores (plain and masked) ----------------------------------- */

static inline T5 __m512 ld_f32(const float *p) { return _mm512_loadu_ps(p); }
static inline T5 void st_f32(float *p, __m512 v) { _mm512_storeu_ps(p, v); }
static inline T5 __m512 ldm_f32(const float *p, __mmask16 k) { return _mm512_maskz_loadu_ps(k, p); }
static inline T5 void stm_f32(float *p, __mmask16 k, __m512 v) { _mm512_mask_storeu_ps(p, k, v); }

static inline T5 __m512d ld_f64(const double *p) { return _mm512_loadu_pd(p); }
static inline T5 void st_f64(double *p, __m512d v) { _mm512_storeu_pd(p, v); }
static inline T5 __m512d ldm_f64(const double *p, __mmask8 k) { return _mm512_maskz_loadu_pd(k, p); }
static inline T5 void stm_f64(double *p, __mmask8 k, __m512d v) { _mm512_mask_storeu_pd(p, k, v); }

static inline T5 __m512i ld_int(const void *p) { return _mm512_loadu_si512(p); }
static inline T5 void st_int(void *p, __m512i v) { _mm512_storeu_si512(p, v); }
static inline T5 __m512i ldm_i8(const void *p, __mmask64 k) { return _mm512_maskz_loadu_epi8(k, p); }
static inline T5 void stm_i8(void *p, __mmask64 k, __m512i v) { _mm512_mask_storeu_epi8(p, k, v); }
static inline T5 __m512i ldm_i32(const void *p, __mmask16 k) { return _mm512_maskz_loadu_epi32(k, p); }
static inline T5 void stm_i32(void *p, __mmask16 k, __m512i v) { _mm512_mask_storeu_epi32(p, k, v); }
static inline T5 __m512i ldm_i64(const void *p, __mmask8 k) { return _mm512_maskz_loadu_epi64(k, p); }
static inline T5 void stm_i64(void *p, __mmask8 k, __m512i v) { _mm512_mask_storeu_epi64(p, k, v); }

static inline T5 __m512 cvt_f16(__m256i h) { return _mm512_cvtph_ps(h); }
static inline T5 __m256i cvt_to_f16(__m512 v) { return _mm512_cvtps_ph(v, RNE); }
static inline T5 __m512 ld_f16(const uint16_t *p) {
    return cvt_f16(_mm256_loadu_si256((const __m256i *)p));
}
static inline T5 void st_f16(uint16_t *p, __m512 v) {
    _mm256_storeu_si256((__m256i *)p, cvt_to_f16(v));
}
static inline T5 __m512 ldm_f16(const uint16_t *p, __mmask16 k) {
    return cvt_f16(_mm256_maskz_loadu_epi16(k, p));
}
static inline T5 void stm_f16(uint16_t *p, __mmask16 k, __m512 v) {
    _mm256_mask_storeu_epi16(p, k, cvt_to_f16(v));
}

static inline T5 __m512 cvt_bf16(__m256i h) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}
/* Nearest-even: add 0x7fff + lsb of the kept half; NaN: top bits, quiet bit set. */
static inline T5 __m256i cvt_to_bf16(__m512 v) {
    __m512i b = _mm512_castps_si512(v);
    __m512i top = _mm512_srli_epi32(b, 16);
    __m512i lsb = _mm512_and_si512(top, _mm512_set1_epi32(1));
    __m512i r = _mm512_add_epi32(b, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff)));
    r = _mm512_srli_epi32(r, 16);
    __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    r = _mm512_mask_or_epi32(r, nan, top, _mm512_set1_epi32(0x40));
    return _mm512_cvtepi32_epi16(r);
}
static inline T5 __m512 ld_bf16(const uint16_t *p) {
    return cvt_bf16(_mm256_loadu_si256((const __m256i *)p));
}
static inline T5 void st_bf16(uint16_t *p, __m512 v) {
    _mm256_storeu_si256((__m256i *)p, cvt_to_bf16(v));
}
static inline T5 __m512 ldm_bf16(const uint16_t *p, __mmask16 k) {
    return cvt_bf16(_mm256_maskz_loadu_epi16(k, p));
}
static inline T5 void stm_bf16(uint16_t *p, __mmask16 k, __m512 v) {
    _mm256_mask_storeu_epi16(p, k, cvt_to_bf16(v));
}

/* ---- operations ------------------------------------------------------------ */

/* As in reduce_avx2.c: both operand orders OR-ed (min) or AND-ed (max) settle
 * -0/+0 ties, and unordered lanes become the all-ones NaN. */
static inline T5 __m512 vmin_ps(__m512 a, __m512 b) {
    __m512 m = _mm512_or_ps(_mm512_min_ps(a, b), _mm512_min_ps(b, a));
    __mmask16 u = _mm512_cmp_ps_mask(a, b, _CMP_UNORD_Q);
    return _mm512_mask_mov_ps(m, u, _mm512_castsi512_ps(_mm512_set1_epi32(-1)));
}
static inline T5 __m512 vmax_ps(__m512 a, __m512 b) {
    __m512 m = _mm512_and_ps(_mm512_max_ps(a, b), _mm512_max_ps(b, a));
    __mmask16 u = _mm512_cmp_ps_mask(a, b, _CMP_UNORD_Q);
    return _mm512_mask_mov_ps(m, u, _mm512_castsi512_ps(_mm512_set1_epi32(-1)));
}
static inline T5 __m512d vmin_pd(__m512d a, __m512d b) {
    __m512d m = _mm512_or_pd(_mm512_min_pd(a, b), _mm512_min_pd(b, a));
    __mmask8 u = _mm512_cmp_pd_mask(a, b, _CMP_UNORD_Q);
    return _mm512_mask_mov_pd(m, u, _mm512_castsi512_pd(_mm512_set1_epi64(-1)));
}
static inline T5 __m512d vmax_pd(__m512d a, __m512d b) {
    __m512d m = _mm512_and_pd(_mm512_max_pd(a, b), _mm512_max_pd(b, a));
    __mmask8 u = _mm512_cmp_pd_mask(a, b, _CMP_UNORD_Q);
    return _mm512_mask_mov_pd(m, u, _mm512_castsi512_pd(_mm512_set1_epi64(-1)));
}

/* Bytes: even lanes from a 16-bit multiply, odd lanes from the high bytes. */
static inline T5 __m512i vmul_epi8(__m512i a, __m512i b) {
    __m512i even = _mm512_mullo_epi16(a, b);
    __m512i odd = _mm512_mullo_epi16(_mm512_srli_epi16(a, 8), _mm512_srli_epi16(b, 8));
    return _mm512_or_si512(_mm512_slli_epi16(odd, 8),
                           _mm512_and_si512(even, _mm512_set1_epi16(0xff)));
}

/* ---- kernel generators ------------------------------------------------------ */

/* Loads of an iteration precede its stores: dst == a or dst == b is safe.
 * The tail is one masked vector (rem < W <= 64 lanes). */
#define VKERNEL(name, ET, W, MT, VT, LOAD, STORE, LOADM, STOREM, VOP)               \
    static T5 void name(void *dst, const void *pa, const void *pb, size_t n) {      \
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
        if (i < n) {                                                                \
            MT k = (MT)((UINT64_C(1) << (n - i)) - 1);                              \
            STOREM(d + i, k, VOP(LOADM(a + i, k), LOADM(b + i, k)));                \
        }                                                                           \
    }

#define FLOAT_KERNELS(sfx, ET, W, MT, VT, LD, ST, LDM, STM, ADD, MUL, MIN, MAX)     \
    VKERNEL(sum_##sfx, ET, W, MT, VT, LD, ST, LDM, STM, ADD)                        \
    VKERNEL(prod_##sfx, ET, W, MT, VT, LD, ST, LDM, STM, MUL)                       \
    VKERNEL(min_##sfx, ET, W, MT, VT, LD, ST, LDM, STM, MIN)                        \
    VKERNEL(max_##sfx, ET, W, MT, VT, LD, ST, LDM, STM, MAX)

#define INT_KERNELS(sfx, ET, MT, LDM, STM, ADD, MUL, MIN, MAX)                      \
    FLOAT_KERNELS(sfx, ET, 64 / sizeof(ET), MT, __m512i, ld_int, st_int, LDM, STM,  \
                  ADD, MUL, MIN, MAX)                                               \
    VKERNEL(band_##sfx, ET, 64 / sizeof(ET), MT, __m512i, ld_int, st_int, LDM, STM, \
            _mm512_and_si512)                                                       \
    VKERNEL(bor_##sfx, ET, 64 / sizeof(ET), MT, __m512i, ld_int, st_int, LDM, STM,  \
            _mm512_or_si512)                                                        \
    VKERNEL(bxor_##sfx, ET, 64 / sizeof(ET), MT, __m512i, ld_int, st_int, LDM, STM, \
            _mm512_xor_si512)

FLOAT_KERNELS(f32, float, 16, __mmask16, __m512, ld_f32, st_f32, ldm_f32, stm_f32,
              _mm512_add_ps, _mm512_mul_ps, vmin_ps, vmax_ps)
FLOAT_KERNELS(f64, double, 8, __mmask8, __m512d, ld_f64, st_f64, ldm_f64, stm_f64,
              _mm512_add_pd, _mm512_mul_pd, vmin_pd, vmax_pd)
FLOAT_KERNELS(f16, uint16_t, 16, __mmask16, __m512, ld_f16, st_f16, ldm_f16, stm_f16,
              _mm512_add_ps, _mm512_mul_ps, vmin_ps, vmax_ps)
FLOAT_KERNELS(bf16, uint16_t, 16, __mmask16, __m512, ld_bf16, st_bf16, ldm_bf16, stm_bf16,
              _mm512_add_ps, _mm512_mul_ps, vmin_ps, vmax_ps)
INT_KERNELS(i8, int8_t, __mmask64, ldm_i8, stm_i8, _mm512_add_epi8, vmul_epi8, _mm512_min_epi8,
            _mm512_max_epi8)
INT_KERNELS(u8, uint8_t, __mmask64, ldm_i8, stm_i8, _mm512_add_epi8, vmul_epi8,
            _mm512_min_epu8, _mm512_max_epu8)
INT_KERNELS(i32, int32_t, __mmask16, ldm_i32, stm_i32, _mm512_add_epi32, _mm512_mullo_epi32,
            _mm512_min_epi32, _mm512_max_epi32)
INT_KERNELS(i64, int64_t, __mmask8, ldm_i64, stm_i64, _mm512_add_epi64, _mm512_mullo_epi64,
            _mm512_min_epi64, _mm512_max_epi64)

/* ---- AVG finish --------------------------------------------------------------- */

/* int32 through double (exact truncation, see reduce_avx2.c). */
static inline T5 __m512d ld_i32pd(const int32_t *p) {
    return _mm512_cvtepi32_pd(_mm256_loadu_si256((const __m256i *)p));
}
static inline T5 void st_i32pd(int32_t *p, __m512d v) {
    _mm256_storeu_si256((__m256i *)p, _mm512_cvttpd_epi32(v));
}
static inline T5 __m512d ldm_i32pd(const int32_t *p, __mmask8 k) {
    return _mm512_cvtepi32_pd(_mm256_maskz_loadu_epi32(k, p));
}
static inline T5 void stm_i32pd(int32_t *p, __mmask8 k, __m512d v) {
    _mm256_mask_storeu_epi32(p, k, _mm512_cvttpd_epi32(v));
}

/* One division per element in the type's arithmetic (f16/bf16 in f32).  A
 * power-of-two divisor is a multiplication by its exact reciprocal instead:
 * both round the same real number once, so the results are identical, and a
 * multiply costs a fraction of a divide (DDP at world 2 averages every step). */
#define VAVG(name, ET, W, MT, VT, LOAD, STORE, LOADM, STOREM, DIV, MUL, SET1, RCP)  \
    static T5 void name(void *buf, size_t n, int divisor) {                         \
        ET *p = buf;                                                                \
        size_t i = 0;                                                               \
        const int pow2 = (divisor & (divisor - 1)) == 0; /* the loop is unswitched */ \
        VT dv = SET1(divisor), rv = RCP(divisor);                                   \
        for (; i + (W) <= n; i += (W)) {                                            \
            VT x = LOAD(p + i);                                                     \
            STORE(p + i, pow2 ? MUL(x, rv) : DIV(x, dv));                           \
        }                                                                           \
        if (i < n) {                                                                \
            MT k = (MT)((UINT64_C(1) << (n - i)) - 1);                              \
            VT x = LOADM(p + i, k);                                                 \
            STOREM(p + i, k, pow2 ? MUL(x, rv) : DIV(x, dv));                       \
        }                                                                           \
    }

static inline T5 __m512 set1_ps_int(int d) { return _mm512_set1_ps((float)d); }
static inline T5 __m512d set1_pd_int(int d) { return _mm512_set1_pd((double)d); }
static inline T5 __m512 rcp_ps_int(int d) { return _mm512_set1_ps(1.0f / (float)d); }
static inline T5 __m512d rcp_pd_int(int d) { return _mm512_set1_pd(1.0 / (double)d); }

VAVG(avg_f32, float, 16, __mmask16, __m512, ld_f32, st_f32, ldm_f32, stm_f32,
     _mm512_div_ps, _mm512_mul_ps, set1_ps_int, rcp_ps_int)
VAVG(avg_f64, double, 8, __mmask8, __m512d, ld_f64, st_f64, ldm_f64, stm_f64,
     _mm512_div_pd, _mm512_mul_pd, set1_pd_int, rcp_pd_int)
VAVG(avg_f16, uint16_t, 16, __mmask16, __m512, ld_f16, st_f16, ldm_f16, stm_f16,
     _mm512_div_ps, _mm512_mul_ps, set1_ps_int, rcp_ps_int)
VAVG(avg_bf16, uint16_t, 16, __mmask16, __m512, ld_bf16, st_bf16, ldm_bf16,
     stm_bf16, _mm512_div_ps, _mm512_mul_ps, set1_ps_int, rcp_ps_int)
VAVG(avg_i32, int32_t, 8, __mmask8, __m512d, ld_i32pd, st_i32pd, ldm_i32pd,
     stm_i32pd, _mm512_div_pd, _mm512_mul_pd, set1_pd_int, rcp_pd_int)

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

void spmd__reduce_fill_avx512(spmd__reduce_table *t, const spmd__reduce_table *scalar) {
    sc = scalar;
    *t = *scalar; /* int8/uint8/int64 AVG finish stay scalar */
    t->name = "avx512";
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
