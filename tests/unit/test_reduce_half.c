/* f16 and bf16 scalar conversions (src/coll/half.c):
 *  - all 65536 patterns of each, widened, against a decoding written here
 *    with ldexp, and round-tripped;
 *  - narrowing from f32 against a rounding written here in double, on every
 *    representable value, every exact tie between neighbours and the f32
 *    values just beside it, the overflow and underflow edges, and a strided
 *    sweep over all 2^32 f32 patterns (NaNs included);
 *  - on x86 with F16C, the same values through vcvtph2ps/vcvtps2ph, which the
 *    vector kernels use: scalar and vector must agree bit for bit. */
#include <math.h>
#include <stdint.h>
#include "coll/reduce.h"
#include "harness.h"

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#endif

static uint32_t bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}
static float from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* ---- references ------------------------------------------------------------ */

static double f16_decode(uint16_t h) {
    int exp = (h >> 10) & 31, mant = h & 1023;
    double v = exp == 31 ? (mant ? NAN : INFINITY)
                         : exp == 0 ? ldexp(mant, -24) : ldexp(1024 + mant, exp - 25);
    return (h & 0x8000) ? -v : v;
}

/* Nearest-even rounding of a non-NaN x to a 16-bit format with mbits stored
 * mantissa bits and minimum normal exponent emin (f16: 10, -14; bf16: 7, -126). */
static uint16_t round16(double x, int mbits, int emin) {
    uint32_t sign = signbit(x) ? 0x8000u : 0;
    int ebits = 15 - mbits;
    uint32_t inf = ((1u << ebits) - 1) << mbits;
    double a = fabs(x);
    if (isinf(a))
        return (uint16_t)(sign | inf);
    if (a == 0)
        return (uint16_t)sign;
    int e;
    frexp(a, &e);
    int q = e - 1 - mbits;
    if (q < emin - mbits)
        q = emin - mbits;
    double r = nearbyint(ldexp(a, -q)); /* ties to even in the default mode */
    if (r == ldexp(1, mbits + 1)) {
        r /= 2;
        q++;
    }
    uint32_t ir = (uint32_t)r;
    if (ir < (1u << mbits))
        return (uint16_t)(sign | ir);
    uint32_t biased = (uint32_t)(q + mbits + 1 - emin);
    if (biased >= (1u << ebits) - 1)
        return (uint16_t)(sign | inf);
    return (uint16_t)(sign | (biased << mbits) | (ir - (1u << mbits)));
}

/* What f32 -> f16/bf16 must give: NaN keeps sign and top payload bits, quiet. */
static uint16_t want_f16(float f) {
    uint32_t u = bits(f);
    if (isnan(f))
        return (uint16_t)(((u >> 16) & 0x8000u) | 0x7e00u | ((u >> 13) & 0x3ffu));
    return round16(f, 10, -14);
}
static uint16_t want_bf16(float f) {
    if (isnan(f))
        return (uint16_t)((bits(f) >> 16) | 0x40u);
    return round16(f, 7, -126);
}

/* ---- hardware (F16C), when present ----------------------------------------- */

static int have_f16c;
#if defined(__x86_64__)
__attribute__((target("avx,f16c"))) static float hw_f16_to_f32(uint16_t h) {
    return _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(h)));
}
__attribute__((target("avx,f16c"))) static uint16_t hw_f32_to_f16(float f) {
    __m128i h = _mm_cvtps_ph(_mm_set_ss(f), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    return (uint16_t)_mm_extract_epi16(h, 0);
}
static void detect(void) {
    unsigned a, b, c, d;
    /* the builtin also checks that the OS saves AVX state */
    have_f16c = __builtin_cpu_supports("avx") && __get_cpuid(1, &a, &b, &c, &d) &&
                (c & (1u << 29));
}
#else
static float hw_f16_to_f32(uint16_t h) { return spmd__f16_to_f32(h); }
static uint16_t hw_f32_to_f16(float f) { return spmd__f32_to_f16(f); }
static void detect(void) {}
#endif

/* ---- checks ----------------------------------------------------------------- */

static long narrow_bad;

static void check_narrow(float f) {
    uint16_t h = spmd__f32_to_f16(f), wh = want_f16(f);
    uint16_t b = spmd__f32_to_bf16(f), wb = want_bf16(f);
    if (h != wh || b != wb || (have_f16c && hw_f32_to_f16(f) != h)) {
        if (narrow_bad++ < 10)
            fprintf(stderr, "f32 %#010x: f16 %#06x want %#06x (hw %#06x), bf16 %#06x want %#06x\n",
                    bits(f), h, wh, have_f16c ? hw_f32_to_f16(f) : 0, b, wb);
    }
}

static void test_widen_all(void) {
    long bad = 0;
    for (uint32_t i = 0; i < 65536; i++) {
        uint16_t h = (uint16_t)i;
        double v = f16_decode(h);
        float f = spmd__f16_to_f32(h);
        int nan = isnan(v);
        /* widening is exact; a NaN comes back quiet with its payload */
        uint32_t want = nan ? (((uint32_t)(h & 0x8000) << 16) | 0x7fc00000u | ((uint32_t)(h & 0x3ff) << 13))
                            : bits((float)v);
        int ok = bits(f) == want;
        ok &= spmd__f32_to_f16(f) == (nan ? (h | 0x200) : h);          /* round trip */
        ok &= !have_f16c || bits(hw_f16_to_f32(h)) == bits(f);        /* = vcvtph2ps */
        float g = spmd__bf16_to_f32(h);
        ok &= bits(g) == (uint32_t)h << 16;
        ok &= spmd__f32_to_bf16(g) == (isnan(g) ? (h | 0x40) : h);
        if (!ok && bad++ < 10)
            fprintf(stderr, "pattern %#06x: f16->f32 %#010x want %#010x, round trip %#06x\n", h,
                    bits(f), want, spmd__f32_to_f16(f));
    }
    CHECK_MSG(bad == 0, "%ld of 65536 half patterns convert wrongly", bad);
}

static void test_narrow(void) {
    narrow_bad = 0;
    /* every f16 value, the exact ties between neighbours, and the f32 values
     * on either side of each tie */
    for (uint32_t i = 0; i < 0x7c00; i++) {
        for (int s = 0; s < 2; s++) {
            uint16_t h = (uint16_t)(i | (s ? 0x8000 : 0));
            float v = (float)f16_decode(h);
            float next = (float)f16_decode((uint16_t)(h + 1)); /* 0x7bff + 1 = inf */
            float mid = (i == 0x7bff) ? (s ? -65520.0f : 65520.0f) : (v + next) / 2;
            check_narrow(v);
            check_narrow(mid);
            check_narrow(nextafterf(mid, INFINITY));
            check_narrow(nextafterf(mid, -INFINITY));
        }
    }
    /* the same for bf16: ties are the f32 patterns ending in 0x8000 */
    for (uint32_t i = 0; i < 0x7f80; i++) {
        for (uint32_t s = 0; s < 2; s++) {
            uint32_t u = (i << 16) | (s << 31);
            check_narrow(from_bits(u));
            check_narrow(from_bits(u | 0x8000u));
            check_narrow(from_bits(u | 0x7fffu));
            check_narrow(from_bits(u | 0x8001u));
        }
    }
    /* edges: overflow, underflow, f32 subnormals, infinities, NaNs */
    static const uint32_t edges[] = {
        0x477fe000, 0x477fefff, 0x477ff000, 0x477ff001, 0x47800000, 0x7f7fffff, 0x7f7f7fff,
        0x7f7f8000, 0x7f800000, 0xff800000, 0x33000000, 0x33000001, 0x32ffffff, 0x33400000,
        0x387fc000, 0x387fe000, 0x387ff000, 0x38800000, 0x00000001, 0x80000001, 0x007fffff,
        0x00800000, 0x7f800001, 0x7fbfffff, 0x7fc00000, 0xffffffff, 0xff800001, 0x7f802000,
        0x00000000, 0x80000000};
    for (size_t i = 0; i < sizeof edges / sizeof edges[0]; i++)
        check_narrow(from_bits(edges[i]));
    /* a strided sweep over all 2^32 patterns (the stride is odd: every low bit pattern) */
    for (uint64_t u = 7; u < (1ull << 32); u += 4093)
        check_narrow(from_bits((uint32_t)u));
    CHECK_MSG(narrow_bad == 0, "%ld f32 values narrow wrongly", narrow_bad);
}

int main(void) {
    detect();
    printf("F16C hardware comparison: %s\n", have_f16c ? "yes" : "no (not x86 or no F16C)");
    test_widen_all();
    test_narrow();
    TEST_MAIN_END();
}
