/* sharded.c — strategy 3: the sharded optimizer step (spmd_ddp_alloc_step).
 * On top of shared gradients, the rank that summed a slice hands it to the
 * optimizer, which updates that slice of its own parameters and state, and
 * copies the new parameters into every rank's memory.  Each rank runs the
 * optimizer over 1/world of the parameters, and nobody reads an averaged
 * gradient back.  The state stays with each slice's owner until
 * spmd__ddp_gather (torch's consolidate_state_dict). */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "coll/reduce.h"
#include "ddp_internal.h"

spmd_status spmd_ddp_alloc_step(spmd_ddp *d, size_t state_arrays, spmd_ddp_step_fn fn, void *ctx,
                                float **params, float **state) {
    if (!d || !fn || !params || !state || state_arrays > 8) return SPMD_ERR_INVALID;
    *params = *state = NULL;
    if (d->finalized || !d->shm || d->step_shm)
        return spmd__ddp_fail(d, SPMD_ERR_INVALID, "alloc_step: only once, after alloc_grads and before finalize");
    size_t n = d->shm_count;
    d->step_shm = spmd__group_shm_alloc(d->g, sizeof(float) * (n ? n : 1) * (1 + state_arrays));
    if (!d->step_shm)
        return spmd__ddp_fail(d, SPMD_ERR_NOMEM, "alloc_step: cannot allocate %zu floats of shared memory", n * (1 + state_arrays));
    d->step_k = state_arrays;
    d->step_fn = fn;
    d->step_ctx = ctx;
    *params = spmd__arena_data(d->step_shm);
    *state = state_arrays ? *params + n : NULL;
    return SPMD_OK;
}

/* This step is the sharded one: every bucket is shared (the same answer on
 * every rank, as shm_bucket's) and no rank may join. */
int spmd__ddp_step_mode(const spmd_ddp *d) {
    return d->step_shared && d->all_views && !d->hook && d->o.compression == SPMD_DDP_COMPRESS_NONE &&
           !d->join_enabled;
}

/* Elements [off, off + n) of the optimizer step: the step function updates
 * them in this rank's memory, and the new parameters are copied to every
 * other rank's.  The optimizer state stays with the slice's owner until
 * gather_state. */
void spmd__ddp_step_slice(spmd_ddp *d, size_t off, size_t n, const float *avg) {
    d->step_fn(d->step_ctx, off, n, avg);
    int w = spmd_group_size(d->g), me = spmd_group_rank(d->g);
    const float *mine = spmd__arena_data(d->step_shm);
    for (int q = 0; q < w; q++)
        if (q != me) memcpy((float *)spmd__arena_peer(d->step_shm, q) + off, mine + off, n * sizeof(float));
    d->state_scattered = 1;
}

/* Collective: copy every other rank's slices of the optimizer state (as the
 * current buckets cut them) into this rank's memory.  Called by every rank
 * at the same point between steps: every slice's owner finished writing it
 * before the last finish returned.  Nobody returns before everyone has
 * read (the step memory's counter), since a rank may step its own whole
 * state next. */
spmd_status spmd__ddp_gather(spmd_ddp *d) {
    if (!d->state_scattered) return SPMD_OK;
    d->state_scattered = 0;
    if (!d->step_k) return SPMD_OK;
    int w = spmd_group_size(d->g), me = spmd_group_rank(d->g);
    float *mine = spmd__arena_data(d->step_shm);
    for (int b = 0; b < d->nbk; b++)
        for (int q = 0; q < w; q++) {
            size_t lo, hi, off;
            if (q == me || !d->bk[b].view) continue;
            spmd__ddp_slice_of(d, &d->bk[b], q, &lo, &hi, &off);
            const float *theirs = spmd__arena_peer(d->step_shm, q);
            for (size_t k = 1; k <= d->step_k; k++) {   /* past the parameters: each state array */
                size_t at = k * d->shm_count + off;
                memcpy(mine + at, theirs + at, (hi - lo) * sizeof(float));
            }
        }
    d->gather_seq++;
    spmd__arena_post(d->step_shm, SHM_GATHERED, d->gather_seq);
    return spmd__arena_wait_all(d->step_shm, SHM_GATHERED, d->gather_seq, "read of the optimizer state", d->err,
                              sizeof d->err);
}

spmd_status spmd_ddp_gather_state(spmd_ddp *d) {
    if (!d || !d->finalized) return d ? spmd__ddp_fail(d, SPMD_ERR_INVALID, "gather_state before finalize") : SPMD_ERR_INVALID;
    return spmd__ddp_gather(d);
}

