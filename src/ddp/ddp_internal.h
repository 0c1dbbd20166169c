/* src/ddp/ddp_internal.h — the inside of the reducer, shared by its files:
 *
 *   reducer.c   registration, finalize (verify + broadcast), the step
 *               (prepare, grad_ready, finish), join, the bucket rebuild
 *   buckets.c   cutting parameters into buckets, in place when contiguous
 *   wire.c      strategy 1: a bucket by all_reduce (comm hook, compression)
 *   shared.c    strategy 2: shared gradients, each rank sums its slice of a
 *               bucket in every rank's memory (transport/arena.h)
 *   sharded.c   strategy 3: the sharded optimizer step on top of 2, and the
 *               optimizer state's gathering
 *
 * Which strategy a bucket takes is decided identically on every rank
 * (spmd__ddp_shared_bucket, spmd__ddp_step_mode). */
#ifndef SPMD_DDP_INTERNAL_H
#define SPMD_DDP_INTERNAL_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include "common/fnv.h"
#include "group/group_internal.h"
#include "spmd/ddp.h"

/* dst[i] = half(src[i] / div); and back.  Round-to-nearest-even. */
void spmd__ddp_to_f16(uint16_t *dst, const float *src, size_t n, float div);
void spmd__ddp_from_f16(float *dst, const uint16_t *src, size_t n);
void spmd__ddp_to_bf16(uint16_t *dst, const float *src, size_t n, float div);
void spmd__ddp_from_bf16(float *dst, const uint16_t *src, size_t n);

typedef struct {
    char *name;
    float *param, *grad;
    size_t count;
    int bucket;
    size_t offset;   /* in the bucket, floats */
    int ready;
} dparam;

typedef struct {
    char *name;
    float *buf;
    size_t count;
} dbuf;

typedef struct {
    int *idx;        /* parameter indices, in bucket order */
    int n;
    size_t count;    /* floats */
    float *view;     /* gradients contiguous in memory: reduce them in place */
    float *flat;     /* else: staging buffer */
    uint16_t *half;  /* compressed copy (fp16/bf16 hooks) */
    int pending;     /* gradients not ready yet this step */
    spmd_work *work;
    int launched;
    int shm;         /* launched as a shared-memory bucket: seq is its number */
    int reduced;     /* shared: my slice is summed and written everywhere */
    uint32_t seq;
} bucket;

enum { SHM_READY, SHM_DONE }; /* the two counters of transport/arena.h */
enum { SHM_GATHERED };        /* the step memory's first counter: gather_state's */

struct spmd_ddp {
    spmd_group *g;
    spmd_ddp_opts o;
    dparam *p;
    int np, capp;
    dbuf *b;
    int nb, capb;
    float *bufstage;   /* buffers coalesced for one broadcast */
    size_t bufcount;
    bucket *bk;
    int nbk, next_launch;
    int finalized, rebuilt, no_sync, join_enabled;
    int *order;        /* ready order seen this step (for the rebuild) */
    int norder;
    spmd_ddp_comm_hook hook;
    void *hook_state;
    spmd_status sticky;
    double last_wait;
    spmd__arena *shm;     /* spmd_ddp_alloc_grads' memory */
    int shared;         /* every rank maps every rank's gradients */
    size_t shm_count;   /* its length in floats */
    uint32_t shm_seq;   /* shared buckets launched so far */
    spmd__arena *step_shm;  /* spmd_ddp_alloc_step's memory: parameters, then step_k state arrays */
    size_t step_k;
    int step_shared;      /* every rank maps every rank's step memory */
    spmd_ddp_step_fn step_fn;
    void *step_ctx;
    int all_views;        /* every bucket is reduced in place (build_buckets) */
    int stepped;          /* the last finish applied the optimizer step */
    int state_scattered;  /* sharded steps left each state slice up to date only at its owner */
    uint32_t gather_seq;  /* gather_state calls so far */
    char err[512];
};

/* ---- helpers every file uses (so that none of them calls up into reducer.c) ---- */
/* Record the reducer's message; returns st. */
static inline SPMD__PRINTF(3, 4) spmd_status spmd__ddp_fail(spmd_ddp *d, spmd_status st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    spmd__vfail(d->err, sizeof d->err, st, fmt, ap);
    va_end(ap);
    return st;
}
static inline float *spmd__ddp_bucket_data(bucket *b) { return b->view ? b->view : b->flat; }
static inline uint64_t spmd__ddp_name_hash(const char *s) { return spmd__fnv1a64_str(SPMD__FNV64_OFFSET, s); }
/* Rank r's slice [lo, hi) of bucket b, and where it starts in the shared
 * memory (off).  Cut at 64-byte boundaries. */
static inline void spmd__ddp_slice_of(const spmd_ddp *d, const bucket *b, int r, size_t *lo, size_t *hi, size_t *off) {
    size_t w = (size_t)spmd_group_size(d->g);
    size_t per = ((b->count + w - 1) / w + 15) & ~(size_t)15;
    *lo = per * (size_t)r;
    *hi = *lo + per;
    if (*lo > b->count) *lo = b->count;
    if (*hi > b->count) *hi = b->count;
    *off = (size_t)(b->view - (float *)spmd__arena_data(d->shm)) + *lo;
}


/* ---- buckets.c ---- */
/* Cut `order` (parameter indices in expected ready order) into buckets. */
spmd_status spmd__ddp_build_buckets(spmd_ddp *d, const int *order);
void spmd__ddp_free_buckets(spmd_ddp *d);

/* ---- wire.c ---- */
spmd_status spmd__ddp_wire_launch(spmd_ddp *d, bucket *b);
/* Wait, then average (or widen) into the gradients unless `discard`. */
spmd_status spmd__ddp_wire_complete(spmd_ddp *d, bucket *b, int discard);

/* ---- shared.c ---- */
/* Collective (finalize): map the other ranks' gradient memory if possible. */
spmd_status spmd__ddp_share(spmd_ddp *d);
int spmd__ddp_shared_bucket(const spmd_ddp *d, const bucket *b);
void spmd__ddp_shared_launch(spmd_ddp *d, bucket *b);
/* Reduce every launched shared bucket that is ready everywhere; never waits. */
void spmd__ddp_shared_progress(spmd_ddp *d);
spmd_status spmd__ddp_shared_complete(spmd_ddp *d, bucket *b);

/* ---- sharded.c ---- */
int spmd__ddp_step_mode(const spmd_ddp *d);
void spmd__ddp_step_slice(spmd_ddp *d, size_t off, size_t n, const float *avg);
/* Collective: gather the optimizer state's slices (no-op unless scattered). */
spmd_status spmd__ddp_gather(spmd_ddp *d);

#endif
