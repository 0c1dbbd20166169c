/* executor.c — runs a group's collectives one at a time, in issue order.
 *
 * A blocking collective issued while nothing is queued or running runs right
 * away on the caller's thread (no hand-off, so small collectives cost only
 * their network round trips).  Otherwise — and always for async calls — the
 * collective is queued and the executor thread runs it after everything issued
 * before it.  Either way the same order on every rank keeps them matched.
 *
 * Most small async collectives are waited for at once (torch's
 * `dist.all_reduce(t)` is an async call and a wait), and the waiter runs a
 * collective still at the head of the queue itself (spmd__exec_help).  Waking
 * the executor thread for it only loses that race: the woken thread takes
 * the core, runs the collective, and wakes the waiter again — two context
 * switches per call, which doubled a 4-byte all_reduce through torch with
 * four ranks on two cores (~190 against ~95 us).  So while the thread naps
 * (a timed sleep, for WARM_NS after the last async collective), a small
 * async collective issued to an idle group is queued without waking it: its
 * waiter runs it, or the nap's end does, so one nobody waits for still
 * starts on its own; one that is polled (spmd_work_test) wakes it then.
 * The nap adapts: it doubles (to NAP_MAX_NS) while every one was run by its
 * waiter, and shrinks (to NAP_MIN_NS) when one waited for the nap's end, so
 * a program that waits at once sees few wake-ups and one that computes
 * before waiting gets its collectives started soon.  Large ones (the
 * overlap case: DDP's buckets) and any queued behind others wake it at once.
 *
 * A collective that fails after bytes may have moved leaves the collective
 * channel out of step, so the group is marked failed and the other ranks are
 * told (they fail too, instead of waiting for the deadline).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "group_internal.h"

/* state = queued << 1 | running.  A blocking call claims an idle group
 * with one compare-and-swap (0 -> 1) and gives it back with one subtraction,
 * so the common case takes no lock.  Everything else (queueing, the thread,
 * helpers) holds mu; while work is queued the state is non-zero, so no caller
 * can claim it past the queue. */
#define RUNNING 1u
#define ONE_QUEUED 2u

#define LAZY_BYTES 65536u            /* async collectives up to this size may wait for their waiter */
#define NAP_MIN_NS 250000L           /* the executor's nap: how long such a one may wait */
#define NAP_MAX_NS 16000000L
#define WARM_NS 200000000ull         /* napping lasts this long after the last async collective */

struct spmd__exec {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    spmd_work *head, *tail;
    _Atomic unsigned state;
    int stop;
    int thread_started;
    /* the naps (top of the file; mu held to read or write) */
    int napping;        /* the thread naps now */
    long nap_ns;        /* its next nap */
    uint64_t recent_ns; /* when the last async collective was queued or run */
    _Atomic uint32_t issued; /* collectives issued so far: the next one's number - 1 */
    pthread_t thread;
    spmd__coll_ctx ctx;
};

/* Run one collective on the calling thread.  errbuf receives the detail.
 * `waited`: the caller blocks on it (inline or helping) rather than computing
 * meanwhile.  Only then may large messages go by cross-memory attach, which
 * makes each sender wait until its receiver has read: a background collective
 * overlapping computation on busy cores is better served by TCP, whose
 * buffers let each rank move on while the other is off the core (DDP on two
 * cores ran ~5 % slower with CMA). */
static spmd_status run_one(spmd_group *g, spmd__coll_args *a, int waited, char *errbuf, size_t errlen) {
    spmd__coll_ctx *c = &g->exec->ctx;
    c->use_cma = waited;
    /* Yield while spinning when another thread may want this core: a peer
     * rank (more ranks than cores), or, for a collective in the background,
     * the caller's computation. */
    c->yield_in_spin = g->t.oversubscribed || !waited;
    char fmsg[SPMD__ERRLEN];
    spmd_status st = spmd__group_check(g, fmsg, sizeof fmsg);
    if (st) {
        snprintf(errbuf, errlen, "%s", fmsg);
        spmd__rec_coll_end(g->rec, a->seq, st);
        return st;
    }
    c->seq = a->seq;
    c->kind = a->kind;
    spmd__rec_coll_start(g->rec, a->seq);
    c->desc = 0; /* what the ranks must agree on: set by spmd__coll_run (coll/agree.c) */
    c->agreeing = c->unanimous = 0;
    c->deadline = 0; /* set by the first wait that needs it (most small ones never do) */
    c->err[0] = 0;
    st = spmd__coll_run(c, a);
    spmd__rec_coll_end(g->rec, a->seq, st);
    if (st) {
        snprintf(errbuf, errlen, "%s", c->err[0] ? c->err : spmd_status_str(st));
        /* A failure every rank reached alike with the channels in step (bad
         * arguments, or the agreement step's verdict) leaves the group
         * usable; any other may have left bytes in flight: the group fails
         * and every other rank is told why. */
        if (st != SPMD_ERR_INVALID && !c->unanimous)
            spmd__group_fail(g, st, 1, "rank %d: %s", g->rank, errbuf);
    }
    return st;
}

static int busy(spmd__exec *e) { return (atomic_load(&e->state) & RUNNING) != 0; }

/* With mu held, the head of a non-empty queue that nothing runs: it leaves
 * the queue and becomes the running collective in one step. */
static spmd_work *take_head(spmd__exec *e) {
    spmd_work *w = e->head;
    e->head = w->next;
    if (!e->head) e->tail = NULL;
    w->next = NULL;
    atomic_fetch_sub(&e->state, ONE_QUEUED - RUNNING);
    return w;
}

/* The running collective is done (mu held): wake the thread if work waits. */
static void finish_locked(spmd__exec *e) {
    atomic_fetch_sub(&e->state, RUNNING);
    if (e->head) pthread_cond_broadcast(&e->cv);
}

/* Sleep until woken (mu held): a nap while async collectives are recent,
 * else for good (an idle group costs no wake-ups). */
static void exec_sleep(spmd__exec *e) {
    if (spmd__now_ns() - e->recent_ns > WARM_NS) {
        pthread_cond_wait(&e->cv, &e->mu);
        return;
    }
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    ts.tv_nsec += e->nap_ns;
    while (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    e->napping = 1;
    int rc = pthread_cond_timedwait(&e->cv, &e->mu, &ts);
    e->napping = 0;
    if (rc != ETIMEDOUT) return;
    if (e->head && !busy(e)) e->nap_ns = e->nap_ns / 4 > NAP_MIN_NS ? e->nap_ns / 4 : NAP_MIN_NS; /* nobody waited */
    else e->nap_ns = e->nap_ns * 2 < NAP_MAX_NS ? e->nap_ns * 2 : NAP_MAX_NS;
}

static void *exec_main(void *arg) {
    spmd_group *g = arg;
    spmd__exec *e = g->exec;
    spmd__wait_slice_thread();
    pthread_mutex_lock(&e->mu);
    for (;;) {
        while (!e->stop && (!e->head || busy(e))) exec_sleep(e);
        if (!e->head) break; /* stop requested and nothing left */
        e->recent_ns = spmd__now_ns(); /* async calls are being made: nap from now on */
        spmd_work *w = take_head(e);
        pthread_mutex_unlock(&e->mu);
        char msg[SPMD__ERRLEN];
        msg[0] = '\0';
        spmd_status st = run_one(g, &w->args, 0, msg, sizeof msg);
        spmd__work_complete(w, st, msg);
        pthread_mutex_lock(&e->mu);
        atomic_fetch_sub(&e->state, RUNNING);
    }
    pthread_mutex_unlock(&e->mu);
    return NULL;
}

/* No executor thread (the transport's calls must stay on the caller's
 * thread: MPI below MPI_THREAD_MULTIPLE): the thread that waits for or
 * tests w runs every collective queued up to w, in issue order. */
static void run_queue_until(spmd_group *g, spmd_work *w) {
    spmd__exec *e = g->exec;
    pthread_mutex_lock(&e->mu);
    while (!spmd__work_done(w)) {
        if (busy(e)) { /* another thread runs one: it wakes us when done */
            pthread_cond_wait(&e->cv, &e->mu);
            continue;
        }
        if (!e->head) break;
        spmd_work *x = take_head(e);
        pthread_mutex_unlock(&e->mu);
        char msg[SPMD__ERRLEN];
        msg[0] = '\0';
        spmd_status st = run_one(g, &x->args, x == w, msg, sizeof msg);
        spmd__work_complete(x, st, msg); /* x may be gone after this */
        pthread_mutex_lock(&e->mu);
        atomic_fetch_sub(&e->state, RUNNING);
        pthread_cond_broadcast(&e->cv);
    }
    pthread_mutex_unlock(&e->mu);
}

/* The caller is about to wait for w: if w is next in line and the executor
 * is idle, run it right here instead of handing it to the executor thread
 * (async + immediate wait then costs what a blocking call costs). */
void spmd__exec_help(spmd_work *w) {
    spmd_group *g = w->g;
    spmd__exec *e = g ? g->exec : NULL;
    if (!e) return;
    if (g->t.caller_thread_only) {
        run_queue_until(g, w);
        return;
    }
    pthread_mutex_lock(&e->mu);
    if (e->head != w || busy(e)) {
        pthread_mutex_unlock(&e->mu);
        return;
    }
    take_head(e);
    pthread_mutex_unlock(&e->mu);
    char msg[SPMD__ERRLEN];
    msg[0] = '\0';
    spmd_status st = run_one(g, &w->args, 1, msg, sizeof msg);
    spmd__work_complete(w, st, msg);
    pthread_mutex_lock(&e->mu);
    /* Only the executor thread waits on cv, and only for queued work: an
     * idle thread woken for nothing would steal a core from the next call. */
    finish_locked(e);
    pthread_mutex_unlock(&e->mu);
}

void spmd__exec_kick(spmd_work *w) {
    spmd__exec *e = w->g ? w->g->exec : NULL;
    if (!e) return;
    pthread_mutex_lock(&e->mu);
    if (e->napping && e->head && !busy(e)) pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->mu);
}

static size_t env_size(const char *name, size_t dflt, size_t lo, size_t hi) {
    long v;
    if (spmd__env_int(name, (long)lo, (long)hi, &v) == SPMD_OK) return (size_t)v;
    return dflt;
}

spmd_status spmd__exec_start(spmd_group *g, char *err, size_t errlen) {
    spmd__exec *e = calloc(1, sizeof *e);
    if (!e) return spmd__fail(err, errlen, SPMD_ERR_NOMEM, "out of memory");
    pthread_mutex_init(&e->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC); /* the naps' deadlines */
    pthread_cond_init(&e->cv, &ca);
    pthread_condattr_destroy(&ca);
    e->nap_ns = NAP_MIN_NS; /* recent_ns 0: asleep for good until the first async call */
    e->ctx.m = &g->t;
    size_t seg = env_size("SPMD_SEGMENT_BYTES", 1u << 20, 64, (size_t)1 << 30);
    e->ctx.segment_bytes = seg & ~(size_t)63;
    e->ctx.spin_ns = g->t.spin_ns; /* the mesh's busy-poll budget (SPMD_SPIN_US) */
    g->exec = e;
    return SPMD_OK;
}

void spmd__exec_stop(spmd_group *g) {
    spmd__exec *e = g->exec;
    if (!e) return;
    pthread_mutex_lock(&e->mu);
    e->stop = 1;
    pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->mu);
    if (e->thread_started) pthread_join(e->thread, NULL);
    /* Anything still queued (only if the thread never started) is failed. */
    while (e->head) {
        spmd_work *w = e->head;
        e->head = w->next;
        spmd__work_complete(w, SPMD_ERR_ABORTED, "group destroyed before the collective ran");
    }
    for (int i = 0; i < SPMD__SCRATCH_SLOTS; i++) free(e->ctx.scratch[i]);
    pthread_cond_destroy(&e->cv);
    pthread_mutex_destroy(&e->mu);
    free(e);
    g->exec = NULL;
}

/* A collective whose waiter may run it (top of the file): at most LAZY_BYTES
 * per rank block; all_to_all_v's counts are per peer, so it is never one. */
static int small(const spmd__coll_args *a) {
    if (a->sendcounts || a->recvcounts) return 0;
    size_t es = spmd_dtype_size(a->dt);
    return a->count <= LAZY_BYTES / (es ? es : 1);
}

spmd_status spmd__group_collective(spmd_group *g, spmd__coll_args *a, spmd_work **out) {
    spmd__exec *e = g->exec;
    unsigned idle = 0;
    if (!out && atomic_compare_exchange_strong(&e->state, &idle, RUNNING)) {
        /* Idle: run inline. */
        char msg[SPMD__ERRLEN];
        msg[0] = 0;
        a->seq = atomic_fetch_add_explicit(&e->issued, 1, memory_order_relaxed) + 1;
        spmd__rec_coll_issue(g->rec, a, 1);
        spmd_status st = run_one(g, a, 1, msg, sizeof msg);
        spmd__coll_args_free(a);
        if (atomic_fetch_sub(&e->state, RUNNING) != RUNNING) { /* async work queued meanwhile */
            pthread_mutex_lock(&e->mu);
            pthread_cond_broadcast(&e->cv);
            pthread_mutex_unlock(&e->mu);
        }
        if (st) spmd__group_error(g, st, "%s", msg);
        return st;
    }
    pthread_mutex_lock(&e->mu);
    spmd_work *w = spmd__work_new(g, SPMD__W_COLL);
    if (!w) {
        pthread_mutex_unlock(&e->mu);
        spmd__coll_args_free(a);
        return spmd__group_error(g, SPMD_ERR_NOMEM, "out of memory");
    }
    a->seq = atomic_fetch_add_explicit(&e->issued, 1, memory_order_relaxed) + 1;
    spmd__rec_coll_issue(g->rec, a, 0);
    w->args = *a;
    w->help = spmd__exec_help;
    w->kick = spmd__exec_kick;
    memset(a, 0, sizeof *a);
    if (!e->thread_started && !g->t.caller_thread_only) {
        int rc = pthread_create(&e->thread, NULL, exec_main, g);
        if (!rc) pthread_setname_np(e->thread, "spmd-exec"); /* top -H, perf, gdb */
        if (rc) {
            pthread_mutex_unlock(&e->mu);
            spmd__work_complete(w, SPMD_ERR_SYSTEM, "cannot start the executor thread");
            spmd_work_free(w);
            return spmd__group_error(g, SPMD_ERR_SYSTEM, "cannot start the executor thread");
        }
        e->thread_started = 1;
    }
    if (e->tail) e->tail->next = w;
    else e->head = w;
    e->tail = w;
    const unsigned before = atomic_fetch_add(&e->state, ONE_QUEUED);
    if (before == 0 && e->napping && small(&w->args)) e->recent_ns = spmd__now_ns(); /* its waiter runs it (top) */
    else pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->mu);
    if (out) {
        *out = w;
        return SPMD_OK;
    }
    spmd_status st = spmd_work_wait(w, -1);
    if (st == SPMD_ERR_TIMEOUT && spmd_work_test(w) == SPMD_ERR_AGAIN) {
        /* The executor has its own deadline; the wait above only overshoots
         * when collectives queued ahead took long.  Wait for it to finish. */
        st = spmd_work_wait(w, 1 << 30);
    }
    if (st) spmd__group_error(g, st, "%s", spmd_work_errmsg(w));
    spmd_work_free(w);
    return st;
}
