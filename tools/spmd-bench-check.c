/* spmd-bench-check.c — spmd-bench's data (spmd-bench.h): every rank fills
 * its buffers with small integers, exact in every dtype, and after the
 * collective counts the elements that differ from what it must hold (the
 * #wrong column of nccl-tests). */
#include <math.h>
#include <stdint.h>
#include <string.h>
#include "spmd-bench.h"

static double elem_value(int rank, size_t i) { return (double)((rank + 1 + (int)(i % 7)) % 8); }

static void put(void *buf, spmd_dtype dt, size_t i, double v) {
    switch (dt) {
    case SPMD_F32: ((float *)buf)[i] = (float)v; break;
    case SPMD_F64: ((double *)buf)[i] = v; break;
    case SPMD_I8: ((int8_t *)buf)[i] = (int8_t)v; break;
    case SPMD_U8: ((uint8_t *)buf)[i] = (uint8_t)v; break;
    case SPMD_I32: ((int32_t *)buf)[i] = (int32_t)v; break;
    case SPMD_I64: ((int64_t *)buf)[i] = (int64_t)v; break;
    case SPMD_F16: case SPMD_BF16: {
        /* small integers: build the bits directly (exact) */
        float f = (float)v;
        uint32_t b;
        memcpy(&b, &f, 4);
        uint16_t h;
        if (dt == SPMD_BF16) h = (uint16_t)(b >> 16);
        else if (v == 0) h = 0;
        else {
            int e = (int)((b >> 23) & 0xff) - 127 + 15;
            h = (uint16_t)((e << 10) | ((b >> 13) & 0x3ff));
        }
        ((uint16_t *)buf)[i] = h;
        break;
    }
    default: break;
    }
}

static double get(const void *buf, spmd_dtype dt, size_t i) {
    switch (dt) {
    case SPMD_F32: return ((const float *)buf)[i];
    case SPMD_F64: return ((const double *)buf)[i];
    case SPMD_I8: return ((const int8_t *)buf)[i];
    case SPMD_U8: return ((const uint8_t *)buf)[i];
    case SPMD_I32: return ((const int32_t *)buf)[i];
    case SPMD_I64: return (double)((const int64_t *)buf)[i];
    case SPMD_BF16: { uint32_t b = (uint32_t)((const uint16_t *)buf)[i] << 16; float f; memcpy(&f, &b, 4); return f; }
    case SPMD_F16: {
        uint16_t h = ((const uint16_t *)buf)[i];
        int e = (h >> 10) & 0x1f, m = h & 0x3ff;
        double s = (h & 0x8000) ? -1 : 1;
        if (e == 0) return s * m * pow(2, -24);
        if (e == 31) return m ? NAN : s * INFINITY;
        return s * (1 + m / 1024.0) * pow(2, e - 15);
    }
    default: return 0;
    }
}

static double reduce_expect(spmd_op op, int world, size_t i, spmd_dtype dt) {
    double acc = elem_value(0, i);
    for (int r = 1; r < world; r++) {
        double v = elem_value(r, i);
        switch (op) {
        case SPMD_SUM: case SPMD_AVG: acc += v; break;
        case SPMD_PROD: acc *= v; break;
        case SPMD_MIN: acc = v < acc ? v : acc; break;
        case SPMD_MAX: acc = v > acc ? v : acc; break;
        case SPMD_BAND: acc = (double)((long)acc & (long)v); break;
        case SPMD_BOR: acc = (double)((long)acc | (long)v); break;
        case SPMD_BXOR: acc = (double)((long)acc ^ (long)v); break;
        default: break;
        }
    }
    if (op == SPMD_AVG) {
        acc /= world;
        if (dt != SPMD_F32 && dt != SPMD_F64 && dt != SPMD_F16 && dt != SPMD_BF16) acc = trunc(acc);
    }
    return acc;
}

/* Values wrap in small integer types and lose precision in half types when
 * products grow: the check compares after the same rounding. */
static int same(double got, double want, spmd_dtype dt) {
    double tmp[1];
    unsigned char buf[8];
    (void)tmp;
    put(buf, dt, 0, want);
    double w = get(buf, dt, 0);
    if (dt == SPMD_F16 || dt == SPMD_BF16 || dt == SPMD_F32) return fabs(got - w) <= fabs(w) * 1e-2 + 1e-6;
    return got == w;
}

void spmd__bench_fill(const opts_t *o, int rank, int w, void *sendb, void *recvb, size_t count, int inplace) {
    size_t es = spmd_dtype_size(o->dt);
    (void)es;
    switch (o->op) {
    case O_ALL_REDUCE: case O_REDUCE: case O_BROADCAST: {
        void *dst = inplace || o->op == O_BROADCAST ? recvb : sendb;
        for (size_t i = 0; i < count; i++) put(dst, o->dt, i, elem_value(rank, i));
        break;
    }
    case O_ALL_GATHER: case O_GATHER:
        for (size_t i = 0; i < count; i++) {
            if (inplace && o->op == O_ALL_GATHER) put(recvb, o->dt, (size_t)rank * count + i, elem_value(rank, i));
            else put(sendb, o->dt, i, elem_value(rank, i));
        }
        break;
    case O_REDUCE_SCATTER: case O_ALL_TO_ALL: case O_SCATTER:
        for (size_t j = 0; j < (size_t)w; j++)
            for (size_t i = 0; i < count; i++)
                put(inplace && o->op == O_REDUCE_SCATTER ? recvb : sendb, o->dt, j * count + i,
                    elem_value(rank, j * 31 + i));
        break;
    default: break;
    }
}

long spmd__bench_count_wrong(const opts_t *o, int rank, int w, const void *recvb, size_t count, int inplace) {
    long wrong = 0;
    size_t es = spmd_dtype_size(o->dt);
    switch (o->op) {
    case O_ALL_REDUCE:
        for (size_t i = 0; i < count; i++) wrong += !same(get(recvb, o->dt, i), reduce_expect(o->redop, w, i, o->dt), o->dt);
        break;
    case O_REDUCE:
        if (rank == o->root)
            for (size_t i = 0; i < count; i++) wrong += !same(get(recvb, o->dt, i), reduce_expect(o->redop, w, i, o->dt), o->dt);
        break;
    case O_BROADCAST:
        for (size_t i = 0; i < count; i++) wrong += !same(get(recvb, o->dt, i), elem_value(o->root, i), o->dt);
        break;
    case O_ALL_GATHER: case O_GATHER:
        if (o->op == O_GATHER && rank != o->root) break;
        for (size_t j = 0; j < (size_t)w; j++)
            for (size_t i = 0; i < count; i++) wrong += !same(get(recvb, o->dt, j * count + i), elem_value((int)j, i), o->dt);
        break;
    case O_REDUCE_SCATTER: {
        const void *mine = inplace ? (const char *)recvb + (size_t)rank * count * es : recvb;
        for (size_t i = 0; i < count; i++) {
            /* each rank r put elem_value(r, rank*31+i) in block `rank` */
            size_t idx = (size_t)rank * 31 + i;
            wrong += !same(get(mine, o->dt, i), reduce_expect(o->redop, w, idx, o->dt), o->dt);
        }
        break;
    }
    case O_ALL_TO_ALL:
        for (size_t j = 0; j < (size_t)w; j++)
            for (size_t i = 0; i < count; i++)
                wrong += !same(get(recvb, o->dt, j * count + i), elem_value((int)j, (size_t)rank * 31 + i), o->dt);
        break;
    case O_SCATTER:
        for (size_t i = 0; i < count; i++)
            wrong += !same(get(recvb, o->dt, i), elem_value(o->root, (size_t)rank * 31 + i), o->dt);
        break;
    default: break;
    }
    return wrong;
}
