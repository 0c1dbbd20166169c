/* pipe.c — a pipeline stage running a schedule table.
 *
 * Slots: each micro-batch in flight needs its own activations, so the stage
 * holds `slots` models over the same layer range sharing one parameter,
 * gradient and buffer memory (slot 0's); micro-batch mb runs in slot
 * mb % slots.  Schedules keep the live micro-batches consecutive, so that is
 * free whenever the table starts a forward.
 *
 * Buffers: received activations are the next forward's input and stay until
 * that micro-batch's backward; the receive for action a+1 is posted before
 * action a computes, so one more input buffer than slots keeps it from
 * landing on a live one (likewise two output-gradient buffers).  Sends read
 * the slot's output (or input gradient) in place and are waited for before
 * the slot's next forward (or backward) rewrites it. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "common/common.h"
#include "common/seconds.h"
#include "spmd/parallel.h"

typedef struct {
    spmd_model *m;
    spmd_work *send_act, *send_grad;
} slot;

struct spmd_pipe {
    spmd_group *g;
    int S, s, M;
    int first, last;
    spmd_schedule_kind kind;
    slot *slots;
    int nslots;
    size_t in_size, out_size;   /* per-sample floats in / out */
    int mbB;                    /* micro-batch size the buffers are sized for */
    float **rin;                /* nslots + 1 input buffers (stage > 0) */
    float *rgrad[2];            /* output-gradient buffers (stage < S-1) */
    float *dlogits;             /* last stage: M * mbB * out_size */
    spmd_pipe_action *table;
    spmd_pipe_stats st;
    char err[256];
};

static spmd_status failf(spmd_pipe *p, spmd_status st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    spmd__vfail(p->err, sizeof p->err, st, fmt, ap);
    va_end(ap);
    return st;
}

static spmd_status check_cuts(const int *cuts, int S, int n, char *err, size_t errlen) {
    if (cuts[0] != 0 || cuts[S] != n) {
        snprintf(err, errlen, "stage cuts must start at 0 and end at %d layers (got %d .. %d)", n,
                 cuts[0], cuts[S]);
        return SPMD_ERR_INVALID;
    }
    for (int k = 0; k < S; k++)
        if (cuts[k + 1] <= cuts[k]) {
            snprintf(err, errlen, "stage %d is empty: layers [%d, %d)", k, cuts[k], cuts[k + 1]);
            return SPMD_ERR_INVALID;
        }
    return SPMD_OK;
}

spmd_status spmd_pipe_create(spmd_group *g, const spmd_layers *L, const spmd_pipe_opts *o,
                             spmd_pipe **out, char *err, size_t errlen) {
    char e[256] = "";
    if (!err || !errlen) err = e, errlen = sizeof e;
    if (!g || !L || !o || !out) {
        snprintf(err, errlen, "pipe: NULL argument");
        return SPMD_ERR_INVALID;
    }
    int S = spmd_group_size(g), s = spmd_group_rank(g), n = spmd_layers_count(L);
    if (o->microbatches < 1) {
        snprintf(err, errlen, "pipe: %d micro-batches (need at least 1)", o->microbatches);
        return SPMD_ERR_INVALID;
    }
    if (o->schedule != SPMD_SCHEDULE_GPIPE && o->schedule != SPMD_SCHEDULE_1F1B) {
        snprintf(err, errlen, "pipe: unknown schedule %d", (int)o->schedule);
        return SPMD_ERR_INVALID;
    }
    int *cuts = malloc(sizeof(int) * (size_t)(S + 1));
    if (!cuts) return SPMD_ERR_NOMEM;
    spmd_status st;
    if (o->cuts) {
        memcpy(cuts, o->cuts, sizeof(int) * (size_t)(S + 1));
        st = check_cuts(cuts, S, n, err, errlen);
    } else {
        st = spmd_pipe_balance(L, S, cuts, err, errlen);
    }
    if (st != SPMD_OK) {
        free(cuts);
        return st;
    }
    spmd_pipe *p = calloc(1, sizeof *p);
    if (!p) {
        free(cuts);
        return SPMD_ERR_NOMEM;
    }
    p->g = g; p->S = S; p->s = s; p->M = o->microbatches; p->kind = o->schedule;
    p->first = cuts[s]; p->last = cuts[s + 1];
    free(cuts);
    p->nslots = o->schedule == SPMD_SCHEDULE_GPIPE ? p->M : (S - s < p->M ? S - s : p->M);
    p->slots = calloc((size_t)p->nslots, sizeof(slot));
    p->table = malloc(sizeof(spmd_pipe_action) * 2 * (size_t)p->M);
    p->rin = calloc((size_t)p->nslots + 1, sizeof(float *));
    if (!p->slots || !p->table || !p->rin) {
        spmd_pipe_free(p);
        return SPMD_ERR_NOMEM;
    }
    spmd_pipe_schedule(p->kind, S, s, p->M, p->table);
    spmd_build_opts b = {"stage", o->seed, o->dropout, p->first, p->last};
    for (int i = 0; i < p->nslots; i++) {
        st = spmd_model_build(L, &b, &p->slots[i].m, err, errlen);
        if (st != SPMD_OK) {
            spmd_pipe_free(p);
            return st;
        }
        if (i > 0) {
            spmd_model *m0 = p->slots[0].m, *mi = p->slots[i].m;
            spmd_model_use_param_memory(mi, spmd_model_params(m0, NULL));
            spmd_model_use_grad_memory(mi, spmd_model_grads(m0, NULL));
            spmd_model_use_buffer_memory(mi, spmd_model_buffers(m0, NULL));
        }
    }
    spmd_pipe_seed_dropout(p, o->seed, (uint64_t)s);
    int c, h, w;
    spmd_layers_shape(L, p->first - 1, &c, &h, &w, NULL);
    p->in_size = (size_t)c * h * w;
    spmd_layers_shape(L, p->last - 1, &c, &h, &w, NULL);
    p->out_size = (size_t)c * h * w;
    *out = p;
    return SPMD_OK;
}

static void wait_free(spmd_work **w) {
    if (*w) {
        spmd_work_wait(*w, -1);
        spmd_work_free(*w);
        *w = NULL;
    }
}

void spmd_pipe_free(spmd_pipe *p) {
    if (!p) return;
    for (int i = 0; p->slots && i < p->nslots; i++) {
        wait_free(&p->slots[i].send_act);
        wait_free(&p->slots[i].send_grad);
    }
    /* slot 0 owns the shared memory: free it last */
    for (int i = p->nslots - 1; p->slots && i >= 0; i--) spmd_model_free(p->slots[i].m);
    for (int i = 0; p->rin && i <= p->nslots; i++) free(p->rin[i]);
    free(p->rin);
    free(p->rgrad[0]);
    free(p->rgrad[1]);
    free(p->dlogits);
    free(p->slots);
    free(p->table);
    free(p);
}

spmd_model *spmd_pipe_model(spmd_pipe *p) { return p->slots[0].m; }
void spmd_pipe_train(spmd_pipe *p, int training) {
    for (int i = 0; i < p->nslots; i++) spmd_model_train(p->slots[i].m, training);
}
int spmd_pipe_num_slots(const spmd_pipe *p) { return p->nslots; }
spmd_model *spmd_pipe_slot_model(spmd_pipe *p, int i) { return i >= 0 && i < p->nslots ? p->slots[i].m : NULL; }
void spmd_pipe_seed_dropout(spmd_pipe *p, uint64_t seed, uint64_t stream) {
    for (int i = 0; i < p->nslots; i++) spmd_model_seed_dropout(p->slots[i].m, seed, stream * 1024 + (uint64_t)i);
}
spmd_status spmd_pipe_set_syncbn(spmd_pipe *p, spmd_bn_reduce_fn reduce, void *ctx) {
    spmd_status st = p ? SPMD_OK : SPMD_ERR_INVALID;
    for (int i = 0; p && i < p->nslots && st == SPMD_OK; i++) st = spmd_model_set_syncbn(p->slots[i].m, reduce, ctx);
    return st;
}
int spmd_pipe_stage(const spmd_pipe *p) { return p->s; }
int spmd_pipe_stages(const spmd_pipe *p) { return p->S; }
void spmd_pipe_cut(const spmd_pipe *p, int *first, int *last) {
    if (first) *first = p->first;
    if (last) *last = p->last;
}
void spmd_pipe_last_stats(const spmd_pipe *p, spmd_pipe_stats *s) { *s = p->st; }
const char *spmd_pipe_errmsg(const spmd_pipe *p) { return p ? p->err : "no pipeline"; }

static spmd_status size_buffers(spmd_pipe *p, int mbB) {
    if (mbB <= p->mbB) return SPMD_OK;
    size_t in = p->in_size * (size_t)mbB, outn = p->out_size * (size_t)mbB;
    if (p->s > 0)
        for (int i = 0; i <= p->nslots; i++) {
            free(p->rin[i]);
            if (!(p->rin[i] = malloc(sizeof(float) * in))) return SPMD_ERR_NOMEM;
        }
    if (p->s < p->S - 1)
        for (int i = 0; i < 2; i++) {
            free(p->rgrad[i]);
            if (!(p->rgrad[i] = malloc(sizeof(float) * outn))) return SPMD_ERR_NOMEM;
        }
    if (p->s == p->S - 1) {
        free(p->dlogits);
        if (!(p->dlogits = malloc(sizeof(float) * outn * (size_t)p->M))) return SPMD_ERR_NOMEM;
    }
    p->mbB = mbB;
    return SPMD_OK;
}

/* The receive action a needs (NULL work when none): the input of a forward
 * on stages after the first, the output gradient of a backward on stages
 * before the last. */
static spmd_status post_recv(spmd_pipe *p, int a, int mbB, spmd_work **w) {
    *w = NULL;
    const spmd_pipe_action *x = &p->table[a];
    if (x->op == 'F' && p->s > 0)
        return spmd_irecv(p->g, p->rin[x->mb % (p->nslots + 1)], p->in_size * (size_t)mbB, SPMD_F32,
                          p->s - 1, 2 * x->mb, w);
    if (x->op == 'B' && p->s < p->S - 1)
        return spmd_irecv(p->g, p->rgrad[x->mb % 2], p->out_size * (size_t)mbB, SPMD_F32, p->s + 1,
                          2 * x->mb + 1, w);
    return SPMD_OK;
}

static spmd_status wait_timed(spmd_pipe *p, spmd_work **w) {
    if (!*w) return SPMD_OK;
    double t0 = spmd__seconds();
    spmd_status st = spmd_work_wait(*w, -1);
    p->st.wait_s += spmd__seconds() - t0;
    if (st != SPMD_OK) failf(p, st, "stage %d: %s", p->s, spmd_work_errmsg(*w));
    spmd_work_free(*w);
    *w = NULL;
    return st;
}

spmd_status spmd_pipe_step(spmd_pipe *p, const float *x, const int *targets, int B, float *loss,
                           int *correct) {
    if (!p) return SPMD_ERR_INVALID;
    const int first_stage = p->s == 0, last_stage = p->s == p->S - 1;
    if (B < 1 || B % p->M != 0)
        return failf(p, SPMD_ERR_INVALID, "stage %d: batch %d is not divisible by %d micro-batches",
                     p->s, B, p->M);
    if ((first_stage && !x) || (last_stage && !targets))
        return failf(p, SPMD_ERR_INVALID, "stage %d: %s missing", p->s, first_stage && !x ? "input" : "targets");
    const int mbB = B / p->M;
    spmd_status st = size_buffers(p, mbB);
    if (st != SPMD_OK) return failf(p, st, "stage %d: out of memory for micro-batch %d", p->s, mbB);
    memset(&p->st, 0, sizeof p->st);
    p->st.slots = p->nslots;
    const double t_start = spmd__seconds();
    const size_t xs = p->in_size * (size_t)mbB;   /* stage 0: per-sample C*H*W */
    const int V = (int)p->out_size;
    double loss_sum = 0;
    int hits = 0, live = 0;
    spmd_work *next = NULL;
    st = post_recv(p, 0, mbB, &next);
    for (int a = 0; a < 2 * p->M && st == SPMD_OK; a++) {
        const spmd_pipe_action act = p->table[a];
        slot *sl = &p->slots[act.mb % p->nslots];
        spmd_work *cur = next;
        next = NULL;
        if (a + 1 < 2 * p->M) st = post_recv(p, a + 1, mbB, &next);   /* prefetch */
        if (st == SPMD_OK) st = wait_timed(p, &cur);
        if (st != SPMD_OK) {
            wait_free(&cur);
            break;
        }
        if (act.op == 'F') {
            st = wait_timed(p, &sl->send_act);   /* the slot's output is about to change */
            if (st != SPMD_OK) break;
            const float *in = first_stage ? x + (size_t)act.mb * xs : p->rin[act.mb % (p->nslots + 1)];
            const float *y;
            double t0 = spmd__seconds();
            st = spmd_model_forward(sl->m, in, mbB, &y);
            if (st == SPMD_OK && last_stage) {
                int c = 0;
                float *dl = p->dlogits + (size_t)act.mb * mbB * V;
                loss_sum += spmd_cross_entropy(dl, y, targets + (size_t)act.mb * mbB, mbB, V, &c);
                hits += c;
                const float scale = 1.0f / (float)p->M;
                for (size_t i = 0; i < (size_t)mbB * V; i++) dl[i] *= scale;
            }
            p->st.compute_s += spmd__seconds() - t0;
            if (++live > p->st.max_live) p->st.max_live = live;
            if (st != SPMD_OK) {
                failf(p, st, "stage %d: forward of micro-batch %d failed", p->s, act.mb);
                break;
            }
            if (!last_stage)
                st = spmd_isend(p->g, y, p->out_size * (size_t)mbB, SPMD_F32, p->s + 1, 2 * act.mb,
                                &sl->send_act);
        } else {
            st = wait_timed(p, &sl->send_grad);
            if (st != SPMD_OK) break;
            const float *dout = last_stage ? p->dlogits + (size_t)act.mb * mbB * V : p->rgrad[act.mb % 2];
            double t0 = spmd__seconds();
            st = spmd_model_backward(sl->m, dout, NULL, NULL);
            p->st.compute_s += spmd__seconds() - t0;
            live--;
            if (st != SPMD_OK) {
                failf(p, st, "stage %d: backward of micro-batch %d failed", p->s, act.mb);
                break;
            }
            if (!first_stage)
                st = spmd_isend(p->g, spmd_model_input_grad(sl->m), p->in_size * (size_t)mbB, SPMD_F32,
                                p->s - 1, 2 * act.mb + 1, &sl->send_grad);
        }
        if (st != SPMD_OK && !p->err[0]) failf(p, st, "stage %d: %s", p->s, spmd_group_errmsg(p->g));
    }
    wait_free(&next);
    for (int i = 0; i < p->nslots; i++) {
        spmd_status s1 = wait_timed(p, &p->slots[i].send_act);
        spmd_status s2 = wait_timed(p, &p->slots[i].send_grad);
        if (st == SPMD_OK) st = s1 ? s1 : s2;
    }
    p->st.total_s = spmd__seconds() - t_start;
    p->st.bubble_s = p->st.total_s - p->st.compute_s;
    for (int i = 0; i < p->nslots; i++) p->st.act_bytes += spmd_model_activation_bytes(p->slots[i].m);
    if (st != SPMD_OK) return st;
    if (loss) *loss = last_stage ? (float)(loss_sum / p->M) : 0.0f;
    if (correct) *correct = last_stage ? hits : 0;
    return SPMD_OK;
}

spmd_status spmd_pipe_forward(spmd_pipe *p, const float *x, int B, float *logits) {
    if (!p) return SPMD_ERR_INVALID;
    const int first_stage = p->s == 0, last_stage = p->s == p->S - 1;
    if (B < 1 || B % p->M != 0)
        return failf(p, SPMD_ERR_INVALID, "stage %d: batch %d is not divisible by %d micro-batches",
                     p->s, B, p->M);
    if ((first_stage && !x) || (last_stage && !logits))
        return failf(p, SPMD_ERR_INVALID, "stage %d: %s missing", p->s, first_stage ? "input" : "logits");
    const int mbB = B / p->M;
    spmd_status st = size_buffers(p, mbB);
    if (st != SPMD_OK) return st;
    const size_t xs = p->in_size * (size_t)mbB, ys = p->out_size * (size_t)mbB;
    spmd_model *m = p->slots[0].m;
    for (int mb = 0; mb < p->M && st == SPMD_OK; mb++) {
        const float *in = first_stage ? x + (size_t)mb * xs : p->rin[0], *y;
        if (!first_stage) st = spmd_recv(p->g, p->rin[0], xs, SPMD_F32, p->s - 1, 2 * mb, NULL);
        if (st == SPMD_OK) st = spmd_model_forward(m, in, mbB, &y);
        if (st == SPMD_OK && !last_stage) st = spmd_send(p->g, y, ys, SPMD_F32, p->s + 1, 2 * mb);
        if (st == SPMD_OK && last_stage) memcpy(logits + (size_t)mb * ys, y, sizeof(float) * ys);
    }
    if (st != SPMD_OK) failf(p, st, "stage %d: forward failed: %s", p->s, spmd_group_errmsg(p->g));
    return st;
}
