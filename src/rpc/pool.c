/* pool.c — the handler threads: run incoming calls and send their replies. */
#define _GNU_SOURCE /* pthread_setname_np */
#include <sched.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include "rpc_internal.h"

/* The agent whose receive role this pool thread holds, if any. */
static _Thread_local spmd_rpc *tl_receiving;
/* This pool thread runs a call it received itself and goes back to
 * receiving after it: it holds its place as poller from its answer on. */
static _Thread_local spmd_rpc *tl_hold_on_reply;

spmd_rpc_call *spmd__rpc_call_new(spmd_rpc *r, int caller, int kind, uint64_t id, const char *name) {
    spmd_rpc_call *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->r = r;
    c->caller = caller;
    c->kind = kind;
    c->id = id;
    atomic_init(&c->refs, 1);
    if (name) spmd__rpc_name_copy(c->name, name);
    return c;
}

static void call_unref(spmd_rpc_call *c) {
    if (atomic_fetch_sub(&c->refs, 1) != 1) return;
    if (c->entry) spmd__rpc_entry_put(c->r, c->entry);
    spmd_rpc_msg_free(c->args);
    spmd_rpc_msg_free(c->result);
    free(c);
}

/* Answer the call (to the remote caller, or straight into the local
 * future) and free it. */
void spmd__rpc_reply(spmd_rpc_call *c, spmd_status st) {
    spmd_rpc *r = c->r;
    /* RRefs the handler left in its arguments are released before the
     * answer (the tensors stay: a result may refer to them until it is
     * sent), so a caller that then calls their owner finds them gone. */
    spmd__rpc_msg_release_rrefs(c->args);
    if (st != SPMD_OK && !c->err[0]) snprintf(c->err, sizeof c->err, "%s", spmd_status_str(st));
    char err[SPMD__ERRLEN];
    if (st != SPMD_OK) {
        snprintf(err, sizeof err, "worker %s (rank %d): %s", r->names[r->rank], r->rank, c->err);
        if (c->kind != RPC_K_REMOTE) SPMD_LOGI("rpc: call '%s' from rank %d failed: %s", c->name, c->caller, c->err);
    }
    spmd_rpc_msg *result = st == SPMD_OK ? c->result : NULL;
    if (c->kind == RPC_K_REMOTE) {
        /* The result stays here as the RRef's value; the creator gets an ack. */
        if (c->entry) spmd__rpc_entry_set(r, c->entry, st, c->result, err);
        c->result = NULL;
        result = NULL;
    } else if (st == SPMD_OK) {
        c->result = NULL;
    }
    if (c->local) {
        spmd__rpc_future_complete(c->local, st, result, st == SPMD_OK ? NULL : err);
        spmd_rpc_future_free(c->local);
    } else {
        if (tl_hold_on_reply == r) spmd__rpc_hold(r); /* the caller's next request comes right after this */
        rpc_frame f;
        spmd__rpc_frame_init(&f, RPC_K_RESP, c->id, NULL);
        f.h.status = st;
        spmd_rpc_msg *em = NULL;
        if (st != SPMD_OK) {
            em = spmd_rpc_msg_new();
            if (em) spmd_rpc_msg_set_payload(em, err, strlen(err) + 1);
        }
        char serr[SPMD__ERRLEN];
        spmd_status s2 = spmd__rpc_send(r, c->caller, &f, st == SPMD_OK ? result : em, spmd__rpc_batching(r), serr,
                                        sizeof serr);
        if (s2 != SPMD_OK) SPMD_LOGW("rpc: reply to rank %d: %s", c->caller, serr);
        else spmd__rpc_msg_handover(result);
        spmd_rpc_msg_free(em);
        spmd_rpc_msg_free(result);
    }
    atomic_fetch_sub(&r->active, 1);
    call_unref(c);
}

void spmd__rpc_enqueue(spmd_rpc *r, spmd_rpc_call *c) {
    pthread_mutex_lock(&r->qmu);
    c->next = NULL;
    if (r->qtail) r->qtail->next = c;
    else r->qhead = c;
    r->qtail = c;
    atomic_fetch_add(&r->q_len, 1);
    /* A pool thread that received the call runs it itself (leaving the
     * role), unless the next frame is already here: then it stays the
     * receiver and another thread runs the call. */
    if (tl_receiving == r && r->qhead == c && !atomic_load(&r->rx_done)) {
        atomic_store(&r->q_mine, 1);
    } else if (atomic_load(&r->q_len) > atomic_load(&r->q_spinning) && r->q_idle > r->q_woken) {
        /* a spinner takes one call: wake a sleeper for each call beyond
         * the spinners (else a second call of a burst would wait for a
         * running handler, which may be waiting for it).  One wake-up per
         * sleeper: a burst must not wake the same thread again and again
         * before it has even run */
        r->q_woken++;
        pthread_cond_signal(&r->qcv);
    }
    pthread_mutex_unlock(&r->qmu);
}

/* Requests that need no handler thread: user registration and release, and
 * a copy of a value already created.  Served on the receiving thread, so
 * handlers that read RRefs (nested calls) can never starve the pool. */
int spmd__rpc_serve_inline(spmd_rpc_call *c) {
    spmd_rpc *r = c->r;
    if (c->kind == RPC_K_FORK || c->kind == RPC_K_DELETE) {
        spmd_status st = c->kind == RPC_K_FORK ? spmd__rpc_fork_add(r, c->rref_id, c->fork_id, c->err, sizeof c->err)
                                               : spmd__rpc_fork_del(r, c->rref_id, c->fork_id, c->err, sizeof c->err);
        spmd__rpc_reply(c, st);
        return 1;
    }
    if (c->kind != RPC_K_TO_HERE) return 0;
    rpc_entry *e = spmd__rpc_entry_get(r, c->rref_id);
    if (!e) return 0;   /* the pool reports it */
    c->entry = e;
    pthread_mutex_lock(&r->mu);
    int ready = e->state != 0;
    pthread_mutex_unlock(&r->mu);
    if (!ready) return 0;
    spmd_status st = spmd__rpc_entry_wait(r, e, c->err, sizeof c->err);
    if (st == SPMD_OK) {
        pthread_mutex_lock(&e->vmu);
        st = spmd_rpc_msg_copy(r, e->value, &c->result);
        pthread_mutex_unlock(&e->vmu);
    }
    spmd__rpc_reply(c, st);
    return 1;
}

static spmd_status run_handler(spmd_rpc_call *c) {
    spmd_rpc *r = c->r;
    rpc_handler h;
    if (!spmd__rpc_handler_find(r, c->name, &h))
        return spmd_rpc_call_fail(c, "no handler named '%s' is registered", c->name);
    if (h.has_sig && !spmd__rpc_check_sig(&h, c->args, c->err, sizeof c->err)) {
        c->failed = 1;
        return SPMD_ERR_INVALID;
    }
    c->result = spmd_rpc_msg_new();
    if (!c->result) return SPMD_ERR_NOMEM;
    spmd_status st;
    if (c->entry) {
        pthread_mutex_lock(&c->entry->vmu);
        st = h.fn(c, h.ctx);
        pthread_mutex_unlock(&c->entry->vmu);
    } else {
        st = h.fn(c, h.ctx);
    }
    free(h.shapes);
    if (st != SPMD_OK && !c->err[0]) snprintf(c->err, sizeof c->err, "handler '%s' returned %s", c->name, spmd_status_name(st));
    return st;
}

void spmd__rpc_execute(spmd_rpc_call *c) {
    spmd_rpc *r = c->r;
    spmd_status st = SPMD_OK;
    switch (c->kind) {
    case RPC_K_CALL:
    case RPC_K_REMOTE:
        st = run_handler(c);
        break;
    case RPC_K_RREF_CALL:
    case RPC_K_TO_HERE:
        if (!c->entry) c->entry = spmd__rpc_entry_get(r, c->rref_id);
        if (!c->entry) {
            st = spmd_rpc_call_fail(c, "no RRef %llx is owned here (released or never created)",
                                    (unsigned long long)c->rref_id);
            break;
        }
        st = spmd__rpc_entry_wait(r, c->entry, c->err, sizeof c->err);
        if (st != SPMD_OK) break;
        if (c->kind == RPC_K_RREF_CALL) {
            st = run_handler(c);
        } else {
            pthread_mutex_lock(&c->entry->vmu);
            st = spmd_rpc_msg_copy(r, c->entry->value, &c->result);
            pthread_mutex_unlock(&c->entry->vmu);
        }
        break;
    default:
        st = spmd_rpc_call_fail(c, "unexpected request kind %d", c->kind);
    }
    if (c->deferred && st == SPMD_OK) {
        call_unref(c);   /* spmd_rpc_call_finish answers (maybe already has) */
        return;
    }
    if (c->deferred) c->deferred = 2;   /* failed anyway: a later finish is ignored */
    spmd__rpc_reply(c, st);
}

static int call_for_me(void *arg) {
    spmd_rpc *r = arg;
    return atomic_load_explicit(&r->q_mine, memory_order_relaxed) ||
           atomic_load_explicit(&r->q_stopping, memory_order_relaxed);
}

/* Leader/followers: an idle pool thread receives frames itself (rx.c), so
 * a call it receives runs on it with no hand-off; a burst of calls is
 * handed to the others. */
static void *pool_main(void *arg) {
    spmd_rpc *r = arg;
    int own = 0;   /* the call at the head of the queue is one this thread received */
    spmd__wait_slice_thread();
    pthread_mutex_lock(&r->qmu);
    for (;;) {
        if (r->qhead) {
            spmd_rpc_call *c = r->qhead;
            r->qhead = c->next;
            if (!r->qhead) r->qtail = NULL;
            atomic_fetch_sub(&r->q_len, 1);
            pthread_mutex_unlock(&r->qmu);
            spmd__rpc_unhold();   /* a handler may run long: nobody polls for us meanwhile */
            spmd__rpc_batch_begin(r);   /* answers wait while more calls are queued */
            tl_hold_on_reply = own && !atomic_load(&r->q_len) ? r : NULL;
            own = 0;
            spmd__rpc_execute(c);
            tl_hold_on_reply = NULL;
            spmd__rpc_batch_end(r);
            if (!atomic_load(&r->q_len)) spmd__rpc_flush(r);
            pthread_mutex_lock(&r->qmu);
            continue;
        }
        pthread_mutex_unlock(&r->qmu);
        spmd__rpc_flush(r);
        pthread_mutex_lock(&r->qmu);
        if (r->qhead) continue;
        if (r->qstop) break;
        pthread_mutex_unlock(&r->qmu);
        tl_receiving = r;
        int received = spmd__rpc_pool_receive(r, call_for_me, r);
        spmd__rpc_unhold();   /* when it could not take the role */
        tl_receiving = NULL;
        atomic_store(&r->q_mine, 0);
        pthread_mutex_lock(&r->qmu);
        own = received == 1;
        if (received == 1 || r->qhead || r->qstop) continue;
        if (!received) {
            /* Another thread receives (a burst): the next call is likely
             * microseconds away; look for it a while rather than be woken
             * by a system call on the receiver's time. */
            atomic_fetch_add(&r->q_spinning, 1);
            pthread_mutex_unlock(&r->qmu);
            uint64_t end = spmd__now_ns() + 30000;
            for (unsigned i = 1; !atomic_load(&r->q_len) && !atomic_load(&r->q_stopping); i++) {
                spmd__rpc_relax();
                if ((i & 7) == 0) sched_yield();
                if ((i & 63) == 0 && spmd__now_ns() >= end) break;
            }
            pthread_mutex_lock(&r->qmu);
            atomic_fetch_sub(&r->q_spinning, 1);
            if (r->qhead || r->qstop) continue;
        }
        /* nothing came for a spin budget: asleep until a call is queued */
        r->q_idle++;
        pthread_cond_wait(&r->qcv, &r->qmu);
        r->q_idle--;
        if (r->q_woken) r->q_woken--;
    }
    pthread_mutex_unlock(&r->qmu);
    spmd__rpc_unhold();
    return NULL;
}

spmd_status spmd__rpc_pool_start(spmd_rpc *r, int n) {
    r->pool = calloc((size_t)n, sizeof(pthread_t));
    if (!r->pool) return SPMD_ERR_NOMEM;
    for (int i = 0; i < n; i++) {
        if (pthread_create(&r->pool[i], NULL, pool_main, r) != 0) {
            spmd__rpc_pool_stop(r);
            return SPMD_ERR_SYSTEM;
        }
        pthread_setname_np(r->pool[i], "rpc-pool"); /* top -H, perf, gdb */
        r->nthreads = i + 1;
    }
    return SPMD_OK;
}

/* Stops after the queue is drained; calls still queued are answered. */
void spmd__rpc_pool_stop(spmd_rpc *r) {
    pthread_mutex_lock(&r->qmu);
    r->qstop = 1;
    atomic_store(&r->q_stopping, 1);
    pthread_cond_broadcast(&r->qcv);
    pthread_mutex_unlock(&r->qmu);
    for (int i = 0; i < r->nthreads; i++) pthread_join(r->pool[i], NULL);
    free(r->pool);
    r->pool = NULL;
    r->nthreads = 0;
}

/* ---- the handler's side of a call --------------------------------------- */
const spmd_rpc_msg *spmd_rpc_call_args(const spmd_rpc_call *c) { return c ? c->args : NULL; }
spmd_rpc_msg *spmd_rpc_call_args_mut(spmd_rpc_call *c) { return c ? c->args : NULL; }
spmd_rpc_msg *spmd_rpc_call_result(spmd_rpc_call *c) { return c ? c->result : NULL; }
int spmd_rpc_call_caller(const spmd_rpc_call *c) { return c ? c->caller : -1; }
spmd_rpc *spmd_rpc_call_agent(const spmd_rpc_call *c) { return c ? c->r : NULL; }
spmd_rpc_msg *spmd_rpc_call_rref_value(spmd_rpc_call *c) {
    return c && c->kind == RPC_K_RREF_CALL && c->entry ? c->entry->value : NULL;
}

spmd_status spmd_rpc_call_fail(spmd_rpc_call *c, const char *fmt, ...) {
    if (!c) return SPMD_ERR_INVALID;
    va_list ap;
    va_start(ap, fmt);
    spmd__vfail(c->err, sizeof c->err, SPMD_ERR_REMOTE, fmt, ap);
    va_end(ap);
    c->failed = 1;
    return SPMD_ERR_REMOTE;
}

void spmd_rpc_call_defer(spmd_rpc_call *c) {
    if (!c || c->deferred) return;
    c->deferred = 1;
    atomic_fetch_add(&c->refs, 1);   /* the finish's reference */
}

void spmd_rpc_call_finish(spmd_rpc_call *c, spmd_status st) {
    if (!c) return;
    if (c->deferred != 1) {
        SPMD_LOGW("rpc: spmd_rpc_call_finish on a call that was not deferred (or whose handler failed): ignored");
        if (c->deferred == 2) call_unref(c);
        return;
    }
    if (st == SPMD_OK && c->failed) st = SPMD_ERR_REMOTE;
    spmd__rpc_reply(c, st);
}
