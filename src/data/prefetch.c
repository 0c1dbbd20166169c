/* prefetch.c — a batch iterator whose batches a loader thread fills ahead
 * (spmd/data.h, "Prefetching batches").
 *
 * depth + 1 slots in a ring: batch k lives in slot k % nslots.  The loader
 * fills batch k once k < released + nslots (released: batches the consumer
 * has given back by asking for the next one), so at most depth batches wait
 * while the consumer holds one.  One mutex guards the counters; the fill
 * runs outside it.  The loader stops at the end, at its first error (kept
 * with the batch number for the consumer, who first gets every batch before
 * it) or when stop is asked. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "data_internal.h"

#define MAX_DEPTH 64

typedef struct {
    float *x;
    int *y;
    const size_t *idx;
    size_t count;
} slot;

struct spmd_prefetch {
    spmd_prefetch_opts o;
    size_t nbatches;          /* batches after first_batch */
    int nslots;
    slot *slots;
    pthread_t thread;
    int started;              /* thread, mu and cv exist */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    /* under mu */
    size_t produced;          /* batches filled */
    size_t released;          /* batches the consumer gave back */
    size_t consumed;          /* batches handed to the consumer */
    int holding;              /* the consumer holds batch consumed - 1 */
    int failed, stopping;
    spmd_status status;
    char err[512];
    void *own;                /* the fill's context when the iterator made it (freed at stop) */
};

static void *loader(void *arg) {
    spmd_prefetch *p = arg;
    const size_t B = p->o.batch_size;
    for (size_t k = 0;; k++) {
        pthread_mutex_lock(&p->mu);
        while (!p->stopping && k < p->nbatches && k >= p->released + (size_t)p->nslots)
            pthread_cond_wait(&p->cv, &p->mu);
        int go = !p->stopping && k < p->nbatches;
        pthread_mutex_unlock(&p->mu);
        if (!go) return NULL;
        slot *s = &p->slots[k % (size_t)p->nslots];
        size_t start = (p->o.first_batch + k) * B, left = p->o.n - start;
        s->count = left < B ? left : B;
        s->idx = p->o.indices + start;
        char err[400] = "";
        spmd_status st = p->o.fill(p->o.ctx, s->idx, s->count, (uint64_t)(p->o.first_batch + k), s->x, s->y,
                                   err, sizeof err);
        pthread_mutex_lock(&p->mu);
        if (st != SPMD_OK) {
            p->failed = 1;
            p->status = st;
            snprintf(p->err, sizeof p->err, "batch %zu: %s", p->o.first_batch + k,
                     err[0] ? err : spmd_status_str(st));
        } else {
            p->produced = k + 1;
        }
        pthread_cond_broadcast(&p->cv);
        pthread_mutex_unlock(&p->mu);
        if (st != SPMD_OK) return NULL;
    }
}

spmd_status spmd_prefetch_start(const spmd_prefetch_opts *o, spmd_prefetch **out, char *err, size_t errlen) {
    if (!o || !out || !o->fill || o->batch_size == 0 || o->x_per_sample == 0 || (o->n && !o->indices))
        return spmd__fail(err, errlen, SPMD_ERR_INVALID, "prefetch: needs indices, a fill function, "
                                                         "a batch size and an input size");
    if (o->depth < 1 || o->depth > MAX_DEPTH)
        return spmd__fail(err, errlen, SPMD_ERR_INVALID, "prefetch: depth %d is not in [1, %d]", o->depth,
                          MAX_DEPTH);
    size_t total = o->drop_last ? o->n / o->batch_size : (o->n + o->batch_size - 1) / o->batch_size;
    if (o->first_batch > total)
        return spmd__fail(err, errlen, SPMD_ERR_INVALID, "prefetch: skipping %zu of %zu batches",
                          o->first_batch, total);
    spmd_prefetch *p = calloc(1, sizeof *p);
    if (!p) return spmd__fail(err, errlen, SPMD_ERR_NOMEM, "prefetch: out of memory");
    p->o = *o;
    p->nbatches = total - o->first_batch;
    p->nslots = o->depth + 1;
    p->slots = calloc((size_t)p->nslots, sizeof *p->slots);
    int ok = p->slots != NULL;
    for (int i = 0; ok && i < p->nslots; i++) {
        p->slots[i].x = malloc(sizeof(float) * o->x_per_sample * o->batch_size);
        p->slots[i].y = malloc(sizeof(int) * o->batch_size);
        ok = p->slots[i].x && p->slots[i].y;
    }
    if (!ok) {
        spmd_prefetch_stop(p);   /* frees what was allocated; no thread yet */
        return spmd__fail(err, errlen, SPMD_ERR_NOMEM, "prefetch: out of memory for %d batches", o->depth + 1);
    }
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    int rc = spmd__thread_start(&p->thread, loader, p, "spmd-prefetch");
    if (rc != 0) {
        pthread_mutex_destroy(&p->mu);
        pthread_cond_destroy(&p->cv);
        for (int i = 0; i < p->nslots; i++) free(p->slots[i].x), free(p->slots[i].y);
        free(p->slots);
        free(p);
        return spmd__fail_errno(err, errlen, SPMD_ERR_IO, rc, "prefetch: cannot start the loader thread");
    }
    p->started = 1;
    *out = p;
    return SPMD_OK;
}

int spmd_prefetch_next(spmd_prefetch *p, const float **x, const int **y, const size_t **idx, size_t *count) {
    if (!p) return -1;
    pthread_mutex_lock(&p->mu);
    if (p->holding) {   /* the batch returned last time goes back to the loader */
        p->holding = 0;
        p->released++;
        pthread_cond_broadcast(&p->cv);
    }
    while (p->consumed >= p->produced && !p->failed && p->consumed < p->nbatches)
        pthread_cond_wait(&p->cv, &p->mu);
    int rc;
    if (p->consumed < p->produced) {
        const slot *s = &p->slots[p->consumed % (size_t)p->nslots];
        if (x) *x = s->x;
        if (y) *y = s->y;
        if (idx) *idx = s->idx;
        if (count) *count = s->count;
        p->consumed++;
        p->holding = 1;
        rc = 1;
    } else {
        rc = p->failed ? -1 : 0;
    }
    pthread_mutex_unlock(&p->mu);
    return rc;
}

spmd_status spmd_prefetch_status(spmd_prefetch *p) {
    if (!p) return SPMD_ERR_INVALID;
    pthread_mutex_lock(&p->mu);
    spmd_status st = p->failed ? p->status : SPMD_OK;
    pthread_mutex_unlock(&p->mu);
    return st;
}

const char *spmd_prefetch_errmsg(const spmd_prefetch *p) {
    if (!p) return "no prefetch iterator";
    /* written once, before failed is set under the lock the consumer took
     * to learn of the failure */
    return p->err;
}

void spmd_prefetch_stop(spmd_prefetch *p) {
    if (!p) return;
    if (p->started) {
        pthread_mutex_lock(&p->mu);
        p->stopping = 1;
        pthread_cond_broadcast(&p->cv);
        pthread_mutex_unlock(&p->mu);
        pthread_join(p->thread, NULL);
        pthread_mutex_destroy(&p->mu);
        pthread_cond_destroy(&p->cv);
    }
    for (int i = 0; p->slots && i < p->nslots; i++) free(p->slots[i].x), free(p->slots[i].y);
    free(p->slots);
    free(p->own);
    free(p);
}

/* ---- over an image dataset ------------------------------------------------ */
typedef struct {
    const spmd_dataset *ds;
    float mean, std;
} normalised_images;

static spmd_status fill_images(void *ctx, const size_t *idx, size_t count, uint64_t batch_no, float *x, int *y,
                               char *err, size_t errlen) {
    const normalised_images *c = ctx;
    (void)batch_no;
    spmd_status st = spmd_dataset_batch(c->ds, idx, count, c->mean, c->std, x, y);
    if (st) snprintf(err, errlen, "an example index is beyond the dataset's %zu examples", c->ds->n);
    return st;
}

spmd_status spmd_prefetch_dataset(const spmd_dataset *ds, float mean, float std, const size_t *indices, size_t n,
                                  size_t batch_size, int depth, spmd_prefetch **out, char *err, size_t errlen) {
    if (!ds || ds->rows < 1 || ds->cols < 1 || !(std > 0))
        return spmd__fail(err, errlen, SPMD_ERR_INVALID, "prefetch: needs a loaded dataset and std > 0");
    normalised_images *c = malloc(sizeof *c);
    if (!c) return spmd__fail(err, errlen, SPMD_ERR_NOMEM, "prefetch: out of memory");
    *c = (normalised_images){ds, mean, std};
    spmd_prefetch_opts o = {indices, n, batch_size, 0, 0, (size_t)ds->rows * (size_t)ds->cols, depth,
                            fill_images, c};
    spmd_status st = spmd_prefetch_start(&o, out, err, errlen);
    if (st) free(c);
    else (*out)->own = c;   /* the loader reads c through o.ctx only */
    return st;
}
