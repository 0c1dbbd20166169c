/* reducer.c — the gradient reducer of include/spmd/ddp.h: registration,
 * finalize, the step, join (ddp_internal.h lists the other files).
 *
 *   backward:  grad_ready(9) grad_ready(8) ... grad_ready(0)
 *   buckets:   [9 8 7]      [6 5 4 3]      [2 1 0]        (reverse registration order)
 *   launch:      └ reduce ┘    └ reduce ┘    └ ...   as each bucket fills,
 *                                                     strictly in bucket order
 *   finish:    wait bucket 0, 1, 2 -> averaged gradients in place
 *
 * Each bucket goes by one of the strategies: all_reduce over the wire
 * (wire.c), summed in shared memory (shared.c), or summed and stepped by
 * its slice's owner (sharded.c).
 */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "coll/reduce.h"
#include "common/seconds.h"
#include "ddp_internal.h"

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

void spmd_ddp_free(spmd_ddp *d) {
    if (!d) return;
    spmd__ddp_free_buckets(d);
    spmd__arena_free(d->shm);
    spmd__arena_free(d->step_shm);
    for (int i = 0; i < d->np; i++) free(d->p[i].name);
    for (int i = 0; i < d->nb; i++) free(d->b[i].name);
    free(d->p);
    free(d->b);
    free(d->bufstage);
    free(d->order);
    free(d);
}

spmd_status spmd_ddp_add_param(spmd_ddp *d, const char *name, float *param, float *grad, size_t count) {
    if (!d) return SPMD_ERR_INVALID;
    if (d->finalized) return spmd__ddp_fail(d, SPMD_ERR_INVALID, "add_param after finalize");
    if (!param || !grad) return spmd__ddp_fail(d, SPMD_ERR_INVALID, "add_param '%s': NULL buffer", name ? name : "?");
    if (d->np == d->capp) {
        int cap = d->capp ? d->capp * 2 : 16;
        dparam *np = realloc(d->p, sizeof *np * (size_t)cap);
        if (!np) return spmd__ddp_fail(d, SPMD_ERR_NOMEM, "out of memory");
        d->p = np;
        d->capp = cap;
    }
    dparam *p = &d->p[d->np];
    memset(p, 0, sizeof *p);
    p->name = strdup(name ? name : "");
    if (!p->name) return spmd__ddp_fail(d, SPMD_ERR_NOMEM, "out of memory");
    p->param = param;
    p->grad = grad;
    p->count = count;
    d->np++;
    return SPMD_OK;
}

spmd_status spmd_ddp_add_buffer(spmd_ddp *d, const char *name, float *buf, size_t count) {
    if (!d) return SPMD_ERR_INVALID;
    if (d->finalized) return spmd__ddp_fail(d, SPMD_ERR_INVALID, "add_buffer after finalize");
    if (!buf && count) return spmd__ddp_fail(d, SPMD_ERR_INVALID, "add_buffer '%s': NULL buffer", name ? name : "?");
    if (d->nb == d->capb) {
        int cap = d->capb ? d->capb * 2 : 16;
        dbuf *nb = realloc(d->b, sizeof *nb * (size_t)cap);
        if (!nb) return spmd__ddp_fail(d, SPMD_ERR_NOMEM, "out of memory");
        d->b = nb;
        d->capb = cap;
    }
    dbuf *b = &d->b[d->nb];
    b->name = strdup(name ? name : "");
    if (!b->name) return spmd__ddp_fail(d, SPMD_ERR_NOMEM, "out of memory");
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

static spmd_status launch(spmd_ddp *d, bucket *b) {
    b->launched = 1;
    if (spmd__ddp_shared_bucket(d, b)) {
        spmd__ddp_shared_launch(d, b);
        return SPMD_OK;
    }
    return spmd__ddp_wire_launch(d, b);
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
    if (b->shm) return spmd__ddp_shared_complete(d, b);
    return spmd__ddp_wire_complete(d, b, discard);
}

/* Every rank must have registered the same tensors: compare counts and sizes
 * against rank 0's, computed identically on every rank from gathered data. */
static spmd_status verify(spmd_ddp *d, int nitems, const size_t *counts, const char *const *names,
                          const char *what) {
    int w = spmd_group_size(d->g);
    int64_t mine = nitems;
    int64_t *all = malloc(sizeof(int64_t) * (size_t)w);
    if (!all) return spmd__ddp_fail(d, SPMD_ERR_NOMEM, "out of memory");
    spmd_status st = spmd_all_gather(d->g, &mine, all, 1, SPMD_I64);
    if (st) { free(all); return spmd__ddp_fail(d, st, "verifying %ss: %s", what, spmd_group_errmsg(d->g)); }
    for (int r = 1; r < w; r++)
        if (all[r] != all[0]) {
            st = spmd__ddp_fail(d, SPMD_ERR_MISMATCH, "rank %d registered %lld %ss but rank 0 registered %lld", r,
                      (long long)all[r], what, (long long)all[0]);
            free(all);
            return st;
        }
    free(all);
    if (nitems == 0) return SPMD_OK;
    size_t n = (size_t)nitems;
    int64_t *sig = malloc(sizeof(int64_t) * 2 * n);
    int64_t *sigs = malloc(sizeof(int64_t) * 2 * n * (size_t)w);
    if (!sig || !sigs) { free(sig); free(sigs); return spmd__ddp_fail(d, SPMD_ERR_NOMEM, "out of memory"); }
    for (size_t i = 0; i < n; i++) {
        sig[2 * i] = (int64_t)counts[i];
        sig[2 * i + 1] = (int64_t)spmd__ddp_name_hash(names[i]);
    }
    st = spmd_all_gather(d->g, sig, sigs, 2 * n, SPMD_I64);
    if (st) spmd__ddp_fail(d, st, "verifying %ss: %s", what, spmd_group_errmsg(d->g));
    for (int r = 1; r < w && !st; r++)
        for (size_t i = 0; i < n && !st; i++) {
            const int64_t *s0 = sigs + 2 * i, *sr = sigs + (size_t)r * 2 * n + 2 * i;
            if (sr[0] != s0[0])
                st = spmd__ddp_fail(d, SPMD_ERR_MISMATCH, "rank %d's %s %zu ('%s' here) has %lld elements but rank 0's has %lld",
                          r, what, i, names[i], (long long)sr[0], (long long)s0[0]);
            else if (sr[1] != s0[1])
                st = spmd__ddp_fail(d, SPMD_ERR_MISMATCH, "rank %d's %s %zu is named differently from rank 0's ('%s' here)", r,
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
        if (st) return spmd__ddp_fail(d, st, "broadcast from rank %d: %s", root, spmd_group_errmsg(d->g));
        i = j;
    }
    return SPMD_OK;
}

spmd_status spmd_ddp_finalize(spmd_ddp *d) {
    if (!d) return SPMD_ERR_INVALID;
    if (d->finalized) return spmd__ddp_fail(d, SPMD_ERR_INVALID, "finalize called twice");
    int n = d->np > d->nb ? d->np : d->nb;
    size_t *counts = malloc(sizeof(size_t) * (size_t)(n ? n : 1));
    const char **names = malloc(sizeof(char *) * (size_t)(n ? n : 1));
    float **ptrs = malloc(sizeof(float *) * (size_t)(n ? n : 1));
    int *order = malloc(sizeof(int) * (size_t)(d->np ? d->np : 1));
    d->order = malloc(sizeof(int) * (size_t)(d->np ? d->np : 1));
    spmd_status st = SPMD_OK;
    if (!counts || !names || !ptrs || !order || !d->order) st = spmd__ddp_fail(d, SPMD_ERR_NOMEM, "out of memory");
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
        if (d->bufcount && !(d->bufstage = malloc(sizeof(float) * d->bufcount))) st = spmd__ddp_fail(d, SPMD_ERR_NOMEM, "out of memory");
    }
    if (!st) st = spmd__ddp_share(d);
    if (!st) {
        for (int k = 0; k < d->np; k++) order[k] = d->np - 1 - k; /* backward order */
        st = spmd__ddp_build_buckets(d, order);
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
    if (st) return spmd__ddp_fail(d, st, "buffer broadcast: %s", spmd_group_errmsg(d->g));
    off = 0;
    for (int i = 0; i < d->nb; i++) { memcpy(d->b[i].buf, d->bufstage + off, d->b[i].count * sizeof(float)); off += d->b[i].count; }
    return SPMD_OK;
}

/* How many ranks are still training (join bookkeeping). */
static spmd_status count_active(spmd_ddp *d, int me_active, int *active) {
    int32_t v = me_active, sum = 0;
    spmd_status st = spmd_all_reduce(d->g, &v, &sum, 1, SPMD_I32, SPMD_SUM);
    if (st) return spmd__ddp_fail(d, st, "join bookkeeping: %s", spmd_group_errmsg(d->g));
    *active = sum;
    return SPMD_OK;
}

spmd_status spmd_ddp_prepare(spmd_ddp *d) {
    if (!d || !d->finalized) return d ? spmd__ddp_fail(d, SPMD_ERR_INVALID, "prepare before finalize") : SPMD_ERR_INVALID;
    d->sticky = SPMD_OK;
    if (d->join_enabled) {
        int active = 0;
        spmd_status st = count_active(d, 1, &active);
        if (st) return st;
    }
    return bcast_buffers(d);
}

spmd_status spmd_ddp_grad_ready(spmd_ddp *d, int i) {
    if (!d || !d->finalized) return d ? spmd__ddp_fail(d, SPMD_ERR_INVALID, "grad_ready before finalize") : SPMD_ERR_INVALID;
    if (i < 0 || i >= d->np) return spmd__ddp_fail(d, SPMD_ERR_INVALID, "grad_ready: parameter %d out of range [0, %d)", i, d->np);
    dparam *p = &d->p[i];
    if (p->ready) return spmd__ddp_fail(d, SPMD_ERR_INVALID, "parameter %d ('%s') marked ready twice in one step", i, p->name);
    p->ready = 1;
    d->order[d->norder++] = i;
    if (d->no_sync) return SPMD_OK;
    bucket *b = &d->bk[p->bucket];
    if (b->flat) memcpy(b->flat + p->offset, p->grad, p->count * sizeof(float));
    b->pending--;
    spmd_status st = d->o.overlap ? launch_ready(d) : SPMD_OK;
    if (d->shared) spmd__ddp_shared_progress(d);
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
    if (!ord || !order) { free(ord); free(order); return spmd__ddp_fail(d, SPMD_ERR_NOMEM, "out of memory"); }
    for (int k = 0; k < d->np; k++) ord[k] = have_order && d->norder == d->np ? d->order[k] : d->np - 1 - k;
    spmd_status st = spmd_broadcast(d->g, ord, (size_t)d->np, SPMD_I32, 0);
    if (st) spmd__ddp_fail(d, st, "bucket rebuild: %s", spmd_group_errmsg(d->g));
    for (int k = 0; k < d->np && !st; k++) {
        if (ord[k] < 0 || ord[k] >= d->np) st = spmd__ddp_fail(d, SPMD_ERR_PROTOCOL, "bucket rebuild: bad order from rank 0");
        order[k] = ord[k];
    }
    if (!st) st = spmd__ddp_build_buckets(d, order);
    d->rebuilt = 1;
    free(ord);
    free(order);
    return st;
}

spmd_status spmd_ddp_finish(spmd_ddp *d) {
    if (!d || !d->finalized) return d ? spmd__ddp_fail(d, SPMD_ERR_INVALID, "finish before finalize") : SPMD_ERR_INVALID;
    double t0 = spmd__seconds();
    spmd_status st = d->sticky;
    d->stepped = 0;
    if (d->no_sync) {
        if (!st) st = spmd__ddp_gather(d);   /* the caller may step on its own */
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
            st = spmd__ddp_fail(d, SPMD_ERR_INVALID,
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
    d->last_wait = spmd__seconds() - t0;
    if (!st && spmd__ddp_step_mode(d)) d->stepped = 1;
    /* the caller steps the whole state itself now, or new buckets give
     * ranks other slices: each rank needs the whole state first */
    if (!st && (!d->stepped || !d->rebuilt)) st = spmd__ddp_gather(d);
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
    if (st) return spmd__ddp_fail(d, st, "join: final model sync: %s", spmd_group_errmsg(d->g));
    if (root < 0) return spmd__ddp_fail(d, SPMD_ERR_PROTOCOL, "join: no rank joined last");
    int n = d->np > d->nb ? d->np : d->nb;
    float **ptrs = malloc(sizeof(float *) * (size_t)(n ? n : 1));
    size_t *counts = malloc(sizeof(size_t) * (size_t)(n ? n : 1));
    if (!ptrs || !counts) st = spmd__ddp_fail(d, SPMD_ERR_NOMEM, "out of memory");
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
    if (!d || !d->finalized) return d ? spmd__ddp_fail(d, SPMD_ERR_INVALID, "join before finalize") : SPMD_ERR_INVALID;
    if (!d->join_enabled) return spmd__ddp_fail(d, SPMD_ERR_INVALID, "join needs spmd_ddp_set_join_enabled(d, 1) on every rank");
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
        for (int b = 0; b < d->nbk; b++) memset(spmd__ddp_bucket_data(&d->bk[b]), 0, d->bk[b].count * sizeof(float));
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
