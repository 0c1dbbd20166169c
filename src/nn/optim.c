/* optim.c — SGD (momentum, dampening, nesterov, weight decay), Adam and
 * AdamW with torch's update rules.  The state is one contiguous allocation
 * (SGD: momentum buffer; Adam: exp_avg then exp_avg_sq) plus a step count,
 * which is all a checkpoint needs. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "nn/internal.h"

struct spmd_optim {
    spmd_optim_opts o;
    size_t n;
    int64_t steps;
    float *state;
    size_t state_count;
    float *own_state;   /* state when o allocated it (spmd_optim_use_state_memory) */
};

spmd_status spmd_optim_create(const spmd_optim_opts *o, size_t n, spmd_optim **out) {
    if (!o || !out || o->lr < 0.0f || o->momentum < 0.0f || o->weight_decay < 0.0f)
        return SPMD_ERR_INVALID;
    if (o->kind == SPMD_OPTIM_SGD && o->nesterov && (o->momentum <= 0.0f || o->dampening != 0.0f))
        return SPMD_ERR_INVALID;   /* torch: nesterov needs momentum and zero dampening */
    if (o->kind != SPMD_OPTIM_SGD && o->kind != SPMD_OPTIM_ADAM && o->kind != SPMD_OPTIM_ADAMW)
        return SPMD_ERR_INVALID;
    spmd_optim *s = calloc(1, sizeof *s);
    if (!s) return SPMD_ERR_NOMEM;
    s->o = *o;
    s->n = n;
    s->state_count = o->kind == SPMD_OPTIM_SGD ? (o->momentum > 0.0f ? n : 0) : 2 * n;
    if (s->state_count) {
        s->state = s->own_state = calloc(s->state_count, sizeof(float));
        if (!s->state) {
            free(s);
            return SPMD_ERR_NOMEM;
        }
    }
    *out = s;
    return SPMD_OK;
}

void spmd_optim_free(spmd_optim *o) {
    if (!o) return;
    free(o->own_state);
    free(o);
}

/* The kernels update n elements: p, g and the state arrays start at the
 * first of them (buf: SGD momentum; m, v: Adam's moments). */
SPMD__VECTOR_CLONES
static void sgd_step(const spmd_optim *s, float *p, const float *g, float *buf, size_t n) {
    const float lr = s->o.lr, wd = s->o.weight_decay, mom = s->o.momentum;
    const float damp = 1.0f - s->o.dampening;
    const int first = s->steps == 0, nest = s->o.nesterov;
    for (size_t i = 0; i < n; i++) {
        float d = g[i];
        if (wd != 0.0f) d += wd * p[i];
        if (buf) {
            /* torch: the buffer starts as a copy of the first gradient */
            buf[i] = first ? d : mom * buf[i] + damp * d;
            d = nest ? d + mom * buf[i] : buf[i];
        }
        p[i] -= lr * d;
    }
}

SPMD__VECTOR_CLONES
static void adam_step(const spmd_optim *s, float *p, const float *g, float *m, float *v, size_t n,
                      int decoupled) {
    const float lr = s->o.lr, wd = s->o.weight_decay, b1 = s->o.beta1, b2 = s->o.beta2;
    const float eps = s->o.eps;
    const double t = (double)(s->steps + 1);
    const float bc1 = (float)(1.0 - pow(b1, t));
    const float bc2_sqrt = (float)sqrt(1.0 - pow(b2, t));
    const float step_size = lr / bc1;
    for (size_t i = 0; i < n; i++) {
        float d = g[i];
        if (decoupled) p[i] *= 1.0f - lr * wd;
        else if (wd != 0.0f) d += wd * p[i];
        m[i] = b1 * m[i] + (1.0f - b1) * d;
        v[i] = b2 * v[i] + (1.0f - b2) * d * d;
        float denom = sqrtf(v[i]) / bc2_sqrt + eps;
        p[i] -= step_size * m[i] / denom;
    }
}

void spmd_optim_update(spmd_optim *o, float *params, const float *grad, size_t offset, size_t count) {
    if (!o || !count || offset > o->n || count > o->n - offset) return;
    float *p = params + offset, *st = o->state ? o->state + offset : NULL;
    switch (o->o.kind) {
    case SPMD_OPTIM_SGD: sgd_step(o, p, grad, st, count); break;
    case SPMD_OPTIM_ADAM: adam_step(o, p, grad, st, st + o->n, count, 0); break;
    case SPMD_OPTIM_ADAMW: adam_step(o, p, grad, st, st + o->n, count, 1); break;
    }
}

void spmd_optim_step_done(spmd_optim *o) {
    if (o) o->steps++;
}

void spmd_optim_step(spmd_optim *o, float *params, const float *grads) {
    spmd_optim_update(o, params, grads, 0, o->n);
    spmd_optim_step_done(o);
}

int spmd_optim_state_arrays(const spmd_optim *o) {
    return o && o->n ? (int)(o->state_count / o->n) : 0;
}

void spmd_optim_use_state_memory(spmd_optim *o, float *mem) {
    if (!o || !mem || !o->state_count || mem == o->state) return;
    memcpy(mem, o->state, sizeof(float) * o->state_count);
    free(o->own_state);
    o->own_state = NULL;
    o->state = mem;
}

const char *spmd_optim_name(const spmd_optim *o) {
    switch (o->o.kind) {
    case SPMD_OPTIM_SGD: return "sgd";
    case SPMD_OPTIM_ADAM: return "adam";
    case SPMD_OPTIM_ADAMW: return "adamw";
    }
    return "?";
}

spmd_status spmd_optim_parse(const char *s, spmd_optim_kind *out) {
    if (!s || !out) return SPMD_ERR_INVALID;
    if (strcmp(s, "sgd") == 0) *out = SPMD_OPTIM_SGD;
    else if (strcmp(s, "adam") == 0) *out = SPMD_OPTIM_ADAM;
    else if (strcmp(s, "adamw") == 0) *out = SPMD_OPTIM_ADAMW;
    else return SPMD_ERR_INVALID;
    return SPMD_OK;
}

float *spmd_optim_state(spmd_optim *o, size_t *count) {
    if (count) *count = o->state_count;
    return o->state;
}
int64_t spmd_optim_steps(const spmd_optim *o) { return o->steps; }
void spmd_optim_set_steps(spmd_optim *o, int64_t steps) { o->steps = steps < 0 ? 0 : steps; }
void spmd_optim_set_lr(spmd_optim *o, float lr) { o->o.lr = lr; }

const spmd_optim_opts *spmd_optim_get_opts(const spmd_optim *o) { return &o->o; }
