/* work.c — work handles: one per async operation, completed exactly once by
 * whoever finishes the operation (the transport's p2p engine, the executor,
 * or an error path), waited on by the user.  Waiters spin briefly before
 * sleeping: most small operations finish within microseconds. */
#include <errno.h>
#include <sched.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "group_internal.h"

/* The engine completes the request embedded first in the work. */
static void req_complete(spmd__preq *r, spmd_status st, const char *msg) {
    spmd__work_complete((spmd_work *)(void *)((char *)r - offsetof(spmd_work, req)), st, msg);
}

spmd_work *spmd__work_new(spmd_group *g, spmd__work_kind kind) {
    spmd_work *w = calloc(1, sizeof *w);
    if (!w) return NULL;
    w->kind = kind;
    w->g = g;
    w->req.send = kind == SPMD__W_SEND;
    w->req.source = -1;
    w->req.tag = -1;
    w->req.complete = req_complete;
    pthread_mutex_init(&w->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&w->cv, &ca);
    pthread_condattr_destroy(&ca);
    return w;
}

void spmd__work_complete(spmd_work *w, spmd_status st, const char *msg) {
    pthread_mutex_lock(&w->mu);
    w->status = st;
    if (st && msg) snprintf(w->errmsg, sizeof w->errmsg, "%s", msg);
    atomic_store_explicit(&w->done, 1, memory_order_release);
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

spmd_status spmd_work_test(spmd_work *w) {
    if (!w) return SPMD_ERR_INVALID;
    if (!atomic_load_explicit(&w->done, memory_order_acquire)) {
        if (w->kind != SPMD__W_COLL) spmd__p2p_poll(&w->g->t, w->req.poll_peer);
        else if (w->g->t.caller_thread_only) spmd__exec_help(w); /* nobody else runs it */
        if (!atomic_load_explicit(&w->done, memory_order_acquire)) return SPMD_ERR_AGAIN;
    }
    pthread_mutex_lock(&w->mu); /* pairs with the completer's unlock */
    spmd_status st = w->status;
    pthread_mutex_unlock(&w->mu);
    return st;
}

/* Busy-wait for a p2p work, driving the engine ourselves: over shared memory
 * a small message is a few hundred nanoseconds, far below a sleep/wake pair,
 * so spin longer there; when ranks outnumber cores, spinning takes the core
 * the sender needs, so give up soon and sleep (yielding meanwhile). */
static void spin_p2p(spmd_work *w) {
    spmd__mesh *m = &w->g->t;
    uint64_t spin_ns = m->oversubscribed ? 10000 : m->shm ? 200000 : 50000;
    uint64_t spin_until = spmd__now_ns() + spin_ns;
    spmd__p2p_spin_begin(m);
    for (unsigned i = 0; !atomic_load_explicit(&w->done, memory_order_acquire); i++) {
        spmd__p2p_poll(m, w->req.poll_peer);
        if ((i & 63) == 63) {
            if (spmd__now_ns() >= spin_until) break;
            sched_yield(); /* let the progress thread or the peer rank run */
        }
    }
    spmd__p2p_spin_end(m);
}

spmd_status spmd_work_wait(spmd_work *w, int timeout_ms) {
    if (!w) return SPMD_ERR_INVALID;
    if (timeout_ms < 0) timeout_ms = w->g ? w->g->timeout_ms : SPMD_DEFAULT_TIMEOUT_MS;
    if (w->kind == SPMD__W_COLL) {
        if (!atomic_load_explicit(&w->done, memory_order_acquire)) spmd__exec_help(w);
        uint64_t spin_until = spmd__now_ns() + 20000;
        while (!atomic_load_explicit(&w->done, memory_order_acquire) && spmd__now_ns() < spin_until)
            sched_yield();
    } else if (!atomic_load_explicit(&w->done, memory_order_acquire)) {
        spmd__mesh *m = &w->g->t;
        if (!m->ext) {
            spin_p2p(w);
        } else if (m->ext->wait(m, &w->req, &w->done, spmd__deadline(timeout_ms)) == SPMD_ERR_TIMEOUT) {
            /* no progress thread (MPI): the waiter drives the transport */
            pthread_mutex_lock(&w->mu);
            snprintf(w->errmsg, sizeof w->errmsg, "work not finished after %d ms", timeout_ms);
            pthread_mutex_unlock(&w->mu);
            return SPMD_ERR_TIMEOUT;
        }
    }
    int64_t deadline = spmd__deadline(timeout_ms);
    pthread_mutex_lock(&w->mu);
    while (!atomic_load_explicit(&w->done, memory_order_acquire)) {
        int left = spmd__remaining_ms(deadline);
        if (left == 0) {
            snprintf(w->errmsg, sizeof w->errmsg, "work not finished after %d ms", timeout_ms);
            pthread_mutex_unlock(&w->mu);
            return SPMD_ERR_TIMEOUT;
        }
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        int slice = left < 0 || left > 1000 ? 1000 : left;
        ts.tv_sec += slice / 1000;
        ts.tv_nsec += (long)(slice % 1000) * 1000000L;
        if (ts.tv_nsec >= 1000000000L) { ts.tv_sec++; ts.tv_nsec -= 1000000000L; }
        pthread_cond_timedwait(&w->cv, &w->mu, &ts);
    }
    spmd_status st = w->status;
    pthread_mutex_unlock(&w->mu);
    return st;
}

const char *spmd_work_errmsg(const spmd_work *w) { return w ? w->errmsg : "no work handle"; }
int spmd_work_source(const spmd_work *w) { return w ? w->req.source : -1; }
int spmd_work_tag(const spmd_work *w) { return w ? w->req.tag : -1; }

void spmd_work_free(spmd_work *w) {
    if (!w) return;
    /* Never free while the operation may still write into the user's buffer
     * or touch the handle.  A receive nobody will ever match is cancelled;
     * anything else is waited for (sends drain or fail with their peer,
     * collectives have deadlines). */
    if (w->kind != SPMD__W_COLL && !atomic_load(&w->done)) spmd__p2p_cancel(&w->g->t, &w->req);
    pthread_mutex_lock(&w->mu);
    while (!atomic_load_explicit(&w->done, memory_order_acquire)) pthread_cond_wait(&w->cv, &w->mu);
    pthread_mutex_unlock(&w->mu);
    if (w->kind == SPMD__W_COLL) spmd__coll_args_free(&w->args);
    pthread_cond_destroy(&w->cv);
    pthread_mutex_destroy(&w->mu);
    free(w);
}
