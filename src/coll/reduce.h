/* src/coll/reduce.h — elementwise reduction kernels (dtype × op) used by every
 * collective, and the f16/bf16 scalar conversions.
 *
 * Semantics, identical on every kernel family (scalar, AVX2, AVX-512):
 *  - integers: SUM and PROD wrap (two's complement); MIN/MAX signed for
 *    int8/int32/int64, unsigned for uint8; BAND/BOR/BXOR bitwise.
 *  - floats: SUM and PROD are one IEEE operation per element (f16 and bf16
 *    are computed in f32 and rounded back to nearest-even, which gives the
 *    same bits as native half arithmetic).  MIN/MAX follow IEEE 754-2019
 *    minimum/maximum: a NaN in either operand gives a NaN (the canonical
 *    all-ones pattern, as torch's vectorised kernels produce), and -0.0 is
 *    smaller than +0.0 whatever the operand order, so the result never
 *    depends on the order in which ranks are combined.
 *  - bitwise ops on float types are invalid (spmd__reduce_check says so).
 *  - AVG reduces as SUM; spmd__avg_finish divides at the end.
 *
 * Kernel families: a [dtype][op] table of function pointers per ISA, chosen
 * once per process (thread-safe) from the CPU's features; SPMD_REDUCE_ISA =
 * scalar|avx2|avx512 forces a family (falling back, with a warning, to the
 * best one the CPU runs).  Non-x86 builds have the scalar family only. */
#ifndef SPMD_COLL_REDUCE_H
#define SPMD_COLL_REDUCE_H

#include <stddef.h>
#include <stdint.h>
#include "spmd/group.h"

/* SPMD_OK, or SPMD_ERR_INVALID for an unknown dtype/op or a bitwise op on a float type. */
spmd_status spmd__reduce_check(spmd_dtype dt, spmd_op op);
/* dst[i] = dst[i] (op) src[i], i < n.  AVG reduces as SUM (the caller finishes it).
 * dt/op must have passed spmd__reduce_check (otherwise nothing is written).
 * dst and src must not overlap unless they are equal. */
void spmd__reduce(void *dst, const void *src, size_t n, spmd_dtype dt, spmd_op op);
/* dst[i] = a[i] (op) b[i]; dst may alias a or b (the same pointer; a partial
 * overlap is not allowed). */
void spmd__reduce3(void *dst, const void *a, const void *b, size_t n, spmd_dtype dt,
                   spmd_op op);
/* Finish AVG: buf[i] /= divisor.  Integers: truncation toward zero.  Floats:
 * one IEEE division, f64 in double, f32/f16/bf16 in f32 with (float)divisor
 * (exact up to 2^24), f16/bf16 then rounded back; so f32, and f16 for
 * divisors up to 2048, get the correctly rounded quotient.  divisor <= 1 or
 * an unknown dtype: nothing is written. */
void spmd__avg_finish(void *buf, size_t n, spmd_dtype dt, int divisor);

/* Scalar conversions used by tests and by other code.  f16 -> f32 is exact
 * (a signalling NaN comes back quiet, like the F16C instruction). */
float spmd__f16_to_f32(uint16_t h);
uint16_t spmd__f32_to_f16(float f);   /* round-to-nearest-even; NaN stays NaN (quiet) */
float spmd__bf16_to_f32(uint16_t h);  /* exact */
uint16_t spmd__f32_to_bf16(float f);  /* round-to-nearest-even, NaN kept NaN (quiet) */

/* Which kernel family the dispatcher chose: "avx512", "avx2" or "scalar". */
const char *spmd__reduce_isa(void);

/* ---- kernel tables (for reduce_*.c, tests and benchmarks) ---------------- */

/* dst[i] = a[i] (op) b[i] for n elements; dst may equal a or b. */
typedef void (*spmd__reduce_fn)(void *dst, const void *a, const void *b, size_t n);
/* buf[i] /= divisor, divisor >= 1. */
typedef void (*spmd__avg_fn)(void *buf, size_t n, int divisor);

typedef struct {
    const char *name;                                    /* "scalar", "avx2", "avx512" */
    spmd__reduce_fn fn[SPMD_DTYPE_COUNT][SPMD_OP_COUNT]; /* NULL: invalid combination */
    spmd__avg_fn avg[SPMD_DTYPE_COUNT];
} spmd__reduce_table;

/* The table of one family ("scalar", "avx2", "avx512"), or NULL when the name
 * is unknown or this CPU/build cannot run it.  Lets tests and benchmarks
 * compare every family in one process. */
const spmd__reduce_table *spmd__reduce_table_get(const char *isa);

/* Fill a table (reduce_scalar.c fills every valid entry; the vector files
 * overwrite the entries they accelerate and use `scalar` for what remains,
 * e.g. tails).  Called once, from the dispatcher's initialisation. */
void spmd__reduce_fill_scalar(spmd__reduce_table *t);
#if defined(__x86_64__)
void spmd__reduce_fill_avx2(spmd__reduce_table *t, const spmd__reduce_table *scalar);
void spmd__reduce_fill_avx512(spmd__reduce_table *t, const spmd__reduce_table *scalar);
#endif

#endif
