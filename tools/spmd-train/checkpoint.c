/* checkpoint.c — --checkpoint-dir / --resume: everything an exact
 * continuation needs, in one safetensors file written by all ranks together
 * (spmd_ckpt_save_dist), in torch's state_dict names where torch has one. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "dp.h"

typedef struct {
    spmd_ckpt_tensor *t;
    size_t n;
    int64_t state[5];    /* epoch, step_in_epoch, global_step, optimizer steps, world */
    int64_t *rng;        /* world x 4 xoshiro words, one row per rank */
} ckpt_list;

static void tensor_from_info(spmd_ckpt_tensor *ct, const spmd_tensor_info *ti, float *base) {
    memset(ct, 0, sizeof *ct);
    ct->name = ti->name;
    ct->dtype = SPMD_F32;
    ct->ndim = ti->ndim;
    for (int d = 0; d < ti->ndim; d++) ct->shape[d] = ti->shape[d];
    ct->data = base + ti->offset;
}

/* Everything an exact continuation needs, in torch state_dict names where
 * torch has one: parameters, BatchNorm buffers, the optimizer state, the
 * position in the data, and every rank's dropout RNG. */
static int ckpt_list_build(trainer *t, ckpt_list *c) {
    int np = spmd_model_num_params(t->model), nb = spmd_model_num_buffers(t->model);
    c->t = calloc((size_t)np + nb + 3, sizeof(spmd_ckpt_tensor));
    c->rng = calloc((size_t)t->world * 4, sizeof(int64_t));
    if (!c->t || !c->rng) return -1;
    c->n = 0;
    for (int i = 0; i < np; i++)
        tensor_from_info(&c->t[c->n++], spmd_model_param(t->model, i), t->params);
    for (int i = 0; i < nb; i++)
        tensor_from_info(&c->t[c->n++], spmd_model_buffer(t->model, i), t->buffers);
    size_t ns;
    float *os = spmd_optim_state(t->optim, &ns);
    if (ns) {
        spmd_ckpt_tensor *ct = &c->t[c->n++];
        memset(ct, 0, sizeof *ct);
        ct->name = "optimizer.state";
        ct->dtype = SPMD_F32;
        ct->ndim = 1;
        ct->shape[0] = (int64_t)ns;
        ct->data = os;
    }
    spmd_ckpt_tensor *st = &c->t[c->n++];
    memset(st, 0, sizeof *st);
    st->name = "trainer.state";
    st->dtype = SPMD_I64;
    st->ndim = 1;
    st->shape[0] = 5;
    st->data = c->state;
    spmd_ckpt_tensor *rt = &c->t[c->n++];
    memset(rt, 0, sizeof *rt);
    rt->name = "trainer.rng";
    rt->dtype = SPMD_I64;
    rt->ndim = 2;
    rt->shape[0] = t->world;
    rt->shape[1] = 4;
    rt->data = c->rng;
    return 0;
}

static void ckpt_list_free(ckpt_list *c) {
    free(c->t);
    free(c->rng);
}

static void ckpt_path(const trainer *t, char *out, size_t len) {
    snprintf(out, len, "%s/%s", t->o.ckpt_dir, CKPT_NAME);
}

spmd_status checkpoint_save(trainer *t) {
    ckpt_list c;
    spmd_status st = sync_whole_state(t);
    if (st != SPMD_OK) return st;
    if (ckpt_list_build(t, &c)) {
        ckpt_list_free(&c);
        return SPMD_ERR_NOMEM;
    }
    c.state[0] = t->epoch;
    c.state[1] = t->step_in_epoch;
    c.state[2] = t->global_step;
    c.state[3] = spmd_optim_steps(t->optim);
    c.state[4] = t->world;
    int64_t mine[4];
    memcpy(mine, spmd_model_rng(t->model)->s, sizeof mine);
    if (t->g) st = spmd_all_gather(t->g, mine, c.rng, 4, SPMD_I64);
    else memcpy(c.rng, mine, sizeof mine);
    if (st != SPMD_OK) {
        snprintf(t->err, sizeof t->err, "%s", spmd_group_errmsg(t->g));
        ckpt_list_free(&c);
        return st;
    }
    char path[4096], epoch[32], step[32], world[16];
    ckpt_path(t, path, sizeof path);
    snprintf(epoch, sizeof epoch, "%d", t->epoch);
    snprintf(step, sizeof step, "%ld", t->global_step);
    snprintf(world, sizeof world, "%d", t->world);
    spmd_ckpt_kv meta[] = {{"format", "spmd-train"}, {"model", t->o.model},
                           {"optimizer", spmd_optim_name(t->optim)}, {"epoch", epoch},
                           {"step", step}, {"world_size", world}};
    size_t nmeta = sizeof meta / sizeof meta[0];
    if (t->rank == 0 && mkdir(t->o.ckpt_dir, 0777) != 0 && errno != EEXIST) {
        snprintf(t->err, sizeof t->err, "cannot create %s: %s", t->o.ckpt_dir, strerror(errno));
        st = SPMD_ERR_IO;
    }
    if (t->g) {
        /* every rank takes part even if rank 0 failed to create the folder:
         * the collective then reports the failure everywhere */
        spmd_status st2 = spmd_ckpt_save_dist(t->g, path, c.t, c.n, meta, nmeta, t->err,
                                              sizeof t->err);
        if (st == SPMD_OK) st = st2;
    } else if (st == SPMD_OK) {
        st = spmd_ckpt_save(path, c.t, c.n, meta, nmeta, t->err, sizeof t->err);
    }
    ckpt_list_free(&c);
    return st;
}

/* trainer.state and trainer.rng of a checkpoint must describe a position
 * this run can continue from (every rank sees the same file, so every rank
 * decides the same). */
static spmd_status check_state(trainer *t, const char *path, const int64_t *s, const int64_t *rng) {
    size_t n = spmd_sampler_num_samples(t->train_sampler);
    int64_t per_epoch = (int64_t)((n + (size_t)t->o.batch - 1) / (size_t)t->o.batch);
    const char *bad = NULL;
    if (s[0] < 0 || s[0] > 1000000) bad = "epoch out of range [0, 1000000]";
    else if (s[1] < 0 || s[1] >= per_epoch) bad = "step in the epoch out of range";
    else if (s[2] < s[1] || s[2] > ((int64_t)1 << 40)) bad = "global step out of range";
    else if (s[3] < 0 || s[3] > s[2]) bad = "optimizer step count out of range [0, global step]";
    else if (s[4] != t->world) bad = "world size differs from the metadata's";
    for (int r = 0; r < t->world && !bad; r++)
        if (!(rng[4 * r] | rng[4 * r + 1] | rng[4 * r + 2] | rng[4 * r + 3])) bad = "a rank's RNG state is all zero";
    if (!bad) return SPMD_OK;
    snprintf(t->err, sizeof t->err,
             "%s: trainer.state is not a position this run can continue from: %s (epoch %lld, step in "
             "epoch %lld of %lld, global step %lld, optimizer steps %lld, world %lld)",
             path, bad, (long long)s[0], (long long)s[1], (long long)per_epoch, (long long)s[2],
             (long long)s[3], (long long)s[4]);
    return SPMD_ERR_FORMAT;
}

/* Every float of a checkpoint must be finite: a run that diverged saves NaN
 * weights, and resuming them would train on without a word (every loss
 * NaN).  Refused naming the file, the tensor and the first bad element,
 * unless --allow-nonfinite-checkpoint, when it is a warning on every rank. */
static spmd_status check_finite(trainer *t, const char *path, const ckpt_list *c) {
    for (size_t k = 0; k < c->n; k++) {
        const spmd_ckpt_tensor *ct = &c->t[k];
        if (ct->dtype != SPMD_F32) continue;
        size_t n = 1;
        for (int d = 0; d < ct->ndim; d++) n *= (size_t)ct->shape[d];
        const float *v = ct->data;
        size_t bad = 0, first = 0;
        for (size_t i = 0; i < n; i++)
            if (!isfinite(v[i]) && bad++ == 0) first = i;
        if (!bad) continue;
        snprintf(t->err, sizeof t->err,
                 "%s: tensor %s holds %zu non-finite value(s) of %zu (the first, element %zu, is %g): the run "
                 "that saved it diverged; resume an earlier checkpoint, or pass --allow-nonfinite-checkpoint",
                 path, ct->name, bad, n, first, (double)v[first]);
        if (!t->o.allow_nonfinite) return SPMD_ERR_FORMAT;
        if (t->rank == 0) fprintf(stderr, "spmd-train: WARNING: %s\n", t->err);
        t->err[0] = 0;
    }
    return SPMD_OK;
}

/* Load the checkpoint if present (rank 0's view decides for everyone).
 * *loaded tells whether one was found. */
spmd_status checkpoint_load(trainer *t, int *loaded) {
    char path[4096];
    ckpt_path(t, path, sizeof path);
    int32_t exists = access(path, R_OK) == 0;
    spmd_status st;
    if (t->g && (st = spmd_broadcast(t->g, &exists, 1, SPMD_I32, 0)) != SPMD_OK) {
        snprintf(t->err, sizeof t->err, "%s", spmd_group_errmsg(t->g));
        return st;
    }
    *loaded = 0;
    /* the temporaries of saves killed earlier (only dead writers' go) */
    if (t->rank == 0) (void)spmd_ckpt_remove_stale(path, NULL, NULL, 0);
    if (!exists) return SPMD_OK;
    ckpt_list c;
    if (ckpt_list_build(t, &c)) {
        ckpt_list_free(&c);
        return SPMD_ERR_NOMEM;
    }
    /* the saved world size must match: check it before reading the rng rows */
    /* what is wrong with the file, if anything, before what differs */
    spmd_ckpt *ck = NULL;
    long saved_world = -1;
    char saved_model[32] = "";
    if ((st = spmd_ckpt_open(path, &ck, t->err, sizeof t->err)) != SPMD_OK) {
        ckpt_list_free(&c);
        return st;
    }
    /* (copied: the strings belong to the open checkpoint) */
    const char *w = spmd_ckpt_meta(ck, "world_size"), *mdl = spmd_ckpt_meta(ck, "model");
    char world_text[32] = "";
    char *end = NULL;
    if (w) {
        snprintf(world_text, sizeof world_text, "%s", w);
        saved_world = strtol(w, &end, 10);
    }
    int world_ok = w && *w && !*end && saved_world >= 1 && saved_world <= (1L << 24);
    if (mdl) snprintf(saved_model, sizeof saved_model, "%s", mdl);
    spmd_ckpt_close(ck);
    st = SPMD_OK;
    if (!world_ok) {
        snprintf(t->err, sizeof t->err, "%s: metadata world_size is missing or not a rank count ('%s')", path,
                 world_text);
        st = SPMD_ERR_FORMAT;
    } else if (saved_model[0] && strcmp(saved_model, t->o.model) != 0) {
        snprintf(t->err, sizeof t->err, "%s holds a %s model; this run trains %s", path, saved_model, t->o.model);
        st = SPMD_ERR_MISMATCH;
    } else if (saved_world != t->world) {
        snprintf(t->err, sizeof t->err,
                 "%s was written by %ld rank(s); an exact continuation needs the same world "
                 "size (this run has %d)", path, saved_world, t->world);
        st = SPMD_ERR_MISMATCH;
    }
    if (st != SPMD_OK) {
        ckpt_list_free(&c);
        return st;
    }
    if (t->g) st = spmd_ckpt_load_dist(t->g, path, c.t, c.n, t->err, sizeof t->err);
    else st = spmd_ckpt_load(path, c.t, c.n, t->err, sizeof t->err);
    if (st == SPMD_OK) st = check_finite(t, path, &c);
    if (st == SPMD_OK) st = check_state(t, path, c.state, c.rng);
    if (st == SPMD_OK) {
        t->epoch = (int)c.state[0];
        t->step_in_epoch = (long)c.state[1];
        t->global_step = (long)c.state[2];
        spmd_optim_set_steps(t->optim, c.state[3]);
        memcpy(spmd_model_rng(t->model)->s, c.rng + 4 * t->rank, 4 * sizeof(int64_t));
        *loaded = 1;
    }
    ckpt_list_free(&c);
    return st;
}
