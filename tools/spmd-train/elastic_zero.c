/* elastic_zero.c — ZeRO-1 under --elastic (docs/RELIABILITY.md, "Training
 * on top"): the optimizer state sharded over the data-parallel group, each
 * rank keeping its own shard and a copy of its predecessor's ("buddy"), so a
 * lost rank's shard survives on its successor.
 *
 * The DDP reducer leaves the whole averaged gradient on every rank, so the
 * buddy copy is kept current by the same update (spmd_optim_update: the
 * bits of the plain optimizer's step), with no communication; then the
 * parameters are all-gathered.  The step commits when that all_gather
 * returned OK: it completes only if every rank entered it, i.e. every rank
 * updated its shards.  So after a failure either some survivor committed
 * (every survivor's shards hold the step) or none did, and a rank that had
 * updated its shards puts back the copy taken as the step began.  The reset
 * callback then re-deals: each old shard is broadcast from the lowest rank
 * holding it into a transient whole state, from which every rank keeps its
 * shard and buddy of the new world.  A shard whose owner and buddy both died
 * is lost: every rank fails naming it. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "dp.h"

enum { OWN, BUDDY };

struct ezero {
    spmd_optim_opts oo;
    size_t n;
    int arrays;
    int world, rank;  /* the partition's (world 0: holding nothing, a joiner) */
    int id[2];        /* shards held: own and buddy (-1: none) */
    size_t off[2], cnt[2];
    spmd_optim *opt[2];
    float *kept[2];   /* each shard's state as the step began */
    float *scratch;   /* the buddy shard's parameters, updated on the side */
    int64_t commits;  /* steps the shards hold, committed */
    int updated;      /* and the step in flight on top, not committed yet */
    int die;          /* SPMD_TRAIN_KILL R:S:gather: SIGKILL before the all_gather */
};

static void shard_of(size_t n, int world, int j, size_t *off, size_t *cnt) {
    size_t stride = (n + (size_t)world - 1) / (size_t)world;
    size_t o = (size_t)j * stride > n ? n : (size_t)j * stride;
    *off = o;
    *cnt = o + stride > n ? n - o : stride;
}

static void drop_shards(ezero *z) {
    for (int k = 0; k < 2; k++) {
        spmd_optim_free(z->opt[k]);
        free(z->kept[k]);
        z->opt[k] = NULL;
        z->kept[k] = NULL;
        z->id[k] = -1;
    }
    free(z->scratch);
    z->scratch = NULL;
}

spmd_status ezero_create(ezero **out, const spmd_optim_opts *oo, size_t n) {
    ezero *z = calloc(1, sizeof *z);
    spmd_optim *probe = NULL;
    if (!z || spmd_optim_create(oo, 1, &probe) != SPMD_OK) {
        spmd_optim_free(probe);
        free(z);
        return SPMD_ERR_NOMEM;
    }
    z->arrays = spmd_optim_state_arrays(probe);
    spmd_optim_free(probe);
    z->oo = *oo;
    z->n = n;
    z->id[OWN] = z->id[BUDDY] = -1;
    *out = z;
    return SPMD_OK;
}

void ezero_free(ezero *z) {
    if (!z) return;
    drop_shards(z);
    free(z);
}

/* Hold shard `rank` and its predecessor's of a world, their state taken
 * from whole (arrays x n floats, NULL: zero), at `steps` steps. */
static spmd_status take_shards(ezero *z, int rank, int world, const float *whole, int64_t steps, float lr) {
    drop_shards(z);
    z->rank = rank;
    z->world = world;
    z->oo.lr = lr;
    for (int k = 0; k < (world > 1 ? 2 : 1); k++) {
        int j = k == OWN ? rank : (rank + world - 1) % world;
        z->id[k] = j;
        shard_of(z->n, world, j, &z->off[k], &z->cnt[k]);
        size_t ns = (size_t)z->arrays * z->cnt[k];
        if (spmd_optim_create(&z->oo, z->cnt[k] ? z->cnt[k] : 1, &z->opt[k]) != SPMD_OK ||
            !(z->kept[k] = malloc(sizeof(float) * (ns ? ns : 1))))
            return SPMD_ERR_NOMEM;
        float *st = spmd_optim_state(z->opt[k], NULL);
        for (int a = 0; a < z->arrays && whole; a++)
            memcpy(st + (size_t)a * z->cnt[k], whole + (size_t)a * z->n + z->off[k], sizeof(float) * z->cnt[k]);
        spmd_optim_set_steps(z->opt[k], steps);
    }
    if (world > 1 && !(z->scratch = malloc(sizeof(float) * (z->cnt[BUDDY] ? z->cnt[BUDDY] : 1)))) return SPMD_ERR_NOMEM;
    return SPMD_OK;
}

spmd_status ezero_start(ezero *z, int rank, int world) { return take_shards(z, rank, world, NULL, 0, z->oo.lr); }

void ezero_begin_step(ezero *z) {
    for (int k = 0; k < 2; k++)
        if (z->opt[k])
            memcpy(z->kept[k], spmd_optim_state(z->opt[k], NULL), sizeof(float) * (size_t)z->arrays * z->cnt[k]);
    z->updated = 0;
}

void ezero_die_before_gather(ezero *z) { z->die = 1; }

void ezero_commit(ezero *z) {
    z->commits++;
    z->updated = 0;
}

/* The whole state of the current partition on every rank of g (arrays x n
 * floats, the plain optimizer's layout), each shard from its owner. */
static spmd_status gather_whole(ezero *z, spmd_group *g, const int *holder, int world, float *whole) {
    for (int j = 0; j < world; j++) {
        size_t off, cnt;
        shard_of(z->n, world, j, &off, &cnt);
        for (int k = 0; k < 2; k++)
            if (z->id[k] == j && spmd_group_rank(g) == holder[j])
                for (int a = 0; a < z->arrays; a++)
                    memcpy(whole + (size_t)a * z->n + off, spmd_optim_state(z->opt[k], NULL) + (size_t)a * cnt,
                           sizeof(float) * cnt);
        for (int a = 0; a < z->arrays && cnt; a++) {
            spmd_status st = spmd_broadcast(g, whole + (size_t)a * z->n + off, cnt, SPMD_F32, holder[j]);
            if (st) return st;
        }
    }
    return SPMD_OK;
}

spmd_status ezero_step(trainer *t) {
    ezero *z = t->ez;
    for (int k = 0; k < 2; k++) {
        if (!z->opt[k] || !z->cnt[k]) continue;
        float *p = k == OWN ? t->params + z->off[k] : z->scratch;
        if (k == BUDDY) memcpy(p, t->params + z->off[k], sizeof(float) * z->cnt[k]);
        spmd_optim_update(z->opt[k], p, t->grads + z->off[k], 0, z->cnt[k]);
    }
    for (int k = 0; k < 2; k++)
        if (z->opt[k]) spmd_optim_step_done(z->opt[k]);
    z->updated = 1;
    if (z->die) {
        fprintf(stderr, "spmd-train: rank %d SIGKILLs itself before the parameters' all_gather (SPMD_TRAIN_KILL)\n",
                t->rank);
        raise(SIGKILL);
    }
    if (z->world <= 1) return SPMD_OK;
    /* every rank's shard into everyone's parameters: equal counts, the short
     * last shards padded through a scratch of world x stride floats */
    size_t stride = (z->n + (size_t)z->world - 1) / (size_t)z->world;
    float *all = malloc(sizeof(float) * stride * (size_t)(z->world + 1));
    if (!all) return SPMD_ERR_NOMEM;
    float *mine = all + stride * (size_t)z->world;
    memset(mine, 0, sizeof(float) * stride);
    memcpy(mine, t->params + z->off[OWN], sizeof(float) * z->cnt[OWN]);
    spmd_status st = spmd_all_gather(t->g, mine, all, stride, SPMD_F32);
    for (int j = 0; st == SPMD_OK && j < z->world; j++) {
        size_t off, cnt;
        shard_of(z->n, z->world, j, &off, &cnt);
        memcpy(t->params + off, all + (size_t)j * stride, sizeof(float) * cnt);
    }
    free(all);
    if (st) sync_set_err_group(t);
    return st;
}

spmd_status ezero_reset(trainer *t, int64_t agreed, int64_t steps, float lr) {
    ezero *z = t->ez;
    spmd_group *g = t->g;
    int W = spmd_group_size(g), me = spmd_group_rank(g);
    if (z->world && z->commits + z->updated > agreed && z->updated) { /* nobody committed the step: undo it */
        for (int k = 0; k < 2; k++)
            if (z->opt[k])
                memcpy(spmd_optim_state(z->opt[k], NULL), z->kept[k], sizeof(float) * (size_t)z->arrays * z->cnt[k]);
        z->updated = 0;
    }
    /* a rank's shards are never behind a committed step (see the top) */
    int bad = z->world && z->commits + z->updated != agreed;
    z->commits = agreed;
    z->updated = 0;
    /* who holds which shard of the old partition: {old world, own, buddy} */
    int32_t mine[3] = {bad ? -1 : z->world, z->id[OWN], z->id[BUDDY]};
    int32_t *held = malloc(sizeof(int32_t) * 3 * (size_t)W);
    int *holder = NULL;
    float *whole = NULL;
    spmd_status st = held ? spmd_all_gather(g, mine, held, 3, SPMD_I32) : SPMD_ERR_NOMEM;
    if (st) {
        if (held) sync_set_err_group(t);
        free(held);
        return st;
    }
    int old = 0;
    for (int r = 0; r < W; r++) {
        old = held[3 * r] > old ? held[3 * r] : old;
        if (held[3 * r] < 0 && !st) {
            snprintf(t->err, sizeof t->err, "ZeRO-1: rank %d's optimizer shards are not at the agreed step %lld",
                     r, (long long)agreed);
            st = SPMD_ERR_MISMATCH;
        }
    }
    if (st) goto out;
    if (!(holder = malloc(sizeof(int) * (size_t)(old ? old : 1))) ||
        !(whole = calloc((size_t)z->arrays * z->n + 1, sizeof(float)))) {
        st = SPMD_ERR_NOMEM;
        goto out;
    }
    for (int j = 0; j < old; j++) {
        holder[j] = -1;
        for (int r = 0; r < W && holder[j] < 0; r++)
            if (held[3 * r] == old && (held[3 * r + 1] == j || held[3 * r + 2] == j)) holder[j] = r;
        if (holder[j] < 0) {
            snprintf(t->err, sizeof t->err,
                     "ZeRO-1: the optimizer state of shard %d of %d was on ranks %d and %d of the old group, both "
                     "lost", j, old, j, (j + 1) % old);
            st = SPMD_ERR_NOTFOUND; /* not a failure of g: shrinking again would not bring it back */
            goto out;
        }
    }
    if (old && (st = gather_whole(z, g, holder, old, whole)) != SPMD_OK) {
        sync_set_err_group(t);
        goto out;
    }
    if ((st = take_shards(z, me, W, whole, steps, lr)) != SPMD_OK) snprintf(t->err, sizeof t->err, "ZeRO-1: out of memory");
out:
    free(held);
    free(holder);
    free(whole);
    return st;
}

spmd_status ezero_whole_state(trainer *t, float **whole, size_t *count) {
    ezero *z = t->ez;
    int W = z->world;
    int *holder = malloc(sizeof(int) * (size_t)W);
    *count = (size_t)z->arrays * z->n;
    *whole = calloc(*count + 1, sizeof(float));
    if (!holder || !*whole) {
        free(holder);
        free(*whole);
        *whole = NULL;
        return SPMD_ERR_NOMEM;
    }
    for (int j = 0; j < W; j++) holder[j] = j; /* the owners */
    spmd_status st = W > 1 ? gather_whole(z, t->g, holder, W, *whole) : SPMD_OK;
    if (W <= 1)
        for (int a = 0; a < z->arrays; a++)
            memcpy(*whole + (size_t)a * z->n, spmd_optim_state(z->opt[OWN], NULL) + (size_t)a * z->n, sizeof(float) * z->n);
    free(holder);
    if (st) sync_set_err_group(t);
    return st;
}
