/* handlers.c — the registry of handlers and the check of their argument shapes. */
#include <stdlib.h>
#include <string.h>
#include "rpc_internal.h"

/* ---- handlers ------------------------------------------------------------ */
static spmd_status reg(spmd_rpc *r, const char *name, spmd_rpc_handler fn, void *ctx,
                       const spmd_rpc_sig *sig, int inline_ok) {
    if (!r || !name || !fn) return SPMD_ERR_INVALID;
    if (!*name || strlen(name) >= SPMD_RPC_MAX_NAME)
        return spmd__rpc_error(r, SPMD_ERR_INVALID, "rpc: handler name '%s' must have 1-%d characters", name,
                               SPMD_RPC_MAX_NAME - 1);
    if (sig && (sig->nargs > SPMD_RPC_MAX_TENSORS || (sig->nargs > 0 && !sig->args)))
        return spmd__rpc_error(r, SPMD_ERR_INVALID, "rpc: handler '%s': bad signature", name);
    rpc_handler *h = calloc(1, sizeof *h);
    if (!h) return SPMD_ERR_NOMEM;
    snprintf(h->name, sizeof h->name, "%s", name);
    h->fn = fn;
    h->ctx = ctx;
    h->inline_ok = inline_ok;
    if (sig) {
        h->has_sig = 1;
        h->sig = *sig;
        if (sig->nargs > 0) {
            h->shapes = malloc(sizeof(spmd_rpc_shape) * (size_t)sig->nargs);
            if (!h->shapes) {
                free(h);
                return SPMD_ERR_NOMEM;
            }
            memcpy(h->shapes, sig->args, sizeof(spmd_rpc_shape) * (size_t)sig->nargs);
        }
        h->sig.args = h->shapes;
    }
    pthread_mutex_lock(&r->mu);
    for (rpc_handler **pp = &r->handlers; *pp; pp = &(*pp)->next)
        if (strcmp((*pp)->name, name) == 0) {
            rpc_handler *old = *pp;
            h->next = old->next;
            *pp = h;
            pthread_mutex_unlock(&r->mu);
            free(old->shapes);
            free(old);
            return SPMD_OK;
        }
    h->next = r->handlers;
    r->handlers = h;
    pthread_mutex_unlock(&r->mu);
    return SPMD_OK;
}

spmd_status spmd_rpc_register(spmd_rpc *r, const char *name, spmd_rpc_handler fn, void *ctx,
                              const spmd_rpc_sig *sig) {
    return reg(r, name, fn, ctx, sig, 0);
}

spmd_status spmd_rpc_register_inline(spmd_rpc *r, const char *name, spmd_rpc_handler fn, void *ctx,
                                     const spmd_rpc_sig *sig) {
    return reg(r, name, fn, ctx, sig, 1);
}

int spmd__rpc_handler_is_inline(spmd_rpc *r, const char *name) {
    int yes = 0;
    pthread_mutex_lock(&r->mu);
    for (rpc_handler *h = r->handlers; h; h = h->next)
        if (strcmp(h->name, name) == 0) {
            yes = h->inline_ok;
            break;
        }
    pthread_mutex_unlock(&r->mu);
    return yes;
}

/* A copy of the handler (its shapes copied too: free copy->shapes). */
const rpc_handler *spmd__rpc_handler_find(spmd_rpc *r, const char *name, rpc_handler *copy) {
    const rpc_handler *found = NULL;
    pthread_mutex_lock(&r->mu);
    for (rpc_handler *h = r->handlers; h; h = h->next)
        if (strcmp(h->name, name) == 0) {
            *copy = *h;
            copy->shapes = NULL;
            if (h->sig.nargs > 0) {
                copy->shapes = malloc(sizeof(spmd_rpc_shape) * (size_t)h->sig.nargs);
                if (copy->shapes) memcpy(copy->shapes, h->shapes, sizeof(spmd_rpc_shape) * (size_t)h->sig.nargs);
                else copy->has_sig = 0, copy->sig.nargs = -1;
            }
            copy->sig.args = copy->shapes;
            found = copy;
            break;
        }
    pthread_mutex_unlock(&r->mu);
    return found;
}

static void shape_str(char *buf, size_t len, spmd_dtype dt, int ndim, const int64_t *shape) {
    size_t o = (size_t)snprintf(buf, len, "%s[", spmd_dtype_name(dt));
    for (int d = 0; d < ndim && o < len; d++)
        o += (size_t)snprintf(buf + o, len - o, d ? ",%lld" : "%lld", (long long)shape[d]);
    if (o < len) snprintf(buf + o, len - o, "]");
}

int spmd__rpc_check_sig(const rpc_handler *h, const spmd_rpc_msg *m, char *err, size_t errlen) {
    const spmd_rpc_sig *s = &h->sig;
    if (m->plen > s->max_payload && !s->any_payload) {
        snprintf(err, errlen, "handler '%s' takes at most %zu payload bytes, got %zu", h->name, s->max_payload, m->plen);
        return 0;
    }
    if (s->nargs < 0) return 1;
    if (m->n != s->nargs) {
        snprintf(err, errlen, "handler '%s' takes %d tensors, got %d", h->name, s->nargs, m->n);
        return 0;
    }
    for (int i = 0; i < s->nargs; i++) {
        const spmd_rpc_shape *want = &s->args[i];
        const spmd_rpc_tensor *t = &m->t[i];
        int ok = t->dtype == want->dtype && (want->ndim < 0 || want->ndim == t->ndim);
        for (int d = 0; ok && want->ndim >= 0 && d < want->ndim; d++)
            if (want->shape[d] >= 0 && want->shape[d] != t->shape[d]) ok = 0;
        if (!ok) {
            char a[128], b[128];
            shape_str(a, sizeof a, want->dtype, want->ndim < 0 ? 0 : want->ndim, want->shape);
            shape_str(b, sizeof b, t->dtype, t->ndim, t->shape);
            snprintf(err, errlen, "handler '%s': argument %d should be %s (-1: any), got %s", h->name, i, a, b);
            return 0;
        }
    }
    return 1;
}

