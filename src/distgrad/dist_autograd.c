/* dist_autograd.c — contexts, send/recv records and backward over RPC
 * (spmd/dist_autograd.h); the optimizer's step handler is here too, its
 * driver side in dist_optim.c.  Talks to the RPC agent and to nn only through
 * their public headers.
 *
 * Wire: every call is a call through the module's RRef; its payload is a
 * dag_hdr (context, record, optimizer options) and its tensors the
 * activations or gradients. */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "common/common.h"
#include "distgrad/dist_internal.h"


typedef struct module {
    spmd_dag_module m;
    char name[SPMD_RPC_MAX_NAME];
    spmd_optim *opt;           /* the distributed optimizer's, created on the first step */
    pthread_mutex_t mu;        /* forward, backward and step of this module, one at a time
                                * (several RRefs may name it: one per user) */
    struct module *next;
} module;

/* Owner side: what one forward saved, and per-context gradients. */
typedef struct saved_rec {
    int64_t ctx;
    int rec;
    module *mod;
    void *saved;
    struct saved_rec *next;
} saved_rec;

typedef struct grad_buf {
    int64_t ctx;
    module *mod;
    float *g;
    struct grad_buf *next;
} grad_buf;

/* Driver side: the records of its contexts. */
typedef struct drv_rec {
    int64_t ctx;
    int rec, parent;
    spmd_rref *mod;
    struct drv_rec *next;
} drv_rec;

struct spmd_dag {
    spmd_rpc *r;
    pthread_mutex_t mu;
    module *mods;
    saved_rec *saved;
    grad_buf *grads;
    drv_rec *recs;
    int next_rec;
    int64_t next_ctx;
    char err[512];
};

spmd_status spmd__dag_fail(spmd_dag *d, spmd_status st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    spmd__vfail_locked(&d->mu, d->err, sizeof d->err, st, fmt, ap);
    va_end(ap);
    return st;
}

const char *spmd_dag_errmsg(const spmd_dag *d) { return d ? d->err : "no dist autograd state"; }

static module *find_module(spmd_dag *d, const char *name) {
    for (module *m = d->mods; m; m = m->next)
        if (strcmp(m->name, name) == 0) return m;
    return NULL;
}

/* The module an RRef call is about: its value's payload is the name. */
static module *call_module(spmd_dag *d, spmd_rpc_call *c) {
    size_t len = 0;
    const char *nm = spmd_rpc_msg_payload(spmd_rpc_call_rref_value(c), &len);
    if (!nm || len == 0 || nm[len - 1] != 0) return NULL;
    pthread_mutex_lock(&d->mu);
    module *m = find_module(d, nm);
    pthread_mutex_unlock(&d->mu);
    return m;
}

static int read_hdr(spmd_rpc_call *c, dag_hdr *h) {
    size_t len = 0;
    const void *p = spmd_rpc_msg_payload(spmd_rpc_call_args(c), &len);
    if (!p || len != sizeof *h) return 0;
    memcpy(h, p, sizeof *h);
    return 1;
}

static grad_buf *grads_for(spmd_dag *d, int64_t ctx, module *m, int create) {
    for (grad_buf *g = d->grads; g; g = g->next)
        if (g->ctx == ctx && g->mod == m) return g;
    if (!create) return NULL;
    grad_buf *g = calloc(1, sizeof *g);
    if (!g) return NULL;
    g->g = calloc(m->m.nparams ? m->m.nparams : 1, sizeof(float));
    if (!g->g) {
        free(g);
        return NULL;
    }
    g->ctx = ctx;
    g->mod = m;
    g->next = d->grads;
    d->grads = g;
    return g;
}

/* ---- handlers (owner side) -------------------------------------------------- */
static spmd_status h_module(spmd_rpc_call *c, void *ctx) {
    spmd_dag *d = ctx;
    size_t len = 0;
    const char *nm = spmd_rpc_msg_payload(spmd_rpc_call_args(c), &len);
    if (!nm || !len || nm[len - 1] != 0) return spmd_rpc_call_fail(c, "dist autograd: module name missing");
    pthread_mutex_lock(&d->mu);
    module *m = find_module(d, nm);
    pthread_mutex_unlock(&d->mu);
    if (!m) return spmd_rpc_call_fail(c, "dist autograd: no module named '%s' here", nm);
    return spmd_rpc_msg_set_payload(spmd_rpc_call_result(c), nm, len);
}

static spmd_status h_forward(spmd_rpc_call *c, void *ctx) {
    spmd_dag *d = ctx;
    module *m = call_module(d, c);
    dag_hdr h;
    if (!m || !read_hdr(c, &h)) return spmd_rpc_call_fail(c, "dist autograd: bad forward request");
    saved_rec *s = calloc(1, sizeof *s);
    if (!s) return SPMD_ERR_NOMEM;
    pthread_mutex_lock(&m->mu);
    spmd_status st = m->m.forward(m->m.self, spmd_rpc_call_args(c), spmd_rpc_call_result(c), &s->saved);
    pthread_mutex_unlock(&m->mu);
    if (st != SPMD_OK) {
        free(s);
        return spmd_rpc_call_fail(c, "module '%s' forward: %s", m->name, spmd_status_str(st));
    }
    s->ctx = h.ctx;
    s->rec = h.rec;
    s->mod = m;
    pthread_mutex_lock(&d->mu);
    s->next = d->saved;
    d->saved = s;
    pthread_mutex_unlock(&d->mu);
    return SPMD_OK;
}

static spmd_status h_backward(spmd_rpc_call *c, void *ctx) {
    spmd_dag *d = ctx;
    module *m = call_module(d, c);
    dag_hdr h;
    if (!m || !read_hdr(c, &h)) return spmd_rpc_call_fail(c, "dist autograd: bad backward request");
    pthread_mutex_lock(&d->mu);
    saved_rec *s = NULL;
    for (saved_rec **pp = &d->saved; *pp; pp = &(*pp)->next)
        if ((*pp)->ctx == h.ctx && (*pp)->rec == h.rec && (*pp)->mod == m) {
            s = *pp;
            *pp = s->next;   /* a record's graph is used once (retain_graph=False) */
            break;
        }
    grad_buf *g = s ? grads_for(d, h.ctx, m, 1) : NULL;
    pthread_mutex_unlock(&d->mu);
    if (!s) return spmd_rpc_call_fail(c, "dist autograd: context %lld has no record %d of module '%s' (backward twice?)",
                                      (long long)h.ctx, h.rec, m->name);
    pthread_mutex_lock(&m->mu);
    spmd_status st = g ? m->m.backward(m->m.self, s->saved, spmd_rpc_call_args(c), spmd_rpc_call_result(c), g->g)
                       : SPMD_ERR_NOMEM;
    pthread_mutex_unlock(&m->mu);
    if (m->m.free_saved) m->m.free_saved(m->m.self, s->saved);
    free(s);
    if (st != SPMD_OK) return spmd_rpc_call_fail(c, "module '%s' backward: %s", m->name, spmd_status_str(st));
    return SPMD_OK;
}

static spmd_status h_step(spmd_rpc_call *c, void *ctx) {
    spmd_dag *d = ctx;
    module *m = call_module(d, c);
    dag_hdr h;
    if (!m || !read_hdr(c, &h)) return spmd_rpc_call_fail(c, "dist autograd: bad step request");
    pthread_mutex_lock(&d->mu);
    grad_buf *g = grads_for(d, h.ctx, m, 0);
    pthread_mutex_unlock(&d->mu);
    if (!g) return spmd_rpc_call_fail(c, "module '%s' has no gradients in context %lld", m->name, (long long)h.ctx);
    pthread_mutex_lock(&m->mu);
    spmd_status st = m->opt ? SPMD_OK : spmd_optim_create(&h.optim, m->m.nparams, &m->opt);
    if (st == SPMD_OK) spmd_optim_step(m->opt, m->m.params, g->g);
    pthread_mutex_unlock(&m->mu);
    if (st != SPMD_OK) return spmd_rpc_call_fail(c, "module '%s': creating its optimizer failed", m->name);
    return SPMD_OK;
}

static void release_local(spmd_dag *d, int64_t ctx) {
    pthread_mutex_lock(&d->mu);
    for (saved_rec **pp = &d->saved; *pp;) {
        saved_rec *s = *pp;
        if (s->ctx != ctx) { pp = &s->next; continue; }
        *pp = s->next;
        if (s->mod->m.free_saved) s->mod->m.free_saved(s->mod->m.self, s->saved);
        free(s);
    }
    for (grad_buf **pp = &d->grads; *pp;) {
        grad_buf *g = *pp;
        if (g->ctx != ctx) { pp = &g->next; continue; }
        *pp = g->next;
        free(g->g);
        free(g);
    }
    for (drv_rec **pp = &d->recs; *pp;) {
        drv_rec *x = *pp;
        if (x->ctx != ctx) { pp = &x->next; continue; }
        *pp = x->next;
        free(x);
    }
    pthread_mutex_unlock(&d->mu);
}

static spmd_status h_release(spmd_rpc_call *c, void *ctx) {
    dag_hdr h;
    if (!read_hdr(c, &h)) return spmd_rpc_call_fail(c, "dist autograd: bad release request");
    release_local(ctx, h.ctx);
    return SPMD_OK;
}

/* ---- public --------------------------------------------------------------- */
spmd_status spmd_dag_create(spmd_rpc *r, spmd_dag **out) {
    if (!r || !out) return SPMD_ERR_INVALID;
    spmd_dag *d = calloc(1, sizeof *d);
    if (!d) return SPMD_ERR_NOMEM;
    d->r = r;
    pthread_mutex_init(&d->mu, NULL);
    d->next_ctx = ((int64_t)spmd_rpc_rank(r) << 40) + 1;
    spmd_status st = spmd_rpc_register(r, "__dag_module", h_module, d, NULL);
    if (st == SPMD_OK) st = spmd_rpc_register(r, "__dag_forward", h_forward, d, NULL);
    if (st == SPMD_OK) st = spmd_rpc_register(r, "__dag_backward", h_backward, d, NULL);
    if (st == SPMD_OK) st = spmd_rpc_register(r, "__dag_step", h_step, d, NULL);
    if (st == SPMD_OK) st = spmd_rpc_register(r, "__dag_release", h_release, d, NULL);
    if (st != SPMD_OK) {
        free(d);
        return st;
    }
    *out = d;
    return SPMD_OK;
}

void spmd_dag_free(spmd_dag *d) {
    if (!d) return;
    while (d->saved) release_local(d, d->saved->ctx);
    while (d->grads) release_local(d, d->grads->ctx);
    while (d->recs) release_local(d, d->recs->ctx);
    while (d->mods) {
        module *n = d->mods->next;
        spmd_optim_free(d->mods->opt);
        pthread_mutex_destroy(&d->mods->mu);
        free(d->mods);
        d->mods = n;
    }
    pthread_mutex_destroy(&d->mu);
    free(d);
}

spmd_status spmd_dag_add_module(spmd_dag *d, const spmd_dag_module *m) {
    if (!d || !m || !m->name || !m->forward || !m->backward || (m->nparams && !m->params))
        return SPMD_ERR_INVALID;
    if (!*m->name || strlen(m->name) >= SPMD_RPC_MAX_NAME)
        return spmd__dag_fail(d, SPMD_ERR_INVALID, "dist autograd: module name '%s' must have 1-%d characters", m->name,
                    SPMD_RPC_MAX_NAME - 1);
    module *x = calloc(1, sizeof *x);
    if (!x) return SPMD_ERR_NOMEM;
    x->m = *m;
    snprintf(x->name, sizeof x->name, "%s", m->name);
    x->m.name = x->name;
    pthread_mutex_init(&x->mu, NULL);
    pthread_mutex_lock(&d->mu);
    if (find_module(d, m->name)) {
        pthread_mutex_unlock(&d->mu);
        pthread_mutex_destroy(&x->mu);
        free(x);
        return spmd__dag_fail(d, SPMD_ERR_INVALID, "dist autograd: module '%s' added twice", m->name);
    }
    x->next = d->mods;
    d->mods = x;
    pthread_mutex_unlock(&d->mu);
    return SPMD_OK;
}

spmd_status spmd_dag_module_rref(spmd_dag *d, int owner, const char *name, spmd_rref **out) {
    if (!d || !name || !out) return SPMD_ERR_INVALID;
    spmd_rpc_msg *a = spmd_rpc_msg_new();
    if (!a) return SPMD_ERR_NOMEM;
    spmd_status st = spmd_rpc_msg_set_payload(a, name, strlen(name) + 1);
    spmd_rref *ref = NULL;
    if (st == SPMD_OK) st = spmd_rpc_remote(d->r, owner, "__dag_module", a, -1, &ref);
    spmd_rpc_msg_free(a);
    /* to_here confirms the module exists before anyone uses the reference */
    spmd_rpc_msg *v = NULL;
    if (st == SPMD_OK) st = spmd_rref_to_here(ref, -1, &v);
    spmd_rpc_msg_free(v);
    if (st != SPMD_OK) {
        spmd_rref_release(ref);
        return spmd__dag_fail(d, st, "dist autograd: module '%s' on rank %d: %s", name, owner, spmd_rpc_errmsg(d->r));
    }
    *out = ref;
    return SPMD_OK;
}

spmd_status spmd_dag_context_new(spmd_dag *d, int64_t *ctx) {
    if (!d || !ctx) return SPMD_ERR_INVALID;
    pthread_mutex_lock(&d->mu);
    *ctx = d->next_ctx++;
    pthread_mutex_unlock(&d->mu);
    return SPMD_OK;
}

/* A message with in's tensors (by reference) and the header as payload. */
static spmd_rpc_msg *with_hdr(const spmd_rpc_msg *in, const dag_hdr *h) {
    spmd_rpc_msg *m = spmd_rpc_msg_new();
    if (!m) return NULL;
    for (int i = 0; i < spmd_rpc_msg_ntensors(in); i++) {
        const spmd_rpc_tensor *t = spmd_rpc_msg_tensor(in, i);
        if (spmd_rpc_msg_add_tensor_ref(m, t->dtype, t->ndim, t->shape, t->data) != SPMD_OK) {
            spmd_rpc_msg_free(m);
            return NULL;
        }
    }
    spmd_rpc_msg_set_payload(m, h, sizeof *h);
    return m;
}

spmd_status spmd_dag_forward_async(spmd_dag *d, int64_t ctx, spmd_rref *module,
                                   const spmd_rpc_msg *in, int parent, int *rec,
                                   spmd_rpc_future **out) {
    if (!d || !module || !rec || !out) return SPMD_ERR_INVALID;
    drv_rec *x = calloc(1, sizeof *x);
    if (!x) return SPMD_ERR_NOMEM;
    pthread_mutex_lock(&d->mu);
    int ok_parent = parent < 0;
    for (drv_rec *p = d->recs; p && !ok_parent; p = p->next)
        if (p->ctx == ctx && p->rec == parent) ok_parent = 1;
    x->ctx = ctx;
    x->rec = d->next_rec++;
    x->parent = parent;
    x->mod = module;
    if (ok_parent) {
        x->next = d->recs;
        d->recs = x;
    }
    pthread_mutex_unlock(&d->mu);
    if (!ok_parent) {
        free(x);
        return spmd__dag_fail(d, SPMD_ERR_INVALID, "dist autograd: context %lld has no record %d", (long long)ctx, parent);
    }
    dag_hdr h;
    memset(&h, 0, sizeof h);
    h.ctx = ctx;
    h.rec = x->rec;
    spmd_rpc_msg *m = with_hdr(in, &h);
    if (!m) return SPMD_ERR_NOMEM;
    spmd_status st = spmd_rref_call_async(module, "__dag_forward", m, -1, out);
    spmd_rpc_msg_free(m);
    if (st != SPMD_OK) return spmd__dag_fail(d, st, "dist autograd forward: %s", spmd_rpc_errmsg(d->r));
    *rec = h.rec;
    return SPMD_OK;
}

spmd_status spmd__dag_finish(spmd_dag *d, spmd_rpc_future *f, spmd_rpc_msg **out, const char *what) {
    spmd_status st = spmd_rpc_future_wait(f, -1);
    if (st == SPMD_OK && out) st = spmd_rpc_future_take(f, out);
    if (st != SPMD_OK) spmd__dag_fail(d, st, "dist autograd %s: %s", what, spmd_rpc_future_errmsg(f));
    spmd_rpc_future_free(f);
    return st;
}

spmd_status spmd_dag_forward(spmd_dag *d, int64_t ctx, spmd_rref *module, const spmd_rpc_msg *in,
                             int parent, int *rec, spmd_rpc_msg **out) {
    spmd_rpc_future *f = NULL;
    spmd_status st = spmd_dag_forward_async(d, ctx, module, in, parent, rec, &f);
    return st == SPMD_OK ? spmd__dag_finish(d, f, out, "forward") : st;
}

spmd_status spmd_dag_backward(spmd_dag *d, int64_t ctx, int rec, const spmd_rpc_msg *dout,
                              spmd_rpc_msg **din) {
    if (!d || !dout) return SPMD_ERR_INVALID;
    spmd_rpc_msg *grad = NULL;   /* the current gradient, NULL: dout */
    spmd_status st = SPMD_OK;
    while (rec >= 0 && st == SPMD_OK) {
        pthread_mutex_lock(&d->mu);
        drv_rec *x = d->recs;
        while (x && !(x->ctx == ctx && x->rec == rec)) x = x->next;
        spmd_rref *mod = x ? x->mod : NULL;
        int parent = x ? x->parent : -1;
        pthread_mutex_unlock(&d->mu);
        if (!mod) {
            st = spmd__dag_fail(d, SPMD_ERR_INVALID, "dist autograd backward: context %lld has no record %d", (long long)ctx, rec);
            break;
        }
        dag_hdr h;
        memset(&h, 0, sizeof h);
        h.ctx = ctx;
        h.rec = rec;
        spmd_rpc_msg *m = with_hdr(grad ? grad : dout, &h), *next = NULL;
        spmd_rpc_future *f = NULL;
        st = m ? spmd_rref_call_async(mod, "__dag_backward", m, -1, &f) : SPMD_ERR_NOMEM;
        if (st == SPMD_OK) st = spmd__dag_finish(d, f, &next, "backward");
        spmd_rpc_msg_free(m);
        spmd_rpc_msg_free(grad);
        grad = next;
        rec = parent;
    }
    if (st == SPMD_OK && din) *din = grad;
    else spmd_rpc_msg_free(grad);
    return st;
}

const float *spmd_dag_grads(spmd_dag *d, int64_t ctx, const char *name) {
    if (!d || !name) return NULL;
    pthread_mutex_lock(&d->mu);
    module *m = find_module(d, name);
    grad_buf *g = m ? grads_for(d, ctx, m, 0) : NULL;
    pthread_mutex_unlock(&d->mu);
    return g ? g->g : NULL;
}

spmd_status spmd_dag_module_snapshot(spmd_dag *d, const char *name, int64_t ctx, float *params, float *grads) {
    if (!d || !name) return SPMD_ERR_INVALID;
    pthread_mutex_lock(&d->mu);
    module *m = find_module(d, name);
    grad_buf *g = m && grads ? grads_for(d, ctx, m, 0) : NULL;
    pthread_mutex_unlock(&d->mu);
    if (!m) return spmd__dag_fail(d, SPMD_ERR_INVALID, "dist autograd: no module named '%s' here", name);
    if (grads && !g)
        return spmd__dag_fail(d, SPMD_ERR_INVALID, "dist autograd: module '%s' has no gradients in context %lld", name,
                              (long long)ctx);
    /* the module's lock orders this copy after any forward, backward or
     * step the pool ran on it */
    pthread_mutex_lock(&m->mu);
    if (params) memcpy(params, m->m.params, m->m.nparams * sizeof(float));
    if (grads) memcpy(grads, g->g, m->m.nparams * sizeof(float));
    pthread_mutex_unlock(&m->mu);
    return SPMD_OK;
}

spmd_status spmd_dag_context_release(spmd_dag *d, int64_t ctx) {
    if (!d) return SPMD_ERR_INVALID;
    dag_hdr h;
    memset(&h, 0, sizeof h);
    h.ctx = ctx;
    spmd_rpc_msg *m = spmd_rpc_msg_new();
    if (!m) return SPMD_ERR_NOMEM;
    spmd_rpc_msg_set_payload(m, &h, sizeof h);
    int world = spmd_rpc_world_size(d->r);
    spmd_rpc_future *fs[256];
    spmd_status st = SPMD_OK;
    for (int w0 = 0; w0 < world; w0 += 256) {
        int n = world - w0 < 256 ? world - w0 : 256;
        for (int i = 0; i < n; i++) fs[i] = NULL;
        for (int i = 0; i < n && st == SPMD_OK; i++) st = spmd_rpc_async(d->r, w0 + i, "__dag_release", m, -1, &fs[i]);
        for (int i = 0; i < n; i++)
            if (fs[i]) {
                spmd_status s2 = spmd__dag_finish(d, fs[i], NULL, "context release");
                if (st == SPMD_OK) st = s2;
            }
    }
    spmd_rpc_msg_free(m);
    return st;
}
