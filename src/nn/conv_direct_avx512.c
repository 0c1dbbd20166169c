/* src/nn/conv_direct_avx512.c — the direct 3x3 kernels with 512-bit vectors.
 *
 * Forward tile: 8 output channels x 48 positions (24 accumulators, each tap
 * three loads and eight broadcasts for 24 FMAs).  Weight-gradient tile: the
 * 9 taps of one input channel x 32 output channels (18 accumulators, each
 * position two loads and nine broadcasts for 18 FMAs). */
#include "nn/conv_direct.h"

#if defined(__x86_64__)
#include <immintrin.h>

#define KT __attribute__((target("avx512f")))
#define VL SPMD__DCONV_VL_AVX512
#define VEC __m512
#define VZERO() _mm512_setzero_ps()
#define VLOAD(p) _mm512_loadu_ps(p)
#define VSTORE(p, v) _mm512_storeu_ps((p), (v))
#define VBCAST(p) _mm512_set1_ps(*(p))
#define VFMA(a, b, c) _mm512_fmadd_ps((a), (b), (c))
#define VADD(a, b) _mm512_add_ps((a), (b))
/* maxps returns its second operand for a NaN or two zeros: v > 0 ? v : 0 exactly */
#define VRELU(v) _mm512_max_ps((v), _mm512_setzero_ps())
#define MASK __mmask16
#define MASK_LANES(lo, hi) ((__mmask16)(((1u << (hi)) - 1u) & ~((1u << (lo)) - 1u)))
#define VLOADM(p, m) _mm512_maskz_loadu_ps((m), (p))
#define VSTOREM(p, m, v) _mm512_mask_storeu_ps((p), (m), (v))
#define FWD_TO 8
#define DW_KH 3
#define DW_OV 2
#define NAME(f) f##_avx512

/* 16 x 16 transpose: pairs within 128-bit lanes, then quads, then the
 * lanes themselves. */
KT static inline void transpose16(__m512 *r) {
    __m512 t[16], u[16];
    for (int i = 0; i < 8; i++) {
        t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    /* u[4i + j], 128-bit lane l: rows 4i..4i+3 of column 4l + j */
    for (int i = 0; i < 4; i++) {
        u[4 * i] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], 0x44);
        u[4 * i + 1] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], 0xEE);
        u[4 * i + 2] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44);
        u[4 * i + 3] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xEE);
    }
    for (int j = 0; j < 4; j++) {
        __m512 v0 = _mm512_shuffle_f32x4(u[j], u[4 + j], 0x88);
        __m512 w0 = _mm512_shuffle_f32x4(u[j], u[4 + j], 0xDD);
        __m512 v1 = _mm512_shuffle_f32x4(u[8 + j], u[12 + j], 0x88);
        __m512 w1 = _mm512_shuffle_f32x4(u[8 + j], u[12 + j], 0xDD);
        r[j] = _mm512_shuffle_f32x4(v0, v1, 0x88);
        r[8 + j] = _mm512_shuffle_f32x4(v0, v1, 0xDD);
        r[4 + j] = _mm512_shuffle_f32x4(w0, w1, 0x88);
        r[12 + j] = _mm512_shuffle_f32x4(w0, w1, 0xDD);
    }
}
#define TRANSPOSE(r) transpose16(r)

#include "nn/conv_direct_kern.h"

#endif
