/* bench/reduce_bench.c — throughput of the reduce kernels, dst[i] op= src[i].
 *
 *   reduce_bench [dtype [op]]     (default: float32 sum)
 *
 * For every kernel family this CPU runs and for dst sizes 64 KiB (L2), 1 MiB
 * and 64 MiB (memory), prints GB/s of dst: bytes of dst / time of one call,
 * the median of 7 trials, each trial timing enough calls to last ~25 ms.  The
 * streaming reference for f32 sum on the reference machine is ~8.8 GB/s of x
 * (docs/performance-log.md, Reference figures). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "coll/reduce.h"
#include "common/common.h"

enum { TRIALS = 7 };

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Seconds per call, median over TRIALS. */
static double time_call(spmd__reduce_fn fn, void *dst, const void *src, size_t n) {
    /* calibrate: how many calls make ~25 ms */
    uint64_t t0 = spmd__now_ns();
    fn(dst, dst, src, n);
    uint64_t one = spmd__now_ns() - t0 + 1;
    size_t reps = (size_t)(25e6 / (double)one) + 1;
    double per[TRIALS];
    for (int t = 0; t < TRIALS; t++) {
        t0 = spmd__now_ns();
        for (size_t r = 0; r < reps; r++)
            fn(dst, dst, src, n);
        per[t] = (double)(spmd__now_ns() - t0) / 1e9 / (double)reps;
    }
    qsort(per, TRIALS, sizeof per[0], cmp_double);
    return per[TRIALS / 2];
}

/* Values that stay finite and normal under repeated op (denormals or
 * overflow would measure something else). */
static void fill(void *p, size_t n, spmd_dtype dt, int is_dst) {
    for (size_t i = 0; i < n; i++) {
        float v = is_dst ? 1.0f + (float)(i % 7) : (i % 2 ? 1e-3f : -1e-3f);
        switch (dt) {
        case SPMD_F32: ((float *)p)[i] = v; break;
        case SPMD_F64: ((double *)p)[i] = v; break;
        case SPMD_F16: ((uint16_t *)p)[i] = spmd__f32_to_f16(v); break;
        case SPMD_BF16: ((uint16_t *)p)[i] = spmd__f32_to_bf16(v); break;
        default: memset((char *)p + i * spmd_dtype_size(dt), is_dst ? 3 : 1, spmd_dtype_size(dt));
        }
    }
}

int main(int argc, char **argv) {
    spmd_dtype dt = SPMD_F32;
    spmd_op op = SPMD_SUM;
    if ((argc > 1 && spmd_dtype_parse(argv[1], &dt) != SPMD_OK) ||
        (argc > 2 && spmd_op_parse(argv[2], &op) != SPMD_OK) || argc > 3 ||
        spmd__reduce_check(dt, op) != SPMD_OK) {
        fprintf(stderr, "usage: %s [dtype [op]]  e.g. float32 sum, bf16 max, int8 prod\n", argv[0]);
        return 2;
    }
    static const size_t sizes[] = {64u << 10, 1u << 20, 64u << 20};
    static const char *const families[] = {"scalar", "avx2", "avx512"};
    size_t es = spmd_dtype_size(dt), maxbytes = sizes[2];
    void *dst = aligned_alloc(64, maxbytes), *src = aligned_alloc(64, maxbytes);
    if (!dst || !src) {
        fprintf(stderr, "out of memory\n");
        return 1;
    }
    printf("# %s %s: GB/s of dst (median of %d), dispatcher default: %s\n", spmd_dtype_name(dt),
           spmd_op_name(op), TRIALS, spmd__reduce_isa());
    printf("%-8s %12s %12s %12s\n", "family", "64 KiB", "1 MiB", "64 MiB");
    for (int f = 0; f < 3; f++) {
        const spmd__reduce_table *t = spmd__reduce_table_get(families[f]);
        if (!t) {
            printf("%-8s %12s %12s %12s\n", families[f], "-", "-", "-");
            continue;
        }
        printf("%-8s", t->name);
        for (int s = 0; s < 3; s++) {
            size_t n = sizes[s] / es;
            fill(dst, n, dt, 1);
            fill(src, n, dt, 0);
            double sec = time_call(t->fn[dt][op], dst, src, n);
            printf(" %12.2f", (double)(n * es) / sec / 1e9);
            fflush(stdout);
        }
        printf("\n");
    }
    free(dst);
    free(src);
    return 0;
}
