/* p2p.c — the agent's point-to-point messages and its way of waiting.
 *
 * An operation is posted straight to the group's transport engine (no work
 * handle, no allocation) and waited for by polling the transport on the
 * waiting thread for a while (a body follows its frame within microseconds;
 * a large one takes its copy time), then asleep until the engine completes
 * it; past the group's timeout it is cancelled.  spmd__rpc_spin is the one
 * polling loop: it also serves the receive role (rx.c) while it spins. */
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "rpc_internal.h"
#include "group/group_internal.h"
#include "transport/path.h"

typedef struct {
    spmd__preq req;   /* first: the engine hands this back */
    atomic_int done;
    spmd_status st;
    int sleeping;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    char msg[SPMD__ERRLEN];
} rpc_op;

static void op_complete(spmd__preq *q, spmd_status st, const char *msg) {
    rpc_op *o = (rpc_op *)(void *)q;
    pthread_mutex_lock(&o->mu);
    o->st = st;
    if (st) snprintf(o->msg, sizeof o->msg, "%s", msg ? msg : spmd_status_str(st));
    atomic_store_explicit(&o->done, 1, memory_order_release);
    if (o->sleeping) pthread_cond_signal(&o->cv);
    pthread_mutex_unlock(&o->mu);
}

/* Polling pays while every busy thread has a core; when the machine is
 * oversubscribed, or our peer last ran on this core, or the path is TCP
 * (every look is a system call), yield between looks and give up sooner. */
uint64_t spmd__rpc_spin_budget(spmd_rpc *r, size_t bytes) {
    const spmd__mesh *m = &r->g->t;
    uint64_t base = m->shm ? m->spin_ns : m->spin_ns < 50000 ? m->spin_ns : 50000;
    /* a large message: about its copy time at 2 GB/s more, up to 4 ms */
    uint64_t extra = base ? (uint64_t)bytes / 2 : 0;
    return base + (extra < 4000000 ? extra : 4000000);
}

static _Thread_local spmd_rpc *tl_held;

void spmd__rpc_hold(spmd_rpc *r) {
    if (tl_held || r->world < 2) return;
    spmd__p2p_spin_begin(&r->g->t, -1);
    tl_held = r;
}

void spmd__rpc_unhold(void) {
    spmd_rpc *r = tl_held;
    if (!r) return;
    tl_held = NULL;
    spmd__p2p_spin_end(&r->g->t, -1);
}

/* Two threads that poll each other from one core, yielding by turns, stay
 * there: neither ever sleeps, so the scheduler never places either anew
 * (a running thread is cache-hot to its balancer), even with the other core
 * idle — each call then costs two switches, 3 µs each, for as long as it
 * lasts (tens of milliseconds).  A thread that keeps finding its peer on its
 * core sleeps a moment: waking up, it goes to an idle core if there is one. */
static _Thread_local unsigned tl_shared;

static int shares_core(spmd__mesh *m, int peer) {
    if (!spmd__shm_shares_cpu(m->shm, peer)) {
        tl_shared = 0;
        return 0;
    }
    /* both threads count: a threshold of their own keeps them from
     * sleeping at once (then both would wake where they were) */
    if (++tl_shared >= 48 + ((uintptr_t)&tl_shared >> 6 & 31)) {
        struct timespec ts = {0, 1000};
        nanosleep(&ts, NULL);
        tl_shared = 0;
    }
    return 1;
}

/* The spins this thread has begun and not ended (rpc_spin nests: a frame
 * handled inside one may run an inline handler whose answer waits in
 * another).  A thread about to sleep suspends them: a ring counted as polled
 * is never armed, so what it waits for would wait for the progress thread's
 * next tick (100 ms) instead of waking it. */
#define SPIN_NEST_MAX 8
static _Thread_local struct { spmd__mesh *m; int peer; } tl_spins[SPIN_NEST_MAX];
static _Thread_local int tl_nspins;

static void spins_suspend(void) {
    spmd__rpc_unhold();
    for (int i = tl_nspins; i-- > 0;) spmd__p2p_spin_end(tl_spins[i].m, tl_spins[i].peer);
}
static void spins_resume(void) {
    for (int i = 0; i < tl_nspins; i++) spmd__p2p_spin_begin(tl_spins[i].m, tl_spins[i].peer);
}

/* The time off the core one spin may make up for (a few of the scheduler's
 * slices on a loaded machine). */
#define SPIN_OFF_CORE_NS 2000000u

int spmd__rpc_spin(spmd_rpc *r, int peer, int (*stop)(void *), void *ctx, uint64_t budget_ns, int rx,
                   int dispatcher) {
    spmd__mesh *m = &r->g->t;
    if (stop(ctx)) return 1;
    if (!budget_ns) return 0;
    const int yield_always = m->oversubscribed || !m->shm;
    int hit = 0, yield = yield_always || shares_core(m, peer);
    /* The budget counts time on the core: a gap between two looks means we
     * were preempted (on a loaded machine a wall-clock budget runs out while
     * we are off the core, and the next message then costs two wake-ups).
     * At most SPIN_OFF_CORE_NS of gaps is forgiven, though: a spinner that
     * yields to a CPU-bound process is off the core in every stretch of
     * looks, and forgiving them all made its budget endless — four ranks
     * waiting 20 ms for a call held by its callee spun against two busy
     * processes for minutes (issue 28).  Past that the cores are taken and
     * sleeping is what lets the others run. */
    uint64_t last = spmd__now_ns(), end = last + budget_ns, last_frame = last, forgiven = 0;
    spmd__p2p_spin_begin(m, peer);
    spmd__rpc_unhold(); /* counted by this spin now */
    const int nested = tl_nspins < SPIN_NEST_MAX; /* deeper: not suspended (never seen) */
    if (nested) {
        tl_spins[tl_nspins].m = m;
        tl_spins[tl_nspins].peer = peer;
        tl_nspins++;
    }
    for (unsigned i = 1;; i++) {
        if (stop(ctx)) {
            hit = 1;
            break;
        }
        if (rx && atomic_load_explicit(&r->rx_done, memory_order_acquire)) {
            if (!spmd__rpc_rx_process(r)) break;
            if (dispatcher) {   /* traffic: keep watching */
                end = (last_frame = spmd__now_ns()) + budget_ns;
                forgiven = 0;
            }
            continue;
        }
        if (dispatcher) {
            if (atomic_load_explicit(&r->rx_stop, memory_order_relaxed)) break;
            /* an idle pool thread gets the dispatcher's role at once */
            if (atomic_load_explicit(&r->rx_pool_want, memory_order_relaxed) &&
                atomic_load_explicit(&r->rx_holder, memory_order_relaxed) == RPC_RX_DISPATCHER)
                break;
            /* a waiter gets it once the traffic pauses: its reply then
             * needs no hand-off (in a stream, leaving would only make the
             * next frame wake us again) */
            if (atomic_load_explicit(&r->rx_want, memory_order_relaxed) && spmd__now_ns() - last_frame > 3000) break;
        }
        if (spmd__p2p_ready(m, peer)) spmd__p2p_poll(m, peer);
        else spmd__rpc_relax();
        /* sharing the core: let the other side run between short looks */
        if (yield && (i & 3) == 0) sched_yield();
        if ((i & 63) == 0) {
            uint64_t now = spmd__now_ns();
            if (now - last > 50000 && forgiven < SPIN_OFF_CORE_NS) {
                uint64_t gap = now - last < SPIN_OFF_CORE_NS - forgiven ? now - last : SPIN_OFF_CORE_NS - forgiven;
                end += gap;
                forgiven += gap;
            }
            last = now;
            if (now >= end) break;
            if ((i & 255) == 0) yield = yield_always || shares_core(m, peer);
        }
    }
    if (nested) tl_nspins--;
    spmd__p2p_spin_end(m, peer);
    if (rx) spmd__rpc_flush(r);
    return hit;
}

static int op_done(void *o) { return atomic_load_explicit(&((rpc_op *)o)->done, memory_order_acquire); }

spmd_status spmd__rpc_p2p(spmd_rpc *r, int send, void *buf, size_t n, int peer, int tag, char *err,
                          size_t errlen) {
    spmd__mesh *m = &r->g->t;
    rpc_op o;
    memset(&o.req, 0, sizeof o.req);
    atomic_init(&o.done, 0);
    o.st = SPMD_OK;
    o.sleeping = 0;
    o.msg[0] = 0;
    o.req.send = send;
    o.req.buf = buf;
    o.req.len = n;
    o.req.peer = o.req.poll_peer = peer;
    o.req.tag = tag;
    o.req.dtype = SPMD_U8;
    o.req.source = -1;
    o.req.waiting = 1;   /* we poll it ourselves at once */
    o.req.complete = op_complete;
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_mutex_init(&o.mu, NULL);
    pthread_cond_init(&o.cv, &ca);
    pthread_condattr_destroy(&ca);
    char perr[SPMD__ERRLEN];
    spmd_status st = send ? spmd__p2p_post_send(m, &o.req, perr, sizeof perr)
                          : spmd__p2p_post_recv(m, &o.req, perr, sizeof perr);
    if (st != SPMD_OK) {
        pthread_cond_destroy(&o.cv);
        pthread_mutex_destroy(&o.mu);
        return spmd__fail(err, errlen, st, "%s", atomic_load(&r->broken) ? r->broken_msg : perr);
    }
    if (!op_done(&o)) spmd__rpc_spin(r, peer, op_done, &o, spmd__rpc_spin_budget(r, n), 0, 0);
    /* Asleep until the engine completes it; past the group's timeout,
     * withdraw it (a send the peer is reading still completes). */
    int64_t deadline = spmd__now_ms() + (r->g->timeout_ms > 0 ? r->g->timeout_ms : SPMD_DEFAULT_TIMEOUT_MS);
    int cancelled = 0;
    const int suspend = !atomic_load_explicit(&o.done, memory_order_acquire);
    if (suspend) spins_suspend();
    pthread_mutex_lock(&o.mu);   /* also waits out a completer still inside op_complete */
    while (!atomic_load_explicit(&o.done, memory_order_acquire)) {
        int64_t now = spmd__now_ms();
        if (now >= deadline && !cancelled) {
            pthread_mutex_unlock(&o.mu);
            spmd__p2p_cancel(m, &o.req);
            cancelled = 1;
            pthread_mutex_lock(&o.mu);
            continue;
        }
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        int64_t slice = cancelled || deadline - now > 1000 ? 1000 : deadline - now;
        ts.tv_sec += slice / 1000;
        ts.tv_nsec += (long)(slice % 1000) * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        o.sleeping = 1;
        pthread_cond_timedwait(&o.cv, &o.mu, &ts);
        o.sleeping = 0;
    }
    pthread_mutex_unlock(&o.mu);
    if (suspend) spins_resume();
    pthread_cond_destroy(&o.cv);
    pthread_mutex_destroy(&o.mu);
    if (o.st == SPMD_OK) return SPMD_OK;
    if (cancelled && o.st == SPMD_ERR_ABORTED)
        return spmd__fail(err, errlen, SPMD_ERR_TIMEOUT, "%s rank %d (tag %d): nothing within %d ms",
                          send ? "send to" : "receive from", peer, tag, r->g->timeout_ms);
    return spmd__fail(err, errlen, o.st, "%s", o.msg);
}
