/* tp.c — column- and row-parallel Linear layers (Megatron-LM style) as
 * custom layers of a layer list.
 *
 * Column: y_t = x W_t^T + b_t, W_t the t-th block of rows.  Backward:
 * dx = sum_t dy_t W_t, an all_reduce (Megatron's "f": identity forward,
 * all_reduce backward).  Row: y = sum_t x_t W_t^T + b, W_t the t-th block of
 * columns: an all_reduce forward ("g": all_reduce forward, identity
 * backward), dx_t = dy W_t with no communication. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "spmd/parallel.h"

typedef struct tp_layer {
    struct tp_layer *next;
    spmd_group *g;
    int tp, t;
    int row;          /* 0: column-parallel, 1: row-parallel */
    int C, OC;        /* the unsharded layer */
    int Cl, OCl;      /* this rank's shard */
    int bias, gather;
    float *scratch;
    size_t cap;
} tp_layer;

struct spmd_tp {
    spmd_group *g;
    tp_layer *layers;
};

spmd_status spmd_tp_create(spmd_group *g, spmd_tp **out) {
    if (!out) return SPMD_ERR_INVALID;
    spmd_tp *tp = calloc(1, sizeof *tp);
    if (!tp) return SPMD_ERR_NOMEM;
    tp->g = g;
    *out = tp;
    return SPMD_OK;
}

void spmd_tp_free(spmd_tp *tp) {
    if (!tp) return;
    while (tp->layers) {
        tp_layer *l = tp->layers;
        tp->layers = l->next;
        free(l->scratch);
        free(l);
    }
    free(tp);
}

static float *scratch(tp_layer *l, size_t n) {
    if (n > l->cap) {
        float *q = realloc(l->scratch, sizeof(float) * n);
        if (!q) return NULL;
        l->scratch = q;
        l->cap = n;
    }
    return l->scratch;
}

static spmd_status all_reduce(tp_layer *l, float *x, size_t n) {
    return l->tp > 1 ? spmd_all_reduce(l->g, x, x, n, SPMD_F32, SPMD_SUM) : SPMD_OK;
}

static spmd_status col_forward(void *ctx, float *out, const float *in, float *const *p, int B) {
    tp_layer *l = ctx;
    if (!l->gather || l->tp == 1) {
        spmd_linear_forward(out, in, p[0], l->bias ? p[1] : NULL, B, l->C, l->OCl);
        return SPMD_OK;
    }
    /* (tp, B, OCl) gathered, then interleaved into (B, OC) */
    size_t part = (size_t)B * l->OCl;
    float *s = scratch(l, part * (size_t)(l->tp + 1));
    if (!s) return SPMD_ERR_NOMEM;
    spmd_linear_forward(s, in, p[0], l->bias ? p[1] : NULL, B, l->C, l->OCl);
    spmd_status st = spmd_all_gather(l->g, s, s + part, part, SPMD_F32);
    if (st != SPMD_OK) return st;
    for (int r = 0; r < l->tp; r++)
        for (int b = 0; b < B; b++)
            memcpy(out + (size_t)b * l->OC + (size_t)r * l->OCl, s + part * (size_t)(r + 1) + (size_t)b * l->OCl,
                   sizeof(float) * l->OCl);
    return SPMD_OK;
}

static spmd_status col_backward(void *ctx, float *din, float *const *dp, const float *dout,
                                const float *in, const float *out, float *const *p, int B, int acc) {
    (void)out;
    tp_layer *l = ctx;
    const float *dy = dout;
    if (l->gather && l->tp > 1) {   /* this rank's columns of the gathered gradient */
        float *s = scratch(l, (size_t)B * l->OCl);
        if (!s) return SPMD_ERR_NOMEM;
        for (int b = 0; b < B; b++)
            memcpy(s + (size_t)b * l->OCl, dout + (size_t)b * l->OC + (size_t)l->t * l->OCl,
                   sizeof(float) * l->OCl);
        dy = s;
    }
    if (!din) {
        spmd_linear_backward(NULL, dp[0], l->bias ? dp[1] : NULL, dy, in, p[0], B, l->C, l->OCl, 0);
        return SPMD_OK;
    }
    size_t n = (size_t)B * l->C;
    float *part = malloc(sizeof(float) * n);
    if (!part) return SPMD_ERR_NOMEM;
    spmd_linear_backward(part, dp[0], l->bias ? dp[1] : NULL, dy, in, p[0], B, l->C, l->OCl, 0);
    spmd_status st = all_reduce(l, part, n);
    if (st == SPMD_OK) {
        if (acc)
            for (size_t i = 0; i < n; i++) din[i] += part[i];
        else
            memcpy(din, part, sizeof(float) * n);
    }
    free(part);
    return st;
}

static spmd_status row_forward(void *ctx, float *out, const float *in, float *const *p, int B) {
    tp_layer *l = ctx;
    spmd_linear_forward(out, in, p[0], NULL, B, l->Cl, l->OC);
    spmd_status st = all_reduce(l, out, (size_t)B * l->OC);
    if (st == SPMD_OK && l->bias)
        for (int b = 0; b < B; b++)
            for (int o = 0; o < l->OC; o++) out[(size_t)b * l->OC + o] += p[1][o];
    return st;
}

static spmd_status row_backward(void *ctx, float *din, float *const *dp, const float *dout,
                                const float *in, const float *out, float *const *p, int B, int acc) {
    (void)out;
    tp_layer *l = ctx;
    spmd_linear_backward(din, dp[0], l->bias ? dp[1] : NULL, dout, in, p[0], B, l->Cl, l->OC, acc);
    return SPMD_OK;
}

/* The unsharded layer's draws (torch's Linear: weight then bias, uniform in
 * ±1/sqrt(C)), keeping this rank's block. */
static void tp_init(void *ctx, float *const *p, spmd_rng *r) {
    tp_layer *l = ctx;
    const float bound = 1.0f / sqrtf((float)l->C);
    for (int o = 0; o < l->OC; o++)
        for (int c = 0; c < l->C; c++) {
            float v = (2.0f * spmd_rng_uniform(r) - 1.0f) * bound;
            if (!l->row && o / l->OCl == l->t) p[0][(size_t)(o % l->OCl) * l->C + c] = v;
            if (l->row && c / l->Cl == l->t) p[0][(size_t)o * l->Cl + c % l->Cl] = v;
        }
    for (int o = 0; l->bias && o < l->OC; o++) {
        float v = (2.0f * spmd_rng_uniform(r) - 1.0f) * bound;
        if (l->row) p[1][o] = v;
        else if (o / l->OCl == l->t) p[1][o % l->OCl] = v;
    }
}

static spmd_status add_layer(spmd_tp *tp, spmd_layers *L, int row, int out_features, int bias,
                             int gather, const char *name) {
    if (!tp || !L) return SPMD_ERR_INVALID;
    int n = spmd_layers_count(L), c, h, w, flat;
    spmd_layers_shape(L, n - 1, &c, &h, &w, &flat);
    const int tsz = tp->g ? spmd_group_size(tp->g) : 1;
    tp_layer *l = calloc(1, sizeof *l);
    if (!l) return SPMD_ERR_NOMEM;
    l->g = tp->g;
    l->tp = tsz;
    l->t = tp->g ? spmd_group_rank(tp->g) : 0;
    l->row = row;
    l->OC = out_features;
    l->bias = bias != 0;
    l->gather = gather != 0;
    const int in = c * h * w;
    /* a row-parallel layer's input is the shard: the whole input is tp times it */
    l->C = row ? in * tsz : in;
    l->Cl = row ? in : in;
    l->OCl = row ? out_features : out_features / (tsz ? tsz : 1);
    spmd_layer_def d = {.name = name, .nparams = 1 + l->bias, .param_names = {"weight", "bias"},
                        .param_ndim = {2, 1}, .ctx = l, .init = tp_init};
    d.param_shape[0][0] = row ? out_features : l->OCl;
    d.param_shape[0][1] = l->Cl;
    d.param_shape[1][0] = row ? out_features : l->OCl;
    d.out_c = row || gather ? out_features : l->OCl;
    d.out_h = d.out_w = d.out_flat = 1;
    d.forward = row ? row_forward : col_forward;
    d.backward = row ? row_backward : col_backward;
    /* a spatial input, or out_features that do not split over the ranks */
    spmd_status st = !flat || out_features < 1 || (!row && out_features % tsz != 0)
                         ? SPMD_ERR_INVALID
                         : spmd_layers_custom(L, &d);
    if (st != SPMD_OK) {
        free(l);
        return st;
    }
    l->next = tp->layers;
    tp->layers = l;
    return SPMD_OK;
}

spmd_status spmd_tp_column_linear(spmd_tp *tp, spmd_layers *L, int out_features, int bias,
                                  int gather_output, const char *name) {
    return add_layer(tp, L, 0, out_features, bias, gather_output, name ? name : "linear");
}

spmd_status spmd_tp_row_linear(spmd_tp *tp, spmd_layers *L, int out_features, int bias,
                               const char *name) {
    return add_layer(tp, L, 1, out_features, bias, 0, name ? name : "linear");
}

spmd_status spmd_tp_arch(spmd_tp *tp, const char *arch, int num_classes, int in_c, int in_h,
                         int in_w, spmd_layers **out, char *err, size_t errlen) {
    const char *a = arch ? arch : "cnn";
    int ncls = num_classes > 0 ? num_classes : 10;
    int mlp = strcmp(a, "mlp") == 0;
    if (!tp || !out || (!mlp && strcmp(a, "cnn") != 0)) {
        if (err && errlen) snprintf(err, errlen, "tensor parallelism: no sharded '%s' (mlp, cnn)", a);
        return SPMD_ERR_INVALID;
    }
    /* the built-in list up to its fc1, then the sharded head */
    spmd_layers *L;
    spmd_status st = spmd_layers_arch(a, ncls, in_c, in_h, in_w, &L, err, errlen);
    if (st != SPMD_OK) return st;
    int hidden = 0, fc1 = spmd_layers_index(L, "fc1");
    spmd_layers_shape(L, fc1, &hidden, NULL, NULL, NULL);
    if (fc1 < 0 || spmd_layers_truncate(L, fc1) != SPMD_OK) {
        spmd_layers_free(L);
        return SPMD_ERR_INVALID;
    }
    st = spmd_tp_column_linear(tp, L, hidden, 1, 0, "fc1");
    if (st == SPMD_OK) st = spmd_layers_relu(L);
    if (st == SPMD_OK && !mlp) st = spmd_layers_dropout(L, 0.5f);
    if (st == SPMD_OK) st = spmd_tp_row_linear(tp, L, ncls, 1, "fc2");
    if (st != SPMD_OK || spmd_layers_errmsg(L)[0]) {
        int tsz = tp->g ? spmd_group_size(tp->g) : 1;
        if (err && errlen)
            snprintf(err, errlen, "%s with tensor parallelism %d: hidden size %d does not split over %d ranks",
                     a, tsz, hidden, tsz);
        spmd_layers_free(L);
        return st ? st : SPMD_ERR_INVALID;
    }
    *out = L;
    return SPMD_OK;
}
