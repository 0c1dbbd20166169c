/* graph_run.c — running a spmd_model built by graph.c: the activation memory
 * for a batch (grown on demand), forward over the table of nodes, and
 * backward in reverse, calling grad_ready as each parameter's gradient is
 * finished. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "common/common.h"
#include "nn/internal.h"
#include "spmd/syncbn.h"

/* (Re)allocate activation memory for batch B. */
static spmd_status alloc_batch(spmd_model *m, int B) {
    size_t acts = 0, cache = 0, scratch = 0;
    char *shared = calloc((size_t)m->nacts, 1);   /* a fused ReLU's output: its conv's memory */
    if (!shared) return SPMD_ERR_NOMEM;
    for (int i = 0; i < m->nnodes; i++)
        if (m->nodes[i].op == SPMD__OP_RELU && m->nodes[i].relu_fused) shared[m->nodes[i].out] = 1;
    for (int i = 1; i < m->nacts; i++)
        if (!shared[i]) acts += m->acts[i].size * (size_t)B;
    size_t in0 = 0;
    if (!m->stage_input && !m->acts[0].flat && m->in_c > 1) in0 = m->acts[0].size * (size_t)B;
    for (int i = 0; i < m->nnodes; i++) {
        spmd__node *n = &m->nodes[i];
        size_t osz = m->acts[n->out].size * (size_t)B;
        switch (n->op) {
        case SPMD__OP_CONV: {
            size_t cs = spmd_conv2d_col_size(&n->conv, B);
            if (cs > scratch) scratch = cs;
            break;
        }
        case SPMD__OP_DROPOUT: cache += osz; break;
        case SPMD__OP_MAXPOOL: cache += osz; break;   /* int32 indices, same size as floats */
        case SPMD__OP_BN: cache += 2 * (size_t)m->acts[n->out].c; break;
        default: break;
        }
    }
    size_t dcol = scratch;   /* the input-gradient chunk has the same shape */
    float *am = malloc(sizeof(float) * (acts + in0 + 1));
    size_t gin0 = m->stage_input ? m->acts[0].size * (size_t)B : 0;
    float *gm = malloc(sizeof(float) * (acts + gin0 + 1));
    float *cm = malloc(sizeof(float) * (cache + scratch + dcol + 1));
    if (!am || !gm || !cm) {
        free(am); free(gm); free(cm); free(shared);
        return SPMD_ERR_NOMEM;
    }
    free(m->act_mem); free(m->actgrad_mem); free(m->cache_mem);
    m->act_mem = am; m->actgrad_mem = gm; m->cache_mem = cm;
    float *pa = am, *pg = gm, *pc = cm;
    m->acts[0].data = NULL;
    m->acts[0].grad = NULL;
    for (int i = 1; i < m->nacts; i++) {
        if (shared[i]) continue;
        m->acts[i].data = pa; pa += m->acts[i].size * (size_t)B;
        m->acts[i].grad = pg; pg += m->acts[i].size * (size_t)B;
    }
    if (in0) m->acts[0].data = pa;
    if (gin0) m->acts[0].grad = pg;
    /* nodes are in forward order, so a conv's output is placed before its ReLU's */
    for (int i = 0; i < m->nnodes; i++) {
        const spmd__node *n = &m->nodes[i];
        if (n->op != SPMD__OP_RELU || !n->relu_fused) continue;
        m->acts[n->out].data = m->acts[n->in].data;
        m->acts[n->out].grad = m->acts[n->in].grad;
    }
    free(shared);
    m->col_scratch = pc; pc += scratch;
    m->dcol_scratch = pc; pc += dcol;
    for (int i = 0; i < m->nnodes; i++) {
        spmd__node *n = &m->nodes[i];
        size_t osz = m->acts[n->out].size * (size_t)B;
        n->col = NULL; n->mask = NULL; n->idx = NULL; n->mean = n->rstd = NULL;
        switch (n->op) {
        case SPMD__OP_CONV: n->col = m->col_scratch; break;
        case SPMD__OP_DROPOUT: n->mask = pc; pc += osz; break;
        case SPMD__OP_MAXPOOL: n->idx = (int32_t *)pc; pc += osz; break;
        case SPMD__OP_BN:
            n->mean = pc; pc += m->acts[n->out].c;
            n->rstd = pc; pc += m->acts[n->out].c;
            break;
        default: break;
        }
    }
    m->bmax = B;
    m->act_bytes = sizeof(float) * (acts + in0 + acts + gin0 + cache + scratch + dcol);
    m->fwd_ready = 0;
    return SPMD_OK;
}

static float *P(spmd_model *m, int i) { return m->param_mem + m->params[i].offset; }
static float *G(spmd_model *m, int i) { return m->grad_mem + m->params[i].offset; }

spmd_status spmd_model_forward(spmd_model *m, const float *x, int B, const float **logits) {
    if (!m || !x || B < 1) return SPMD_ERR_INVALID;
    if (B > m->bmax) {
        spmd_status st = alloc_batch(m, B);
        if (st != SPMD_OK) return st;
    }
    /* train-mode BatchNorm over the global batch when SyncBatchNorm is on */
    const int sync = m->training && m->bn_reduce != NULL;
    m->fwd_ready = 0;
    spmd__act *a0 = &m->acts[0];
    if (!m->stage_input && !a0->flat && m->in_c > 1) spmd_flatten_backward(a0->data, x, m->in_c, B, m->in_h * m->in_w, 0);
    else a0->data = (float *)x;   /* read only: no node writes to act 0 */
    for (int i = 0; i < m->nnodes; i++) {
        spmd__node *n = &m->nodes[i];
        spmd__act *in = &m->acts[n->in], *out = &m->acts[n->out];
        size_t osz = out->size * (size_t)B;
        switch (n->op) {
        case SPMD__OP_LINEAR:
            spmd_linear_forward(out->data, in->data, P(m, n->p0), n->np > 1 ? P(m, n->p0 + 1) : NULL,
                                B, (int)in->size, out->c);
            break;
        case SPMD__OP_CONV:
            (n->relu_fused ? spmd_conv2d_relu_forward : spmd_conv2d_forward)(
                out->data, in->data, P(m, n->p0), n->np > 1 ? P(m, n->p0 + 1) : NULL, n->col, &n->conv, B);
            break;
        case SPMD__OP_BN:
            if (sync) {
                spmd_status st = spmd_syncbn_forward(
                    out->data, n->mean, n->rstd, in->data, P(m, n->p0), P(m, n->p0 + 1),
                    m->buf_mem + m->bufs[n->b0].offset, m->buf_mem + m->bufs[n->b0 + 1].offset,
                    out->c, B, out->h * out->w, m->bn_reduce, m->bn_ctx, m->bn_scratch);
                if (st != SPMD_OK) {
                    m->fwd_ready = 0;
                    return st;
                }
                break;
            }
            spmd_batchnorm_forward(out->data, n->mean, n->rstd, in->data, P(m, n->p0),
                                   P(m, n->p0 + 1), m->buf_mem + m->bufs[n->b0].offset,
                                   m->buf_mem + m->bufs[n->b0 + 1].offset, out->c, B,
                                   out->h * out->w, m->training);
            break;
        case SPMD__OP_RELU:
            if (!n->relu_fused) spmd_relu_forward(out->data, in->data, osz);
            break;
        case SPMD__OP_MAXPOOL:
            spmd_maxpool_forward(out->data, n->idx, in->data, in->c * B, in->h, in->w, n->k);
            break;
        case SPMD__OP_DROPOUT:
            if (m->training && m->dropout_on && n->p > 0.0f) {
                spmd_dropout_forward(out->data, n->mask, in->data, osz, n->p, &m->drop_rng);
            } else {
                memcpy(out->data, in->data, sizeof(float) * osz);
                for (size_t j = 0; j < osz; j++) n->mask[j] = 1.0f;
            }
            break;
        case SPMD__OP_FLATTEN:
            if (in->flat) memcpy(out->data, in->data, sizeof(float) * osz);
            else spmd_flatten_forward(out->data, in->data, in->c, B, in->h * in->w);
            break;
        case SPMD__OP_GAP: spmd_gap_forward(out->data, in->data, in->c, B, in->h * in->w); break;
        case SPMD__OP_ADD:
            spmd_add_forward(out->data, in->data, m->acts[n->in2].data, osz);
            break;
        case SPMD__OP_CUSTOM: {
            float *ps[SPMD_LAYER_MAX_PARAMS];
            for (int p = 0; p < n->np; p++) ps[p] = P(m, n->p0 + p);
            spmd_status st = n->custom->forward(n->custom->ctx, out->data, in->data, ps, B);
            if (st != SPMD_OK) return st;
            break;
        }
        }
    }
    m->batch = B;
    m->fwd_ready = 1;
    m->fwd_sync = sync;
    if (logits) *logits = m->acts[m->nacts - 1].data;
    return SPMD_OK;
}

static void copy_or_add(float *dst, const float *src, size_t n, int acc) {
    if (acc) {
        for (size_t i = 0; i < n; i++) dst[i] += src[i];
    } else {
        memcpy(dst, src, sizeof(float) * n);
    }
}

spmd_status spmd_model_backward(spmd_model *m, const float *dlogits, spmd_grad_ready_fn grad_ready,
                                void *ctx) {
    if (!m || !dlogits) return SPMD_ERR_INVALID;
    if (!m->fwd_ready) return SPMD_ERR_INVALID;
    const int B = m->batch;
    spmd__act *last = &m->acts[m->nacts - 1];
    memcpy(last->grad, dlogits, sizeof(float) * last->size * (size_t)B);
    for (int i = m->nnodes - 1; i >= 0; i--) {
        spmd__node *n = &m->nodes[i];
        spmd__act *in = &m->acts[n->in], *out = &m->acts[n->out];
        float *din = in->grad;   /* NULL for the model input: nothing to compute */
        size_t osz = out->size * (size_t)B;
        /* after spmd_model_zero_grad_lazy: linear layers write their
         * gradients, the others' (small) are cleared here, just before use */
        if (m->grad_stale && n->op != SPMD__OP_LINEAR)
            for (int p = 0; p < n->np; p++)
                memset(G(m, n->p0 + p), 0, sizeof(float) * m->params[n->p0 + p].count);
        switch (n->op) {
        case SPMD__OP_LINEAR:
            spmd__linear_backward(din, G(m, n->p0), n->np > 1 ? G(m, n->p0 + 1) : NULL, out->grad,
                                  in->data, P(m, n->p0), B, (int)in->size, out->c, n->acc_in,
                                  !m->grad_stale);
            break;
        case SPMD__OP_CONV:
            spmd_conv2d_backward(din, G(m, n->p0), n->np > 1 ? G(m, n->p0 + 1) : NULL, out->grad,
                                 in->data, P(m, n->p0), n->col, m->dcol_scratch, &n->conv, B,
                                 n->acc_in);
            break;
        case SPMD__OP_BN:
            if (m->fwd_sync) {
                spmd_status st = spmd_syncbn_backward(din, G(m, n->p0), G(m, n->p0 + 1), out->grad,
                                                      in->data, n->mean, n->rstd, P(m, n->p0), out->c,
                                                      B, out->h * out->w, n->acc_in, m->bn_reduce,
                                                      m->bn_ctx, m->bn_scratch);
                if (st != SPMD_OK) return st;
                break;
            }
            spmd_batchnorm_backward(din, G(m, n->p0), G(m, n->p0 + 1), out->grad, in->data, n->mean,
                                    n->rstd, P(m, n->p0), out->c, B, out->h * out->w, m->training,
                                    n->acc_in);
            break;
        case SPMD__OP_RELU:
            if (din && n->relu_in_pool != 1)
                spmd_relu_backward(din, out->grad, out->data, osz, n->acc_in);
            break;
        case SPMD__OP_MAXPOOL:
            if (n->relu_in_pool >= 0) {
                const spmd__node *r = &m->nodes[n->relu_in_pool];
                float *rdin = m->acts[r->in].grad;
                if (rdin)
                    spmd__maxpool_relu_backward(rdin, out->grad, out->data, n->idx, in->c * B,
                                                in->h, in->w, n->k, r->acc_in);
            } else if (din) {
                spmd_maxpool_backward(din, out->grad, n->idx, in->c * B, in->h, in->w, n->k, n->acc_in);
            }
            break;
        case SPMD__OP_DROPOUT:
            if (din) spmd_dropout_backward(din, out->grad, n->mask, osz, n->acc_in);
            break;
        case SPMD__OP_FLATTEN:
            if (!din) break;
            if (in->flat) copy_or_add(din, out->grad, osz, n->acc_in);
            else spmd_flatten_backward(din, out->grad, in->c, B, in->h * in->w, n->acc_in);
            break;
        case SPMD__OP_GAP:
            if (din) spmd_gap_backward(din, out->grad, in->c, B, in->h * in->w, n->acc_in);
            break;
        case SPMD__OP_ADD:
            if (din) copy_or_add(din, out->grad, osz, n->acc_in);
            if (m->acts[n->in2].grad)
                copy_or_add(m->acts[n->in2].grad, out->grad, osz, n->acc_in2);
            break;
        case SPMD__OP_CUSTOM: {
            float *ps[SPMD_LAYER_MAX_PARAMS], *gs[SPMD_LAYER_MAX_PARAMS];
            for (int p = 0; p < n->np; p++) ps[p] = P(m, n->p0 + p), gs[p] = G(m, n->p0 + p);
            spmd_status st = n->custom->backward(n->custom->ctx, din, gs, out->grad, in->data,
                                                 out->data, ps, B, n->acc_in);
            if (st != SPMD_OK) return st;
            break;
        }
        }
        if (grad_ready)
            for (int p = n->np - 1; p >= 0; p--) grad_ready(ctx, n->p0 + p);
    }
    m->grad_stale = 0;
    return SPMD_OK;
}
