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
#define MASK __mmask16
#define MASK_LANES(lo, hi) ((__mmask16)(((1u << (hi)) - 1u) & ~((1u << (lo)) - 1u)))
#define VLOADM(p, m) _mm512_maskz_loadu_ps((m), (p))
#define VSTOREM(p, m, v) _mm512_mask_storeu_ps((p), (m), (v))
#define FWD_TO 8
#define DW_KH 3
#define DW_OV 2
#define NAME(f) f##_avx512

#include "nn/conv_direct_kern.h"

#endif
