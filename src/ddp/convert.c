/* convert.c — bulk float32 <-> float16/bfloat16 for the compression hooks:
 * F16C for float16 when the CPU has it (8 values per instruction), plain
 * loops the compiler vectorises for bfloat16; round-to-nearest-even both
 * ways, as the scalar converters of coll/reduce.h. */
#include <string.h>
#include "coll/reduce.h"
#include "ddp_internal.h"
#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#endif

#if defined(__x86_64__)
__attribute__((target("avx,f16c"))) static void to_f16_f16c(uint16_t *dst, const float *src, size_t n, float div) {
    size_t i = 0;
    const __m256 d = _mm256_set1_ps(div);
    for (; i + 8 <= n; i += 8) {
        __m256 v = _mm256_div_ps(_mm256_loadu_ps(src + i), d);
        _mm_storeu_si128((__m128i *)(dst + i), _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
    }
    for (; i < n; i++) dst[i] = spmd__f32_to_f16(src[i] / div);
}

__attribute__((target("avx,f16c"))) static void from_f16_f16c(float *dst, const uint16_t *src, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + i))));
    for (; i < n; i++) dst[i] = spmd__f16_to_f32(src[i]);
}

/* F16C is CPUID.1:ECX bit 29: clang 14's __builtin_cpu_supports has no
 * "f16c"; its "avx" also checks that the OS saves the AVX registers. */
static int have_f16c(void) {
    static int cached = -1;
    if (cached < 0) {
        unsigned a, b, c, d;
        __builtin_cpu_init();
        cached = __builtin_cpu_supports("avx") && __get_cpuid(1, &a, &b, &c, &d) && (c & (1u << 29));
    }
    return cached;
}
#endif

void spmd__ddp_to_f16(uint16_t *dst, const float *src, size_t n, float div) {
#if defined(__x86_64__)
    if (have_f16c()) {
        to_f16_f16c(dst, src, n, div);
        return;
    }
#endif
    for (size_t i = 0; i < n; i++) dst[i] = spmd__f32_to_f16(src[i] / div);
}

void spmd__ddp_from_f16(float *dst, const uint16_t *src, size_t n) {
#if defined(__x86_64__)
    if (have_f16c()) {
        from_f16_f16c(dst, src, n);
        return;
    }
#endif
    for (size_t i = 0; i < n; i++) dst[i] = spmd__f16_to_f32(src[i]);
}

void spmd__ddp_to_bf16(uint16_t *dst, const float *src, size_t n, float div) {
    for (size_t i = 0; i < n; i++) {
        float f = src[i] / div;
        uint32_t b;
        memcpy(&b, &f, 4);
        uint32_t rounded = (b + 0x7fffu + ((b >> 16) & 1u)) >> 16;
        uint32_t nan = ((b >> 16) | 0x40u) & 0xffffu; /* quiet NaN keeps its sign */
        dst[i] = (uint16_t)((b & 0x7fffffffu) > 0x7f800000u ? nan : rounded);
    }
}

void spmd__ddp_from_bf16(float *dst, const uint16_t *src, size_t n) {
    for (size_t i = 0; i < n; i++) {
        uint32_t b = (uint32_t)src[i] << 16;
        memcpy(&dst[i], &b, 4);
    }
}
