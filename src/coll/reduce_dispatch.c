/* src/coll/reduce_dispatch.c — picks the kernel family once per process and
 * routes spmd__reduce / spmd__reduce3 / spmd__avg_finish through its table.
 *
 * Initialisation runs under pthread_once: the first collectives of two groups
 * may reach here from two executor threads at the same moment.  After it, the
 * tables are read-only. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include "coll/reduce.h"
#include "common/common.h"

#if defined(__x86_64__)
#include <cpuid.h>
#endif

enum { ISA_SCALAR, ISA_AVX2, ISA_AVX512, ISA_COUNT };
static const char *const isa_names[ISA_COUNT] = {"scalar", "avx2", "avx512"};

static spmd__reduce_table tables[ISA_COUNT];
static int supported[ISA_COUNT];
static const spmd__reduce_table *active;
static pthread_once_t once = PTHREAD_ONCE_INIT;

#if defined(__x86_64__)
/* F16C is CPUID.1:ECX bit 29 (not every compiler's __builtin_cpu_supports
 * knows its name).  The builtin checks also cover OS support (XCR0) for the
 * AVX and AVX-512 register state. */
static int cpu_has_f16c(void) {
    unsigned a, b, c, d;
    return __get_cpuid(1, &a, &b, &c, &d) && (c & (1u << 29));
}
#endif

static void init(void) {
    spmd__reduce_fill_scalar(&tables[ISA_SCALAR]);
    supported[ISA_SCALAR] = 1;
#if defined(__x86_64__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2") && cpu_has_f16c()) {
        spmd__reduce_fill_avx2(&tables[ISA_AVX2], &tables[ISA_SCALAR]);
        supported[ISA_AVX2] = 1;
    }
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl")) {
        spmd__reduce_fill_avx512(&tables[ISA_AVX512], &tables[ISA_SCALAR]);
        supported[ISA_AVX512] = 1;
    }
#endif
    int best = ISA_SCALAR;
    for (int i = 0; i < ISA_COUNT; i++)
        if (supported[i])
            best = i;

    int choice = best;
    const char *env = getenv("SPMD_REDUCE_ISA");
    if (env && *env && strcmp(env, "auto") != 0) {
        int want = -1;
        for (int i = 0; i < ISA_COUNT; i++)
            if (strcmp(env, isa_names[i]) == 0)
                want = i;
        if (want < 0) {
            SPMD_LOGW("SPMD_REDUCE_ISA=%s is not scalar, avx2, avx512 or auto; using %s", env,
                      isa_names[best]);
        } else {
            choice = want;
            while (!supported[choice])
                choice--;
            if (choice != want)
                SPMD_LOGW("SPMD_REDUCE_ISA=%s: this CPU cannot run it; using %s", env,
                          isa_names[choice]);
        }
    }
    active = &tables[choice];
    SPMD_LOGD("reduce kernels: %s", active->name);
}

static const spmd__reduce_table *table(void) {
    pthread_once(&once, init);
    return active;
}

const spmd__reduce_table *spmd__reduce_table_get(const char *isa) {
    pthread_once(&once, init);
    for (int i = 0; isa && i < ISA_COUNT; i++)
        if (strcmp(isa, isa_names[i]) == 0)
            return supported[i] ? &tables[i] : NULL;
    return NULL;
}

const char *spmd__reduce_isa(void) {
    return table()->name;
}

static int is_float(spmd_dtype dt) {
    return dt == SPMD_F32 || dt == SPMD_F64 || dt == SPMD_F16 || dt == SPMD_BF16;
}

spmd_status spmd__reduce_check(spmd_dtype dt, spmd_op op) {
    if ((unsigned)dt >= SPMD_DTYPE_COUNT || (unsigned)op >= SPMD_OP_COUNT)
        return SPMD_ERR_INVALID;
    if (is_float(dt) && (op == SPMD_BAND || op == SPMD_BOR || op == SPMD_BXOR))
        return SPMD_ERR_INVALID;
    return SPMD_OK;
}

void spmd__reduce3(void *dst, const void *a, const void *b, size_t n, spmd_dtype dt,
                   spmd_op op) {
    if (n == 0 || spmd__reduce_check(dt, op) != SPMD_OK)
        return;
    table()->fn[dt][op](dst, a, b, n);
}

void spmd__reduce(void *dst, const void *src, size_t n, spmd_dtype dt, spmd_op op) {
    spmd__reduce3(dst, dst, src, n, dt, op);
}

void spmd__avg_finish(void *buf, size_t n, spmd_dtype dt, int divisor) {
    /* x / 1 == x for every value, so there is nothing to do for one rank */
    if (n == 0 || divisor <= 1 || (unsigned)dt >= SPMD_DTYPE_COUNT)
        return;
    table()->avg[dt](buf, n, divisor);
}
