/* tests/mp/coll_common.h — shared by the multi-process collective tests:
 * exact input values per (op, dtype, rank, index), the reference result
 * computed locally, typed stores, bit-for-bit comparison, and a group set-up
 * helper.
 *
 * Inputs are small integers chosen so every partial result of every
 * reduction order is exact in every dtype (bf16 holds integers up to 256
 * exactly, f16 up to 2048); integer types wrap on SUM/PROD exactly as the
 * reference does (two's complement), so results compare bit for bit:
 *   SUM      v in [-5, 5]   ([0, 10] for uint8)
 *   AVG      v = base(i) + d(r) with sum over ranks of d(r) = 0, so the
 *            mean is base(i) exactly (base in [0, 15] for uint8, w <= 16)
 *   PROD     v in {1, 2}
 *   MIN/MAX  v in [-8, 8]   ([0, 16] for uint8)
 *   bitwise  arbitrary bit patterns
 */
#ifndef SPMD_TEST_COLL_COMMON_H
#define SPMD_TEST_COLL_COMMON_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "coll/reduce.h"
#include "harness.h"
#include "mpi_job.h"
#include "spmd/group.h"

#define RREQUIRE(cond)                                                                             \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "rank %d: %s:%d: failed: %s (%s)\n", rank, __FILE__, __LINE__, #cond,  \
                    g ? spmd_group_errmsg(g) : "");                                                \
            return 1;                                                                              \
        }                                                                                          \
    } while (0)

#define NALGOS(list) ((int)(sizeof(list) / sizeof((list)[0])))

static const spmd_dtype ALL_DTYPES[] = {SPMD_F32, SPMD_F64, SPMD_F16, SPMD_BF16,
                                        SPMD_I8,  SPMD_U8,  SPMD_I32, SPMD_I64};
#define N_DTYPES ((int)(sizeof ALL_DTYPES / sizeof ALL_DTYPES[0]))

static inline int is_float(spmd_dtype dt) {
    return dt == SPMD_F32 || dt == SPMD_F64 || dt == SPMD_F16 || dt == SPMD_BF16;
}

/* Store the integer v into element i of a buffer of dtype dt (wrapping for ints). */
static inline void put(void *buf, size_t i, spmd_dtype dt, int64_t v) {
    switch (dt) {
    case SPMD_F32: ((float *)buf)[i] = (float)v; break;
    case SPMD_F64: ((double *)buf)[i] = (double)v; break;
    case SPMD_F16: ((uint16_t *)buf)[i] = spmd__f32_to_f16((float)v); break;
    case SPMD_BF16: ((uint16_t *)buf)[i] = spmd__f32_to_bf16((float)v); break;
    case SPMD_I8: ((int8_t *)buf)[i] = (int8_t)(uint8_t)((uint64_t)v & 0xff); break;
    case SPMD_U8: ((uint8_t *)buf)[i] = (uint8_t)((uint64_t)v & 0xff); break;
    case SPMD_I32: ((int32_t *)buf)[i] = (int32_t)(uint32_t)((uint64_t)v & 0xffffffffu); break;
    case SPMD_I64: ((int64_t *)buf)[i] = v; break;
    default: break;
    }
}

/* The AVG offsets: sum over r < w of d(r) is 0. */
static inline int64_t avg_d(int r, int w) {
    if (r < w - 1) return r;
    return -(int64_t)(w - 1) * (w - 2) / 2;
}
static inline int64_t avg_base(size_t i, spmd_dtype dt) {
    if (dt == SPMD_U8) return (int64_t)(i % 16);
    return (int64_t)(i % 11) - 5;
}

/* Input value of rank r (of w) at element i for op. */
static inline int64_t val(spmd_op op, spmd_dtype dt, int r, int w, size_t i) {
    const int64_t x = (int64_t)((size_t)r * 7 + i * 3 + (i >> 7));
    switch (op) {
    case SPMD_SUM: return dt == SPMD_U8 ? x % 11 : x % 11 - 5;
    case SPMD_AVG: return avg_base(i, dt) + avg_d(r, w);
    case SPMD_PROD: return 1 + ((r + (int64_t)i) % 3 == 0);
    case SPMD_MIN:
    case SPMD_MAX: {
        int64_t y = (int64_t)(((size_t)r * 13 + i * 5) % 17);
        return dt == SPMD_U8 ? y : y - 8;
    }
    default: { /* bitwise: a spread of bit patterns */
        uint64_t h = ((uint64_t)r + 1) * 0x9E3779B97F4A7C15ull ^ ((uint64_t)i + 7) * 0xC2B2AE3D27D4EB4Full;
        h ^= h >> 29;
        return (int64_t)h;
    }
    }
}

/* Reference reduction over ranks 0..w-1 of element i, as an integer. */
static inline int64_t ref_val(spmd_op op, spmd_dtype dt, int w, size_t i) {
    if (op == SPMD_AVG) return avg_base(i, dt);
    uint64_t acc = (uint64_t)val(op, dt, 0, w, i);
    for (int r = 1; r < w; r++) {
        int64_t v = val(op, dt, r, w, i);
        switch (op) {
        case SPMD_SUM: acc += (uint64_t)v; break;
        case SPMD_PROD: acc *= (uint64_t)v; break;
        case SPMD_MIN: if (v < (int64_t)acc) acc = (uint64_t)v; break;
        case SPMD_MAX: if (v > (int64_t)acc) acc = (uint64_t)v; break;
        case SPMD_BAND: acc &= (uint64_t)v; break;
        case SPMD_BOR: acc |= (uint64_t)v; break;
        case SPMD_BXOR: acc ^= (uint64_t)v; break;
        default: break;
        }
    }
    return (int64_t)acc;
}

static inline void fill_input(void *buf, size_t n, spmd_op op, spmd_dtype dt, int r, int w, size_t first) {
    for (size_t i = 0; i < n; i++) put(buf, i, dt, val(op, dt, r, w, first + i));
}
static inline void fill_ref(void *buf, size_t n, spmd_op op, spmd_dtype dt, int w, size_t first) {
    for (size_t i = 0; i < n; i++) put(buf, i, dt, ref_val(op, dt, w, first + i));
}
/* Data that is not a reduction: distinct bytes per (rank, element). */
static inline void fill_data(void *buf, size_t bytes, int r, size_t first) {
    unsigned char *p = buf;
    for (size_t i = 0; i < bytes; i++) p[i] = (unsigned char)((size_t)r * 29 + (first + i) * 7 + ((first + i) >> 8) + 1);
}

/* Index of the first differing byte, or -1. */
static inline long first_diff(const void *a, const void *b, size_t bytes) {
    const unsigned char *x = a, *y = b;
    for (size_t i = 0; i < bytes; i++)
        if (x[i] != y[i]) return (long)i;
    return -1;
}

static inline int op_valid(spmd_dtype dt, spmd_op op) { return spmd__reduce_check(dt, op) == SPMD_OK; }

/* Join the group the spawner set up.  SPMD_TIMEOUT in the environment keeps
 * any bug short. */
static spmd_group *join_group(int rank) {
    spmd_group *g = NULL;
    char err[512];
    spmd_status st = spmd_group_init(NULL, &g, err, sizeof err);
    if (st != SPMD_OK) {
        fprintf(stderr, "rank %d: group init: %s\n", rank, err);
        return NULL;
    }
    return g;
}

/* Counts worth testing at world size w: 0, 1, w-1, w+1 and one that spans
 * several SPMD_SEGMENT_BYTES (256) pieces per chunk for every dtype. */
static inline int test_counts(int w, size_t es, size_t *out) {
    int k = 0;
    out[k++] = 0;
    out[k++] = 1;
    if (w - 1 > 1) out[k++] = (size_t)w - 1;
    out[k++] = (size_t)w + 1;
    out[k++] = (size_t)w * (700 / es) + 13;
    return k;
}

/* Spawn `world` ranks running fn with small segments; returns 0 on success.
 * The collective timeout only bounds a bug (no test here waits for it to
 * expire), so it is generous: at 10 s a 64 Ki-float all_reduce in 256-byte
 * segments at world 4 or 5 ran out of it under ASan or TSan on a loaded
 * machine (test_coll_agree, test_coll_big). */
static inline int run_world(int world, spmd_spawn_fn fn, void *arg, int timeout_s) {
    char report[512];
    setenv("SPMD_TIMEOUT", "120", 0); /* keep a value the caller set (debugging) */
    setenv("SPMD_SEGMENT_BYTES", "256", 0);
    spmd_status st = test_spawn(world, fn, arg, timeout_s * 1000, report, sizeof report);
    if (st != SPMD_OK) {
        fprintf(stderr, "world %d: %s (%s)\n", world, spmd_status_name(st), report);
        return 1;
    }
    return 0;
}

/* The shared-slot algorithms need every pair on shared memory (not so under
 * SPMD_TRANSPORT=tcp), "mpi" (MPI's own collectives) a group over MPI.
 * Tests set SPMD_SHM_SLOT_BYTES small so the chunked paths are reached. */
static inline int algo_usable(spmd_group *g, const char *algo) {
    if (algo && !strcmp(algo, "mpi")) return group_on_mpi(g);
    if (!algo || (strcmp(algo, "shm") && strcmp(algo, "oneshot") && strcmp(algo, "cma"))) return 1;
    return spmd_group_size(g) == 1 || !strcmp(spmd_group_backend(g), "shm");
}
static inline void use_test_slots(void) { setenv("SPMD_SHM_SLOT_BYTES", "4096", 1); }

/* World sizes from the command line (at most 8), else the n defaults. */
static inline int test_worlds(int argc, char **argv, int out[8], const int *defaults, int n) {
    int k = 0;
    for (int i = 1; i < argc && k < 8; i++) out[k++] = atoi(argv[i]);
    for (int i = 0; k == 0 && i < n && i < 8; i++) out[i] = defaults[i];
    return k ? k : n < 8 ? n : 8;
}

/* The transports to run under: SPMD_TRANSPORT if set, else tcp, then the
 * default (shared memory on one host). */
static inline int test_transports(const char *out[2]) {
    const char *fixed = getenv("SPMD_TRANSPORT");
    if (fixed && *fixed) {
        out[0] = fixed;
        return 1;
    }
    out[0] = "tcp";
    out[1] = "auto";
    return 2;
}

/* Run fn at every world (the command line's, else `defaults`) under every
 * transport (test_transports), checking each run; `what` names it. */
static inline void run_worlds_transports(int argc, char **argv, const int *defaults, int n, const char *what,
                                         spmd_spawn_fn fn, void *arg, int timeout_s) {
    int worlds[8];
    const char *transports[2];
    const int nw = test_worlds(argc, argv, worlds, defaults, n), nt = test_transports(transports);
    for (int t = 0; t < nt; t++) {
        setenv("SPMD_TRANSPORT", transports[t], 1);
        for (int i = 0; i < nw; i++)
            CHECK_MSG(run_world(worlds[i], fn, arg, timeout_s) == 0, "%s, world %d, %s", what, worlds[i],
                      transports[t]);
    }
}

#endif
