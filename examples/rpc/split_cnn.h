/* split_cnn.h — seed 000's CNN (spmd_model arch "cnn", dropout off) cut in
 * two dist-autograd modules, written with nn.h's per-layer kernels:
 *   stage 1: conv1 3x3 1->32, ReLU, conv2 3x3 32->32, ReLU, max-pool 2, flatten
 *            (B,1,28,28) -> (B,4608); parameters conv1.{weight,bias}, conv2.{weight,bias}
 *   stage 2: fc1 4608->128, ReLU, fc2 128->10   (B,4608) -> (B,10)
 * Each stage's parameters are one flat array in the whole model's order, so
 * split_cnn_init copies them from a whole "cnn" model.  Used by the pipeline
 * example and by the dist-autograd test. */
#ifndef SPMD_EXAMPLE_SPLIT_CNN_H
#define SPMD_EXAMPLE_SPLIT_CNN_H

#include <stdlib.h>
#include <string.h>
#include "spmd/dist_autograd.h"

enum { SC_FLAT = 32 * 12 * 12, SC_S1 = 32 * 9 + 32 + 32 * 32 * 9 + 32, SC_S2 = 128 * SC_FLAT + 128 + 10 * 128 + 10 };

typedef struct {
    float p1[SC_S1];
    float *p2;   /* SC_S2 floats */
} split_cnn;

/* Copy stage parameters out of a whole "cnn" model (params 0-3 then 4-7). */
static spmd_status split_cnn_init(split_cnn *s, spmd_model *whole) {
    size_t n = 0;
    const float *p = spmd_model_params(whole, &n);
    if (n != (size_t)SC_S1 + SC_S2) return SPMD_ERR_MISMATCH;
    s->p2 = malloc(sizeof(float) * SC_S2);
    if (!s->p2) return SPMD_ERR_NOMEM;
    memcpy(s->p1, p, sizeof(float) * SC_S1);
    memcpy(s->p2, p + SC_S1, sizeof(float) * SC_S2);
    return SPMD_OK;
}

typedef struct {
    int B;
    float *x, *r1, *r2;
    int32_t *idx;
} s1_saved;

static void s1_dims(spmd_conv2d_dims *d1, spmd_conv2d_dims *d2) {
    spmd_conv2d_dims_init(d1, 1, 28, 28, 32, 3, 1, 0);
    spmd_conv2d_dims_init(d2, 32, 26, 26, 32, 3, 1, 0);
}

static void s1_free(void *self, void *saved) {
    (void)self;
    s1_saved *s = saved;
    if (!s) return;
    free(s->x), free(s->r1), free(s->r2), free(s->idx), free(s);
}

static spmd_status s1_forward(void *self, const spmd_rpc_msg *in, spmd_rpc_msg *out, void **saved) {
    split_cnn *m = self;
    const spmd_rpc_tensor *x = spmd_rpc_msg_tensor(in, 0);
    if (!x || x->dtype != SPMD_F32 || x->ndim != 4 || x->shape[1] != 1 || x->shape[2] != 28 || x->shape[3] != 28)
        return SPMD_ERR_INVALID;
    int B = (int)x->shape[0];
    spmd_conv2d_dims d1, d2;
    s1_dims(&d1, &d2);
    s1_saved *s = calloc(1, sizeof *s);
    if (!s) return SPMD_ERR_NOMEM;
    s->B = B;
    size_t n0 = (size_t)B * 784, n1 = (size_t)32 * B * 26 * 26, n2 = (size_t)32 * B * 24 * 24, np = (size_t)32 * B * 144;
    s->x = malloc(sizeof(float) * n0);
    s->r1 = malloc(sizeof(float) * n1);
    s->r2 = malloc(sizeof(float) * n2);
    s->idx = malloc(sizeof(int32_t) * np);
    float *pool = malloc(sizeof(float) * np);
    size_t cs = spmd_conv2d_col_size(&d1, B) > spmd_conv2d_col_size(&d2, B) ? spmd_conv2d_col_size(&d1, B)
                                                                              : spmd_conv2d_col_size(&d2, B);
    float *col = malloc(sizeof(float) * cs);
    int64_t shape[2] = {B, SC_FLAT};
    spmd_status st = s->x && s->r1 && s->r2 && s->idx && pool && col ? SPMD_OK : SPMD_ERR_NOMEM;
    if (st == SPMD_OK) st = spmd_rpc_msg_add_tensor(out, SPMD_F32, 2, shape, NULL);
    if (st == SPMD_OK) {
        /* (B,1,28,28) is (1,B,28,28): the CNHW layout the kernels use */
        memcpy(s->x, x->data, sizeof(float) * n0);
        const float *w1 = m->p1, *b1 = w1 + 288, *w2 = b1 + 32, *b2 = w2 + 9216;
        spmd_conv2d_forward(s->r1, s->x, w1, b1, col, &d1, B);
        spmd_relu_forward(s->r1, s->r1, n1);
        spmd_conv2d_forward(s->r2, s->r1, w2, b2, col, &d2, B);
        spmd_relu_forward(s->r2, s->r2, n2);
        spmd_maxpool_forward(pool, s->idx, s->r2, 32 * B, 24, 24, 2);
        spmd_flatten_forward(spmd_rpc_msg_tensor(out, 0)->data, pool, 32, B, 144);
    }
    free(pool);
    free(col);
    if (st != SPMD_OK) {
        s1_free(NULL, s);
        return st;
    }
    *saved = s;
    return SPMD_OK;
}

static spmd_status s1_backward(void *self, void *saved, const spmd_rpc_msg *dout, spmd_rpc_msg *din,
                               float *grads) {
    (void)din;   /* the input is data: no gradient */
    split_cnn *m = self;
    s1_saved *s = saved;
    const spmd_rpc_tensor *g = spmd_rpc_msg_tensor(dout, 0);
    int B = s->B;
    if (!g || g->ndim != 2 || g->shape[0] != B || g->shape[1] != SC_FLAT) return SPMD_ERR_INVALID;
    spmd_conv2d_dims d1, d2;
    s1_dims(&d1, &d2);
    size_t n1 = (size_t)32 * B * 26 * 26, n2 = (size_t)32 * B * 24 * 24, np = (size_t)32 * B * 144;
    size_t cs = spmd_conv2d_col_size(&d1, B) > spmd_conv2d_col_size(&d2, B) ? spmd_conv2d_col_size(&d1, B)
                                                                              : spmd_conv2d_col_size(&d2, B);
    float *dp = malloc(sizeof(float) * np), *d2b = malloc(sizeof(float) * n2), *d1b = malloc(sizeof(float) * n1);
    float *col = malloc(sizeof(float) * cs), *dcol = malloc(sizeof(float) * cs);
    spmd_status st = dp && d2b && d1b && col && dcol ? SPMD_OK : SPMD_ERR_NOMEM;
    if (st == SPMD_OK) {
        const float *w1 = m->p1, *w2 = w1 + 288 + 32;
        float *gw1 = grads, *gb1 = gw1 + 288, *gw2 = gb1 + 32, *gb2 = gw2 + 9216;
        spmd_flatten_backward(dp, g->data, 32, B, 144, 0);
        spmd_maxpool_backward(d2b, dp, s->idx, 32 * B, 24, 24, 2, 0);
        spmd_relu_backward(d2b, d2b, s->r2, n2, 0);
        spmd_conv2d_backward(d1b, gw2, gb2, d2b, s->r1, w2, col, dcol, &d2, B, 0);
        spmd_relu_backward(d1b, d1b, s->r1, n1, 0);
        spmd_conv2d_backward(NULL, gw1, gb1, d1b, s->x, w1, col, NULL, &d1, B, 0);
    }
    free(dp), free(d2b), free(d1b), free(col), free(dcol);
    return st;
}

typedef struct {
    int B;
    float *h, *r;
} s2_saved;

static void s2_free(void *self, void *saved) {
    (void)self;
    s2_saved *s = saved;
    if (!s) return;
    free(s->h), free(s->r), free(s);
}

static spmd_status s2_forward(void *self, const spmd_rpc_msg *in, spmd_rpc_msg *out, void **saved) {
    split_cnn *m = self;
    const spmd_rpc_tensor *h = spmd_rpc_msg_tensor(in, 0);
    if (!h || h->dtype != SPMD_F32 || h->ndim != 2 || h->shape[1] != SC_FLAT) return SPMD_ERR_INVALID;
    int B = (int)h->shape[0];
    s2_saved *s = calloc(1, sizeof *s);
    if (!s) return SPMD_ERR_NOMEM;
    s->B = B;
    s->h = malloc(sizeof(float) * (size_t)B * SC_FLAT);
    s->r = malloc(sizeof(float) * (size_t)B * 128);
    int64_t shape[2] = {B, 10};
    spmd_status st = s->h && s->r ? spmd_rpc_msg_add_tensor(out, SPMD_F32, 2, shape, NULL) : SPMD_ERR_NOMEM;
    if (st != SPMD_OK) {
        s2_free(NULL, s);
        return st;
    }
    memcpy(s->h, h->data, sizeof(float) * (size_t)B * SC_FLAT);
    const float *w1 = m->p2, *b1 = w1 + 128 * SC_FLAT, *w2 = b1 + 128, *b2 = w2 + 1280;
    spmd_linear_forward(s->r, s->h, w1, b1, B, SC_FLAT, 128);
    spmd_relu_forward(s->r, s->r, (size_t)B * 128);
    spmd_linear_forward(spmd_rpc_msg_tensor(out, 0)->data, s->r, w2, b2, B, 128, 10);
    *saved = s;
    return SPMD_OK;
}

static spmd_status s2_backward(void *self, void *saved, const spmd_rpc_msg *dout, spmd_rpc_msg *din,
                               float *grads) {
    split_cnn *m = self;
    s2_saved *s = saved;
    const spmd_rpc_tensor *g = spmd_rpc_msg_tensor(dout, 0);
    int B = s->B;
    if (!g || g->ndim != 2 || g->shape[0] != B || g->shape[1] != 10) return SPMD_ERR_INVALID;
    int64_t shape[2] = {B, SC_FLAT};
    float *dr = malloc(sizeof(float) * (size_t)B * 128);
    spmd_status st = dr ? spmd_rpc_msg_add_tensor(din, SPMD_F32, 2, shape, NULL) : SPMD_ERR_NOMEM;
    if (st == SPMD_OK) {
        const float *w1 = m->p2, *w2 = w1 + 128 * SC_FLAT + 128;
        float *gw1 = grads, *gb1 = gw1 + 128 * SC_FLAT, *gw2 = gb1 + 128, *gb2 = gw2 + 1280;
        spmd_linear_backward(dr, gw2, gb2, g->data, s->r, w2, B, 128, 10, 0);
        spmd_relu_backward(dr, dr, s->r, (size_t)B * 128, 0);
        spmd_linear_backward(spmd_rpc_msg_tensor(din, 0)->data, gw1, gb1, dr, s->h, w1, B, SC_FLAT, 128, 0);
    }
    free(dr);
    return st;
}

static spmd_dag_module split_cnn_stage(split_cnn *s, int stage) {
    spmd_dag_module m;
    memset(&m, 0, sizeof m);
    m.self = s;
    if (stage == 1) {
        m.name = "stage1", m.params = s->p1, m.nparams = SC_S1;
        m.forward = s1_forward, m.backward = s1_backward, m.free_saved = s1_free;
    } else {
        m.name = "stage2", m.params = s->p2, m.nparams = SC_S2;
        m.forward = s2_forward, m.backward = s2_backward, m.free_saved = s2_free;
    }
    return m;
}

#endif
