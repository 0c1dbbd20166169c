/* checkpoint.c — the data-parallel trainer's --checkpoint-dir / --resume:
 * every rank holds the whole model and optimizer state (after the reducer's
 * sharded steps, sync_whole_state), described to ckpt_state.c as whole
 * tensors: the save writes each once, the load takes them from any layout. */
#include <string.h>
#include "ckpt_state.h"
#include "dp.h"

static void layout_of(trainer *t, ckpt_layout *L) {
    memset(L, 0, sizeof *L);
    L->model = t->model;
    L->params = t->params;
    L->buffers = t->buffers;
    L->optim = t->optim;
    L->state_off = 0;
    L->state_count = t->nparams;
    L->param_groups = 1;
}

static void state_of(const trainer *t, int64_t *s) {
    memset(s, 0, sizeof(int64_t) * CK_STATE_N);
    s[CK_EPOCH] = t->epoch;
    s[CK_STEP_IN_EPOCH] = t->step_in_epoch;
    s[CK_GLOBAL_STEP] = t->global_step;
    s[CK_OPTIM_STEPS] = spmd_optim_steps(t->optim);
    s[CK_WORLD] = t->world;
    s[CK_REPLICAS] = t->world;
    s[CK_BATCH] = t->o.batch;
    s[CK_PP] = s[CK_TP] = 1;
    s[CK_VERSION] = 1;
}

spmd_status checkpoint_save(trainer *t) {
    double t0 = report_now();
    spmd_status st = sync_whole_state(t);
    if (st != SPMD_OK) return st;
    ckpt_layout L;
    int64_t s[CK_STATE_N];
    layout_of(t, &L);
    state_of(t, s);
    char dir[4200];
    st = ckpt_save(t->g, t->saver, t->saver ? &t->hold : NULL, t->o.ckpt_dir, &L, s, spmd_model_rng(t->model)->s,
                   t->o.model, dir, sizeof dir, t->err, sizeof t->err);
    t->t.ckpt += report_now() - t0;
    t->t.saves++;
    return st;
}

void checkpoint_staged(trainer *t) {
    if (!t->saver) return;
    double t0 = report_now();
    ckpt_staged(t->saver, &t->hold);
    t->t.ckpt += report_now() - t0;
}

spmd_status checkpoint_load(trainer *t, int *loaded, char *dir, size_t dirlen) {
    *loaded = 0;
    spmd_status st = ckpt_find(t->g, t->o.resume_dir, dir, dirlen, loaded, t->err, sizeof t->err);
    if (st != SPMD_OK || !*loaded) return st;
    *loaded = 0;
    ckpt_layout L;
    int64_t now[CK_STATE_N], s[CK_STATE_N];
    uint64_t rng[4];
    int rng_ok = 0;
    layout_of(t, &L);
    state_of(t, now);
    st = ckpt_load(t->g, dir, &L, t->o.model, now, t->o.allow_nonfinite, s, rng, &rng_ok, t->err, sizeof t->err);
    if (st != SPMD_OK) return st;
    size_t n = spmd_sampler_num_samples(t->train_sampler);
    long per_epoch = (long)((n + (size_t)t->o.batch - 1) / (size_t)t->o.batch);
    int exact;
    ckpt_position(s, t->world, t->o.batch, per_epoch, &t->epoch, &t->step_in_epoch, &exact);
    t->global_step = (long)s[CK_GLOBAL_STEP];
    if (rng_ok) memcpy(spmd_model_rng(t->model)->s, rng, sizeof rng);
    else   /* another layout: a fresh stream per rank, from the seed and the step */
        spmd_model_seed_dropout(t->model, t->o.seed, (uint64_t)t->rank + ((uint64_t)t->global_step << 24));
    if (!exact)
        report_say(&t->rep, "note: the checkpoint's %lld x %lld samples per step do not divide this run's %d x %d: "
                   "resuming at step %ld of epoch %d (some samples of this epoch are seen twice)\n",
                   (long long)s[CK_REPLICAS], (long long)s[CK_BATCH], t->world, t->o.batch, t->step_in_epoch,
                   t->epoch + 1);
    *loaded = 1;
    return SPMD_OK;
}
