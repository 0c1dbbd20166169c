/* sync.c — data-parallel gradient synchronisation and --check-sync.
 *
 * The only place gradients cross ranks, in three calls around backward:
 * sync_prepare (before forward), sync_hook (handed to backward as its
 * grad_ready callback) and sync_finish (after backward, before the
 * optimizer).  With the DDP reducer these are spmd_ddp_prepare,
 * spmd_ddp_grad_ready_hook (buckets start while earlier layers are still in
 * backward) and spmd_ddp_finish.  With --sync average they are seed 000's
 * average_gradients: nothing until backward ends, then one all_reduce(SUM) of
 * the whole contiguous gradient buffer and a division by the world size. */
#include <stdlib.h>
#include <string.h>
#include "common/fnv.h"
#include "dp.h"

/* DDP bucket cap.  torch's 25 MiB puts the seed CNN's 2.4 MB of gradients in
 * one bucket that can only start when backward ends; at 1 MiB its fc1 weight
 * gradient (2.36 MB) is reduced while the convolutions' backward runs.  Over
 * a 2 Gbit/s link 1 MiB was 12-20 % faster; on loopback, where both cores are
 * busy anyway, 2-3 % slower (docs/performance-log.md, DDP training). */
const double DEFAULT_BUCKET_CAP_MB = 1.0;

void sync_set_err_group(trainer *t) {
    snprintf(t->err, sizeof t->err, "%s", t->g ? spmd_group_errmsg(t->g) : "");
}

static void set_err_ddp(trainer *t) { snprintf(t->err, sizeof t->err, "%s", spmd_ddp_errmsg(t->ddp)); }

/* The reducer's sharded step: this rank's share of the optimizer step. */
static void shard_step(void *ctx, size_t offset, size_t count, const float *avg) {
    trainer *t = ctx;
    spmd_optim_update(t->optim, t->params, avg, offset, count);
}

/* model = DistributedDataParallel(model, bucket_cap_mb=...): every parameter
 * in model order, the BatchNorm buffers, then finalize (which checks the
 * ranks agree and broadcasts rank 0's parameters and buffers). */
spmd_status sync_setup_ddp(trainer *t) {
    spmd_ddp_opts o = SPMD_DDP_OPTS_DEFAULT;
    o.overlap = !t->o.no_overlap;
    o.compression = t->o.compression;
    double cap_mb = t->o.bucket_cap_mb > 0.0f ? (double)t->o.bucket_cap_mb : DEFAULT_BUCKET_CAP_MB;
    o.bucket_cap_bytes = (size_t)(cap_mb * 1048576.0);
    if (o.bucket_cap_bytes < sizeof(float)) o.bucket_cap_bytes = sizeof(float);
    /* torch keeps its 1 MiB first bucket; a smaller cap applies to it too */
    if (o.first_bucket_bytes > o.bucket_cap_bytes) o.first_bucket_bytes = o.bucket_cap_bytes;
    spmd_status st = spmd_ddp_create(t->g, &o, &t->ddp);
    if (st != SPMD_OK) {
        snprintf(t->err, sizeof t->err, "cannot create the reducer");
        return st;
    }
    if (!t->o.no_shared_grads) {
        /* gradient_as_bucket_view: the model's gradients live in the reducer's
         * memory, which ranks on one host share */
        float *shared = NULL;
        st = spmd_ddp_alloc_grads(t->ddp, t->nparams, &shared);
        if (st == SPMD_OK) {
            spmd_model_use_grad_memory(t->model, shared);
            t->grads = shared;
        }
        /* and the sharded step: parameters and optimizer state shared too */
        float *params = NULL, *state = NULL;
        if (st == SPMD_OK && !t->o.no_shard_step &&
            (st = spmd_ddp_alloc_step(t->ddp, (size_t)spmd_optim_state_arrays(t->optim), shard_step, t,
                                      &params, &state)) == SPMD_OK) {
            spmd_model_use_param_memory(t->model, params);
            t->params = params;
            if (state) spmd_optim_use_state_memory(t->optim, state);
        }
    }
    for (int i = 0; i < spmd_model_num_params(t->model) && st == SPMD_OK; i++) {
        const spmd_tensor_info *p = spmd_model_param(t->model, i);
        st = spmd_ddp_add_param(t->ddp, p->name, t->params + p->offset, t->grads + p->offset, p->count);
    }
    for (int i = 0; i < spmd_model_num_buffers(t->model) && st == SPMD_OK; i++) {
        const spmd_tensor_info *b = spmd_model_buffer(t->model, i);
        st = spmd_ddp_add_buffer(t->ddp, b->name, t->buffers + b->offset, b->count);
    }
    if (st == SPMD_OK) st = spmd_ddp_finalize(t->ddp);
    if (st != SPMD_OK) set_err_ddp(t);
    return st;
}

spmd_status sync_prepare(trainer *t) {
    if (!t->ddp) return SPMD_OK;
    spmd_status st = spmd_ddp_prepare(t->ddp);
    if (st != SPMD_OK) set_err_ddp(t);
    return st;
}

void sync_hook(void *ctx, int param_index) {
    trainer *t = ctx;
    /* the plain all_reduce waits for the whole buffer */
    if (t->ddp) spmd_ddp_grad_ready_hook(t->ddp, param_index);
}

spmd_status sync_finish(trainer *t) {
    if (!t->g || t->world == 1) return SPMD_OK;
    if (t->ddp) {
        spmd_status st = spmd_ddp_finish(t->ddp);
        if (st != SPMD_OK) set_err_ddp(t);
        return st;
    }
    spmd_status st = spmd_all_reduce(t->g, t->grads, t->grads, t->nparams, SPMD_F32, SPMD_SUM);
    if (st != SPMD_OK) {
        sync_set_err_group(t);
        return st;
    }
    /* blocks of 16 with a fixed trip count vectorise at -O2 (GCC's cheap
     * cost model refuses a loop that needs a remainder) */
    const float inv = 1.0f / (float)t->world;
    size_t i = 0;
    for (; i + 16 <= t->nparams; i += 16)
        for (size_t k = 0; k < 16; k++) t->grads[i + k] *= inv;
    for (; i < t->nparams; i++) t->grads[i] *= inv;
    return SPMD_OK;
}

/* --check-sync: data parallelism keeps every rank's replica identical.  A
 * 64-bit hash of the parameters and the optimizer state (and of the
 * BatchNorm buffers under SyncBatchNorm, the only mode in which they agree
 * after a local forward) is all-reduced as {MAX(h), MAX(~h)} = {max, ~min}.
 * FNV-1a a word at a time: resnet18 has 90 MB to hash. */

/* The whole optimizer state on this rank (after sharded steps each rank
 * keeps only its slices current). */
spmd_status sync_whole_state(trainer *t) {
    if (!t->ddp) return SPMD_OK;
    spmd_status st = spmd_ddp_gather_state(t->ddp);
    if (st != SPMD_OK) set_err_ddp(t);
    return st;
}

spmd_status sync_check(trainer *t) {
    spmd_status st0 = sync_whole_state(t);
    if (st0 != SPMD_OK) return st0;
    uint64_t h = SPMD__FNV64_OFFSET;
    h = spmd__fnv1a64_words(h, t->params, t->nparams * sizeof(float));
    size_t ns;
    float *whole = NULL; /* --elastic --zero: the shards put together */
    if (t->ez && (st0 = ezero_whole_state(t, &whole, &ns)) != SPMD_OK) return st0;
    float *os = whole ? whole : spmd_optim_state(t->optim, &ns);
    h = spmd__fnv1a64_words(h, os, ns * sizeof(float));
    free(whole);
    int with_buffers = t->nbuffers && spmd_model_is_syncbn(t->model);
    if (with_buffers) h = spmd__fnv1a64_words(h, t->buffers, t->nbuffers * sizeof(float));
    int64_t v[2] = {(int64_t)h, (int64_t)~h};
    if (t->g) {
        spmd_status st = spmd_all_reduce(t->g, v, v, 2, SPMD_I64, SPMD_MAX);
        if (st != SPMD_OK) {
            sync_set_err_group(t);
            return st;
        }
    }
    uint64_t hi = (uint64_t)v[0], lo = ~(uint64_t)v[1];
    if (hi != lo) {
        snprintf(t->err, sizeof t->err,
                 "the ranks' replicas differ (hash here %016llx, min %016llx, max %016llx over %d ranks)",
                 (unsigned long long)h, (unsigned long long)lo, (unsigned long long)hi, t->world);
        return SPMD_ERR_MISMATCH;
    }
    report_say(&t->rep, "check-sync: parameters, optimizer state%s identical on all %d rank(s) (hash %016llx)\n",
        with_buffers ? " and BatchNorm buffers" : "", t->world, (unsigned long long)h);
    return SPMD_OK;
}
