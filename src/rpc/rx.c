/* rx.c — receiving frames: the receive role.
 *
 * One receive of the frame tag (any source) is posted to the transport at a
 * time.  The thread that holds the receive role polls the transport, and
 * when that receive completes it posts the next one (into the other buffer)
 * and processes the frame (dispatch.c), so frames are handled one at a time in
 * arrival order whoever handles them.
 *
 * Who holds the role:
 *   - a caller waiting for its reply (spmd_rpc_future_wait) takes it when
 *     it is free: its reply then reaches it with no other thread in between
 *     (the dispatcher would have to be woken, then wake it); before leaving
 *     it handles the frames that are already here;
 *   - an idle pool thread: a call it receives runs on it, with no hand-off
 *     (leader/followers; pool.c), unless more frames are already waiting;
 *   - otherwise the dispatcher thread: it takes the role when a frame is
 *     waiting and nobody holds it, keeps polling while frames come (the
 *     transport's spin budget), then leaves it and sleeps.  It leaves the
 *     role at once to an idle pool thread that asks, and to a waiter that
 *     asks once its traffic pauses (meanwhile it completes the waiter's
 *     future itself).
 * Nobody holds the role while nothing happens: the transport's progress
 * thread then completes the posted receive and its completion wakes the
 * dispatcher.  A thread never calls into the transport holding rxmu (the
 * completion takes rxmu inside the transport's lock). */
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "rpc_internal.h"
#include "group/group_internal.h"

struct rpc_rx {
    spmd__preq req;   /* first: the engine hands this back */
    spmd_rpc *r;
    spmd_status st;
    char msg[SPMD__ERRLEN];
    rpc_frame f;
};

/* The transport completed the posted receive (inside its lock, any thread). */
static void rx_complete(spmd__preq *q, spmd_status st, const char *msg) {
    struct rpc_rx *x = (struct rpc_rx *)(void *)q;
    spmd_rpc *r = x->r;
    x->st = st;
    if (st) snprintf(x->msg, sizeof x->msg, "%s", msg ? msg : spmd_status_str(st));
    pthread_mutex_lock(&r->rxmu);
    atomic_store_explicit(&r->rx_done, 1, memory_order_release);
    if (atomic_load(&r->rx_holder) == RPC_RX_NONE && r->disp_sleeping) pthread_cond_signal(&r->dcv);
    pthread_mutex_unlock(&r->rxmu);
}

static spmd_status rx_post(spmd_rpc *r, char *err, size_t errlen) {
    struct rpc_rx *x = &r->rx[r->rx_cur];
    memset(&x->req, 0, sizeof x->req);
    x->req.buf = &x->f;
    x->req.len = RPC_FRAME_BYTES;
    x->req.peer = x->req.poll_peer = SPMD_ANY_SOURCE;
    x->req.tag = RPC_TAG_FRAME;
    x->req.dtype = SPMD_U8;
    x->req.source = -1;
    x->req.complete = rx_complete;
    atomic_store(&r->rx_done, 0);   /* before the post: it may complete at once */
    return spmd__p2p_post_recv(&r->g->t, &x->req, err, errlen);
}

spmd_status spmd__rpc_rx_start(spmd_rpc *r, char *err, size_t errlen) {
    r->rx = calloc(2, sizeof *r->rx);
    if (!r->rx) return spmd__fail(err, errlen, SPMD_ERR_NOMEM, "out of memory");
    r->rx[0].r = r->rx[1].r = r;
    return rx_post(r, err, errlen);
}

/* The group failed: nothing more will arrive.  Every pending call fails
 * with the group's message and the dispatcher leaves. */
static void rx_failed(spmd_rpc *r, spmd_status st, const char *why) {
    spmd__rpc_set_broken(r, why);
    spmd__rpc_fail_all(r, st == SPMD_ERR_TIMEOUT ? SPMD_ERR_REMOTE : st, r->broken_msg);
    spmd__rpc_rx_stop(r);
}

int spmd__rpc_rx_process(spmd_rpc *r) {
    struct rpc_rx *x = &r->rx[r->rx_cur];
    char err[SPMD__ERRLEN];
    if (atomic_load(&r->rx_stop)) return 0;
    if (x->st == SPMD_ERR_MISMATCH) {
        /* A frame of the wrong size: consumed and refused, the sender is told. */
        SPMD_LOGW("rpc: rank %d: dropped a frame: %s", r->rank, x->msg);
        if (rx_post(r, err, sizeof err) == SPMD_OK) return 1;
        rx_failed(r, SPMD_ERR_REMOTE, err);
        return 0;
    }
    if (x->st != SPMD_OK) {
        atomic_store(&r->rx_done, 0);
        rx_failed(r, x->st, x->msg);
        return 0;
    }
    int src = x->req.source;
    r->rx_cur ^= 1;
    spmd_status st = rx_post(r, err, sizeof err);
    spmd__rpc_batch_begin(r);
    spmd__rpc_on_message(r, src, &x->f);
    spmd__rpc_batch_end(r);
    if (!atomic_load(&r->rx_done)) spmd__rpc_flush(r);   /* the burst is over */
    if (st != SPMD_OK) {
        rx_failed(r, st, err);
        return 0;
    }
    return 1;
}

void spmd__rpc_rx_stop(spmd_rpc *r) {
    pthread_mutex_lock(&r->rxmu);
    atomic_store(&r->rx_stop, 1);
    pthread_cond_broadcast(&r->dcv);
    pthread_mutex_unlock(&r->rxmu);
}

/* Leave the role; a frame that arrived meanwhile is the dispatcher's unless
 * a waiter is about to take the role. */
static void rx_leave(spmd_rpc *r) {
    spmd__rpc_flush(r);
    pthread_mutex_lock(&r->rxmu);
    atomic_store(&r->rx_holder, RPC_RX_NONE);
    if (atomic_load(&r->rx_done) && r->disp_sleeping) pthread_cond_signal(&r->dcv);
    pthread_mutex_unlock(&r->rxmu);
}

static int rx_take(spmd_rpc *r, int who) {
    int none = RPC_RX_NONE;
    if (atomic_load_explicit(&r->rx_holder, memory_order_relaxed) != RPC_RX_NONE) return 0;
    pthread_mutex_lock(&r->rxmu);
    int ok = !atomic_load(&r->rx_stop) && atomic_compare_exchange_strong(&r->rx_holder, &none, who);
    pthread_mutex_unlock(&r->rxmu);
    return ok;
}

static int never(void *ctx) {
    (void)ctx;
    return 0;
}

void *spmd__rpc_dispatcher_main(void *arg) {
    spmd_rpc *r = arg;
    spmd__wait_slice_thread();
    pthread_mutex_lock(&r->rxmu);
    while (!atomic_load(&r->rx_stop)) {
        /* An idle pool thread asking for the role gets it: it runs the next
         * call itself, with no hand-off. */
        if (atomic_load(&r->rx_done) && atomic_load(&r->rx_holder) == RPC_RX_NONE && !atomic_load(&r->rx_pool_want) &&
            !atomic_load(&r->rx_want)) {
            atomic_store(&r->rx_holder, RPC_RX_DISPATCHER);
            pthread_mutex_unlock(&r->rxmu);
            spmd__rpc_spin(r, -1, never, NULL, spmd__rpc_spin_budget(r, 0), 1, 1);
            rx_leave(r);
            pthread_mutex_lock(&r->rxmu);
            continue;
        }
        /* Woken by the receive's completion, a waiter leaving the role with
         * a frame waiting, or the stop. */
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += 1;
        r->disp_sleeping = 1;
        pthread_cond_timedwait(&r->dcv, &r->rxmu, &ts);
        r->disp_sleeping = 0;
    }
    pthread_mutex_unlock(&r->rxmu);
    return NULL;
}

/* Take the role as `who`, asking its holder for it through *want while
 * the holder is one that gives it to us (giver(holder)), until stop(ctx) or
 * `end` (a pool thread gives up at once on a holder that keeps the role; a
 * waiter watches its future meanwhile).  Returns 1 with the role, 0
 * without; *hit when stop(ctx) held.  Yields often while asking: the holder
 * may need this core. */
static int take_asking(spmd_rpc *r, int who, atomic_int *want, int (*giver)(int), int (*stop)(void *), void *ctx,
                       uint64_t end, int *hit) {
    int asked = 0, got = 0;
    *hit = 0;
    for (unsigned i = 1; !atomic_load(&r->rx_stop); i++) {
        if (stop(ctx)) {
            *hit = 1;
            break;
        }
        if (rx_take(r, who)) {
            got = 1;
            break;
        }
        int h = atomic_load(&r->rx_holder);
        if (giver(h)) {
            if (!asked) atomic_fetch_add(want, 1), asked = 1;
        } else if (h != RPC_RX_NONE && who == RPC_RX_POOL) {
            break;   /* another thread receives and keeps doing so */
        }
        spmd__rpc_relax();
        if ((i & 7) == 0) sched_yield();
        if ((i & 63) == 0 && spmd__now_ns() >= end) break;
    }
    if (asked) {
        atomic_fetch_sub(want, 1);
        /* a frame that waited for us is the dispatcher's if we did not come */
        pthread_mutex_lock(&r->rxmu);
        if (!got && atomic_load(&r->rx_done) && r->disp_sleeping) pthread_cond_signal(&r->dcv);
        pthread_mutex_unlock(&r->rxmu);
    }
    return got;
}

/* The dispatcher and a pool thread leave the role to a waiter once their
 * traffic pauses; another waiter keeps it (it handles our reply too). */
static int gives_to_waiter(int holder) { return holder == RPC_RX_DISPATCHER || holder == RPC_RX_POOL; }
static int gives_to_pool(int holder) { return holder == RPC_RX_DISPATCHER; }

int spmd__rpc_drive_while_waiting(spmd_rpc *r, int (*stop)(void *), void *ctx, uint64_t budget_ns) {
    if (!atomic_load(&r->rx_live) || stop(ctx)) return stop(ctx);
    uint64_t end = spmd__now_ns() + budget_ns;
    int hit = 0;
    if (!take_asking(r, RPC_RX_WAITER, &r->rx_want, gives_to_waiter, stop, ctx, end, &hit)) return hit || stop(ctx);
    uint64_t now = spmd__now_ns();
    hit = now < end && spmd__rpc_spin(r, -1, stop, ctx, end - now, 1, 0);
    /* Frames already here are handled now: the dispatcher need not wake
     * for them (a window of calls gets its replies in bursts). */
    for (int k = 0; k < 64 && atomic_load(&r->rx_done); k++)
        if (!spmd__rpc_rx_process(r)) break;
    rx_leave(r);
    return hit || stop(ctx);
}

int spmd__rpc_pool_receive(spmd_rpc *r, int (*stop)(void *), void *ctx) {
    int hit = 0;
    if (!atomic_load(&r->rx_live) ||
        !take_asking(r, RPC_RX_POOL, &r->rx_pool_want, gives_to_pool, stop, ctx, spmd__now_ns() + 50000, &hit))
        return 0;
    hit = spmd__rpc_spin(r, -1, stop, ctx, spmd__rpc_spin_budget(r, 0), 1, 1);
    rx_leave(r);
    return hit ? 1 : 2;
}
