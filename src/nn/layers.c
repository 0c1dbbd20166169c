/* layers.c — spmd_layers: a model described as a list of layers, built
 * whole or by range (a pipeline stage).
 *
 * The list keeps a "shadow" graph (never allocated or run) that every added
 * layer is appended to, so shapes, parameter counts and error messages come
 * from the same builder code the real model uses.  A failed add rebuilds the
 * shadow from the recorded layers, leaving the list as it was. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "common/common.h"
#include "nn/internal.h"

enum { L_LINEAR, L_CONV, L_BN, L_RELU, L_MAXPOOL, L_DROPOUT, L_FLATTEN, L_GAP, L_BLOCK, L_CUSTOM };

typedef struct {
    int kind;
    int a, k, stride, pad, bias;   /* out size / planes, kernel, stride, pad, bias */
    float p;
    char name[96];
    spmd_layer_def def;            /* L_CUSTOM (its name points at .name) */
    char pnames[SPMD_LAYER_MAX_PARAMS][32];
    int out;                       /* the shadow's activation id of the output */
    int p0, np, b0, nb;            /* the shadow's parameter / buffer table entries */
} layer;

struct spmd_layers {
    int c, h, w, flat;
    layer *v;
    int n, cap;
    spmd_model *shadow;
    char err[200];
};

static spmd_status failf(spmd_layers *L, spmd_status st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    spmd__vfail(L->err, sizeof L->err, st, fmt, ap);
    va_end(ap);
    return st;
}

/* Append layer l to model m after activation in; returns the output id or -1. */
static int append(spmd_model *m, int in, const layer *l) {
    switch (l->kind) {
    case L_LINEAR: return spmd__add_linear(m, in, l->a, l->bias, l->name);
    case L_CONV: return spmd__add_conv(m, in, l->a, l->k, l->stride, l->pad, l->bias, l->name);
    case L_BN: return spmd__add_bn(m, in, l->name);
    case L_RELU: return spmd__add_relu(m, in);
    case L_MAXPOOL: return spmd__add_maxpool(m, in, l->k);
    case L_DROPOUT: return spmd__add_dropout(m, in, l->p);
    case L_FLATTEN: return spmd__add_flatten(m, in);
    case L_GAP: return spmd__add_gap(m, in);
    case L_BLOCK: return spmd__add_basic_block(m, in, l->a, l->stride, l->name);
    case L_CUSTOM: {
        spmd_layer_def d = l->def;
        d.name = l->name;
        for (int p = 0; p < d.nparams; p++) d.param_names[p] = l->pnames[p];
        return spmd__add_custom(m, in, &d);
    }
    }
    return -1;
}

/* Replay layers [0, n) on a fresh shadow. */
static spmd_status rebuild_shadow(spmd_layers *L) {
    spmd_model_free(L->shadow);
    L->shadow = spmd__model_new("shadow", L->c, L->h, L->w, L->flat);
    if (!L->shadow) return SPMD_ERR_NOMEM;
    int x = 0;
    for (int i = 0; i < L->n && x >= 0; i++) x = append(L->shadow, x, &L->v[i]);
    return L->shadow->err;
}

static spmd_status push(spmd_layers *L, layer *l) {
    if (!L) return SPMD_ERR_INVALID;
    if (L->n == L->cap) {
        int nc = L->cap ? 2 * L->cap : 16;
        layer *q = realloc(L->v, sizeof(layer) * (size_t)nc);
        if (!q) return failf(L, SPMD_ERR_NOMEM, "out of memory adding layer %d", L->n);
        L->v = q;
        L->cap = nc;
    }
    spmd_model *s = L->shadow;
    int in = L->n ? L->v[L->n - 1].out : 0;
    int np0 = s->nparams, nb0 = s->nbufs;
    int out = append(s, in, l);
    if (out < 0) {
        spmd_status st = s->err ? s->err : SPMD_ERR_INVALID;
        failf(L, st, "layer %d: %s", L->n, s->errmsg);
        if (rebuild_shadow(L) != SPMD_OK) failf(L, SPMD_ERR_NOMEM, "out of memory");
        return st;
    }
    l->out = out;
    l->p0 = np0;
    l->np = s->nparams - np0;
    l->b0 = nb0;
    l->nb = s->nbufs - nb0;
    L->v[L->n++] = *l;
    return SPMD_OK;
}

static void set_name(layer *l, const char *name, const char *dflt) {
    snprintf(l->name, sizeof l->name, "%s", name && *name ? name : dflt);
}

spmd_status spmd_layers_create(int c, int h, int w, int flat, spmd_layers **out) {
    if (!out || c < 1 || h < 1 || w < 1) return SPMD_ERR_INVALID;
    spmd_layers *L = calloc(1, sizeof *L);
    if (!L) return SPMD_ERR_NOMEM;
    L->c = c; L->h = h; L->w = w; L->flat = flat != 0;
    if (rebuild_shadow(L) != SPMD_OK) {
        spmd_layers_free(L);
        return SPMD_ERR_NOMEM;
    }
    *out = L;
    return SPMD_OK;
}

void spmd_layers_free(spmd_layers *L) {
    if (!L) return;
    spmd_model_free(L->shadow);
    free(L->v);
    free(L);
}

const char *spmd_layers_errmsg(const spmd_layers *L) { return L ? L->err : "no layer list"; }

spmd_status spmd_layers_linear(spmd_layers *L, int out_features, int bias, const char *name) {
    layer l = {.kind = L_LINEAR, .a = out_features, .bias = bias != 0};
    set_name(&l, name, "linear");
    return push(L, &l);
}
spmd_status spmd_layers_conv2d(spmd_layers *L, int out_channels, int k, int stride, int pad,
                               int bias, const char *name) {
    layer l = {.kind = L_CONV, .a = out_channels, .k = k, .stride = stride, .pad = pad,
               .bias = bias != 0};
    set_name(&l, name, "conv");
    return push(L, &l);
}
spmd_status spmd_layers_batchnorm2d(spmd_layers *L, const char *name) {
    layer l = {.kind = L_BN};
    set_name(&l, name, "bn");
    return push(L, &l);
}
spmd_status spmd_layers_relu(spmd_layers *L) { return push(L, &(layer){.kind = L_RELU}); }
spmd_status spmd_layers_maxpool2d(spmd_layers *L, int k) {
    return push(L, &(layer){.kind = L_MAXPOOL, .k = k});
}
spmd_status spmd_layers_dropout(spmd_layers *L, float p) {
    return push(L, &(layer){.kind = L_DROPOUT, .p = p});
}
spmd_status spmd_layers_flatten(spmd_layers *L) { return push(L, &(layer){.kind = L_FLATTEN}); }
spmd_status spmd_layers_global_avgpool(spmd_layers *L) { return push(L, &(layer){.kind = L_GAP}); }
spmd_status spmd_layers_basic_block(spmd_layers *L, int planes, int stride, const char *prefix) {
    layer l = {.kind = L_BLOCK, .a = planes, .stride = stride};
    set_name(&l, prefix, "block");
    return push(L, &l);
}
spmd_status spmd_layers_custom(spmd_layers *L, const spmd_layer_def *def) {
    if (!L || !def) return SPMD_ERR_INVALID;
    layer l = {.kind = L_CUSTOM, .def = *def};
    set_name(&l, def->name, "custom");
    for (int p = 0; p < def->nparams && p < SPMD_LAYER_MAX_PARAMS; p++)
        snprintf(l.pnames[p], sizeof l.pnames[p], "%s", def->param_names[p] ? def->param_names[p] : "");
    for (int p = 0; p < def->nparams && p < SPMD_LAYER_MAX_PARAMS; p++)
        if (!def->param_names[p] || !*def->param_names[p])
            return failf(L, SPMD_ERR_INVALID, "layer %d (%s): parameter %d has no name", L->n,
                         l.name, p);
    return push(L, &l);
}

int spmd_layers_count(const spmd_layers *L) { return L ? L->n : 0; }

int spmd_layers_index(const spmd_layers *L, const char *name) {
    for (int i = 0; L && name && i < L->n; i++)
        if (L->v[i].name[0] && strcmp(L->v[i].name, name) == 0) return i;
    return -1;
}

spmd_status spmd_layers_truncate(spmd_layers *L, int n) {
    if (!L || n < 0 || n > L->n) {
        if (L) failf(L, SPMD_ERR_INVALID, "cannot keep %d layers of %d", n, L->n);
        return SPMD_ERR_INVALID;
    }
    L->n = n;
    return rebuild_shadow(L) == SPMD_OK ? SPMD_OK : failf(L, SPMD_ERR_NOMEM, "out of memory");
}

size_t spmd_layers_layer_params(const spmd_layers *L, int i) {
    if (!L || i < 0 || i >= L->n) return 0;
    size_t c = 0;
    for (int p = 0; p < L->v[i].np; p++) c += L->shadow->params[L->v[i].p0 + p].count;
    return c;
}

void spmd_layers_param_range(const spmd_layers *L, int first, int last, size_t *off,
                             size_t *count) {
    size_t o = 0, c = 0;
    for (int i = 0; L && i < L->n && i < last; i++) {
        if (i < first) o += spmd_layers_layer_params(L, i);
        else c += spmd_layers_layer_params(L, i);
    }
    if (off) *off = o;
    if (count) *count = c;
}

void spmd_layers_shape(const spmd_layers *L, int i, int *c, int *h, int *w, int *flat) {
    const spmd__act *a = &L->shadow->acts[i < 0 || i >= L->n ? 0 : L->v[i].out];
    if (c) *c = a->c;
    if (h) *h = a->h;
    if (w) *w = a->w;
    if (flat) *flat = a->flat;
}

/* Layers [first, last) into a fresh graph (not yet finished). */
static spmd_model *assemble(const spmd_layers *L, const char *arch, int first, int last) {
    const spmd__act *in = &L->shadow->acts[first ? L->v[first - 1].out : 0];
    spmd_model *m = spmd__model_new(arch, in->c, in->h, in->w, in->flat);
    if (!m) return NULL;
    m->stage_input = first > 0;
    m->stage_output = last < L->n;
    int x = 0;
    for (int i = first; i < last && x >= 0; i++) x = append(m, x, &L->v[i]);
    return m;
}

/* The random draws the whole model's initialisation makes before layer
 * `first` (one per element of every Linear/Conv2d tensor, none for
 * BatchNorm), so a stage can start its own where the whole model's would be;
 * -1 when a custom init (whose draws are its own business) comes first. */
static int64_t draws_before(const spmd_layers *L, int first) {
    if (first == 0) return 0;
    const spmd_model *s = L->shadow;
    int pend = L->v[first].p0;   /* parameter table entries before the stage */
    int64_t n = 0;
    for (int i = 0; i < s->nnodes; i++) {
        const spmd__node *nd = &s->nodes[i];
        if (nd->np == 0 || nd->p0 >= pend || nd->op == SPMD__OP_BN) continue;
        if (nd->op == SPMD__OP_CUSTOM && nd->custom->init) return -1;
        for (int p = 0; p < nd->np; p++) n += (int64_t)s->params[nd->p0 + p].count;
    }
    return n;
}

/* The stage's initial parameters and buffers from a whole model built from
 * the same seed (when draws_before cannot tell). */
static spmd_status copy_slice(spmd_model *stage, const spmd_layers *L, int first, int last,
                              uint64_t seed, char *err, size_t errlen) {
    spmd_model *whole = assemble(L, "whole", 0, L->n);
    if (!whole) return SPMD_ERR_NOMEM;
    spmd_status st = spmd__model_finish(whole, seed, err, errlen);
    if (st == SPMD_OK) {
        size_t off;
        spmd_layers_param_range(L, first, last, &off, NULL);
        memcpy(stage->param_mem, whole->param_mem + off, sizeof(float) * stage->param_count);
        size_t boff = 0;
        for (int i = 0; i < first; i++)
            for (int b = 0; b < L->v[i].nb; b++) boff += whole->bufs[L->v[i].b0 + b].count;
        if (stage->buf_count)
            memcpy(stage->buf_mem, whole->buf_mem + boff, sizeof(float) * stage->buf_count);
    }
    spmd_model_free(whole);
    return st;
}

spmd_status spmd_model_build(const spmd_layers *L, const spmd_build_opts *o, spmd_model **out,
                             char *err, size_t errlen) {
    if (!L || !o || !out) return SPMD_ERR_INVALID;
    int first = o->first, last = o->last > 0 ? o->last : L->n;
    if (L->n == 0 || first < 0 || first >= last || last > L->n) {
        if (err && errlen)
            snprintf(err, errlen, "layer range [%d, %d) of a %d-layer list is empty or out of range",
                     first, last, L->n);
        return SPMD_ERR_INVALID;
    }
    spmd_model *m = assemble(L, o->arch ? o->arch : "custom", first, last);
    if (!m) return SPMD_ERR_NOMEM;
    m->dropout_on = o->dropout != 0;
    int64_t skip = draws_before(L, first);
    m->init_skip = skip > 0 ? (uint64_t)skip : 0;
    spmd_status st = spmd__model_finish(m, o->seed, err, errlen);
    if (st == SPMD_OK && skip < 0) st = copy_slice(m, L, first, last, o->seed, err, errlen);
    if (st != SPMD_OK) {
        spmd_model_free(m);
        return st;
    }
    *out = m;
    return SPMD_OK;
}
