/* ckpt_state.c — spmd-train's DCP checkpoints (see ckpt_state.h): the boxes
 * a rank holds, the save, the search for the newest complete one, the load
 * with resharding (the gather of a sharded model: model_gather.c). */
#include "ckpt_state.h"
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- the boxes of one rank ---------------------------------------------------- */


void ckpt_boxes_free(ckpt_boxes *b) {
    for (size_t i = 0; i < b->nnames; i++) free(b->names[i]);
    free(b->names);
    free(b->s);
    free(b->steps);
    free(b->slot_rng);
    for (size_t i = 0; i < b->nitems; i++) free((void *)b->items[i].data);
    memset(b, 0, sizeof *b);
}

static const char *name_add(ckpt_boxes *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static const char *name_add(ckpt_boxes *b, const char *fmt, ...) {
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    char **q = realloc(b->names, (b->nnames + 1) * sizeof *q);
    if (!q) return NULL;
    b->names = q;
    if (!(q[b->nnames] = strdup(buf))) return NULL;
    return q[b->nnames++];
}

static spmd_dcp_shard *box_add(ckpt_boxes *b, const char *fqn, const char *dtype, int ndim, const int64_t *global) {
    if (!fqn) return NULL;
    if (b->n == b->cap) {
        size_t cap = b->cap ? 2 * b->cap : 64;
        spmd_dcp_shard *q = realloc(b->s, cap * sizeof *q);
        if (!q) return NULL;
        b->s = q;
        b->cap = cap;
    }
    spmd_dcp_shard *s = &b->s[b->n++];
    memset(s, 0, sizeof *s);
    s->fqn = fqn;
    s->dtype = dtype;
    s->ndim = ndim;
    for (int d = 0; d < ndim; d++) s->global[d] = global[d];
    return s;
}

/* A tensor's global shape and the offset of this rank's block: dims where
 * the unsharded model's tensor is larger are sharded, block t. */
static void geometry(const ckpt_layout *L, const spmd_tensor_info *p, int64_t *global, int64_t *off) {
    const spmd_tensor_info *w = NULL;
    for (int i = 0; L->whole && i < spmd_model_num_params(L->whole) && !w; i++)
        if (strcmp(spmd_model_param(L->whole, i)->name, p->name) == 0) w = spmd_model_param(L->whole, i);
    for (int d = 0; d < p->ndim; d++) {
        global[d] = p->shape[d];
        off[d] = 0;
        if (w && w->ndim == p->ndim && w->shape[d] != p->shape[d]) {
            global[d] = w->shape[d];
            off[d] = (int64_t)L->t * p->shape[d];
        }
    }
}

/* The flat range [a, b) of a row-major tensor as boxes, each contiguous in
 * memory, in order (a ZeRO-1 shard cuts tensors anywhere): a partial first
 * row, whole rows, a partial last row, recursively.  idx: the fixed indices
 * of dims < k; base: the flat index of that sub-tensor's start. */
typedef struct {
    ckpt_boxes *b;
    const char *fqn;
    int ndim;
    const int64_t *global, *shift;
    float *data;   /* element 0 of the flat range's tensor, local layout */
    int64_t first; /* the flat index data[0] stands for */
    int fail;
} flat_ctx;

static void flat_emit(flat_ctx *c, const int64_t *idx, int k, int64_t lo, int64_t hi, const int64_t *shape,
                      int64_t start) {
    spmd_dcp_shard *s = box_add(c->b, c->fqn, "float32", c->ndim, c->global);
    if (!s) {
        c->fail = 1;
        return;
    }
    for (int d = 0; d < c->ndim; d++) {
        s->offsets[d] = (d < k ? idx[d] : d == k ? lo : 0) + c->shift[d];
        s->sizes[d] = d < k ? 1 : d == k ? hi - lo : shape[d];
    }
    s->data = c->data + (start - c->first);
}

static void flat_rec(flat_ctx *c, const int64_t *shape, int k, int64_t *idx, int64_t base, int64_t a, int64_t b) {
    if (a >= b || c->fail) return;
    int64_t inner = 1;
    for (int d = k + 1; d < c->ndim; d++) inner *= shape[d];
    if (a % inner == 0 && b % inner == 0) {
        flat_emit(c, idx, k, a / inner, b / inner, shape, base + a);
        return;
    }
    int64_t r0 = a / inner, r1 = b / inner;
    if (r0 == (b - 1) / inner) {
        idx[k] = r0;
        flat_rec(c, shape, k + 1, idx, base + r0 * inner, a - r0 * inner, b - r0 * inner);
        return;
    }
    if (a % inner) {
        idx[k] = r0;
        flat_rec(c, shape, k + 1, idx, base + r0 * inner, a - r0 * inner, inner);
        r0++;
    }
    if (r1 > r0) flat_emit(c, idx, k, r0, r1, shape, base + r0 * inner);
    if (b % inner) {
        idx[k] = r1;
        flat_rec(c, shape, k + 1, idx, base + r1 * inner, 0, b - r1 * inner);
    }
}

/* One param_groups entry: optim.param_groups.0.<key> holding v's pickle. */
static int group_item(ckpt_boxes *b, const char *key, const spmd_dcp_value *v) {
    void *buf;
    size_t len;
    const char *fqn = name_add(b, "optim.param_groups.0.%s", key);
    if (!fqn || b->nitems == sizeof b->items / sizeof b->items[0] || spmd_dcp_value_encode(v, &buf, &len) != SPMD_OK)
        return -1;
    b->items[b->nitems++] = (spmd_dcp_bytes){fqn, buf, len, 1};
    return 0;
}

/* The one param group of torch.optim.SGD / Adam / AdamW (torch 2.6's keys
 * and defaults for what spmd's optimizers do not have) as
 * get_optimizer_state_dict's flattening names them: a strict dcp.load into
 * the torch optimizer finds every key. */
static int param_groups(const ckpt_layout *L, ckpt_boxes *b) {
    const spmd_optim_opts *o = spmd_optim_get_opts(L->optim);
    const spmd_model *m = L->whole ? L->whole : L->model;
    int np = spmd_model_num_params(m), rc = 0;
    spmd_dcp_value *names = calloc((size_t)(np ? np : 1), sizeof *names);
    if (!names) return -1;
    for (int i = 0; i < np; i++) {
        names[i].type = SPMD_DCP_STR;
        names[i].s = (char *)spmd_model_param(m, i)->name;
        names[i].len = strlen(names[i].s);
    }
#define F(x) (spmd_dcp_value){.type = SPMD_DCP_FLOAT, .f = (double)(x)}
#define B(x) (spmd_dcp_value){.type = SPMD_DCP_BOOL, .i = (x)}
    spmd_dcp_value none = {.type = SPMD_DCP_NONE}, no = B(0), betas[2] = {F(o->beta1), F(o->beta2)};
    spmd_dcp_value params = {.type = SPMD_DCP_LIST, .n = (size_t)np, .items = names};
    spmd_dcp_value pair = {.type = SPMD_DCP_LIST, .is_tuple = 1, .n = 2, .items = betas};
    rc |= group_item(b, "lr", &F(o->lr));
    rc |= group_item(b, "weight_decay", &F(o->weight_decay));
    rc |= group_item(b, "maximize", &no);
    rc |= group_item(b, "foreach", &none);
    rc |= group_item(b, "differentiable", &no);
    rc |= group_item(b, "fused", &none);
    rc |= group_item(b, "params", &params);
    if (o->kind == SPMD_OPTIM_SGD) {
        rc |= group_item(b, "momentum", &F(o->momentum));
        rc |= group_item(b, "dampening", &F(o->dampening));
        rc |= group_item(b, "nesterov", &B(o->nesterov != 0));
    } else {
        rc |= group_item(b, "betas", &pair);
        rc |= group_item(b, "eps", &F(o->eps));
        rc |= group_item(b, "amsgrad", &no);
        rc |= group_item(b, "capturable", &no);
    }
#undef F
#undef B
    free(names);
    return rc ? -1 : 0;
}

static const char *const SGD_STATE[] = {"momentum_buffer"};
static const char *const ADAM_STATE[] = {"exp_avg", "exp_avg_sq"};

int ckpt_boxes_build(const ckpt_layout *L, int with_optim, ckpt_boxes *b) {
    memset(b, 0, sizeof *b);
    int np = spmd_model_num_params(L->model), nb = spmd_model_num_buffers(L->model);
    int arrays = with_optim && L->optim ? spmd_optim_state_arrays(L->optim) : 0;
    int adam = arrays == 2 && strcmp(spmd_optim_name(L->optim), "sgd") != 0;
    const char *const *anames = adam ? ADAM_STATE : SGD_STATE;
    float *state = arrays ? spmd_optim_state(L->optim, NULL) : NULL;
    if (adam && !(b->steps = malloc(sizeof(float) * (size_t)(np ? np : 1)))) return -1;
    for (int i = 0; i < np; i++) {
        const spmd_tensor_info *p = spmd_model_param(L->model, i);
        int64_t global[4], off[4], shape[4];
        geometry(L, p, global, off);
        for (int d = 0; d < p->ndim; d++) shape[d] = p->shape[d];
        spmd_dcp_shard *s = box_add(b, name_add(b, "model.%s", p->name), "float32", p->ndim, global);
        if (!s) return -1;
        for (int d = 0; d < p->ndim; d++) s->offsets[d] = off[d], s->sizes[d] = shape[d];
        s->data = L->params + p->offset;
        /* the optimizer state of this tensor's elements that this rank holds */
        size_t lo = p->offset > L->state_off ? p->offset : L->state_off;
        size_t hi = p->offset + p->count < L->state_off + L->state_count ? p->offset + p->count
                                                                            : L->state_off + L->state_count;
        if (!arrays || lo >= hi) continue;
        for (int a = 0; a < arrays; a++) {
            flat_ctx c = {b, name_add(b, "optim.state.%s.%s", p->name, anames[a]), p->ndim, global, off,
                          state + (size_t)a * L->state_count + (lo - L->state_off), (int64_t)(lo - p->offset), 0};
            int64_t idx[4] = {0};
            if (!c.fqn) return -1;
            flat_rec(&c, shape, 0, idx, 0, (int64_t)(lo - p->offset), (int64_t)(hi - p->offset));
            if (c.fail) return -1;
        }
        if (adam) {
            b->steps[i] = (float)spmd_optim_steps(L->optim);
            if (!(s = box_add(b, name_add(b, "optim.state.%s.step", p->name), "float32", 0, NULL))) return -1;
            s->data = &b->steps[i];
        }
    }
    for (int i = 0; i < nb; i++) {
        const spmd_tensor_info *p = spmd_model_buffer(L->model, i);
        int64_t global[4];
        for (int d = 0; d < p->ndim; d++) global[d] = p->shape[d];
        spmd_dcp_shard *s = box_add(b, name_add(b, "model.%s", p->name), "float32", p->ndim, global);
        if (!s) return -1;
        for (int d = 0; d < p->ndim; d++) s->sizes[d] = global[d];
        s->data = L->buffers + p->offset;
    }
    if (with_optim && L->optim && L->param_groups && param_groups(L, b) != 0) return -1;
    return 0;
}

static void group_err(spmd_group *g, char *err, size_t errlen) {
    snprintf(err, errlen, "%s", g ? spmd_group_errmsg(g) : "");
}

/* Every rank learns whether any failed (st: this rank's status; err keeps
 * its own message), the others naming the lowest failing rank: no rank goes
 * on training while another has stopped. */
static spmd_status agree(spmd_group *g, spmd_status st, const char *what, char *err, size_t errlen) {
    if (!g) return st;
    int32_t mine = st == SPMD_OK ? INT32_MAX : spmd_group_rank(g), first = mine;
    spmd_status st2 = spmd_all_reduce(g, &mine, &first, 1, SPMD_I32, SPMD_MIN);
    if (st2 != SPMD_OK) {
        if (st == SPMD_OK) group_err(g, err, errlen);
        return st == SPMD_OK ? st2 : st;
    }
    if (st == SPMD_OK && first != INT32_MAX) {
        snprintf(err, errlen, "rank %d could not %s (its message says why)", first, what);
        return SPMD_ERR_MISMATCH;
    }
    return st;
}

/* ---- save -------------------------------------------------------------------- */

spmd_status ckpt_save(spmd_group *g, spmd_dcp_saver *saver, ckpt_hold *hold, const char *root, const ckpt_layout *L,
                      const int64_t state[CK_STATE_N], const uint64_t rng[4], const char *model_name, char *dir,
                      size_t dirlen, char *err, size_t errlen) {
    int rank = g ? spmd_group_rank(g) : 0;
    int deferred = saver && hold;
    snprintf(dir, dirlen, "%s/step-%lld", root, (long long)state[CK_GLOBAL_STEP]);
    /* every rank creates the folders (EEXIST is fine), so none waits for rank 0's */
    spmd_status st = SPMD_OK;
    if ((mkdir(root, 0777) != 0 && errno != EEXIST) || (mkdir(dir, 0777) != 0 && errno != EEXIST)) {
        snprintf(err, errlen, "cannot create %s: %s", dir, strerror(errno));
        st = SPMD_ERR_IO;
    }
    ckpt_boxes local_b;
    int64_t local_state[CK_STATE_N], local_rng[4];
    ckpt_boxes *b = deferred ? &hold->b : &local_b;
    int64_t *state_copy = deferred ? hold->state : local_state, *rng_row = deferred ? hold->rng : local_rng;
    ckpt_layout Lb = *L;
    if (deferred) {
        ckpt_staged(saver, hold);   /* the previous save's boxes are done with */
        /* the buffers change in the next forward (BatchNorm): copied now */
        size_t nbuf = 0;
        spmd_model_buffers(L->model, &nbuf);
        if (nbuf > hold->buffers_cap) {
            free(hold->buffers);
            hold->buffers_cap = 0;
            if ((hold->buffers = malloc(nbuf * sizeof(float)))) hold->buffers_cap = nbuf;
        }
        if (nbuf && !hold->buffers && st == SPMD_OK) {
            snprintf(err, errlen, "out of memory copying the buffers");
            st = SPMD_ERR_NOMEM;
        }
        if (nbuf && hold->buffers) memcpy(hold->buffers, L->buffers, nbuf * sizeof(float));
        Lb.buffers = hold->buffers;
    }
    if (ckpt_boxes_build(&Lb, 1, b) != 0 && st == SPMD_OK) {
        snprintf(err, errlen, "out of memory describing the checkpoint");
        st = SPMD_ERR_NOMEM;
    }
    memcpy(state_copy, state, sizeof(int64_t) * CK_STATE_N);
    memcpy(rng_row, rng, sizeof(int64_t) * 4);
    int64_t g1[1] = {CK_STATE_N}, g2[2] = {state[CK_WORLD], 4};
    spmd_dcp_shard *s = box_add(b, "trainer.state", "int64", 1, g1);
    if (s) s->sizes[0] = CK_STATE_N, s->data = state_copy;
    spmd_dcp_shard *r = s ? box_add(b, "trainer.rng", "int64", 2, g2) : NULL;
    if (r) r->offsets[0] = rank, r->sizes[0] = 1, r->sizes[1] = 4, r->data = rng_row;
    if (r && L->slot_rng) {   /* every pipeline slot's dropout stream, copied now */
        int64_t g3[3] = {state[CK_WORLD], L->slot_rows, 4};
        size_t words = (size_t)L->slot_rows * 4;
        r = (b->slot_rng = malloc(words * sizeof(int64_t))) ? box_add(b, "trainer.pipe_rng", "int64", 3, g3) : NULL;
        if (r) {
            memcpy(b->slot_rng, L->slot_rng, words * sizeof(int64_t));
            r->offsets[0] = rank, r->sizes[0] = 1, r->sizes[1] = L->slot_rows, r->sizes[2] = 4, r->data = b->slot_rng;
        }
    }
    if (!r && st == SPMD_OK) {
        snprintf(err, errlen, "out of memory describing the checkpoint");
        st = SPMD_ERR_NOMEM;
    }
    const char *optim = L->optim ? spmd_optim_name(L->optim) : "sgd";
    spmd_dcp_bytes items[2 + sizeof b->items / sizeof b->items[0]] = {
        {"trainer.model", model_name, strlen(model_name), 0}, {"trainer.optimizer", optim, strlen(optim), 0}};
    for (size_t i = 0; i < b->nitems; i++) items[2 + i] = b->items[i];
    char what[4300];
    snprintf(what, sizeof what, "prepare its part of %s", dir);
    if ((st = agree(g, st, what, err, errlen)) == SPMD_OK)   /* the save's own status is agreed */
        st = deferred ? spmd_dcp_save_async_deferred(saver, dir, b->s, b->n, items, 2 + b->nitems, err, errlen)
             : saver  ? spmd_dcp_save_async(saver, dir, b->s, b->n, items, 2 + b->nitems, err, errlen)
                      : spmd_dcp_save(g, dir, b->s, b->n, items, 2 + b->nitems, err, errlen);
    if (!deferred) ckpt_boxes_free(b);   /* else until ckpt_staged: the thread copies from them */
    return st;
}

void ckpt_staged(spmd_dcp_saver *saver, ckpt_hold *hold) {
    if (!saver) return;
    spmd_dcp_save_staged(saver);
    if (hold) ckpt_boxes_free(&hold->b);
}

void ckpt_hold_free(ckpt_hold *hold) {
    ckpt_boxes_free(&hold->b);
    free(hold->buffers);
    memset(hold, 0, sizeof *hold);
}

/* ---- find -------------------------------------------------------------------- */

static int has_metadata(const char *dir) {
    char p[4200];
    snprintf(p, sizeof p, "%s/.metadata", dir);
    return access(p, R_OK) == 0;
}

spmd_status ckpt_find(spmd_group *g, const char *path, char *dir, size_t dirlen, int *found, char *err,
                      size_t errlen) {
    char pick[4096] = "";
    if (!g || spmd_group_rank(g) == 0) {
        if (has_metadata(path)) {
            snprintf(pick, sizeof pick, "%s", path);
        } else {
            DIR *d = opendir(path);
            long long best = -1;
            struct dirent *e;
            while (d && (e = readdir(d))) {
                char *end;
                if (strncmp(e->d_name, "step-", 5) != 0) continue;
                long long n = strtoll(e->d_name + 5, &end, 10);
                char sub[4200];
                snprintf(sub, sizeof sub, "%s/%s", path, e->d_name);
                if (*end || end == e->d_name + 5 || n < 0 || n <= best || !has_metadata(sub)) continue;
                best = n;
                snprintf(pick, sizeof pick, "%s", sub);
            }
            if (d) closedir(d);
        }
    }
    if (g) {
        spmd_status st = spmd_broadcast(g, pick, sizeof pick, SPMD_U8, 0);
        if (st != SPMD_OK) {
            group_err(g, err, errlen);
            return st;
        }
    }
    pick[sizeof pick - 1] = 0;
    *found = pick[0] != 0;
    snprintf(dir, dirlen, "%s", pick);
    return SPMD_OK;
}

/* ---- load -------------------------------------------------------------------- */

/* A bytes item that must equal what this run has (model, optimizer). */
static spmd_status check_item(const char *dir, const char *fqn, const char *what, const char *verb,
                              const char *mine, char *err, size_t errlen) {
    void *data = NULL;
    size_t len = 0;
    spmd_status st = spmd_dcp_load_bytes(dir, fqn, &data, &len, err, errlen);
    if (st == SPMD_ERR_NOTFOUND) {
        snprintf(err, errlen, "%s is not a spmd-train checkpoint: it has no %s", dir, fqn);
        return SPMD_ERR_FORMAT;
    }
    if (st != SPMD_OK) return st;
    if (len != strlen(mine) || memcmp(data, mine, len) != 0) {
        snprintf(err, errlen, "%s holds a%s %.*s %s; this run %s %s", dir,
                 len && strchr("aeiou", ((char *)data)[0]) ? "n" : "", (int)(len > 64 ? 64 : len), (char *)data,
                 what, verb, mine);
        st = SPMD_ERR_MISMATCH;
    }
    free(data);
    return st;
}

static spmd_status check_finite(const ckpt_boxes *b, const char *dir, int allow, int rank, char *err, size_t errlen) {
    for (size_t k = 0; k < b->n; k++) {
        const spmd_dcp_shard *s = &b->s[k];
        if (strcmp(s->dtype, "float32") != 0) continue;
        size_t n = 1, bad = 0, first = 0;
        for (int d = 0; d < s->ndim; d++) n *= (size_t)s->sizes[d];
        const float *v = s->data;
        for (size_t i = 0; i < n; i++)
            if (!isfinite(v[i]) && bad++ == 0) first = i;
        if (!bad) continue;
        snprintf(err, errlen,
                 "%s: tensor %s holds %zu non-finite value(s) of the %zu this rank loads (the first, element %zu "
                 "of its box, is %g): the run that saved it diverged; resume an earlier checkpoint, or pass "
                 "--allow-nonfinite-checkpoint",
                 dir, s->fqn, bad, n, first, (double)v[first]);
        if (!allow) return SPMD_ERR_FORMAT;
        if (rank == 0) fprintf(stderr, "spmd-train: WARNING: %s\n", err);
        err[0] = 0;
    }
    return SPMD_OK;
}

static spmd_status load_local(const char *dir, const ckpt_layout *L, const char *model_name,
                              const int64_t now[CK_STATE_N], int allow_nonfinite, int rank, int64_t state[CK_STATE_N],
                              uint64_t rng[4], int *rng_ok, char *err, size_t errlen) {
    spmd_status st = check_item(dir, "trainer.model", "model", "trains", model_name, err, errlen);
    const char *optim = L->optim ? spmd_optim_name(L->optim) : "sgd";
    if (st == SPMD_OK) st = check_item(dir, "trainer.optimizer", "optimizer state", "uses", optim, err, errlen);
    if (st != SPMD_OK) return st;
    spmd_dcp_shard ss = {"trainer.state", "int64", 1, {CK_STATE_N}, {0}, {CK_STATE_N}, state};
    if ((st = spmd_dcp_load(dir, &ss, 1, err, errlen)) != SPMD_OK) return st;
    const char *bad = NULL;
    if (state[CK_VERSION] != 1) bad = "unknown version";
    else if (state[CK_EPOCH] < 0 || state[CK_EPOCH] > 1000000) bad = "epoch out of range [0, 1000000]";
    else if (state[CK_GLOBAL_STEP] < 0 || state[CK_GLOBAL_STEP] > ((int64_t)1 << 40)) bad = "global step out of range";
    else if (state[CK_STEP_IN_EPOCH] < 0 || state[CK_STEP_IN_EPOCH] > ((int64_t)1 << 40))
        bad = "step in the epoch out of range";   /* counted in the saving layout's steps */
    else if (state[CK_OPTIM_STEPS] < 0 || state[CK_OPTIM_STEPS] > state[CK_GLOBAL_STEP])
        bad = "optimizer step count out of range [0, global step]";
    else if (state[CK_WORLD] < 1 || state[CK_REPLICAS] < 1 || state[CK_BATCH] < 1 || state[CK_WORLD] > (1 << 24) ||
             state[CK_REPLICAS] > state[CK_WORLD] || state[CK_BATCH] > 65536)
        bad = "world, replicas or batch out of range";
    if (bad) {
        snprintf(err, errlen,
                 "%s: trainer.state is not a position this run can continue from: %s (epoch %lld, step in epoch "
                 "%lld, global step %lld, optimizer steps %lld, world %lld, replicas %lld, batch %lld)",
                 dir, bad, (long long)state[CK_EPOCH], (long long)state[CK_STEP_IN_EPOCH],
                 (long long)state[CK_GLOBAL_STEP], (long long)state[CK_OPTIM_STEPS], (long long)state[CK_WORLD],
                 (long long)state[CK_REPLICAS], (long long)state[CK_BATCH]);
        return SPMD_ERR_FORMAT;
    }
    ckpt_boxes b;
    if (ckpt_boxes_build(L, 1, &b) != 0) {
        ckpt_boxes_free(&b);
        snprintf(err, errlen, "out of memory describing the checkpoint");
        return SPMD_ERR_NOMEM;
    }
    st = spmd_dcp_load(dir, b.s, b.n, err, errlen);
    if (st == SPMD_OK) st = check_finite(&b, dir, allow_nonfinite, rank, err, errlen);
    ckpt_boxes_free(&b);
    if (st != SPMD_OK) return st;
    if (L->optim) spmd_optim_set_steps(L->optim, state[CK_OPTIM_STEPS]);
    /* the dropout streams continue only where the same rank runs the same part */
    *rng_ok = state[CK_WORLD] == now[CK_WORLD] && state[CK_REPLICAS] == now[CK_REPLICAS] &&
              state[CK_PP] == now[CK_PP] && state[CK_TP] == now[CK_TP];
    if (*rng_ok) {
        int64_t row[4];
        spmd_dcp_shard rs = {"trainer.rng", "int64", 2, {state[CK_WORLD], 4}, {rank, 0}, {1, 4}, row};
        if ((st = spmd_dcp_load(dir, &rs, 1, err, errlen)) != SPMD_OK) return st;
        memcpy(rng, row, sizeof row);
        if (!(rng[0] | rng[1] | rng[2] | rng[3])) {
            snprintf(err, errlen, "%s: trainer.rng: rank %d's RNG state is all zero", dir, rank);
            return SPMD_ERR_FORMAT;
        }
        if (L->slot_rng) {   /* the pipeline's slots: the same micro-batch count, else fresh streams */
            spmd_dcp_shard ps = {"trainer.pipe_rng", "int64", 3, {state[CK_WORLD], L->slot_rows, 4}, {rank, 0, 0},
                                 {1, L->slot_rows, 4}, L->slot_rng};
            st = spmd_dcp_load(dir, &ps, 1, err, errlen);
            if (st == SPMD_ERR_NOTFOUND || st == SPMD_ERR_MISMATCH) *rng_ok = 0, st = SPMD_OK, err[0] = 0;
            if (st != SPMD_OK) return st;
        }
    }
    return SPMD_OK;
}

spmd_status ckpt_load(spmd_group *g, const char *dir, const ckpt_layout *L, const char *model_name,
                      const int64_t layout_now[CK_STATE_N], int allow_nonfinite, int64_t state[CK_STATE_N],
                      uint64_t rng[4], int *rng_ok, char *err, size_t errlen) {
    int rank = g ? spmd_group_rank(g) : 0;
    spmd_status st = load_local(dir, L, model_name, layout_now, allow_nonfinite, rank, state, rng, rng_ok, err,
                                errlen);
    char what[4300];
    snprintf(what, sizeof what, "load %s", dir);
    return agree(g, st, what, err, errlen);
}

void ckpt_position(const int64_t state[CK_STATE_N], int replicas, int batch, long per_epoch, int *epoch,
                   long *step_in_epoch, int *exact) {
    int64_t seen = state[CK_STEP_IN_EPOCH] * state[CK_BATCH] * state[CK_REPLICAS];
    int64_t per_step = (int64_t)replicas * batch;
    *epoch = (int)state[CK_EPOCH];
    *step_in_epoch = (long)(seen / per_step);
    *exact = seen % per_step == 0;
    if (*step_in_epoch >= per_epoch) {   /* the saved epoch is over in this layout */
        (*epoch)++;
        *step_in_epoch = 0;
    }
}
