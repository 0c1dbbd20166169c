/* src/coll/reduce_scalar.c — the portable kernel family: one plain loop per
 * dtype × op.  It is the definition the vector families are tested against,
 * serves CPUs without AVX2 (and non-x86 builds), and finishes the tails of the
 * AVX2 loops.
 *
 * Integer SUM/PROD are done in the unsigned type of the same width (wrap-around
 * is defined there; signed overflow would be undefined behaviour). */
#include <math.h>
#include <string.h>
#include "coll/reduce.h"
#include "coll/reduce_half.h"

/* ---- float MIN/MAX: NaN-propagating, -0.0 < +0.0 (see reduce.h) ---------- */

static float f32_from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}
static uint32_t f32_to_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}
static double f64_from_bits(uint64_t u) {
    double f;
    memcpy(&f, &u, sizeof f);
    return f;
}
static uint64_t f64_to_bits(double f) {
    uint64_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

/* Equal operands can only differ as -0.0/+0.0: OR of the bits picks -0.0
 * (min), AND picks +0.0 (max).  The vector kernels compute exactly this. */
static float min_f32(float x, float y) {
    if (isnan(x) || isnan(y))
        return f32_from_bits(UINT32_MAX);
    if (x < y)
        return x;
    if (y < x)
        return y;
    return f32_from_bits(f32_to_bits(x) | f32_to_bits(y));
}
static float max_f32(float x, float y) {
    if (isnan(x) || isnan(y))
        return f32_from_bits(UINT32_MAX);
    if (x > y)
        return x;
    if (y > x)
        return y;
    return f32_from_bits(f32_to_bits(x) & f32_to_bits(y));
}
static double min_f64(double x, double y) {
    if (isnan(x) || isnan(y))
        return f64_from_bits(UINT64_MAX);
    if (x < y)
        return x;
    if (y < x)
        return y;
    return f64_from_bits(f64_to_bits(x) | f64_to_bits(y));
}
static double max_f64(double x, double y) {
    if (isnan(x) || isnan(y))
        return f64_from_bits(UINT64_MAX);
    if (x > y)
        return x;
    if (y > x)
        return y;
    return f64_from_bits(f64_to_bits(x) & f64_to_bits(y));
}

/* ---- kernel generators ---------------------------------------------------- */

/* dst[i] = EXPR(x = a[i], y = b[i]); reading both before writing makes dst == a
 * or dst == b safe. */
#define KERNEL(name, T, EXPR)                                                     \
    static void name(void *dst, const void *pa, const void *pb, size_t n) {       \
        T *d = dst;                                                               \
        const T *a = pa, *b = pb;                                                 \
        for (size_t i = 0; i < n; i++) {                                          \
            T x = a[i], y = b[i];                                                 \
            d[i] = (EXPR);                                                        \
        }                                                                         \
    }

#define INT_KERNELS(sfx, T, U)                                                    \
    KERNEL(sum_##sfx, T, (T)((U)x + (U)y))                                        \
    KERNEL(prod_##sfx, T, (T)((U)x * (U)y))                                       \
    KERNEL(min_##sfx, T, x < y ? x : y)                                           \
    KERNEL(max_##sfx, T, x > y ? x : y)                                           \
    KERNEL(band_##sfx, T, (T)(x & y))                                             \
    KERNEL(bor_##sfx, T, (T)(x | y))                                              \
    KERNEL(bxor_##sfx, T, (T)(x ^ y))                                             \
    static void avg_##sfx(void *buf, size_t n, int divisor) {                     \
        T *p = buf;                                                               \
        for (size_t i = 0; i < n; i++)                                            \
            p[i] = (T)(p[i] / divisor); /* C division truncates toward zero */    \
    }

/* uint8 * uint8 promotes to int (at most 65025); the cast keeps the low byte. */
INT_KERNELS(i8, int8_t, uint8_t)
INT_KERNELS(u8, uint8_t, uint8_t)
INT_KERNELS(i32, int32_t, uint32_t)
INT_KERNELS(i64, int64_t, uint64_t)

KERNEL(sum_f32, float, x + y)
KERNEL(prod_f32, float, x * y)
KERNEL(min_f32k, float, min_f32(x, y))
KERNEL(max_f32k, float, max_f32(x, y))
KERNEL(sum_f64, double, x + y)
KERNEL(prod_f64, double, x * y)
KERNEL(min_f64k, double, min_f64(x, y))
KERNEL(max_f64k, double, max_f64(x, y))

/* One f32 division, as the vector families do (see spmd__avg_finish). */
static void avg_f32(void *buf, size_t n, int divisor) {
    float *p = buf;
    float d = (float)divisor;
    for (size_t i = 0; i < n; i++)
        p[i] /= d;
}
static void avg_f64(void *buf, size_t n, int divisor) {
    double *p = buf;
    for (size_t i = 0; i < n; i++)
        p[i] /= divisor;
}

/* f16 and bf16: computed in f32, rounded back (24 >= 2*11 + 2, so one f32
 * operation then rounding equals the native half-precision operation). */
#define HALF_KERNELS(sfx, TO32, FROM32)                                           \
    KERNEL(sum_##sfx, uint16_t, FROM32(TO32(x) + TO32(y)))                        \
    KERNEL(prod_##sfx, uint16_t, FROM32(TO32(x) * TO32(y)))                       \
    KERNEL(min_##sfx, uint16_t, FROM32(min_f32(TO32(x), TO32(y))))                \
    KERNEL(max_##sfx, uint16_t, FROM32(max_f32(TO32(x), TO32(y))))                \
    static void avg_##sfx(void *buf, size_t n, int divisor) {                     \
        uint16_t *p = buf;                                                        \
        for (size_t i = 0; i < n; i++)                                            \
            p[i] = FROM32(TO32(p[i]) / (float)divisor);                           \
    }

HALF_KERNELS(f16, spmd__h_f16_to_f32, spmd__h_f32_to_f16)
HALF_KERNELS(bf16, spmd__h_bf16_to_f32, spmd__h_f32_to_bf16)

/* ---- the table ------------------------------------------------------------ */

#define SET_FLOAT(t, DT, sfx, minf, maxf)                                         \
    do {                                                                          \
        (t)->fn[DT][SPMD_SUM] = sum_##sfx;                                        \
        (t)->fn[DT][SPMD_AVG] = sum_##sfx;                                        \
        (t)->fn[DT][SPMD_PROD] = prod_##sfx;                                      \
        (t)->fn[DT][SPMD_MIN] = minf;                                             \
        (t)->fn[DT][SPMD_MAX] = maxf;                                             \
        (t)->avg[DT] = avg_##sfx;                                                 \
    } while (0)

#define SET_INT(t, DT, sfx)                                                       \
    do {                                                                          \
        SET_FLOAT(t, DT, sfx, min_##sfx, max_##sfx);                              \
        (t)->fn[DT][SPMD_BAND] = band_##sfx;                                      \
        (t)->fn[DT][SPMD_BOR] = bor_##sfx;                                        \
        (t)->fn[DT][SPMD_BXOR] = bxor_##sfx;                                      \
    } while (0)

void spmd__reduce_fill_scalar(spmd__reduce_table *t) {
    memset(t, 0, sizeof *t);
    t->name = "scalar";
    SET_FLOAT(t, SPMD_F32, f32, min_f32k, max_f32k);
    SET_FLOAT(t, SPMD_F64, f64, min_f64k, max_f64k);
    SET_FLOAT(t, SPMD_F16, f16, min_f16, max_f16);
    SET_FLOAT(t, SPMD_BF16, bf16, min_bf16, max_bf16);
    SET_INT(t, SPMD_I8, i8);
    SET_INT(t, SPMD_U8, u8);
    SET_INT(t, SPMD_I32, i32);
    SET_INT(t, SPMD_I64, i64);
}
