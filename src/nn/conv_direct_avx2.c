/* src/nn/conv_direct_avx2.c — the direct 3x3 kernels with 256-bit vectors
 * (AVX2 + FMA), for CPUs without AVX-512.
 *
 * Forward tile: 4 output channels x 24 positions (12 accumulators of the 16
 * registers).  Weight-gradient tile: the 3 taps of one kernel row x 32
 * output channels (12 accumulators, each position four loads and three
 * broadcasts for 12 FMAs).  Masks are vectors (vmaskmovps). */
#include "nn/conv_direct.h"

#if defined(__x86_64__)
#include <immintrin.h>

#define KT __attribute__((target("avx2,fma")))
#define VL SPMD__DCONV_VL_AVX2
#define VEC __m256
#define VZERO() _mm256_setzero_ps()
#define VLOAD(p) _mm256_loadu_ps(p)
#define VSTORE(p, v) _mm256_storeu_ps((p), (v))
#define VBCAST(p) _mm256_broadcast_ss(p)
#define VFMA(a, b, c) _mm256_fmadd_ps((a), (b), (c))
#define VADD(a, b) _mm256_add_ps((a), (b))
/* maxps returns its second operand for a NaN or two zeros: v > 0 ? v : 0 exactly */
#define VRELU(v) _mm256_max_ps((v), _mm256_setzero_ps())
#define MASK __m256i
#define MASK_LANES(lo, hi) mask_lanes((lo), (hi))
#define VLOADM(p, m) _mm256_maskload_ps((p), (m))
#define VSTOREM(p, m, v) _mm256_maskstore_ps((p), (m), (v))
#define FWD_TO 4
#define DW_KH 1
#define DW_OV 4
#define NAME(f) f##_avx2

/* All bits set in lanes [lo, hi). */
KT static inline __m256i mask_lanes(int lo, int hi) {
    const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    return _mm256_and_si256(_mm256_cmpgt_epi32(idx, _mm256_set1_epi32(lo - 1)),
                            _mm256_cmpgt_epi32(_mm256_set1_epi32(hi), idx));
}

/* 8 x 8 transpose: pairs, quads, then the two 128-bit lanes. */
KT static inline void transpose8(__m256 *r) {
    __m256 t[8], u[8];
    for (int i = 0; i < 4; i++) {
        t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    for (int i = 0; i < 2; i++) {
        u[4 * i] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], 0x44);
        u[4 * i + 1] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], 0xEE);
        u[4 * i + 2] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44);
        u[4 * i + 3] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xEE);
    }
    for (int j = 0; j < 4; j++) {
        r[j] = _mm256_permute2f128_ps(u[j], u[4 + j], 0x20);
        r[4 + j] = _mm256_permute2f128_ps(u[j], u[4 + j], 0x31);
    }
}
#define TRANSPOSE(r) transpose8(r)

#include "nn/conv_direct_kern.h"

#endif
