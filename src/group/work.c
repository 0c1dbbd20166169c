/* work.c — work handles: one per async operation, completed exactly once by
 * whoever finishes the operation (the transport's p2p engine, the executor,
 * or an error path), waited on by the user.  Waiters spin briefly before
 * sleeping: most small operations finish within microseconds.
 *
 * Completion takes no lock unless the owner sleeps (one atomic state word):
 *   DONE      the status and message are final (release: read them after it)
 *   SLEEPING  the owner may be in pthread_cond_wait: the completer takes the
 *             mutex and broadcasts
 *   FREE      the completer will not touch the handle again: the owner waits
 *             for it before reusing or freeing the handle
 */
#include <errno.h>
#include <sched.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "group_internal.h"
#include "transport/path.h"

void spmd__coll_args_free(spmd__coll_args *a) {
    free(a->recvbufs);
    free(a->sendcounts);
    free(a->sdispls);
    free(a->recvcounts);
    free(a->rdispls);
    a->recvbufs = NULL;
    a->sendcounts = a->sdispls = a->recvcounts = a->rdispls = NULL;
}

enum { W_DONE = 1, W_SLEEPING = 2, W_FREE = 4 };

static int is_done(spmd_work *w) { return atomic_load_explicit(&w->state, memory_order_acquire) & W_DONE; }
int spmd__work_done(spmd_work *w) { return is_done(w); }

/* The engine completes the request embedded first in the work. */
static void req_complete(spmd__preq *r, spmd_status st, const char *msg) {
    spmd_work *w = (spmd_work *)(void *)((char *)r - offsetof(spmd_work, req));
    spmd__rec_p2p_end(w->g->rec, w->rec_ticket, st);
    spmd__work_complete(w, st, msg);
}

void spmd__work_init(spmd_work *w, spmd_group *g, spmd__work_kind kind) {
    /* Only what is read before it is written: mu and cv are made by a
     * sleeper (make_cv), the message is written before it is read, and only
     * a collective has args.  A blocking p2p call pays for these stores. */
    memset(w, 0, offsetof(spmd_work, mu));
    w->errmsg[0] = '\0';
    w->next = NULL;
    w->rec_ticket = 0;
    w->spun_ns = 0;
    if (kind == SPMD__W_COLL) memset(&w->args, 0, sizeof w->args);
    w->kind = kind;
    w->g = g;
    w->req.send = kind == SPMD__W_SEND;
    w->req.source = -1;
    w->req.tag = -1;
    w->req.complete = req_complete;
}

/* The mutex and condition variable exist only once a waiter is about to
 * sleep: most operations finish while their owner spins, and destroying a
 * condition variable is a locked instruction, which on the receive path
 * waits for the ring's stores.  The completer touches them only after it
 * sees W_SLEEPING, which is set after they are made. */
enum { CV_NONE, CV_MAKING, CV_READY };
static void make_cv(spmd_work *w) {
    int none = CV_NONE;
    if (atomic_compare_exchange_strong(&w->cv_state, &none, CV_MAKING)) {
        pthread_mutex_init(&w->mu, NULL);
        pthread_condattr_t ca;
        pthread_condattr_init(&ca);
        pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
        pthread_cond_init(&w->cv, &ca);
        pthread_condattr_destroy(&ca);
        atomic_store_explicit(&w->cv_state, CV_READY, memory_order_release);
        return;
    }
    while (atomic_load_explicit(&w->cv_state, memory_order_acquire) != CV_READY) sched_yield();
}

spmd_work *spmd__work_new(spmd_group *g, spmd__work_kind kind) {
    spmd_work *w = malloc(sizeof *w);
    if (w) spmd__work_init(w, g, kind);
    return w;
}

void spmd__work_complete(spmd_work *w, spmd_status st, const char *msg) {
    w->status = st;
    if (st && msg) snprintf(w->errmsg, sizeof w->errmsg, "%s", msg);
    int s = atomic_load_explicit(&w->state, memory_order_relaxed);
    if (w->blocking && pthread_equal(w->owner, pthread_self())) {
        /* the owner completes its own call, so it does not sleep: no locked
         * instruction (it would wait for the ring's stores to drain) */
        atomic_store_explicit(&w->state, s | W_DONE | W_FREE, memory_order_release);
        return;
    }
    /* no sleeper: DONE and FREE at once, and the handle is the owner's again */
    while (!atomic_compare_exchange_weak_explicit(&w->state, &s, s | W_DONE | (s & W_SLEEPING ? 0 : W_FREE),
                                                  memory_order_acq_rel, memory_order_relaxed)) {
    }
    if (!(s & W_SLEEPING)) return;
    pthread_mutex_lock(&w->mu);
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
    atomic_fetch_or_explicit(&w->state, W_FREE, memory_order_release);
}

spmd_status spmd_work_test(spmd_work *w) {
    if (!w) return SPMD_ERR_INVALID;
    if (!is_done(w)) {
        if (w->kind != SPMD__W_COLL) spmd__p2p_poll(&w->g->t, w->req.poll_peer);
        else if (w->g->t.caller_thread_only) w->help(w); /* nobody else runs it */
        else if (w->kick) w->kick(w);
        if (!is_done(w)) return SPMD_ERR_AGAIN;
    }
    return w->status; /* final once DONE is seen (acquire) */
}

static int work_done(void *w) { return is_done(w); }

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

/* How long a waiter for a message of len bytes busy-polls before it sleeps.
 * A large message over shared memory takes a copy's time (the peer's, or
 * ours): wait that long too, at 4 GB/s.  Falling asleep just before the end
 * costs a doorbell and a wake-up (~100 µs on a guest): 4 MiB ping-pong went
 * 530 -> 430 µs. */
static uint64_t spin_budget_ns(const spmd__mesh *m, size_t len) {
    if (!m->shm) return m->spin_ns < 50000 ? m->spin_ns : 50000;
    return m->spin_ns + (m->oversubscribed ? 0 : (uint64_t)(len < (64u << 20) ? len : 64u << 20) / 4);
}

/* Busy-wait for a p2p work, driving the engine ourselves: over shared memory
 * a small message is a few hundred nanoseconds, far below a sleep/wake pair,
 * so spin longer there, and touch the engine only when its ring has bytes
 * (no lock, no system call while nothing comes).  When ranks outnumber cores,
 * spinning takes the core the sender needs: yield while spinning and give up
 * soon.  Over TCP every look is a system call; yield between them so the
 * progress thread or the peer rank may run. */
static void spin_p2p(spmd_work *w) {
    spmd__mesh *m = &w->g->t;
    const int peer = w->req.poll_peer;
    uint64_t spin_ns = spin_budget_ns(m, w->req.len);
    /* A sender whose message its receiver reads with two threads: the
     * receiver's helper may want this core (transport/cma_parallel.c). */
    const int lends_core =
        w->req.send && m->p2p_parallel_min && w->req.len >= m->p2p_parallel_min && m->shm && spmd__idle_core();
    const int yield = m->oversubscribed || !m->shm || lends_core;
    spin_ns = spin_ns > w->spun_ns ? spin_ns - w->spun_ns : 0;
    uint64_t spin_until = 0; /* from the first look at the clock: most waits end before it */
    if (!w->req.spin_begun) spmd__p2p_spin_begin(m, peer);
    w->req.spin_begun = 0;
    int ended = 0; /* the poll that completed w ended the spin too */
    for (unsigned i = 0; !is_done(w); i++) {
        if (!spmd__p2p_ready(m, peer)) cpu_relax();
        else if ((ended = spmd__p2p_poll_spin(m, peer, work_done, w))) break;
        if ((i & 63) == 63) {
            const uint64_t now = spmd__now_ns();
            if (!spin_until) spin_until = now + spin_ns, spmd__wait_slice_thread();
            else if (now >= spin_until) break;
            if (yield || spmd__shm_shares_cpu(m->shm, peer)) sched_yield();
        }
    }
    if (!ended) spmd__p2p_spin_end(m, peer);
}

int spmd__work_quick_recv(spmd_group *g, spmd__quick_recv *q, uint64_t *spun_ns) {
    spmd__mesh *m = &g->t;
    int r = spmd__p2p_quick_recv(m, q, 0);
    if (r != SPMD__QUICK_NOT_YET) return r;
    /* spin_p2p's policy for a receive over shared memory.  The spin is
     * announced to the engine only once the first round of looks found
     * nothing: a ping-pong's reply comes sooner, and the announcement and its
     * end cost more than the message. */
    const uint64_t spin_ns = spin_budget_ns(m, q->len);
    uint64_t start = 0;
    for (unsigned i = 0;; i++) {
        if (!spmd__p2p_ready(m, q->peer)) cpu_relax();
        else if ((r = spmd__p2p_quick_recv(m, q, start != 0)) != SPMD__QUICK_NOT_YET) break;
        if ((i & 63) == 63) {
            const uint64_t now = spmd__now_ns();
            /* A look under the lock too (and the spin announced, the first
             * time): another thread of ours, the progress thread among them,
             * may have read the message and kept it unexpected, which the
             * ring no longer shows.  Without this look the message waited
             * for the end of the spin. */
            if ((r = spmd__p2p_quick_recv(m, q, 1)) != SPMD__QUICK_NOT_YET) break;
            if (!start) start = now, spmd__wait_slice_thread();
            else if (now - start >= spin_ns || atomic_load_explicit(&m->failed, memory_order_relaxed)) break;
            if (m->oversubscribed || spmd__shm_shares_cpu(m->shm, q->peer)) sched_yield();
        }
    }
    *spun_ns = start ? spmd__now_ns() - start : 0;
    spmd__p2p_quick_recv_end(m, q); /* a spin left begun (NOT_YET when the loop gave up) */
    return r == SPMD__QUICK_DONE ? r : SPMD__QUICK_GENERAL;
}

/* Sleep until w is done or the deadline passes (SPMD_ERR_TIMEOUT). */
static spmd_status sleep_until_done(spmd_work *w, int64_t deadline, int timeout_ms) {
    make_cv(w);
    pthread_mutex_lock(&w->mu);
    atomic_fetch_or_explicit(&w->state, W_SLEEPING, memory_order_acq_rel);
    while (!is_done(w)) {
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
    pthread_mutex_unlock(&w->mu);
    return SPMD_OK;
}

spmd_status spmd_work_wait(spmd_work *w, int timeout_ms) {
    if (!w) return SPMD_ERR_INVALID;
    if (timeout_ms < 0) timeout_ms = w->g ? w->g->timeout_ms : SPMD_DEFAULT_TIMEOUT_MS;
    if (w->kind == SPMD__W_COLL) {
        if (!is_done(w)) w->help(w);
        uint64_t spin_until = spmd__now_ns() + 20000;
        while (!is_done(w) && spmd__now_ns() < spin_until) sched_yield();
    } else if (!is_done(w) || w->req.spin_begun) {
        spmd__mesh *m = &w->g->t;
        if (!m->ext) {
            spin_p2p(w); /* ends a spin its post began, even when already done */
        } else if (m->ext->wait(m, &w->req, &w->state, W_DONE, spmd__deadline(timeout_ms)) == SPMD_ERR_TIMEOUT) {
            /* no progress thread (MPI): the waiter drives the transport, and
             * nobody completes w while it sleeps */
            snprintf(w->errmsg, sizeof w->errmsg, "work not finished after %d ms", timeout_ms);
            return SPMD_ERR_TIMEOUT;
        }
    }
    if (!is_done(w)) {
        spmd_status st = sleep_until_done(w, spmd__deadline(timeout_ms), timeout_ms);
        if (st) return st;
    }
    return w->status;
}

const char *spmd_work_errmsg(const spmd_work *w) { return w ? w->errmsg : "no work handle"; }
int spmd_work_source(const spmd_work *w) { return w ? w->req.source : -1; }
int spmd_work_tag(const spmd_work *w) { return w ? w->req.tag : -1; }

void spmd__work_release(spmd_work *w) {
    /* Never release while the operation may still write into the user's
     * buffer or touch the handle.  A receive nobody will ever match is
     * cancelled; anything else is waited for (sends drain or fail with their
     * peer, collectives have deadlines). */
    if (w->kind != SPMD__W_COLL && !is_done(w)) spmd__p2p_cancel(&w->g->t, &w->req);
    /* a collective nobody waited for: with no executor thread (MPI below
     * MPI_THREAD_MULTIPLE) only this thread can run it */
    if (w->kind == SPMD__W_COLL && !is_done(w)) {
        if (w->g->t.caller_thread_only) w->help(w);
        else if (w->kick) w->kick(w); /* a small one may wait in the queue for a waiter */
    }
    if (!is_done(w)) sleep_until_done(w, INT64_MAX, -1);
    while (!(atomic_load_explicit(&w->state, memory_order_acquire) & W_FREE)) sched_yield(); /* a broadcast ends */
    if (w->kind == SPMD__W_COLL) spmd__coll_args_free(&w->args);
    if (atomic_load_explicit(&w->cv_state, memory_order_acquire) == CV_READY) {
        pthread_cond_destroy(&w->cv);
        pthread_mutex_destroy(&w->mu);
    }
}

void spmd_work_free(spmd_work *w) {
    if (!w) return;
    spmd__work_release(w);
    free(w);
}
