/* request.c — sending a request (or serving a call to oneself through the
 * pool) and waiting for its future: a waiter receives frames itself for a
 * while (rx.c), then sleeps until the dispatcher or the watchdog settles it. */
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "rpc_internal.h"

spmd_status spmd__rpc_request(spmd_rpc *r, int dst, int kind, const char *fn, uint64_t rref_id,
                              uint64_t fork_id, const spmd_rpc_msg *args, int timeout_ms,
                              spmd_rpc_future **out) {
    *out = NULL;
    if (dst < 0 || dst >= r->world)
        return spmd__rpc_error(r, SPMD_ERR_INVALID, "rpc: rank %d out of range (world %d)", dst, r->world);
    if (atomic_load(&r->broken))
        return spmd__rpc_error(r, SPMD_ERR_ABORTED, "rpc: %s", r->broken_msg);
    spmd_rpc_future *f = spmd__rpc_future_new(r, dst, timeout_ms);
    if (!f) return spmd__rpc_error(r, SPMD_ERR_NOMEM, "out of memory");
    if (dst == r->rank) {
        /* A call to oneself skips the wire: the arguments are copied so the
         * handler sees the same thing a remote worker would. */
        spmd_rpc_msg *copy = NULL;
        spmd_status st = args ? spmd__rpc_msg_copy(r, args, 1, &copy) : SPMD_OK;
        if (st != SPMD_OK) {
            spmd_rpc_future_free(f);
            return spmd__rpc_error(r, st, "rpc: copying the arguments failed");
        }
        spmd_rpc_call *c = spmd__rpc_call_new(r, r->rank, kind, 0, fn);
        if (!c) {
            spmd_rpc_msg_free(copy);
            spmd_rpc_future_free(f);
            return spmd__rpc_error(r, SPMD_ERR_NOMEM, "out of memory");
        }
        c->args = copy ? copy : spmd_rpc_msg_new();
        c->rref_id = rref_id;
        c->fork_id = fork_id;
        f->refs++;
        f->local = 1;
        c->local = f;
        pthread_mutex_lock(&r->fmu);
        f->counted = 1;
        pthread_mutex_unlock(&r->fmu);
        atomic_fetch_add(&r->active, 2);   /* the call out and the call being served */
        if (kind == RPC_K_REMOTE) c->entry = spmd__rpc_entry_create(r, rref_id, fork_id);
        if (!spmd__rpc_serve_inline(c)) spmd__rpc_enqueue(r, c);
        *out = f;
        return SPMD_OK;
    }
    if (!spmd__rpc_enter(r)) {
        spmd_rpc_future_free(f);
        return spmd__rpc_error(r, SPMD_ERR_ABORTED, "rpc: %s", r->broken_msg);
    }
    spmd__rpc_pending_add(r, f);
    rpc_frame fr;
    spmd__rpc_frame_init(&fr, kind, f->id, fn);
    fr.h.rref_id = rref_id;
    fr.h.fork_id = fork_id;
    char err[SPMD__ERRLEN];
    atomic_fetch_add(&r->sent_req, 1);
    spmd_status st = spmd__rpc_send(r, dst, &fr, args, 0, err, sizeof err);
    spmd__rpc_leave(r);
    if (st == SPMD_OK) spmd__rpc_msg_handover(args);
    if (st != SPMD_OK) {
        atomic_fetch_sub(&r->sent_req, 1);
        spmd_rpc_future *t = spmd__rpc_pending_take(r, f->id);
        if (t) {
            spmd__rpc_future_complete(t, st, NULL, err);
            spmd_rpc_future_free(t);
        }
        spmd__rpc_error(r, st, "%s", err);
    }
    *out = f;   /* a failed send is reported by the future too */
    return st;
}

static int settled(void *f) {
    return atomic_load_explicit(&((spmd_rpc_future *)f)->settled, memory_order_acquire);
}

spmd_status spmd_rpc_future_wait(spmd_rpc_future *f, int timeout_ms) {
    if (!f) return SPMD_ERR_INVALID;
    spmd_rpc *r = f->r;
    int64_t until = timeout_ms < 0 ? f->deadline : spmd__now_ms() + timeout_ms;
    if (!settled(f) && timeout_ms != 0 && spmd__rpc_enter(r)) {
        /* A reply usually comes within microseconds: receive it ourselves
         * for the transport's spin budget (no other thread in between),
         * then sleep and let the dispatcher wake us. */
        uint64_t budget = spmd__rpc_spin_budget(r, 0);
        if (timeout_ms > 0 && budget > (uint64_t)timeout_ms * 1000000u) budget = (uint64_t)timeout_ms * 1000000u;
        if (f->local) {
            uint64_t spin_end = spmd__now_ns() + (budget < 20000 ? budget : 20000);
            while (!settled(f) && spmd__now_ns() < spin_end) sched_yield();
        } else {
            spmd__rpc_drive_while_waiting(r, settled, f, budget);
        }
        spmd__rpc_leave(r);
    }
    spmd__rpc_unhold(); /* spmd_rpc_sync's, if nothing took it over: we may sleep now */
    pthread_mutex_lock(&r->fmu);
    while (!f->settled) {
        if (f->deadline && spmd__now_ms() >= f->deadline && !f->done) {
            /* Past the call's own deadline: fail it here, not only in the watchdog. */
            pthread_mutex_unlock(&r->fmu);
            spmd__rpc_future_expire(r, f);
            pthread_mutex_lock(&r->fmu);
            continue;
        }
        if (until && spmd__now_ms() >= until) break;
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        /* Re-check at least every 50 ms: the watchdog fails expired calls. */
        int64_t left = until ? until - spmd__now_ms() : 50;
        if (left > 50 || left <= 0) left = 50;
        ts.tv_nsec += left * 1000000L;
        while (ts.tv_nsec >= 1000000000L) { ts.tv_sec++; ts.tv_nsec -= 1000000000L; }
        pthread_cond_timedwait(&f->cv, &r->fmu, &ts);
    }
    spmd_status st = f->settled ? f->st : SPMD_ERR_TIMEOUT;
    pthread_mutex_unlock(&r->fmu);
    return st;
}
