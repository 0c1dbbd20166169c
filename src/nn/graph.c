/* graph.c — spmd_model: the builder, the parameters' memory layout and the
 * accessors; running it (activations, forward, backward) is graph_run.c's.
 *
 * Memory: params, grads (same layout) and buffers are each one allocation,
 * laid out in table order.  Activations and their gradients are two more,
 * sized for the largest batch seen (grown on demand, as llm.c sizes them on
 * the first forward); per-node caches are a third. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "common/common.h"
#include "nn/internal.h"
#include "spmd/syncbn.h"

static void fail(spmd_model *m, spmd_status st, const char *fmt, ...) {
    if (m->err != SPMD_OK) return;
    m->err = st;
    va_list ap;
    va_start(ap, fmt);
    spmd__vfail(m->errmsg, sizeof m->errmsg, st, fmt, ap);
    va_end(ap);
}

static int grow(void **p, int *cap, int need, size_t elem) {
    if (need <= *cap) return 0;
    int nc = *cap ? *cap * 2 : 16;
    while (nc < need) nc *= 2;
    void *q = realloc(*p, (size_t)nc * elem);
    if (!q) return -1;
    memset((char *)q + (size_t)*cap * elem, 0, (size_t)(nc - *cap) * elem);
    *p = q;
    *cap = nc;
    return 0;
}

static int new_act(spmd_model *m, int c, int h, int w, int flat) {
    if (grow((void **)&m->acts, &m->cap_acts, m->nacts + 1, sizeof(spmd__act))) {
        fail(m, SPMD_ERR_NOMEM, "out of memory building the model");
        return -1;
    }
    spmd__act *a = &m->acts[m->nacts];
    a->c = c; a->h = h; a->w = w; a->flat = flat;
    a->size = (size_t)c * h * w;
    return m->nacts++;
}

static spmd__node *new_node(spmd_model *m, int op, int in) {
    if (m->err != SPMD_OK) return NULL;
    if (in < 0 || in >= m->nacts) {
        fail(m, SPMD_ERR_INVALID, "layer input %d does not exist", in);
        return NULL;
    }
    if (grow((void **)&m->nodes, &m->cap_nodes, m->nnodes + 1, sizeof(spmd__node))) {
        fail(m, SPMD_ERR_NOMEM, "out of memory building the model");
        return NULL;
    }
    spmd__node *n = &m->nodes[m->nnodes++];
    memset(n, 0, sizeof *n);
    n->op = op;
    n->in = in;
    n->in2 = -1;
    n->p0 = m->nparams;
    n->b0 = -1;
    return n;
}

/* Append a tensor to a table; the shape has ndim entries. */
static int add_tensor(spmd_model *m, int buffer, const char *name, int ndim, const int *shape) {
    spmd_tensor_info **tab = buffer ? &m->bufs : &m->params;
    int *n = buffer ? &m->nbufs : &m->nparams, *cap = buffer ? &m->cap_bufs : &m->cap_params;
    size_t *total = buffer ? &m->buf_count : &m->param_count;
    char *copy = strdup(name);
    if (!copy || grow((void **)tab, cap, *n + 1, sizeof(spmd_tensor_info))) {
        free(copy);
        fail(m, SPMD_ERR_NOMEM, "out of memory building the model");
        return -1;
    }
    spmd_tensor_info *t = &(*tab)[*n];
    t->name = copy;
    t->ndim = ndim;
    t->count = 1;
    for (int i = 0; i < 4; i++) t->shape[i] = i < ndim ? shape[i] : 0;
    for (int i = 0; i < ndim; i++) t->count *= (size_t)shape[i];
    t->offset = *total;
    *total += t->count;
    return (*n)++;
}

static void join(char *out, size_t len, const char *a, const char *b) {
    snprintf(out, len, "%s.%s", a, b);
}

spmd_model *spmd__model_new(const char *arch, int c, int h, int w, int flat_input) {
    spmd_model *m = calloc(1, sizeof *m);
    if (!m) return NULL;
    snprintf(m->arch, sizeof m->arch, "%s", arch);
    m->in_c = c; m->in_h = h; m->in_w = w;
    m->training = 1;
    m->dropout_on = 1;
    spmd_rng_seed(&m->drop_rng, 0, 0);
    if (c < 1 || h < 1 || w < 1) fail(m, SPMD_ERR_INVALID, "input shape must be positive");
    else new_act(m, c, h, w, flat_input);
    return m;
}

int spmd__add_linear(spmd_model *m, int in, int oc, int bias, const char *name) {
    spmd__node *n = new_node(m, SPMD__OP_LINEAR, in);
    if (!n) return -1;
    int C = (int)m->acts[in].size;
    if (!m->acts[in].flat) { fail(m, SPMD_ERR_INVALID, "%s: input must be flat", name); return -1; }
    if (oc < 1) { fail(m, SPMD_ERR_INVALID, "%s: bad output size", name); return -1; }
    char nm[128];
    int ws[2] = {oc, C};
    join(nm, sizeof nm, name, "weight");
    add_tensor(m, 0, nm, 2, ws);
    if (bias) {
        join(nm, sizeof nm, name, "bias");
        add_tensor(m, 0, nm, 1, &oc);
    }
    n->np = bias ? 2 : 1;
    n->out = new_act(m, oc, 1, 1, 1);
    return m->err ? -1 : n->out;
}

int spmd__add_conv(spmd_model *m, int in, int oc, int k, int stride, int pad, int bias,
                   const char *name) {
    spmd__node *n = new_node(m, SPMD__OP_CONV, in);
    if (!n) return -1;
    spmd__act a = m->acts[in];
    if (a.flat) { fail(m, SPMD_ERR_INVALID, "%s: input is not spatial", name); return -1; }
    if (spmd_conv2d_dims_init(&n->conv, a.c, a.h, a.w, oc, k, stride, pad) != SPMD_OK) {
        fail(m, SPMD_ERR_INVALID, "%s: kernel %d stride %d pad %d does not fit %dx%dx%d", name, k,
             stride, pad, a.c, a.h, a.w);
        return -1;
    }
    char nm[128];
    int ws[4] = {oc, a.c, k, k};
    join(nm, sizeof nm, name, "weight");
    add_tensor(m, 0, nm, 4, ws);
    if (bias) {
        join(nm, sizeof nm, name, "bias");
        add_tensor(m, 0, nm, 1, &oc);
    }
    n->np = bias ? 2 : 1;
    n->out = new_act(m, oc, n->conv.oh, n->conv.ow, 0);
    return m->err ? -1 : n->out;
}

int spmd__add_bn(spmd_model *m, int in, const char *name) {
    spmd__node *n = new_node(m, SPMD__OP_BN, in);
    if (!n) return -1;
    spmd__act a = m->acts[in];
    if (a.flat) { fail(m, SPMD_ERR_INVALID, "%s: BatchNorm2d needs a spatial input", name); return -1; }
    char nm[128];
    join(nm, sizeof nm, name, "weight");
    add_tensor(m, 0, nm, 1, &a.c);
    join(nm, sizeof nm, name, "bias");
    add_tensor(m, 0, nm, 1, &a.c);
    n->np = 2;
    n->b0 = m->nbufs;
    join(nm, sizeof nm, name, "running_mean");
    add_tensor(m, 1, nm, 1, &a.c);
    join(nm, sizeof nm, name, "running_var");
    add_tensor(m, 1, nm, 1, &a.c);
    n->out = new_act(m, a.c, a.h, a.w, 0);
    return m->err ? -1 : n->out;
}

static int add_same_shape(spmd_model *m, int op, int in) {
    spmd__node *n = new_node(m, op, in);
    if (!n) return -1;
    spmd__act a = m->acts[in];
    n->out = new_act(m, a.c, a.h, a.w, a.flat);
    return m->err ? -1 : n->out;
}

int spmd__add_relu(spmd_model *m, int in) { return add_same_shape(m, SPMD__OP_RELU, in); }

int spmd__add_dropout(spmd_model *m, int in, float p) {
    if (!(p >= 0.0f && p < 1.0f)) {
        fail(m, SPMD_ERR_INVALID, "dropout probability %g not in [0, 1)", (double)p);
        return -1;
    }
    int out = add_same_shape(m, SPMD__OP_DROPOUT, in);
    if (out >= 0) m->nodes[m->nnodes - 1].p = p;
    return out;
}

int spmd__add_maxpool(spmd_model *m, int in, int k) {
    spmd__node *n = new_node(m, SPMD__OP_MAXPOOL, in);
    if (!n) return -1;
    spmd__act a = m->acts[in];
    if (a.flat || k < 1 || a.h / k < 1 || a.w / k < 1) {
        fail(m, SPMD_ERR_INVALID, "max-pool %d does not fit %dx%d", k, a.h, a.w);
        return -1;
    }
    n->k = k;
    n->out = new_act(m, a.c, a.h / k, a.w / k, 0);
    return m->err ? -1 : n->out;
}

int spmd__add_flatten(spmd_model *m, int in) {
    spmd__node *n = new_node(m, SPMD__OP_FLATTEN, in);
    if (!n) return -1;
    spmd__act a = m->acts[in];
    n->out = new_act(m, (int)a.size, 1, 1, 1);
    return m->err ? -1 : n->out;
}

int spmd__add_gap(spmd_model *m, int in) {
    spmd__node *n = new_node(m, SPMD__OP_GAP, in);
    if (!n) return -1;
    spmd__act a = m->acts[in];
    if (a.flat) { fail(m, SPMD_ERR_INVALID, "global average pool needs a spatial input"); return -1; }
    n->out = new_act(m, a.c, 1, 1, 1);
    return m->err ? -1 : n->out;
}

int spmd__add_add(spmd_model *m, int a, int b) {
    spmd__node *n = new_node(m, SPMD__OP_ADD, a);
    if (!n) return -1;
    if (b < 0 || b >= m->nacts) { fail(m, SPMD_ERR_INVALID, "add: input %d does not exist", b); return -1; }
    spmd__act x = m->acts[a], y = m->acts[b];
    if (x.c != y.c || x.h != y.h || x.w != y.w || x.flat != y.flat) {
        fail(m, SPMD_ERR_INVALID, "add: shapes %dx%dx%d and %dx%dx%d differ", x.c, x.h, x.w, y.c,
             y.h, y.w);
        return -1;
    }
    n->in2 = b;
    n->out = new_act(m, x.c, x.h, x.w, x.flat);
    return m->err ? -1 : n->out;
}

int spmd__add_custom(spmd_model *m, int in, const spmd_layer_def *def) {
    spmd__node *n = new_node(m, SPMD__OP_CUSTOM, in);
    if (!n) return -1;
    const char *name = def->name ? def->name : "custom";
    if (!def->forward || !def->backward) {
        fail(m, SPMD_ERR_INVALID, "%s: a custom layer needs forward and backward", name);
        return -1;
    }
    if (def->out_c < 1 || def->out_h < 1 || def->out_w < 1 ||
        (def->out_flat && (def->out_h != 1 || def->out_w != 1))) {
        fail(m, SPMD_ERR_INVALID, "%s: bad output shape %dx%dx%d (flat %d)", name, def->out_c,
             def->out_h, def->out_w, def->out_flat);
        return -1;
    }
    if (def->nparams < 0 || def->nparams > SPMD_LAYER_MAX_PARAMS) {
        fail(m, SPMD_ERR_INVALID, "%s: %d parameters (at most %d)", name, def->nparams,
             SPMD_LAYER_MAX_PARAMS);
        return -1;
    }
    for (int p = 0; p < def->nparams; p++) {
        int nd = def->param_ndim[p];
        int ok = nd >= 1 && nd <= 4 && def->param_names[p];
        for (int d = 0; ok && d < nd; d++) ok = def->param_shape[p][d] >= 1;
        if (!ok) {
            fail(m, SPMD_ERR_INVALID, "%s: parameter %d has no name or a bad shape", name, p);
            return -1;
        }
    }
    n->custom = malloc(sizeof *n->custom);
    if (!n->custom) { fail(m, SPMD_ERR_NOMEM, "out of memory building the model"); return -1; }
    *n->custom = *def;
    n->custom->name = NULL;   /* names are only read here */
    char nm[128];
    for (int p = 0; p < def->nparams; p++) {
        n->custom->param_names[p] = NULL;
        join(nm, sizeof nm, name, def->param_names[p]);
        add_tensor(m, 0, nm, def->param_ndim[p], def->param_shape[p]);
    }
    n->np = def->nparams;
    n->out = new_act(m, def->out_c, def->out_h, def->out_w, def->out_flat);
    return m->err ? -1 : n->out;
}

int spmd__add_basic_block(spmd_model *m, int in, int planes, int stride, const char *prefix) {
    if (m->err) return -1;
    char nm[128];
    int cin = m->acts[in].c;
    join(nm, sizeof nm, prefix, "conv1");
    int x = spmd__add_conv(m, in, planes, 3, stride, 1, 0, nm);
    join(nm, sizeof nm, prefix, "bn1");
    x = spmd__add_bn(m, x, nm);
    x = spmd__add_relu(m, x);
    join(nm, sizeof nm, prefix, "conv2");
    x = spmd__add_conv(m, x, planes, 3, 1, 1, 0, nm);
    join(nm, sizeof nm, prefix, "bn2");
    x = spmd__add_bn(m, x, nm);
    int sc = in;
    if (stride != 1 || cin != planes) {
        join(nm, sizeof nm, prefix, "downsample.0");
        sc = spmd__add_conv(m, in, planes, 1, stride, 0, 0, nm);
        join(nm, sizeof nm, prefix, "downsample.1");
        sc = spmd__add_bn(m, sc, nm);
    }
    x = spmd__add_add(m, x, sc);
    return spmd__add_relu(m, x);
}

/* Fan-in of a weight tensor (torch's _calculate_fan_in_and_fan_out). */
static size_t fan_in(const spmd_tensor_info *t) {
    size_t f = 1;
    for (int i = 1; i < t->ndim; i++) f *= (size_t)t->shape[i];
    return f;
}

/* A convolution whose output only a ReLU reads computes the ReLU itself, and
 * the ReLU's output is the convolution's memory: one pass over the largest
 * activations instead of three (write, read, write), which matters most when
 * several processes share the caches.  The two share their gradient memory
 * as well: the ReLU's backward masks the gradient in place (it is the
 * convolution output's only reader, so it writes that gradient, never adds to
 * it), and the convolution never reads its own output.  That is two fewer
 * activation-sized buffers in the working set. */
/* The node that writes activation act when act has exactly one reader, else -1. */
static int sole_reader_producer(const spmd_model *m, int act) {
    int producer = -1, readers = 0;
    for (int j = 0; j < m->nnodes; j++) {
        const spmd__node *n = &m->nodes[j];
        if (n->out == act) producer = j;
        readers += (n->in == act) + (n->in2 == act);
    }
    return readers == 1 ? producer : -1;
}

static void fuse_conv_relu(spmd_model *m) {
    for (int i = 0; i < m->nnodes; i++) {
        spmd__node *r = &m->nodes[i];
        if (r->op != SPMD__OP_RELU) continue;
        int producer = sole_reader_producer(m, r->in);
        if (producer < 0 || m->nodes[producer].op != SPMD__OP_CONV) continue;
        m->nodes[producer].relu_fused = 1;
        r->relu_fused = 1;
    }
}

/* A max-pool whose input only comes from a ReLU also does that ReLU's
 * backward: the pooled value is the ReLU of the window's maximum, so the
 * gradient reaches the window's argmax exactly when the pooled value is
 * positive.  Backward then never reads the ReLU's activation-sized output and
 * skips a pass over its gradient. */
static void fuse_pool_relu(spmd_model *m) {
    for (int i = 0; i < m->nnodes; i++) {
        spmd__node *p = &m->nodes[i];
        p->relu_in_pool = -1;
        if (p->op != SPMD__OP_MAXPOOL) continue;
        int producer = sole_reader_producer(m, p->in);
        if (producer < 0 || m->nodes[producer].op != SPMD__OP_RELU) continue;
        p->relu_in_pool = producer;
    }
    for (int i = 0; i < m->nnodes; i++)
        if (m->nodes[i].op == SPMD__OP_MAXPOOL && m->nodes[i].relu_in_pool >= 0)
            m->nodes[m->nodes[i].relu_in_pool].relu_in_pool = 1;
}

spmd_status spmd__model_finish(spmd_model *m, uint64_t seed, char *err, size_t errlen) {
    if (m->err == SPMD_OK && m->nnodes == 0) fail(m, SPMD_ERR_INVALID, "model has no layers");
    if (m->err == SPMD_OK && !m->stage_output && !m->acts[m->nacts - 1].flat)
        fail(m, SPMD_ERR_INVALID, "the last layer must give a flat (B, n) output");
    if (m->err == SPMD_OK) {
        m->param_mem = m->own_param_mem = calloc(m->param_count ? m->param_count : 1, sizeof(float));
        m->grad_mem = m->own_grad_mem = calloc(m->param_count ? m->param_count : 1, sizeof(float));
        m->buf_mem = m->own_buf_mem = m->buf_count ? calloc(m->buf_count, sizeof(float)) : NULL;
        if (!m->param_mem || !m->grad_mem || (m->buf_count && !m->buf_mem))
            fail(m, SPMD_ERR_NOMEM, "cannot allocate %zu parameters", m->param_count);
    }
    if (m->err != SPMD_OK) {
        if (err && errlen) snprintf(err, errlen, "%s", m->errmsg);
        return m->err;
    }
    /* Initialisation, torch's defaults: each node's weight and bias uniform
     * in ±1/sqrt(fan_in of the weight) (kaiming_uniform with a = sqrt(5)
     * gives exactly that bound); BatchNorm weight 1, bias 0. */
    spmd_rng r;
    spmd_rng_seed(&r, seed, 0x1417);
    for (uint64_t i = 0; i < m->init_skip; i++) spmd_rng_next(&r);
    for (int i = 0; i < m->nnodes; i++) {
        spmd__node *n = &m->nodes[i];
        if (n->np == 0) continue;
        spmd_tensor_info *w = &m->params[n->p0];
        if (n->op == SPMD__OP_CUSTOM && n->custom->init) {
            float *ps[SPMD_LAYER_MAX_PARAMS];
            for (int p = 0; p < n->np; p++) ps[p] = m->param_mem + m->params[n->p0 + p].offset;
            n->custom->init(n->custom->ctx, ps, &r);
            continue;
        }
        if (n->op == SPMD__OP_BN) {
            for (size_t j = 0; j < w->count; j++) m->param_mem[w->offset + j] = 1.0f;
            /* bias stays 0; running_var starts at 1 */
            spmd_tensor_info *rv = &m->bufs[n->b0 + 1];
            for (size_t j = 0; j < rv->count; j++) m->buf_mem[rv->offset + j] = 1.0f;
            continue;
        }
        float bound = 1.0f / sqrtf((float)fan_in(w));
        for (int p = 0; p < n->np; p++) {
            spmd_tensor_info *t = &m->params[n->p0 + p];
            for (size_t j = 0; j < t->count; j++)
                m->param_mem[t->offset + j] = (2.0f * spmd_rng_uniform(&r) - 1.0f) * bound;
        }
    }
    /* Backward accumulation: walking nodes in reverse, the first node to
     * reach an activation writes its gradient, later ones add to it. */
    char *written = calloc((size_t)m->nacts, 1);
    if (!written) {
        if (err && errlen) snprintf(err, errlen, "out of memory");
        return SPMD_ERR_NOMEM;
    }
    for (int i = m->nnodes - 1; i >= 0; i--) {
        spmd__node *n = &m->nodes[i];
        n->acc_in = written[n->in];
        written[n->in] = 1;
        if (n->in2 >= 0) {
            n->acc_in2 = written[n->in2];
            written[n->in2] = 1;
        }
    }
    free(written);
    fuse_conv_relu(m);
    fuse_pool_relu(m);
    return SPMD_OK;
}

/* ---- accessors ------------------------------------------------------------ */

void spmd_model_free(spmd_model *m) {
    if (!m) return;
    for (int i = 0; i < m->nparams; i++) free((char *)m->params[i].name);
    for (int i = 0; i < m->nbufs; i++) free((char *)m->bufs[i].name);
    for (int i = 0; i < m->nnodes; i++) free(m->nodes[i].custom);
    free(m->params); free(m->bufs); free(m->acts); free(m->nodes);
    free(m->own_param_mem); free(m->own_grad_mem); free(m->own_buf_mem);
    free(m->act_mem); free(m->actgrad_mem); free(m->cache_mem);
    free(m->bn_scratch);
    free(m);
}

spmd_status spmd_model_set_syncbn(spmd_model *m, spmd_bn_reduce_fn reduce, void *ctx) {
    if (!m) return SPMD_ERR_INVALID;
    int widest = 0;
    for (int i = 0; i < m->nnodes; i++)
        if (m->nodes[i].op == SPMD__OP_BN && m->acts[m->nodes[i].out].c > widest)
            widest = m->acts[m->nodes[i].out].c;
    if (!reduce || widest == 0) {   /* off, or nothing to synchronise */
        m->bn_reduce = NULL;
        m->bn_ctx = NULL;
        return SPMD_OK;
    }
    if (!m->bn_scratch) {
        m->bn_scratch = malloc(sizeof(double) * (2 * (size_t)widest + 1));
        if (!m->bn_scratch) return SPMD_ERR_NOMEM;
    }
    m->bn_reduce = reduce;
    m->bn_ctx = ctx;
    m->fwd_ready = 0;   /* a backward must follow a forward of the same kind */
    return SPMD_OK;
}

int spmd_model_is_syncbn(const spmd_model *m) { return m && m->bn_reduce != NULL; }

const char *spmd_model_arch(const spmd_model *m) { return m->arch; }
void spmd_model_input_shape(const spmd_model *m, int *c, int *h, int *w) {
    if (c) *c = m->in_c;
    if (h) *h = m->in_h;
    if (w) *w = m->in_w;
}
int spmd_model_num_outputs(const spmd_model *m) { return (int)m->acts[m->nacts - 1].size; }
int spmd_model_num_params(const spmd_model *m) { return m->nparams; }
const spmd_tensor_info *spmd_model_param(const spmd_model *m, int i) {
    return i >= 0 && i < m->nparams ? &m->params[i] : NULL;
}
int spmd_model_num_buffers(const spmd_model *m) { return m->nbufs; }
const spmd_tensor_info *spmd_model_buffer(const spmd_model *m, int i) {
    return i >= 0 && i < m->nbufs ? &m->bufs[i] : NULL;
}
float *spmd_model_params(spmd_model *m, size_t *count) {
    if (count) *count = m->param_count;
    return m->param_mem;
}
float *spmd_model_grads(spmd_model *m, size_t *count) {
    if (count) *count = m->param_count;
    return m->grad_mem;
}
float *spmd_model_buffers(spmd_model *m, size_t *count) {
    if (count) *count = m->buf_count;
    return m->buf_mem;
}
/* Move n floats from *cur to the caller's mem, freeing *own (the model's
 * allocation, if *cur still is it). */
static void adopt_memory(float **cur, float **own, float *mem, size_t n) {
    if (!mem || mem == *cur) return;
    memcpy(mem, *cur, sizeof(float) * n);
    free(*own);
    *own = NULL;
    *cur = mem;
}
void spmd_model_use_grad_memory(spmd_model *m, float *mem) {
    if (m) adopt_memory(&m->grad_mem, &m->own_grad_mem, mem, m->param_count);
}
void spmd_model_use_param_memory(spmd_model *m, float *mem) {
    if (m) adopt_memory(&m->param_mem, &m->own_param_mem, mem, m->param_count);
}
void spmd_model_use_buffer_memory(spmd_model *m, float *mem) {
    if (m && m->buf_count) adopt_memory(&m->buf_mem, &m->own_buf_mem, mem, m->buf_count);
}
size_t spmd_model_activation_bytes(const spmd_model *m) { return m ? m->act_bytes : 0; }
const float *spmd_model_input_grad(const spmd_model *m) {
    return m && m->stage_input && m->fwd_ready ? m->acts[0].grad : NULL;
}

void spmd_model_zero_grad(spmd_model *m) {
    memset(m->grad_mem, 0, sizeof(float) * m->param_count);
    m->grad_stale = 0;
}
void spmd_model_zero_grad_lazy(spmd_model *m) { m->grad_stale = 1; }
void spmd_model_train(spmd_model *m, int training) { m->training = training != 0; }
int spmd_model_is_training(const spmd_model *m) { return m->training; }
void spmd_model_seed_dropout(spmd_model *m, uint64_t seed, uint64_t stream) {
    spmd_rng_seed(&m->drop_rng, seed, stream);
}
spmd_rng *spmd_model_rng(spmd_model *m) { return &m->drop_rng; }
