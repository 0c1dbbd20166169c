/* future.c — futures of outgoing calls, the table of pending requests, the
 * watchdog that fails calls past their deadline.  Sending a request and
 * waiting for its future (which receives) are request.c's. */
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "rpc_internal.h"

spmd_rpc_future *spmd__rpc_future_new(spmd_rpc *r, int dst, int timeout_ms) {
    spmd_rpc_future *f = calloc(1, sizeof *f);
    if (!f) return NULL;
    f->r = r;
    pthread_cond_init(&f->cv, NULL);
    spmd__rpc_ref(r);
    f->refs = 1;
    f->dst = dst;
    if (timeout_ms < 0) timeout_ms = r->timeout_ms;
    f->deadline = timeout_ms > 0 ? spmd__now_ms() + timeout_ms : 0;
    f->st = SPMD_ERR_AGAIN;
    return f;
}

static void unref_locked(spmd_rpc_future *f, int *free_it) {
    *free_it = --f->refs == 0;
}

static void destroy(spmd_rpc_future *f) {
    spmd_rpc *r = f->r;
    pthread_cond_destroy(&f->cv);
    spmd_rpc_msg_free(f->result);
    while (f->cbs) {
        struct rpc_cb *n = f->cbs->next;
        free(f->cbs);
        f->cbs = n;
    }
    free(f);
    spmd__rpc_unref(r);
}

void spmd_rpc_future_free(spmd_rpc_future *f) {
    if (!f) return;
    spmd_rpc *r = f->r;
    int fr;
    pthread_mutex_lock(&r->fmu);
    unref_locked(f, &fr);
    pthread_mutex_unlock(&r->fmu);
    if (fr) destroy(f);
}

void spmd__rpc_future_complete(spmd_rpc_future *f, spmd_status st, spmd_rpc_msg *result,
                               const char *err) {
    spmd_rpc *r = f->r;
    pthread_mutex_lock(&r->fmu);
    if (f->done) {
        pthread_mutex_unlock(&r->fmu);
        spmd_rpc_msg_free(result);
        return;
    }
    f->done = 1;
    f->st = st;
    f->result = result;
    if (st != SPMD_OK) snprintf(f->err, sizeof f->err, "%s", err && *err ? err : spmd_status_str(st));
    f->refs++;   /* kept alive across the callbacks */
    int counted = f->counted;
    f->counted = 0;
    /* Callbacks run before waiters wake: after wait() returns, they have run
     * (then() calls made meanwhile included). */
    while (f->cbs) {
        struct rpc_cb *cbs = f->cbs;
        f->cbs = NULL;
        pthread_mutex_unlock(&r->fmu);
        while (cbs) {
            struct rpc_cb *n = cbs->next;
            cbs->fn(f, cbs->ctx);
            free(cbs);
            cbs = n;
        }
        pthread_mutex_lock(&r->fmu);
    }
    atomic_store_explicit(&f->settled, 1, memory_order_release);
    pthread_cond_broadcast(&f->cv);
    pthread_mutex_unlock(&r->fmu);
    if (counted) atomic_fetch_sub(&r->active, 1);
    spmd_rpc_future_free(f);
}

void spmd__rpc_pending_add(spmd_rpc *r, spmd_rpc_future *f) {
    pthread_mutex_lock(&r->fmu);
    f->id = ++r->next_id;
    f->refs++;   /* the table's reference */
    f->counted = 1;
    atomic_fetch_add(&r->active, 1);
    size_t b = f->id % RPC_BUCKETS;
    f->hnext = r->pending[b];
    r->pending[b] = f;
    pthread_mutex_unlock(&r->fmu);
}

static spmd_rpc_future *take_locked(spmd_rpc *r, uint64_t id) {
    spmd_rpc_future **pp = &r->pending[id % RPC_BUCKETS];
    for (; *pp; pp = &(*pp)->hnext)
        if ((*pp)->id == id) {
            spmd_rpc_future *f = *pp;
            *pp = f->hnext;
            return f;
        }
    return NULL;
}

/* The caller owns the table's reference of the returned future. */
spmd_rpc_future *spmd__rpc_pending_take(spmd_rpc *r, uint64_t id) {
    pthread_mutex_lock(&r->fmu);
    spmd_rpc_future *f = take_locked(r, id);
    pthread_mutex_unlock(&r->fmu);
    return f;
}

/* Fail every pending call (the group broke, or shutdown). */
void spmd__rpc_fail_all(spmd_rpc *r, spmd_status st, const char *msg) {
    for (;;) {
        spmd_rpc_future *f = NULL;
        pthread_mutex_lock(&r->fmu);
        for (int b = 0; b < RPC_BUCKETS && !f; b++)
            if (r->pending[b]) f = take_locked(r, r->pending[b]->id);
        pthread_mutex_unlock(&r->fmu);
        if (!f) return;
        char err[SPMD__ERRLEN];
        snprintf(err, sizeof err, "call to worker %s (rank %d) failed: %s", r->names[f->dst], f->dst, msg);
        spmd__rpc_future_complete(f, st, NULL, err);
        spmd_rpc_future_free(f);
    }
}

void spmd__rpc_future_expire(spmd_rpc *r, spmd_rpc_future *f) {
    char err[SPMD__ERRLEN];
    snprintf(err, sizeof err, "call to worker %s (rank %d) timed out", r->names[f->dst], f->dst);
    spmd_rpc_future *t = f->id ? spmd__rpc_pending_take(r, f->id) : NULL;
    spmd__rpc_future_complete(f, SPMD_ERR_TIMEOUT, NULL, err);
    if (t) spmd_rpc_future_free(t);
}

/* Fail calls whose deadline passed, every 20 ms. */
void *spmd__rpc_watchdog(void *arg) {
    spmd_rpc *r = arg;
    pthread_mutex_lock(&r->fmu);
    while (!r->wstop) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 20 * 1000000L;
        if (ts.tv_nsec >= 1000000000L) { ts.tv_sec++; ts.tv_nsec -= 1000000000L; }
        pthread_cond_timedwait(&r->wcv, &r->fmu, &ts);
        if (r->wstop) break;
        int64_t now = spmd__now_ms();
        for (int b = 0; b < RPC_BUCKETS; b++) {
            for (spmd_rpc_future *f = r->pending[b]; f;) {
                spmd_rpc_future *n = f->hnext;
                if (f->deadline && now >= f->deadline) {
                    f->refs++;
                    pthread_mutex_unlock(&r->fmu);
                    spmd__rpc_future_expire(r, f);
                    spmd_rpc_future_free(f);
                    pthread_mutex_lock(&r->fmu);
                    n = r->pending[b];   /* the chain may have changed */
                }
                f = n;
            }
        }
    }
    pthread_mutex_unlock(&r->fmu);
    return NULL;
}

spmd_status spmd_rpc_future_test(spmd_rpc_future *f) {
    if (!f) return SPMD_ERR_INVALID;
    pthread_mutex_lock(&f->r->fmu);
    spmd_status st = f->done ? f->st : SPMD_ERR_AGAIN;
    pthread_mutex_unlock(&f->r->fmu);
    return st;
}

spmd_status spmd_rpc_future_take(spmd_rpc_future *f, spmd_rpc_msg **out) {
    if (!f || !out) return SPMD_ERR_INVALID;
    pthread_mutex_lock(&f->r->fmu);
    spmd_status st;
    if (!f->done) st = SPMD_ERR_AGAIN;
    else if (f->st != SPMD_OK) st = f->st;
    else if (f->taken) {
        snprintf(f->err, sizeof f->err, "the result of this future was already taken");
        st = SPMD_ERR_INVALID;
    } else {
        f->taken = 1;
        *out = f->result ? f->result : spmd_rpc_msg_new();
        f->result = NULL;
        st = *out ? SPMD_OK : SPMD_ERR_NOMEM;
    }
    pthread_mutex_unlock(&f->r->fmu);
    return st;
}

const char *spmd_rpc_future_errmsg(const spmd_rpc_future *f) { return f ? f->err : "no future"; }

spmd_status spmd_rpc_future_then(spmd_rpc_future *f, spmd_rpc_future_cb fn, void *ctx) {
    if (!f || !fn) return SPMD_ERR_INVALID;
    pthread_mutex_lock(&f->r->fmu);
    if (!f->settled) {
        struct rpc_cb *cb = malloc(sizeof *cb);
        if (!cb) {
            pthread_mutex_unlock(&f->r->fmu);
            return SPMD_ERR_NOMEM;
        }
        cb->fn = fn;
        cb->ctx = ctx;
        cb->next = NULL;
        struct rpc_cb **pp = &f->cbs;
        while (*pp) pp = &(*pp)->next;
        *pp = cb;
        pthread_mutex_unlock(&f->r->fmu);
        return SPMD_OK;
    }
    pthread_mutex_unlock(&f->r->fmu);
    fn(f, ctx);
    return SPMD_OK;
}
