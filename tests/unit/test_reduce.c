/* Reduce kernels: every dtype × op × kernel family this CPU runs, against a
 * reference written independently here (floats computed in double and rounded
 * by ref_round, not through the library's conversions).
 *
 * Bit-exact everywhere, except that a NaN result of SUM/PROD/AVG only has to
 * be a NaN (its payload depends on operand order, which C does not pin down).
 * MIN/MAX are bit-exact even for NaN (the canonical all-ones NaN).
 * Lengths 0..4099 with odd tails, element offsets that break vector
 * alignment, dst aliasing a and/or b, guard bytes around every output. */
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include "coll/reduce.h"
#include "harness.h"

static const size_t lengths[] = {0, 1, 7, 15, 17, 31, 33, 63, 65, 1000, 4099};
#define NLEN (sizeof lengths / sizeof lengths[0])

/* ---- random numbers (xorshift64*, fixed seed: failures reproduce) -------- */
static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint64_t rnd(void) {
    rng ^= rng >> 12;
    rng ^= rng << 25;
    rng ^= rng >> 27;
    return rng * 0x2545f4914f6cdd1dull;
}

/* ---- independent float reference ----------------------------------------- */

static int is_float_dt(spmd_dtype dt) {
    return dt == SPMD_F32 || dt == SPMD_F64 || dt == SPMD_F16 || dt == SPMD_BF16;
}

static double f16_value(uint16_t h) {
    int sign = h >> 15, exp = (h >> 10) & 31, mant = h & 1023;
    double v;
    if (exp == 31)
        v = mant ? NAN : INFINITY;
    else if (exp == 0)
        v = ldexp(mant, -24);
    else
        v = ldexp(1024 + mant, exp - 25);
    return sign ? -v : v;
}

static double bf16_value(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* Round x (not NaN) to a binary format with mbits stored mantissa bits and
 * minimum normal exponent emin, nearest-even, with subnormals and overflow to
 * inf.  Returns the bit pattern. */
static uint16_t ref_round(double x, int mbits, int emin) {
    int bias = 1 - emin;
    uint32_t sign = signbit(x) ? 0x8000u : 0; /* bit 15 in both f16 and bf16 */
    int ebits = 15 - mbits;
    uint32_t inf = ((1u << ebits) - 1) << mbits;
    double a = fabs(x);
    if (isinf(a))
        return (uint16_t)(sign | inf);
    if (a == 0)
        return (uint16_t)sign;
    int e;
    frexp(a, &e); /* a = f * 2^e, f in [0.5, 1): leading bit is 2^(e-1) */
    int qexp = e - 1 - mbits;
    if (qexp < emin - mbits)
        qexp = emin - mbits;
    double r = nearbyint(ldexp(a, -qexp)); /* exact scaling; default mode: ties to even */
    if (r == ldexp(1, mbits + 1)) {
        r /= 2;
        qexp++;
    }
    uint32_t ir = (uint32_t)r;
    if (ir < (1u << mbits)) /* subnormal (qexp is the minimum) */
        return (uint16_t)(sign | ir);
    uint32_t biased = (uint32_t)(qexp + mbits + bias);
    if (biased >= (1u << ebits) - 1)
        return (uint16_t)(sign | inf);
    return (uint16_t)(sign | (biased << mbits) | (ir - (1u << mbits)));
}

/* value of element i of a buffer of type dt, as a double (floats only) */
static double fval(spmd_dtype dt, const void *p, size_t i) {
    switch (dt) {
    case SPMD_F32: return ((const float *)p)[i];
    case SPMD_F64: return ((const double *)p)[i];
    case SPMD_F16: return f16_value(((const uint16_t *)p)[i]);
    default: return bf16_value(((const uint16_t *)p)[i]);
    }
}

/* store a double (exact or to be rounded) as type dt */
static void fstore(spmd_dtype dt, void *p, size_t i, double v) {
    switch (dt) {
    case SPMD_F32: ((float *)p)[i] = (float)v; break; /* hardware rounding: nearest-even */
    case SPMD_F64: ((double *)p)[i] = v; break;
    case SPMD_F16: ((uint16_t *)p)[i] = isnan(v) ? 0x7e00 : ref_round(v, 10, -14); break;
    default: ((uint16_t *)p)[i] = isnan(v) ? 0x7fc0 : ref_round(v, 7, -126); break;
    }
}

static void all_ones(spmd_dtype dt, void *p, size_t i) {
    memset((char *)p + i * spmd_dtype_size(dt), 0xff, spmd_dtype_size(dt));
}
static void copy_elem(spmd_dtype dt, void *dst, size_t i, const void *src) {
    size_t es = spmd_dtype_size(dt);
    memcpy((char *)dst + i * es, (const char *)src + i * es, es);
}

/* Reference for one element: out[i] = a[i] op b[i]. */
static void ref_elem(spmd_dtype dt, spmd_op op, void *out, const void *a, const void *b, size_t i) {
    if (is_float_dt(dt)) {
        double x = fval(dt, a, i), y = fval(dt, b, i);
        switch (op) {
        case SPMD_SUM:
        case SPMD_AVG:
            /* f16/bf16/f32 sums are exact in double, or (bf16 with far apart
             * exponents) rounded twice harmlessly: 53 >= 2*24 + 2. */
            fstore(dt, out, i, x + y);
            break;
        case SPMD_PROD: fstore(dt, out, i, x * y); break;
        case SPMD_MIN:
        case SPMD_MAX:
            if (isnan(x) || isnan(y))
                all_ones(dt, out, i);
            else if (x == y) /* -0/+0: min takes the negative, max the positive */
                copy_elem(dt, out, i, (signbit(x) == (op == SPMD_MIN)) ? a : b);
            else
                copy_elem(dt, out, i, ((x < y) == (op == SPMD_MIN)) ? a : b);
            break;
        default: break;
        }
        return;
    }
#define INT_REF(T, U)                                                             \
    do {                                                                          \
        T x = ((const T *)a)[i], y = ((const T *)b)[i], r = 0;                    \
        switch (op) {                                                             \
        case SPMD_SUM: case SPMD_AVG: r = (T)((U)x + (U)y); break;                \
        case SPMD_PROD: r = (T)((U)x * (U)y); break;                              \
        case SPMD_MIN: r = x < y ? x : y; break;                                  \
        case SPMD_MAX: r = x > y ? x : y; break;                                  \
        case SPMD_BAND: r = (T)(x & y); break;                                    \
        case SPMD_BOR: r = (T)(x | y); break;                                     \
        case SPMD_BXOR: r = (T)(x ^ y); break;                                    \
        default: break;                                                           \
        }                                                                         \
        ((T *)out)[i] = r;                                                        \
    } while (0)
    switch (dt) {
    case SPMD_I8: INT_REF(int8_t, uint32_t); break;
    case SPMD_U8: INT_REF(uint8_t, uint32_t); break;
    case SPMD_I32: INT_REF(int32_t, uint32_t); break;
    case SPMD_I64: INT_REF(int64_t, uint64_t); break;
    default: break;
    }
#undef INT_REF
}

/* got[i] matches want[i]? (NaN-ness only for arithmetic on floats) */
static int same_elem(spmd_dtype dt, spmd_op op, const void *got, const void *want, size_t i) {
    size_t es = spmd_dtype_size(dt);
    if (is_float_dt(dt) && op != SPMD_MIN && op != SPMD_MAX && isnan(fval(dt, want, i)))
        return isnan(fval(dt, got, i));
    return memcmp((const char *)got + i * es, (const char *)want + i * es, es) == 0;
}

/* ---- input generation ------------------------------------------------------ */

static uint64_t special_bits(spmd_dtype dt) {
    static const uint32_t f32s[] = {0x00000000, 0x80000000, 0x7f800000, 0xff800000, 0x7fc00000,
                                    0xffc00001, 0x7f800001, 0x3f800000, 0xbf800000, 0x7f7fffff,
                                    0xff7fffff, 0x00000001, 0x807fffff, 0x00800000};
    static const uint64_t f64s[] = {0, 0x8000000000000000ull, 0x7ff0000000000000ull,
                                    0xfff0000000000000ull, 0x7ff8000000000000ull,
                                    0x7ff0000000000001ull, 0x3ff0000000000000ull,
                                    0x7fefffffffffffffull, 0x0000000000000001ull,
                                    0x8010000000000000ull};
    static const uint16_t f16s[] = {0x0000, 0x8000, 0x7c00, 0xfc00, 0x7e00, 0xfd01, 0x7c01,
                                    0x3c00, 0x7bff, 0xfbff, 0x0001, 0x83ff, 0x0400, 0x3555};
    static const uint16_t bf16s[] = {0x0000, 0x8000, 0x7f80, 0xff80, 0x7fc0, 0xff81, 0x7f81,
                                     0x3f80, 0x7f7f, 0xff7f, 0x0001, 0x807f, 0x0080, 0x3eab};
    static const int64_t ints[] = {0, 1, -1, 2, INT8_MIN, INT8_MAX, UINT8_MAX, INT32_MIN,
                                   INT32_MAX, INT64_MIN, INT64_MAX};
#define PICK(arr) arr[rnd() % (sizeof arr / sizeof arr[0])]
    switch (dt) {
    case SPMD_F32: return PICK(f32s);
    case SPMD_F64: return PICK(f64s);
    case SPMD_F16: return PICK(f16s);
    case SPMD_BF16: return PICK(bf16s);
    default: return (uint64_t)PICK(ints);
    }
#undef PICK
}

/* Random bits with moderate exponents for f32/f64 (so sums are not all inf). */
static uint64_t random_bits(spmd_dtype dt) {
    uint64_t r = rnd();
    switch (dt) {
    case SPMD_F32: return (r & 0x807fffffu) | ((uint64_t)(100 + r % 56) << 23);
    case SPMD_F64: return (r & 0x800fffffffffffffull) | ((uint64_t)(1000 + (r >> 52) % 48) << 52);
    default: return r; /* halves and ints: any pattern, NaNs and subnormals included */
    }
}

static void put_bits(spmd_dtype dt, void *p, size_t i, uint64_t v) {
    size_t es = spmd_dtype_size(dt);
    memcpy((char *)p + i * es, &v, es); /* little-endian: the low bytes */
}
static uint64_t get_bits(spmd_dtype dt, const void *p, size_t i) {
    uint64_t v = 0;
    memcpy(&v, (const char *)p + i * spmd_dtype_size(dt), spmd_dtype_size(dt));
    return v;
}

/* a[i], b[i]: random, special, equal, ±0 pairs, or b close to a (rounding). */
static void fill_pair(spmd_dtype dt, void *a, void *b, size_t n) {
    for (size_t i = 0; i < n; i++) {
        uint64_t x = (rnd() % 6 == 0) ? special_bits(dt) : random_bits(dt);
        uint64_t y = (rnd() % 6 == 0) ? special_bits(dt) : random_bits(dt);
        switch (rnd() % 10) {
        case 0: y = x; break;
        case 1:
            if (is_float_dt(dt)) { /* +0 / -0 in either order */
                x = 0;
                y = 1ull << (8 * spmd_dtype_size(dt) - 1);
                if (rnd() & 1) { uint64_t t = x; x = y; y = t; }
            }
            break;
        case 2: case 3: y = x ^ (rnd() & 0x3ff); break; /* same exponent: rounding ties */
        default: break;
        }
        put_bits(dt, a, i, x);
        put_bits(dt, b, i, y);
    }
}

/* ---- one case ------------------------------------------------------------- */

#define GUARD 64
#define GUARD_BYTE 0xa5

/* alias: 0 separate dst, 1 dst == a, 2 dst == b, 3 dst == a == b */
static void run_case(const spmd__reduce_table *t, spmd_dtype dt, spmd_op op, size_t n,
                     size_t offd, size_t offa, size_t offb, int alias) {
    size_t es = spmd_dtype_size(dt), bytes = n * es;
    size_t total = 2 * GUARD + 4 * es + bytes;
    unsigned char *bufd = aligned_alloc(64, (total + 63) / 64 * 64);
    unsigned char *bufa = aligned_alloc(64, (total + 63) / 64 * 64);
    unsigned char *bufb = aligned_alloc(64, (total + 63) / 64 * 64);
    unsigned char *ina = malloc(bytes + 1), *inb = malloc(bytes + 1), *want = malloc(bytes + 1);
    if (!bufd || !bufa || !bufb || !ina || !inb || !want) {
        CHECK(!"out of memory");
        goto out;
    }
    memset(bufd, GUARD_BYTE, total);
    memset(bufa, GUARD_BYTE, total);
    memset(bufb, GUARD_BYTE, total);
    fill_pair(dt, ina, inb, n);
    if (alias == 3)
        memcpy(inb, ina, bytes);

    unsigned char *pa = bufa + GUARD + offa * es, *pb = bufb + GUARD + offb * es;
    unsigned char *pd = bufd + GUARD + offd * es;
    unsigned char *dbuf = bufd;
    if (alias == 1) { pd = pa; dbuf = bufa; }
    if (alias == 2) { pd = pb; dbuf = bufb; }
    if (alias == 3) { pd = pb = pa; dbuf = bufa; }
    memcpy(pa, ina, bytes);
    memcpy(pb, inb, bytes);
    for (size_t i = 0; i < n; i++)
        ref_elem(dt, op, want, ina, inb, i);

    t->fn[dt][op](pd, pa, pb, n);

    size_t bad = 0, first = 0;
    for (size_t i = 0; i < n; i++)
        if (!same_elem(dt, op, pd, want, i) && bad++ == 0)
            first = i;
    CHECK_MSG(bad == 0,
              "%s %s %s n=%zu off=%zu/%zu/%zu alias=%d: %zu wrong, first [%zu] %#llx op %#llx "
              "= %#llx, want %#llx",
              t->name, spmd_dtype_name(dt), spmd_op_name(op), n, offd, offa, offb, alias, bad,
              first, (unsigned long long)get_bits(dt, ina, first),
              (unsigned long long)get_bits(dt, inb, first),
              (unsigned long long)get_bits(dt, pd, first),
              (unsigned long long)get_bits(dt, want, first));
    /* nothing written outside [pd, pd + bytes) */
    for (size_t k = 0; k < total; k++) {
        unsigned char *p = dbuf + k;
        if (p >= pd && p < pd + bytes)
            continue;
        if (p >= pa && p < pa + bytes && dbuf == bufa)
            continue;
        if (p >= pb && p < pb + bytes && dbuf == bufb)
            continue;
        if (*p != GUARD_BYTE) {
            CHECK_MSG(0, "%s %s %s n=%zu: byte %zu outside the output was written", t->name,
                      spmd_dtype_name(dt), spmd_op_name(op), n, k);
            break;
        }
    }
    /* inputs that are not the destination are untouched */
    if (alias != 1 && alias != 3)
        CHECK(memcmp(pa, ina, bytes) == 0);
    if (alias != 2 && alias != 3)
        CHECK(memcmp(pb, inb, bytes) == 0);
out:
    free(bufd); free(bufa); free(bufb); free(ina); free(inb); free(want);
}

static void test_family(const spmd__reduce_table *t) {
    int before = test_failures;
    for (int dt = 0; dt < SPMD_DTYPE_COUNT; dt++) {
        for (int op = 0; op < SPMD_OP_COUNT; op++) {
            int valid = spmd__reduce_check((spmd_dtype)dt, (spmd_op)op) == SPMD_OK;
            CHECK_MSG((t->fn[dt][op] != NULL) == valid, "%s %s %s: table entry", t->name,
                      spmd_dtype_name((spmd_dtype)dt), spmd_op_name((spmd_op)op));
            if (!valid || !t->fn[dt][op])
                continue;
            for (size_t l = 0; l < NLEN; l++) {
                run_case(t, (spmd_dtype)dt, (spmd_op)op, lengths[l], 0, 0, 0, 0);
                run_case(t, (spmd_dtype)dt, (spmd_op)op, lengths[l], 1, 3, 2, 0);
                run_case(t, (spmd_dtype)dt, (spmd_op)op, lengths[l], 0, 1, 1, 1);
                run_case(t, (spmd_dtype)dt, (spmd_op)op, lengths[l], 0, 2, 3, 2);
                run_case(t, (spmd_dtype)dt, (spmd_op)op, lengths[l], 0, 1, 1, 3);
            }
        }
    }
    printf("%-7s reduce kernels: %s\n", t->name, test_failures == before ? "ok" : "FAILED");
}

/* ---- AVG finish ------------------------------------------------------------- */

static void test_avg(const spmd__reduce_table *t) {
    static const int divisors[] = {1, 2, 3, 4, 7, 10, 2047, 2048, 2049, 1 << 24, (1 << 24) + 1, INT_MAX};
    int before = test_failures;
    for (int dt = 0; dt < SPMD_DTYPE_COUNT; dt++) {
        size_t es = spmd_dtype_size((spmd_dtype)dt);
        for (size_t di = 0; di < sizeof divisors / sizeof divisors[0]; di++) {
            int d = divisors[di];
            for (size_t l = 0; l < NLEN; l++) {
                size_t n = lengths[l], off = l % 3;
                unsigned char *buf = malloc((n + 3) * es + 1), *in = malloc(n * es + 1),
                              *want = malloc(n * es + 1), *unused = malloc(n * es + 1);
                if (!buf || !in || !want || !unused) {
                    CHECK(!"out of memory");
                    free(buf); free(in); free(want); free(unused);
                    continue;
                }
                fill_pair((spmd_dtype)dt, in, unused, n);
                for (size_t i = 0; i < n; i++) {
                    switch (dt) {
                    case SPMD_I8: ((int8_t *)want)[i] = (int8_t)(((int8_t *)in)[i] / d); break;
                    case SPMD_U8: ((uint8_t *)want)[i] = (uint8_t)(((uint8_t *)in)[i] / d); break;
                    case SPMD_I32: ((int32_t *)want)[i] = ((int32_t *)in)[i] / d; break;
                    case SPMD_I64: ((int64_t *)want)[i] = ((int64_t *)in)[i] / d; break;
                    case SPMD_F64: ((double *)want)[i] = ((double *)in)[i] / d; break;
                    default: {
                        /* f32/f16/bf16: the f32 quotient by (float)d (rounding the double
                         * quotient of two f32 values to f32 is exact rounding: 53 >= 2*24+2),
                         * then rounded to the type.  f16 with d <= 2048 (d is an f16
                         * value): the correctly rounded quotient, as reduce.h promises. */
                        double x = fval((spmd_dtype)dt, in, i);
                        if (dt == SPMD_F16 && d <= 2048)
                            fstore((spmd_dtype)dt, want, i, x / d);
                        else
                            fstore((spmd_dtype)dt, want, i, (float)(x / (double)(float)d));
                    }
                    }
                }
                unsigned char *p = buf + off * es;
                memcpy(p, in, n * es);
                t->avg[dt](p, n, d);
                size_t bad = 0, first = 0;
                for (size_t i = 0; i < n; i++)
                    if (!same_elem((spmd_dtype)dt, SPMD_AVG, p, want, i) && bad++ == 0)
                        first = i;
                CHECK_MSG(bad == 0, "%s avg %s n=%zu d=%d: %zu wrong, first [%zu] %#llx -> "
                          "%#llx, want %#llx", t->name, spmd_dtype_name((spmd_dtype)dt), n, d,
                          bad, first, (unsigned long long)get_bits((spmd_dtype)dt, in, first),
                          (unsigned long long)get_bits((spmd_dtype)dt, p, first),
                          (unsigned long long)get_bits((spmd_dtype)dt, want, first));
                free(buf); free(in); free(want); free(unused);
            }
        }
    }
    printf("%-7s avg finish: %s\n", t->name, test_failures == before ? "ok" : "FAILED");
}

/* ---- the public entry points -------------------------------------------------- */

static void test_check(void) {
    for (int dt = 0; dt < SPMD_DTYPE_COUNT; dt++)
        for (int op = 0; op < SPMD_OP_COUNT; op++) {
            int bitwise = op == SPMD_BAND || op == SPMD_BOR || op == SPMD_BXOR;
            spmd_status want = (is_float_dt((spmd_dtype)dt) && bitwise) ? SPMD_ERR_INVALID : SPMD_OK;
            CHECK(spmd__reduce_check((spmd_dtype)dt, (spmd_op)op) == want);
        }
    CHECK(spmd__reduce_check(SPMD_DTYPE_COUNT, SPMD_SUM) == SPMD_ERR_INVALID);
    CHECK(spmd__reduce_check(SPMD_F32, SPMD_OP_COUNT) == SPMD_ERR_INVALID);
    CHECK(spmd__reduce_check((spmd_dtype)-1, SPMD_SUM) == SPMD_ERR_INVALID);
    CHECK(spmd__reduce_check(SPMD_I32, (spmd_op)-1) == SPMD_ERR_INVALID);

    /* an invalid combination writes nothing */
    float x[3] = {1, 2, 3}, y[3] = {4, 5, 6};
    spmd__reduce(x, y, 3, SPMD_F32, SPMD_BXOR);
    spmd__reduce(x, y, 3, SPMD_DTYPE_COUNT, SPMD_SUM);
    spmd__reduce3(x, x, y, 3, SPMD_F32, SPMD_OP_COUNT);
    spmd__avg_finish(x, 3, SPMD_DTYPE_COUNT, 2);
    spmd__avg_finish(x, 3, SPMD_F32, 0);
    spmd__avg_finish(x, 3, SPMD_F32, -4);
    CHECK(x[0] == 1 && x[1] == 2 && x[2] == 3);
}

static void test_entry_points(void) {
    /* spmd__reduce is dst op= src, AVG reduces as SUM, spmd__avg_finish divides */
    int32_t a[37], b[37], c[37];
    for (int i = 0; i < 37; i++) {
        a[i] = i * 3 - 50;
        b[i] = 7 - i;
    }
    memcpy(c, a, sizeof c);
    spmd__reduce(c, b, 37, SPMD_I32, SPMD_AVG);
    spmd__avg_finish(c, 37, SPMD_I32, 2);
    for (int i = 0; i < 37; i++)
        CHECK(c[i] == (a[i] + b[i]) / 2);
    spmd__reduce3(c, a, b, 37, SPMD_I32, SPMD_MAX);
    for (int i = 0; i < 37; i++)
        CHECK(c[i] == (a[i] > b[i] ? a[i] : b[i]));
    spmd__reduce3(a, a, a, 37, SPMD_I32, SPMD_BXOR); /* all three the same buffer */
    for (int i = 0; i < 37; i++)
        CHECK(a[i] == 0);

    /* torch-like NaN propagation through the public entry, both operand orders */
    float x[20], y[20];
    for (int i = 0; i < 20; i++) {
        x[i] = (float)i;
        y[i] = (i % 2) ? NAN : -1.0f;
    }
    float m1[20], m2[20];
    spmd__reduce3(m1, x, y, 20, SPMD_F32, SPMD_MIN);
    spmd__reduce3(m2, y, x, 20, SPMD_F32, SPMD_MAX);
    for (int i = 0; i < 20; i++) {
        CHECK((i % 2) ? isnan(m1[i]) : m1[i] == -1.0f);
        CHECK((i % 2) ? isnan(m2[i]) : m2[i] == (float)i);
    }
    /* -0.0/+0.0 do not depend on the order */
    float pz[17], nz[17], r1[17], r2[17];
    for (int i = 0; i < 17; i++) {
        pz[i] = 0.0f;
        nz[i] = -0.0f;
    }
    spmd__reduce3(r1, pz, nz, 17, SPMD_F32, SPMD_MIN);
    spmd__reduce3(r2, nz, pz, 17, SPMD_F32, SPMD_MIN);
    for (int i = 0; i < 17; i++)
        CHECK(signbit(r1[i]) && signbit(r2[i]));
    spmd__reduce3(r1, pz, nz, 17, SPMD_F32, SPMD_MAX);
    spmd__reduce3(r2, nz, pz, 17, SPMD_F32, SPMD_MAX);
    for (int i = 0; i < 17; i++)
        CHECK(!signbit(r1[i]) && !signbit(r2[i]));

    /* the active family is one of the tables and agrees with scalar on a big f16 sum */
    const char *isa = spmd__reduce_isa();
    CHECK(spmd__reduce_table_get(isa) != NULL);
    CHECK(spmd__reduce_table_get("scalar") != NULL);
    CHECK(spmd__reduce_table_get("nonsense") == NULL);
    CHECK(spmd__reduce_table_get(NULL) == NULL);
    enum { N = 10007 };
    uint16_t *h1 = malloc(N * 2), *h2 = malloc(N * 2), *h3 = malloc(N * 2);
    if (h1 && h2 && h3) {
        fill_pair(SPMD_F16, h1, h2, N);
        memcpy(h3, h1, N * 2);
        spmd__reduce(h1, h2, N, SPMD_F16, SPMD_SUM);
        spmd__reduce_table_get("scalar")->fn[SPMD_F16][SPMD_SUM](h3, h3, h2, N);
        size_t bad = 0;
        for (size_t i = 0; i < N; i++)
            bad += !(h1[i] == h3[i] || (isnan(f16_value(h1[i])) && isnan(f16_value(h3[i]))));
        CHECK_MSG(bad == 0, "%s vs scalar f16 sum: %zu differ", isa, bad);
    }
    free(h1); free(h2); free(h3);
    printf("active family: %s\n", isa);
}

int main(void) {
    test_check();
    static const char *const families[] = {"scalar", "avx2", "avx512"};
    for (int i = 0; i < 3; i++) {
        const spmd__reduce_table *t = spmd__reduce_table_get(families[i]);
        if (!t) {
            printf("%-7s not supported here: skipped\n", families[i]);
            continue;
        }
        CHECK(strcmp(t->name, families[i]) == 0);
        test_family(t);
        test_avg(t);
    }
    test_entry_points();
    TEST_MAIN_END();
}
