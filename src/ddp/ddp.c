/* ddp.c — the gradient reducer of include/spmd/ddp.h.
 *
 *   backward:  grad_ready(9) grad_ready(8) ... grad_ready(0)
 *   buckets:   [9 8 7]      [6 5 4 3]      [2 1 0]        (reverse registration order)
 *   launch:      └ all_reduce_async ┘└ all_reduce_async ┘└ ...   as each bucket fills,
 *                                                               strictly in bucket order
 *   finish:    wait bucket 0, 1, 2 -> average -> gradients in place
 *
 * A bucket whose gradients sit back to back in memory (the training stack
 * keeps all gradients in one allocation) is reduced in place; otherwise its
 * gradients are copied into a staging buffer as they become ready.
 *
 * Shared gradients (spmd_ddp_alloc_grads, every rank on one host): every
 * rank maps every other's gradient memory (group/shm.h), and a bucket needs
 * no message at all.  Each rank owns a slice of the bucket, sums it over the
 * ranks' memories, divides, and writes the result into every rank's memory:
 *
 *   launch:  ready := bucket's sequence number      (my gradients are final)
 *   reduce:  when every rank's ready has reached it (polled from grad_ready,
 *            waited for in finish): sum my slice, write it everywhere,
 *            done := the sequence number
 *   finish:  wait until every rank's done has reached the last bucket's
 *
 * Only the training thread does this, in bucket order; there is nothing to
 * overlap on a host whose cores are all training, and no thread to wake.
 * Between steps a rank's memory is touched by nobody else: peers write to it
 * only after its ready and are done before its finish returns.
 *
 * The sharded step (spmd_ddp_alloc_step) goes one further: instead of
 * writing the averaged slice everywhere, the rank that summed it hands it to
 * the optimizer, which updates that slice of its own parameters and state,
 * and those are what it copies into every rank's memory.  Each rank then runs
 * the optimizer over 1/world of the parameters, and nobody reads an averaged
 * gradient back.  A parameter's ready comes after backward's last read of it,
 * so a peer may overwrite it from then on.
 */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "coll/reduce.h"
#include "group/shm.h"
#include "spmd/ddp.h"
#include "ddp_internal.h"

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

enum { SHM_READY, SHM_DONE }; /* the two counters of group/shm.h */
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
    spmd__shm *shm;     /* spmd_ddp_alloc_grads' memory */
    int shared;         /* every rank maps every rank's gradients */
    size_t shm_count;   /* its length in floats */
    uint32_t shm_seq;   /* shared buckets launched so far */
    spmd__shm *step_shm;  /* spmd_ddp_alloc_step's memory: parameters, then step_k state arrays */
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

static spmd_status fail(spmd_ddp *d, spmd_status st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(d->err, sizeof d->err, fmt, ap);
    va_end(ap);
    return st;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

const char *spmd_ddp_errmsg(const spmd_ddp *d) { return d ? d->err : "no reducer"; }
double spmd_ddp_last_wait_seconds(const spmd_ddp *d) { return d ? d->last_wait : 0; }
int spmd_ddp_num_buckets(const spmd_ddp *d) { return d ? d->nbk : 0; }
int spmd_ddp_grads_shared(const spmd_ddp *d) { return d ? d->shared : 0; }
int spmd_ddp_stepped(const spmd_ddp *d) { return d ? d->stepped : 0; }
int spmd_ddp_step_shared(const spmd_ddp *d) { return d ? d->step_shared : 0; }
void spmd_ddp_set_no_sync(spmd_ddp *d, int on) { if (d) d->no_sync = on; }
void spmd_ddp_set_join_enabled(spmd_ddp *d, int on) { if (d) d->join_enabled = on; }

spmd_status spmd_ddp_create(spmd_group *g, const spmd_ddp_opts *opts, spmd_ddp **out) {
    static const spmd_ddp_opts dflt = SPMD_DDP_OPTS_DEFAULT;
    if (!g || !out) return SPMD_ERR_INVALID;
    spmd_ddp *d = calloc(1, sizeof *d);
    if (!d) return SPMD_ERR_NOMEM;
    d->g = g;
    d->o = opts ? *opts : dflt;
    if (!d->o.bucket_cap_bytes) d->o.bucket_cap_bytes = dflt.bucket_cap_bytes;
    if (!d->o.first_bucket_bytes) d->o.first_bucket_bytes = dflt.first_bucket_bytes;
    *out = d;
    return SPMD_OK;
}

static void free_buckets(spmd_ddp *d) {
    for (int i = 0; i < d->nbk; i++) {
        if (d->bk[i].work) spmd_work_free(d->bk[i].work);
        free(d->bk[i].idx);
        free(d->bk[i].flat);
        free(d->bk[i].half);
    }
    free(d->bk);
    d->bk = NULL;
    d->nbk = 0;
}

void spmd_ddp_free(spmd_ddp *d) {
    if (!d) return;
    free_buckets(d);
    spmd__shm_free(d->shm);
    spmd__shm_free(d->step_shm);
    for (int i = 0; i < d->np; i++) free(d->p[i].name);
    for (int i = 0; i < d->nb; i++) free(d->b[i].name);
    free(d->p);
    free(d->b);
    free(d->bufstage);
    free(d->order);
    free(d);
}

spmd_status spmd_ddp_alloc_grads(spmd_ddp *d, size_t count, float **grads) {
    if (!d || !grads) return SPMD_ERR_INVALID;
    *grads = NULL;
    if (d->finalized || d->shm) return fail(d, SPMD_ERR_INVALID, "alloc_grads: only once, before finalize");
    d->shm = spmd__shm_alloc(d->g, sizeof(float) * (count ? count : 1));
    if (!d->shm) return fail(d, SPMD_ERR_NOMEM, "alloc_grads: cannot allocate %zu floats of shared memory", count);
    d->shm_count = count;
    *grads = spmd__shm_data(d->shm);
    return SPMD_OK;
}

spmd_status spmd_ddp_alloc_step(spmd_ddp *d, size_t state_arrays, spmd_ddp_step_fn fn, void *ctx,
                                float **params, float **state) {
    if (!d || !fn || !params || !state || state_arrays > 8) return SPMD_ERR_INVALID;
    *params = *state = NULL;
    if (d->finalized || !d->shm || d->step_shm)
        return fail(d, SPMD_ERR_INVALID, "alloc_step: only once, after alloc_grads and before finalize");
    size_t n = d->shm_count;
    d->step_shm = spmd__shm_alloc(d->g, sizeof(float) * (n ? n : 1) * (1 + state_arrays));
    if (!d->step_shm)
        return fail(d, SPMD_ERR_NOMEM, "alloc_step: cannot allocate %zu floats of shared memory", n * (1 + state_arrays));
    d->step_k = state_arrays;
    d->step_fn = fn;
    d->step_ctx = ctx;
    *params = spmd__shm_data(d->step_shm);
    *state = state_arrays ? *params + n : NULL;
    return SPMD_OK;
}

spmd_status spmd_ddp_add_param(spmd_ddp *d, const char *name, float *param, float *grad, size_t count) {
    if (!d) return SPMD_ERR_INVALID;
    if (d->finalized) return fail(d, SPMD_ERR_INVALID, "add_param after finalize");
    if (!param || !grad) return fail(d, SPMD_ERR_INVALID, "add_param '%s': NULL buffer", name ? name : "?");
    if (d->np == d->capp) {
        int cap = d->capp ? d->capp * 2 : 16;
        dparam *np = realloc(d->p, sizeof *np * (size_t)cap);
        if (!np) return fail(d, SPMD_ERR_NOMEM, "out of memory");
        d->p = np;
        d->capp = cap;
    }
    dparam *p = &d->p[d->np];
    memset(p, 0, sizeof *p);
    p->name = strdup(name ? name : "");
    if (!p->name) return fail(d, SPMD_ERR_NOMEM, "out of memory");
    p->param = param;
    p->grad = grad;
    p->count = count;
    d->np++;
    return SPMD_OK;
}

spmd_status spmd_ddp_add_buffer(spmd_ddp *d, const char *name, float *buf, size_t count) {
    if (!d) return SPMD_ERR_INVALID;
    if (d->finalized) return fail(d, SPMD_ERR_INVALID, "add_buffer after finalize");
    if (!buf && count) return fail(d, SPMD_ERR_INVALID, "add_buffer '%s': NULL buffer", name ? name : "?");
    if (d->nb == d->capb) {
        int cap = d->capb ? d->capb * 2 : 16;
        dbuf *nb = realloc(d->b, sizeof *nb * (size_t)cap);
        if (!nb) return fail(d, SPMD_ERR_NOMEM, "out of memory");
        d->b = nb;
        d->capb = cap;
    }
    dbuf *b = &d->b[d->nb];
    b->name = strdup(name ? name : "");
    if (!b->name) return fail(d, SPMD_ERR_NOMEM, "out of memory");
    b->buf = buf;
    b->count = count;
    d->nb++;
    return SPMD_OK;
}

spmd_status spmd_ddp_set_comm_hook(spmd_ddp *d, spmd_ddp_comm_hook hook, void *state) {
    if (!d) return SPMD_ERR_INVALID;
    d->hook = hook;
    d->hook_state = state;
    return SPMD_OK;
}

/* ---- buckets ------------------------------------------------------------- */

/* Cut `order` (parameter indices in expected ready order) into buckets. */
static spmd_status build_buckets(spmd_ddp *d, const int *order) {
    free_buckets(d);
    d->bk = calloc((size_t)(d->np ? d->np : 1), sizeof *d->bk);
    if (!d->bk) return fail(d, SPMD_ERR_NOMEM, "out of memory");
    size_t cap = d->o.first_bucket_bytes;
    bucket *cur = NULL;
    size_t cur_bytes = 0;
    for (int k = 0; k < d->np; k++) {
        int i = order[k];
        size_t bytes = d->p[i].count * sizeof(float);
        if (!cur || (cur_bytes > 0 && cur_bytes + bytes > cap)) {
            if (cur) cap = d->o.bucket_cap_bytes;
            cur = &d->bk[d->nbk++];
            cur->idx = malloc(sizeof(int) * (size_t)d->np);
            if (!cur->idx) return fail(d, SPMD_ERR_NOMEM, "out of memory");
            cur_bytes = 0;
        }
        d->p[i].bucket = (int)(cur - d->bk);
        d->p[i].offset = cur->count;
        cur->idx[cur->n++] = i;
        cur->count += d->p[i].count;
        cur_bytes += bytes;
    }
    for (int b = 0; b < d->nbk; b++) {
        bucket *bk = &d->bk[b];
        /* In place when the bucket's gradients, in bucket order, are one
         * contiguous run of memory (ascending or descending). */
        float *lo = d->p[bk->idx[0]].grad;
        int asc = 1, desc = 1;
        for (int k = 1; k < bk->n; k++) {
            const dparam *prev = &d->p[bk->idx[k - 1]], *p = &d->p[bk->idx[k]];
            if (p->grad != prev->grad + prev->count) asc = 0;
            if (p->grad + p->count != prev->grad) desc = 0;
            if (p->grad < lo) lo = p->grad;
        }
        if (asc || desc) {
            bk->view = lo;
            for (int k = 0; k < bk->n; k++) d->p[bk->idx[k]].offset = (size_t)(d->p[bk->idx[k]].grad - lo);
        } else {
            bk->flat = malloc(sizeof(float) * (bk->count ? bk->count : 1));
            if (!bk->flat) return fail(d, SPMD_ERR_NOMEM, "out of memory");
        }
        if (d->o.compression != SPMD_DDP_COMPRESS_NONE) {
            bk->half = malloc(sizeof(uint16_t) * (bk->count ? bk->count : 1));
            if (!bk->half) return fail(d, SPMD_ERR_NOMEM, "out of memory");
        }
        bk->pending = bk->n;
    }
    d->all_views = 1;
    for (int b = 0; b < d->nbk; b++) d->all_views &= d->bk[b].view != NULL;
    d->next_launch = 0;
    return SPMD_OK;
}

static float *bucket_data(bucket *b) { return b->view ? b->view : b->flat; }

/* Does this bucket go through shared memory?  The same answer on every rank:
 * sharing, layout, hooks and compression are agreed or must be. */
static int shm_bucket(const spmd_ddp *d, const bucket *b) {
    return d->shared && b->view && !d->hook && d->o.compression == SPMD_DDP_COMPRESS_NONE;
}

/* Rank r's slice [lo, hi) of bucket b, and where it starts in the shared
 * memory (off).  Cut at 64-byte boundaries. */
static void slice_of(const spmd_ddp *d, const bucket *b, int r, size_t *lo, size_t *hi, size_t *off) {
    size_t w = (size_t)spmd_group_size(d->g);
    size_t per = ((b->count + w - 1) / w + 15) & ~(size_t)15;
    *lo = per * (size_t)r;
    *hi = *lo + per;
    if (*lo > b->count) *lo = b->count;
    if (*hi > b->count) *hi = b->count;
    *off = (size_t)(b->view - (float *)spmd__shm_data(d->shm)) + *lo;
}

/* This step is the sharded one: every bucket is shared (the same answer on
 * every rank, as shm_bucket's) and no rank may join. */
static int step_mode(const spmd_ddp *d) {
    return d->step_shared && d->all_views && !d->hook && d->o.compression == SPMD_DDP_COMPRESS_NONE &&
           !d->join_enabled;
}

/* Elements [off, off + n) of the optimizer step: the step function updates
 * them in this rank's memory, and the new parameters are copied to every
 * other rank's.  The optimizer state stays with the slice's owner until
 * gather_state. */
static void step_slice(spmd_ddp *d, size_t off, size_t n, const float *avg) {
    d->step_fn(d->step_ctx, off, n, avg);
    int w = spmd_group_size(d->g), me = spmd_group_rank(d->g);
    const float *mine = spmd__shm_data(d->step_shm);
    for (int q = 0; q < w; q++)
        if (q != me) memcpy((float *)spmd__shm_peer(d->step_shm, q) + off, mine + off, n * sizeof(float));
    d->state_scattered = 1;
}

/* Collective: copy every other rank's slices of the optimizer state (as the
 * current buckets cut them) into this rank's memory.  Called by every rank
 * at the same point between steps: every slice's owner finished writing it
 * before the last finish returned.  Nobody returns before everyone has
 * read (the step memory's counter), since a rank may step its own whole
 * state next. */
static spmd_status gather_state(spmd_ddp *d) {
    if (!d->state_scattered) return SPMD_OK;
    d->state_scattered = 0;
    if (!d->step_k) return SPMD_OK;
    int w = spmd_group_size(d->g), me = spmd_group_rank(d->g);
    float *mine = spmd__shm_data(d->step_shm);
    for (int b = 0; b < d->nbk; b++)
        for (int q = 0; q < w; q++) {
            size_t lo, hi, off;
            if (q == me || !d->bk[b].view) continue;
            slice_of(d, &d->bk[b], q, &lo, &hi, &off);
            const float *theirs = spmd__shm_peer(d->step_shm, q);
            for (size_t k = 1; k <= d->step_k; k++) {   /* past the parameters: each state array */
                size_t at = k * d->shm_count + off;
                memcpy(mine + at, theirs + at, (hi - lo) * sizeof(float));
            }
        }
    d->gather_seq++;
    spmd__shm_post(d->step_shm, SHM_GATHERED, d->gather_seq);
    return spmd__shm_wait_all(d->step_shm, SHM_GATHERED, d->gather_seq, "read of the optimizer state", d->err,
                              sizeof d->err);
}

spmd_status spmd_ddp_gather_state(spmd_ddp *d) {
    if (!d || !d->finalized) return d ? fail(d, SPMD_ERR_INVALID, "gather_state before finalize") : SPMD_ERR_INVALID;
    return gather_state(d);
}

/* Sum my slice of bucket b over every rank's memory, average it, write it to
 * every rank's memory (or, in the sharded step, apply the optimizer to it).
 * Slices are cut at 64-byte boundaries; the sum runs in rank order, so each
 * element's result does not depend on whose slice it is. */
static void shm_reduce_slice(spmd_ddp *d, bucket *b) {
    enum { CHUNK = 2048 }; /* floats: stays in L1 between the sum and the writes */
    int w = spmd_group_size(d->g);
    size_t lo, hi, off;
    slice_of(d, b, spmd_group_rank(d->g), &lo, &hi, &off);
    const int step = step_mode(d);
    float tmp[CHUNK];
    for (size_t i = 0; i < hi - lo; i += CHUNK) {
        size_t n = hi - lo - i < CHUNK ? hi - lo - i : CHUNK;
        const float *p0 = (const float *)spmd__shm_peer(d->shm, 0) + off + i;
        const float *p1 = (const float *)spmd__shm_peer(d->shm, 1) + off + i;
        spmd__reduce3(tmp, p0, p1, n, SPMD_F32, SPMD_SUM);
        for (int q = 2; q < w; q++)
            spmd__reduce(tmp, (const float *)spmd__shm_peer(d->shm, q) + off + i, n, SPMD_F32, SPMD_SUM);
        spmd__avg_finish(tmp, n, SPMD_F32, w);
        if (step) {
            step_slice(d, off + i, n, tmp);
            continue;
        }
        for (int q = 0; q < w; q++) memcpy((float *)spmd__shm_peer(d->shm, q) + off + i, tmp, n * sizeof(float));
    }
    b->reduced = 1;
    spmd__shm_post(d->shm, SHM_DONE, b->seq);
}

/* Reduce, in bucket order, every launched shared bucket whose gradients are
 * final on every rank; never waits. */
static void shm_progress(spmd_ddp *d) {
    for (int k = 0; k < d->next_launch; k++) {
        bucket *b = &d->bk[k];
        if (!b->shm || b->reduced) continue;
        if (!spmd__shm_all_reached(d->shm, SHM_READY, b->seq)) return;
        shm_reduce_slice(d, b);
    }
}

static spmd_status launch(spmd_ddp *d, bucket *b) {
    float *data = bucket_data(b);
    int w = spmd_group_size(d->g);
    spmd_status st;
    b->launched = 1;
    if (shm_bucket(d, b)) {
        b->shm = 1;
        b->reduced = 0;
        b->seq = ++d->shm_seq;
        spmd__shm_post(d->shm, SHM_READY, b->seq);
        return SPMD_OK;
    }
    if (d->hook) {
        st = d->hook(d->hook_state, d->g, data, b->count, &b->work);
    } else if (d->o.compression != SPMD_DDP_COMPRESS_NONE) {
        /* As torch's fp16/bf16 hooks: divide first (no overflow), reduce the
         * narrow copy, widen back at finish. */
        int fp16 = d->o.compression == SPMD_DDP_COMPRESS_FP16;
        if (fp16) spmd__ddp_to_f16(b->half, data, b->count, (float)w);
        else spmd__ddp_to_bf16(b->half, data, b->count, (float)w);
        st = spmd_all_reduce_async(d->g, b->half, b->half, b->count, fp16 ? SPMD_F16 : SPMD_BF16, SPMD_SUM,
                                   NULL, &b->work);
    } else {
        st = spmd_all_reduce_async(d->g, data, data, b->count, SPMD_F32, SPMD_SUM, NULL, &b->work);
    }
    if (st) return fail(d, st, "bucket all_reduce: %s", spmd_group_errmsg(d->g));
    return SPMD_OK;
}

/* Launch every complete bucket that is next in line. */
static spmd_status launch_ready(spmd_ddp *d) {
    while (d->next_launch < d->nbk && d->bk[d->next_launch].pending == 0) {
        spmd_status st = launch(d, &d->bk[d->next_launch]);
        d->next_launch++;
        if (st) return st;
    }
    return SPMD_OK;
}

/* Wait for bucket b and put the averaged result into the gradients
 * (unless `discard`, for a joined rank). */
static spmd_status complete(spmd_ddp *d, bucket *b, int discard) {
    spmd_status st = SPMD_OK;
    if (b->shm) {
        /* peers write into our memory until their done: wait even when discarding */
        b->shm = 0;
        b->launched = 0;
        if (!b->reduced) {
            st = spmd__shm_wait_all(d->shm, SHM_READY, b->seq, "gradients (shared bucket)", d->err, sizeof d->err);
            if (st) return st;
            shm_reduce_slice(d, b);
        }
        st = spmd__shm_wait_all(d->shm, SHM_DONE, b->seq, "share of the bucket sum", d->err, sizeof d->err);
        return st; /* averaged already, and in place */
    }
    if (b->work) {
        st = spmd_work_wait(b->work, -1);
        if (st) fail(d, st, "bucket all_reduce: %s", spmd_work_errmsg(b->work));
        spmd_work_free(b->work);
        b->work = NULL;
    }
    b->launched = 0;
    if (st || discard) return st;
    float *data = bucket_data(b);
    int w = spmd_group_size(d->g);
    if (!d->hook && d->o.compression != SPMD_DDP_COMPRESS_NONE) {
        if (d->o.compression == SPMD_DDP_COMPRESS_FP16) spmd__ddp_from_f16(data, b->half, b->count);
        else spmd__ddp_from_bf16(data, b->half, b->count);
    } else if (w > 1) {
        /* divide (as torch does), with the reduce kernels' vectorised AVG finish */
        spmd__avg_finish(data, b->count, SPMD_F32, w);
    }
    if (b->flat)
        for (int k = 0; k < b->n; k++) {
            dparam *p = &d->p[b->idx[k]];
            memcpy(p->grad, b->flat + p->offset, p->count * sizeof(float));
        }
    return SPMD_OK;
}

/* ---- construction ------------------------------------------------------- */

static uint64_t name_hash(const char *s) {
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

/* Every rank must have registered the same tensors: compare counts and sizes
 * against rank 0's, computed identically on every rank from gathered data. */
static spmd_status verify(spmd_ddp *d, int nitems, const size_t *counts, const char *const *names,
                          const char *what) {
    int w = spmd_group_size(d->g);
    int64_t mine = nitems;
    int64_t *all = malloc(sizeof(int64_t) * (size_t)w);
    if (!all) return fail(d, SPMD_ERR_NOMEM, "out of memory");
    spmd_status st = spmd_all_gather(d->g, &mine, all, 1, SPMD_I64);
    if (st) { free(all); return fail(d, st, "verifying %ss: %s", what, spmd_group_errmsg(d->g)); }
    for (int r = 1; r < w; r++)
        if (all[r] != all[0]) {
            st = fail(d, SPMD_ERR_MISMATCH, "rank %d registered %lld %ss but rank 0 registered %lld", r,
                      (long long)all[r], what, (long long)all[0]);
            free(all);
            return st;
        }
    free(all);
    if (nitems == 0) return SPMD_OK;
    size_t n = (size_t)nitems;
    int64_t *sig = malloc(sizeof(int64_t) * 2 * n);
    int64_t *sigs = malloc(sizeof(int64_t) * 2 * n * (size_t)w);
    if (!sig || !sigs) { free(sig); free(sigs); return fail(d, SPMD_ERR_NOMEM, "out of memory"); }
    for (size_t i = 0; i < n; i++) {
        sig[2 * i] = (int64_t)counts[i];
        sig[2 * i + 1] = (int64_t)name_hash(names[i]);
    }
    st = spmd_all_gather(d->g, sig, sigs, 2 * n, SPMD_I64);
    if (st) fail(d, st, "verifying %ss: %s", what, spmd_group_errmsg(d->g));
    for (int r = 1; r < w && !st; r++)
        for (size_t i = 0; i < n && !st; i++) {
            const int64_t *s0 = sigs + 2 * i, *sr = sigs + (size_t)r * 2 * n + 2 * i;
            if (sr[0] != s0[0])
                st = fail(d, SPMD_ERR_MISMATCH, "rank %d's %s %zu ('%s' here) has %lld elements but rank 0's has %lld",
                          r, what, i, names[i], (long long)sr[0], (long long)s0[0]);
            else if (sr[1] != s0[1])
                st = fail(d, SPMD_ERR_MISMATCH, "rank %d's %s %zu is named differently from rank 0's ('%s' here)", r,
                          what, i, names[i]);
        }
    free(sig);
    free(sigs);
    return st;
}

/* Broadcast a list of float tensors from `root`, coalescing runs that are
 * contiguous in memory. */
static spmd_status bcast_tensors(spmd_ddp *d, float **ptrs, const size_t *counts, int n, int root) {
    int i = 0;
    while (i < n) {
        float *start = ptrs[i];
        size_t total = counts[i];
        int j = i + 1;
        while (j < n && ptrs[j] == start + total) total += counts[j++];
        spmd_status st = spmd_broadcast(d->g, start, total, SPMD_F32, root);
        if (st) return fail(d, st, "broadcast from rank %d: %s", root, spmd_group_errmsg(d->g));
        i = j;
    }
    return SPMD_OK;
}

/* Collective: with spmd_ddp_alloc_grads on every rank and every gradient in
 * that memory, at the same offsets everywhere, map the other ranks' gradient
 * memory if this host allows (d->shared). */
static spmd_status share_grads(spmd_ddp *d) {
    int32_t have = d->shm != NULL, all_have = 0;
    spmd_status st = spmd_all_reduce(d->g, &have, &all_have, 1, SPMD_I32, SPMD_MIN);
    if (st) return fail(d, st, "sharing gradients: %s", spmd_group_errmsg(d->g));
    if (!all_have) return SPMD_OK;
    const float *base = spmd__shm_data(d->shm);
    uint64_t layout = name_hash("layout") ^ (uint64_t)d->np;
    for (int i = 0; i < d->np && layout; i++) {
        const dparam *p = &d->p[i];
        if (p->grad < base || p->grad + p->count > base + d->shm_count) layout = 0; /* outside: no sharing */
        else layout = (layout ^ (uint64_t)(p->grad - base)) * 1099511628211ull ^ p->count;
    }
    st = spmd__shm_connect(d->shm, layout, &d->shared, d->err, sizeof d->err);
    if (st || !d->shared) return st;
    /* the step memory: on every rank or on none, with the same shape
     * (one MIN gives the least k and, negated, the greatest) */
    int32_t k = d->step_shm ? (int32_t)d->step_k : 0;
    int32_t step[3] = {d->step_shm != NULL, k, -k}, all_step[3] = {0, 0, 0};
    st = spmd_all_reduce(d->g, step, all_step, 3, SPMD_I32, SPMD_MIN);
    if (st) return fail(d, st, "sharing the step memory: %s", spmd_group_errmsg(d->g));
    if (all_step[0] && all_step[1] != -all_step[2])
        return fail(d, SPMD_ERR_MISMATCH, "alloc_step: ranks keep different numbers of state arrays (%d to %d)",
                    all_step[1], -all_step[2]);
    if (!all_step[0]) return SPMD_OK;
    st = spmd__shm_connect(d->step_shm, layout ^ (d->step_k + 1) * 0x9e3779b97f4a7c15ull, &d->step_shared, d->err,
                           sizeof d->err);
    return st;
}

spmd_status spmd_ddp_finalize(spmd_ddp *d) {
    if (!d) return SPMD_ERR_INVALID;
    if (d->finalized) return fail(d, SPMD_ERR_INVALID, "finalize called twice");
    int n = d->np > d->nb ? d->np : d->nb;
    size_t *counts = malloc(sizeof(size_t) * (size_t)(n ? n : 1));
    const char **names = malloc(sizeof(char *) * (size_t)(n ? n : 1));
    float **ptrs = malloc(sizeof(float *) * (size_t)(n ? n : 1));
    int *order = malloc(sizeof(int) * (size_t)(d->np ? d->np : 1));
    d->order = malloc(sizeof(int) * (size_t)(d->np ? d->np : 1));
    spmd_status st = SPMD_OK;
    if (!counts || !names || !ptrs || !order || !d->order) st = fail(d, SPMD_ERR_NOMEM, "out of memory");
    if (!st) {
        for (int i = 0; i < d->np; i++) { counts[i] = d->p[i].count; names[i] = d->p[i].name; ptrs[i] = d->p[i].param; }
        st = verify(d, d->np, counts, names, "parameter");
        if (!st) st = bcast_tensors(d, ptrs, counts, d->np, 0);
    }
    if (!st) {
        for (int i = 0; i < d->nb; i++) { counts[i] = d->b[i].count; names[i] = d->b[i].name; ptrs[i] = d->b[i].buf; }
        st = verify(d, d->nb, counts, names, "buffer");
        if (!st) st = bcast_tensors(d, ptrs, counts, d->nb, 0);
    }
    if (!st) {
        d->bufcount = 0;
        for (int i = 0; i < d->nb; i++) d->bufcount += d->b[i].count;
        if (d->bufcount && !(d->bufstage = malloc(sizeof(float) * d->bufcount))) st = fail(d, SPMD_ERR_NOMEM, "out of memory");
    }
    if (!st) st = share_grads(d);
    if (!st) {
        for (int k = 0; k < d->np; k++) order[k] = d->np - 1 - k; /* backward order */
        st = build_buckets(d, order);
    }
    free(counts);
    free(names);
    free(ptrs);
    free(order);
    if (!st) d->finalized = 1;
    return st;
}

/* ---- the step ------------------------------------------------------------- */

static spmd_status bcast_buffers(spmd_ddp *d) {
    if (!d->o.broadcast_buffers || !d->bufcount || spmd_group_size(d->g) == 1) return SPMD_OK;
    size_t off = 0;
    for (int i = 0; i < d->nb; i++) { memcpy(d->bufstage + off, d->b[i].buf, d->b[i].count * sizeof(float)); off += d->b[i].count; }
    spmd_status st = spmd_broadcast(d->g, d->bufstage, d->bufcount, SPMD_F32, 0);
    if (st) return fail(d, st, "buffer broadcast: %s", spmd_group_errmsg(d->g));
    off = 0;
    for (int i = 0; i < d->nb; i++) { memcpy(d->b[i].buf, d->bufstage + off, d->b[i].count * sizeof(float)); off += d->b[i].count; }
    return SPMD_OK;
}

/* How many ranks are still training (join bookkeeping). */
static spmd_status count_active(spmd_ddp *d, int me_active, int *active) {
    int32_t v = me_active, sum = 0;
    spmd_status st = spmd_all_reduce(d->g, &v, &sum, 1, SPMD_I32, SPMD_SUM);
    if (st) return fail(d, st, "join bookkeeping: %s", spmd_group_errmsg(d->g));
    *active = sum;
    return SPMD_OK;
}

spmd_status spmd_ddp_prepare(spmd_ddp *d) {
    if (!d || !d->finalized) return d ? fail(d, SPMD_ERR_INVALID, "prepare before finalize") : SPMD_ERR_INVALID;
    d->sticky = SPMD_OK;
    if (d->join_enabled) {
        int active = 0;
        spmd_status st = count_active(d, 1, &active);
        if (st) return st;
    }
    return bcast_buffers(d);
}

spmd_status spmd_ddp_grad_ready(spmd_ddp *d, int i) {
    if (!d || !d->finalized) return d ? fail(d, SPMD_ERR_INVALID, "grad_ready before finalize") : SPMD_ERR_INVALID;
    if (i < 0 || i >= d->np) return fail(d, SPMD_ERR_INVALID, "grad_ready: parameter %d out of range [0, %d)", i, d->np);
    dparam *p = &d->p[i];
    if (p->ready) return fail(d, SPMD_ERR_INVALID, "parameter %d ('%s') marked ready twice in one step", i, p->name);
    p->ready = 1;
    d->order[d->norder++] = i;
    if (d->no_sync) return SPMD_OK;
    bucket *b = &d->bk[p->bucket];
    if (b->flat) memcpy(b->flat + p->offset, p->grad, p->count * sizeof(float));
    b->pending--;
    spmd_status st = d->o.overlap ? launch_ready(d) : SPMD_OK;
    if (d->shared) shm_progress(d);
    return st;
}

void spmd_ddp_grad_ready_hook(void *ctx, int param_index) {
    spmd_ddp *d = ctx;
    spmd_status st = spmd_ddp_grad_ready(d, param_index);
    if (st && !d->sticky) d->sticky = st;
}

static void reset_step(spmd_ddp *d) {
    for (int i = 0; i < d->np; i++) d->p[i].ready = 0;
    for (int b = 0; b < d->nbk; b++) d->bk[b].pending = d->bk[b].n;
    d->next_launch = 0;
    d->norder = 0;
}

/* After the first step: rebuild the buckets in the order gradients became
 * ready on rank 0 (broadcast, so every rank cuts the same buckets). */
static spmd_status rebuild(spmd_ddp *d, int have_order) {
    int32_t *ord = malloc(sizeof(int32_t) * (size_t)(d->np ? d->np : 1));
    int *order = malloc(sizeof(int) * (size_t)(d->np ? d->np : 1));
    if (!ord || !order) { free(ord); free(order); return fail(d, SPMD_ERR_NOMEM, "out of memory"); }
    for (int k = 0; k < d->np; k++) ord[k] = have_order && d->norder == d->np ? d->order[k] : d->np - 1 - k;
    spmd_status st = spmd_broadcast(d->g, ord, (size_t)d->np, SPMD_I32, 0);
    if (st) fail(d, st, "bucket rebuild: %s", spmd_group_errmsg(d->g));
    for (int k = 0; k < d->np && !st; k++) {
        if (ord[k] < 0 || ord[k] >= d->np) st = fail(d, SPMD_ERR_PROTOCOL, "bucket rebuild: bad order from rank 0");
        order[k] = ord[k];
    }
    if (!st) st = build_buckets(d, order);
    d->rebuilt = 1;
    free(ord);
    free(order);
    return st;
}

spmd_status spmd_ddp_finish(spmd_ddp *d) {
    if (!d || !d->finalized) return d ? fail(d, SPMD_ERR_INVALID, "finish before finalize") : SPMD_ERR_INVALID;
    double t0 = now_s();
    spmd_status st = d->sticky;
    d->stepped = 0;
    if (d->no_sync) {
        if (!st) st = gather_state(d);   /* the caller may step on its own */
        reset_step(d);
        d->last_wait = 0;
        return st;
    }
    /* Parameters that got no gradient this step. */
    if (!st) {
        char names[256] = "";
        int missing = 0;
        for (int i = 0; i < d->np; i++) {
            if (d->p[i].ready) continue;
            if (d->o.find_unused_parameters) {
                memset(d->p[i].grad, 0, d->p[i].count * sizeof(float));
                spmd_ddp_grad_ready(d, i);
                continue;
            }
            if (missing++ < 4) {
                size_t len = strlen(names);
                snprintf(names + len, sizeof names - len, "%s'%s'", len ? ", " : "", d->p[i].name);
            }
        }
        if (missing) {
            st = fail(d, SPMD_ERR_INVALID,
                      "rank %d: %d parameter(s) received no gradient this step (%s%s); pass "
                      "find_unused_parameters to reduce them as zero",
                      spmd_group_rank(d->g), missing, names, missing > 4 ? ", ..." : "");
            /* The other ranks would wait for our buckets: fail them now. */
            spmd_group_abort(d->g, d->err);
        }
    }
    if (!st) st = launch_ready(d); /* everything (no-overlap mode launches here) */
    for (int b = 0; b < d->nbk; b++) {
        if (st) {
            if (d->bk[b].work) { spmd_work_wait(d->bk[b].work, -1); spmd_work_free(d->bk[b].work); d->bk[b].work = NULL; }
            continue;
        }
        st = complete(d, &d->bk[b], 0);
    }
    d->last_wait = now_s() - t0;
    if (!st && step_mode(d)) d->stepped = 1;
    /* the caller steps the whole state itself now, or new buckets give
     * ranks other slices: each rank needs the whole state first */
    if (!st && (!d->stepped || !d->rebuilt)) st = gather_state(d);
    if (!st && !d->rebuilt) st = rebuild(d, 1);
    reset_step(d);
    d->sticky = SPMD_OK;
    return st;
}

/* The end of join, as torch's Join._sync_final_model: the rank that joined
 * last (the highest of several that joined at the same step) trained every
 * step, so its parameters and buffers are copied to every rank and the
 * replicas end identical.  (The optimizer state stays each rank's, as in
 * torch.) */
static spmd_status sync_final_model(spmd_ddp *d, int last_joiner) {
    int32_t mine = last_joiner ? spmd_group_rank(d->g) : -1, root = -1;
    spmd_status st = spmd_all_reduce(d->g, &mine, &root, 1, SPMD_I32, SPMD_MAX);
    if (st) return fail(d, st, "join: final model sync: %s", spmd_group_errmsg(d->g));
    if (root < 0) return fail(d, SPMD_ERR_PROTOCOL, "join: no rank joined last");
    int n = d->np > d->nb ? d->np : d->nb;
    float **ptrs = malloc(sizeof(float *) * (size_t)(n ? n : 1));
    size_t *counts = malloc(sizeof(size_t) * (size_t)(n ? n : 1));
    if (!ptrs || !counts) st = fail(d, SPMD_ERR_NOMEM, "out of memory");
    if (!st) {
        for (int i = 0; i < d->np; i++) { ptrs[i] = d->p[i].param; counts[i] = d->p[i].count; }
        st = bcast_tensors(d, ptrs, counts, d->np, root);
    }
    if (!st) {
        for (int i = 0; i < d->nb; i++) { ptrs[i] = d->b[i].buf; counts[i] = d->b[i].count; }
        st = bcast_tensors(d, ptrs, counts, d->nb, root);
    }
    free(ptrs);
    free(counts);
    return st;
}

spmd_status spmd_ddp_join(spmd_ddp *d) {
    if (!d || !d->finalized) return d ? fail(d, SPMD_ERR_INVALID, "join before finalize") : SPMD_ERR_INVALID;
    if (!d->join_enabled) return fail(d, SPMD_ERR_INVALID, "join needs spmd_ddp_set_join_enabled(d, 1) on every rank");
    for (int last_joiner = 1;; last_joiner = 0) {
        int active = 0;
        spmd_status st = count_active(d, 0, &active);
        if (st) return st;
        if (active == 0) return sync_final_model(d, last_joiner);
        /* Shadow one step of the ranks still training: same collectives, in
         * the same order, with zero gradients. */
        if ((st = bcast_buffers(d))) return st;
        if (d->no_sync) continue;
        /* (for in-place buckets this zeroes our own gradients: we are done with them) */
        for (int b = 0; b < d->nbk; b++) memset(bucket_data(&d->bk[b]), 0, d->bk[b].count * sizeof(float));
        for (int b = 0; b < d->nbk && !st; b++) st = launch(d, &d->bk[b]);
        for (int b = 0; b < d->nbk; b++) {
            spmd_status s2 = complete(d, &d->bk[b], 1);
            if (!st) st = s2;
        }
        if (!st && !d->rebuilt) st = rebuild(d, 0);
        if (st) return st;
        reset_step(d);
    }
}
