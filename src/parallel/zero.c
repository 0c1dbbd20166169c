/* zero.c — ZeRO-1 (ZeroRedundancyOptimizer): each rank owns the optimizer
 * state of one contiguous shard of the flat parameters.
 *
 * Shards are ceil(n / world) elements so the all_gather has equal counts;
 * the shards that reach past n (the last ones) travel through a padded
 * scratch buffer, the others straight into the caller's parameters. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "common/common.h"
#include "spmd/parallel.h"

struct spmd_zero {
    spmd_group *g;
    int rank, world;
    size_t n, shard;          /* total, shard stride (ceil(n / world)) */
    size_t off, cnt;          /* this rank's shard */
    int average;
    spmd_optim *o;
    int arrays;               /* state arrays of the optimizer (0, 1, 2) */
    float *pad;               /* world * shard floats: padded shards and the send copy */
    char err[200];
};

static spmd_status failf(spmd_zero *z, spmd_status st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    spmd__vfail(z->err, sizeof z->err, st, fmt, ap);
    va_end(ap);
    return st;
}

static void shard_of(const spmd_zero *z, int r, size_t *off, size_t *cnt) {
    size_t o = (size_t)r * z->shard;
    if (o > z->n) o = z->n;
    size_t e = o + z->shard > z->n ? z->n : o + z->shard;
    *off = o;
    *cnt = e - o;
}

spmd_status spmd_zero_create(spmd_group *g, const spmd_optim_opts *o, size_t n,
                             int average_grads, spmd_zero **out, char *err, size_t errlen) {
    if (!o || !out || n == 0) {
        if (err && errlen) snprintf(err, errlen, "zero: %s", n == 0 ? "no parameters (n = 0)" : "NULL argument");
        return SPMD_ERR_INVALID;
    }
    spmd_zero *z = calloc(1, sizeof *z);
    if (!z) return SPMD_ERR_NOMEM;
    z->g = g;
    z->rank = g ? spmd_group_rank(g) : 0;
    z->world = g ? spmd_group_size(g) : 1;
    z->n = n;
    z->shard = (n + (size_t)z->world - 1) / (size_t)z->world;
    z->average = average_grads != 0;
    shard_of(z, z->rank, &z->off, &z->cnt);
    spmd_status st = spmd_optim_create(o, z->cnt, &z->o);
    if (st != SPMD_OK) {
        if (err && errlen)
            snprintf(err, errlen, "zero: invalid optimizer options (lr %g, momentum %g, weight decay %g)",
                     (double)o->lr, (double)o->momentum, (double)o->weight_decay);
        free(z);
        return st;
    }
    z->arrays = spmd_optim_state_arrays(z->o);
    if (z->world > 1 && !(z->pad = malloc(sizeof(float) * (z->shard * (size_t)z->world + z->shard)))) {
        spmd_zero_free(z);
        return SPMD_ERR_NOMEM;
    }
    *out = z;
    return SPMD_OK;
}

void spmd_zero_free(spmd_zero *z) {
    if (!z) return;
    spmd_optim_free(z->o);
    free(z->pad);
    free(z);
}

void spmd_zero_shard(const spmd_zero *z, size_t *offset, size_t *count) {
    if (offset) *offset = z->off;
    if (count) *count = z->cnt;
}
spmd_optim *spmd_zero_optim(spmd_zero *z) { return z->o; }
size_t spmd_zero_local_state_floats(const spmd_zero *z) { return (size_t)z->arrays * z->cnt; }
size_t spmd_zero_full_state_floats(const spmd_zero *z) { return (size_t)z->arrays * z->n; }
const char *spmd_zero_errmsg(const spmd_zero *z) { return z ? z->err : "no optimizer"; }

/* Every rank's shard of src (n floats) into dst (n floats): all_gather with
 * the full shards received in place and the short ones through z->pad. */
static spmd_status gather_shards(spmd_zero *z, float *dst, const float *mine) {
    float *send = z->pad + z->shard * (size_t)z->world;
    void *bufs[1024];
    void **recv = z->world <= 1024 ? bufs : malloc(sizeof(void *) * (size_t)z->world);
    if (!recv) return SPMD_ERR_NOMEM;
    memset(send, 0, sizeof(float) * z->shard);
    if (z->cnt) memcpy(send, mine, sizeof(float) * z->cnt);
    for (int r = 0; r < z->world; r++) {
        size_t off, cnt;
        shard_of(z, r, &off, &cnt);
        recv[r] = cnt == z->shard ? (void *)(dst + off) : (void *)(z->pad + (size_t)r * z->shard);
    }
    spmd_status st = spmd_all_gather_list(z->g, send, recv, z->shard, SPMD_F32);
    for (int r = 0; st == SPMD_OK && r < z->world; r++) {
        size_t off, cnt;
        shard_of(z, r, &off, &cnt);
        if (cnt != z->shard && cnt) memcpy(dst + off, z->pad + (size_t)r * z->shard, sizeof(float) * cnt);
    }
    if (recv != bufs) free(recv);
    if (st != SPMD_OK) failf(z, st, "zero: all_gather of the parameters failed: %s", spmd_group_errmsg(z->g));
    return st;
}

spmd_status spmd_zero_step(spmd_zero *z, float *params, float *grads) {
    if (!z || !params || !grads) return SPMD_ERR_INVALID;
    if (z->world > 1 && z->average) {
        spmd_status st = spmd_all_reduce(z->g, grads, grads, z->n, SPMD_F32, SPMD_SUM);
        if (st != SPMD_OK)
            return failf(z, st, "zero: all_reduce of the gradients failed: %s", spmd_group_errmsg(z->g));
        const float inv = 1.0f / (float)z->world;
        for (size_t i = 0; i < z->n; i++) grads[i] *= inv;
    }
    if (z->cnt) spmd_optim_update(z->o, params + z->off, grads + z->off, 0, z->cnt);
    spmd_optim_step_done(z->o);
    if (z->world == 1) return SPMD_OK;
    return gather_shards(z, params, params + z->off);
}

spmd_status spmd_zero_consolidate_state_dict(spmd_zero *z, int to, float *state, int64_t *steps) {
    if (!z || to < 0 || to >= z->world) {
        if (z) failf(z, SPMD_ERR_INVALID, "zero: consolidate to rank %d of a group of %d", to, z->world);
        return SPMD_ERR_INVALID;
    }
    if (z->rank == to && !state && z->arrays) return failf(z, SPMD_ERR_INVALID, "zero: no state buffer on rank %d", to);
    float *mine = spmd_optim_state(z->o, NULL);
    float *tmp = NULL;
    if (z->world > 1 && z->arrays && z->rank == to &&
        !(tmp = malloc(sizeof(float) * z->shard * (size_t)z->world)))
        return SPMD_ERR_NOMEM;
    spmd_status st = SPMD_OK;
    for (int a = 0; a < z->arrays && st == SPMD_OK; a++) {
        const float *part = mine + (size_t)a * z->cnt;
        if (z->world == 1) {
            memcpy(state + (size_t)a * z->n, part, sizeof(float) * z->n);   /* one rank: cnt = n */
            continue;
        }
        float *send = z->pad;
        memset(send, 0, sizeof(float) * z->shard);
        if (z->cnt) memcpy(send, part, sizeof(float) * z->cnt);
        st = spmd_gather(z->g, send, tmp, z->shard, SPMD_F32, to);
        if (st == SPMD_OK && z->rank == to)
            for (int r = 0; r < z->world; r++) {
                size_t off, cnt;
                shard_of(z, r, &off, &cnt);
                if (cnt) memcpy(state + (size_t)a * z->n + off, tmp + (size_t)r * z->shard, sizeof(float) * cnt);
            }
    }
    free(tmp);
    if (st != SPMD_OK) return failf(z, st, "zero: gather of the state failed: %s", spmd_group_errmsg(z->g));
    if (steps) *steps = spmd_optim_steps(z->o);
    return SPMD_OK;
}

spmd_status spmd_zero_load_state_dict(spmd_zero *z, const float *state, int64_t steps) {
    if (!z || (z->arrays && !state)) return SPMD_ERR_INVALID;
    float *mine = spmd_optim_state(z->o, NULL);
    for (int a = 0; a < z->arrays && z->cnt; a++)
        memcpy(mine + (size_t)a * z->cnt, state + (size_t)a * z->n + z->off, sizeof(float) * z->cnt);
    spmd_optim_set_steps(z->o, steps);
    return SPMD_OK;
}
