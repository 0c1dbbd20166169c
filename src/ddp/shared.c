/* shared.c — strategy 2: shared gradients.  With spmd_ddp_alloc_grads on
 * every rank of one host, every rank maps every other's gradient memory
 * (transport/arena.h) and a bucket needs no message: each rank owns a slice
 * of it, sums the slice over the ranks' memories in rank order, divides, and
 * writes the result into every rank's memory (or, in the sharded step,
 * hands it to the optimizer: sharded.c).
 *
 *   launch:  ready := bucket's sequence number      (my gradients are final)
 *   reduce:  when every rank's ready has reached it (polled from grad_ready,
 *            waited for in finish): sum my slice, write it everywhere,
 *            done := the sequence number
 *   finish:  wait until every rank's done has reached the last bucket's
 */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "coll/reduce.h"
#include "ddp_internal.h"

spmd_status spmd_ddp_alloc_grads(spmd_ddp *d, size_t count, float **grads) {
    if (!d || !grads) return SPMD_ERR_INVALID;
    *grads = NULL;
    if (d->finalized || d->shm) return spmd__ddp_fail(d, SPMD_ERR_INVALID, "alloc_grads: only once, before finalize");
    d->shm = spmd__group_shm_alloc(d->g, sizeof(float) * (count ? count : 1));
    if (!d->shm) return spmd__ddp_fail(d, SPMD_ERR_NOMEM, "alloc_grads: cannot allocate %zu floats of shared memory", count);
    d->shm_count = count;
    *grads = spmd__arena_data(d->shm);
    return SPMD_OK;
}

/* Does this bucket go through shared memory?  The same answer on every rank:
 * sharing, layout, hooks and compression are agreed or must be. */
int spmd__ddp_shared_bucket(const spmd_ddp *d, const bucket *b) {
    return d->shared && b->view && !d->hook && d->o.compression == SPMD_DDP_COMPRESS_NONE;
}

/* Sum my slice of bucket b over every rank's memory, average it, write it to
 * every rank's memory (or, in the sharded step, apply the optimizer to it).
 * Slices are cut at 64-byte boundaries; the sum runs in rank order, so each
 * element's result does not depend on whose slice it is. */
static void reduce_slice(spmd_ddp *d, bucket *b) {
    enum { CHUNK = 2048 }; /* floats: stays in L1 between the sum and the writes */
    int w = spmd_group_size(d->g);
    size_t lo, hi, off;
    spmd__ddp_slice_of(d, b, spmd_group_rank(d->g), &lo, &hi, &off);
    const int step = spmd__ddp_step_mode(d);
    float tmp[CHUNK];
    for (size_t i = 0; i < hi - lo; i += CHUNK) {
        size_t n = hi - lo - i < CHUNK ? hi - lo - i : CHUNK;
        const float *p0 = (const float *)spmd__arena_peer(d->shm, 0) + off + i;
        const float *p1 = (const float *)spmd__arena_peer(d->shm, 1) + off + i;
        spmd__reduce3(tmp, p0, p1, n, SPMD_F32, SPMD_SUM);
        for (int q = 2; q < w; q++)
            spmd__reduce(tmp, (const float *)spmd__arena_peer(d->shm, q) + off + i, n, SPMD_F32, SPMD_SUM);
        spmd__avg_finish(tmp, n, SPMD_F32, w);
        if (step) {
            spmd__ddp_step_slice(d, off + i, n, tmp);
            continue;
        }
        for (int q = 0; q < w; q++) memcpy((float *)spmd__arena_peer(d->shm, q) + off + i, tmp, n * sizeof(float));
    }
    b->reduced = 1;
    spmd__arena_post(d->shm, SHM_DONE, b->seq);
}

/* Reduce, in bucket order, every launched shared bucket whose gradients are
 * final on every rank; never waits. */
void spmd__ddp_shared_progress(spmd_ddp *d) {
    for (int k = 0; k < d->next_launch; k++) {
        bucket *b = &d->bk[k];
        if (!b->shm || b->reduced) continue;
        if (!spmd__arena_all_reached(d->shm, SHM_READY, b->seq)) return;
        reduce_slice(d, b);
    }
}


void spmd__ddp_shared_launch(spmd_ddp *d, bucket *b) {
    b->shm = 1;
    b->reduced = 0;
    b->seq = ++d->shm_seq;
    spmd__arena_post(d->shm, SHM_READY, b->seq);
}

/* Wait for bucket b's sum (doing my slice if still due); averaged already,
 * and in place.  Peers write into our memory until their done, so even a
 * joined rank waits. */
spmd_status spmd__ddp_shared_complete(spmd_ddp *d, bucket *b) {
    spmd_status st;
    b->shm = 0;
    b->launched = 0;
    if (!b->reduced) {
        st = spmd__arena_wait_all(d->shm, SHM_READY, b->seq, "gradients (shared bucket)", d->err, sizeof d->err);
        if (st) return st;
        reduce_slice(d, b);
    }
    return spmd__arena_wait_all(d->shm, SHM_DONE, b->seq, "share of the bucket sum", d->err, sizeof d->err);
}



/* Collective: with spmd_ddp_alloc_grads on every rank and every gradient in
 * that memory, at the same offsets everywhere, map the other ranks' gradient
 * memory if this host allows (d->shared). */
spmd_status spmd__ddp_share(spmd_ddp *d) {
    int32_t have = d->shm != NULL, all_have = 0;
    spmd_status st = spmd_all_reduce(d->g, &have, &all_have, 1, SPMD_I32, SPMD_MIN);
    if (st) return spmd__ddp_fail(d, st, "sharing gradients: %s", spmd_group_errmsg(d->g));
    if (!all_have) return SPMD_OK;
    const float *base = spmd__arena_data(d->shm);
    uint64_t layout = spmd__ddp_name_hash("layout") ^ (uint64_t)d->np;
    for (int i = 0; i < d->np && layout; i++) {
        const dparam *p = &d->p[i];
        if (p->grad < base || p->grad + p->count > base + d->shm_count) layout = 0; /* outside: no sharing */
        else layout = (layout ^ (uint64_t)(p->grad - base)) * SPMD__FNV64_PRIME ^ p->count;
    }
    st = spmd__group_shm_connect(d->g, d->shm, layout, &d->shared, d->err, sizeof d->err);
    if (st || !d->shared) return st;
    /* the step memory: on every rank or on none, with the same shape
     * (one MIN gives the least k and, negated, the greatest) */
    int32_t k = d->step_shm ? (int32_t)d->step_k : 0;
    int32_t step[3] = {d->step_shm != NULL, k, -k}, all_step[3] = {0, 0, 0};
    st = spmd_all_reduce(d->g, step, all_step, 3, SPMD_I32, SPMD_MIN);
    if (st) return spmd__ddp_fail(d, st, "sharing the step memory: %s", spmd_group_errmsg(d->g));
    if (all_step[0] && all_step[1] != -all_step[2])
        return spmd__ddp_fail(d, SPMD_ERR_MISMATCH, "alloc_step: ranks keep different numbers of state arrays (%d to %d)",
                    all_step[1], -all_step[2]);
    if (!all_step[0]) return SPMD_OK;
    st = spmd__group_shm_connect(d->g, d->step_shm, layout ^ (d->step_k + 1) * 0x9e3779b97f4a7c15ull, &d->step_shared, d->err,
                           sizeof d->err);
    return st;
}

