/* p2p_progress.c — the p2p engine's progress thread (p2p_internal.h): epoll
 * over the peers' connections, the shared-memory rings after each wake-up,
 * naps, and the tick (heartbeats, then the layer above's hook); starting and
 * stopping the engine. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>
#include "p2p_internal.h"

#include <sys/eventfd.h>
#include "heartbeat.h"

/* Shared-memory peers have no readiness the kernel can report: look at every
 * ring after each wake-up.  A doorbell or the close of the pair's connection
 * is what wakes us; a closed connection after the rings are drained is a
 * departure (after BYE) or a death. */
static uint64_t rx_total(const spmd__p2p *p) {
    uint64_t sum = 0;
    for (int i = 0; i < p->m->world; i++) sum += p->peers[i].rx;
    return sum;
}

static void service_shm(spmd__p2p *p, const char *closed, int nap_over) {
    spmd__mesh *g = p->m;
    for (int i = 0; i < g->world; i++) {
        peer *pe = &p->peers[i];
        if (!pe->shm || pe->dead) continue;
        /* its spinners come back to it (progress_main), or are on it now:
         * a frame taken from under a quick receive (p2p_quick.c), which
         * posts nothing, would be kept unexpected and handed back late */
        if (nap_over && (pe->spun_nap || pe->spinners)) continue;
        if (pe->sq && spmd__p2p_flush_peer(p, i) < 0) { spmd__p2p_peer_died(p, i, strerror(errno)); continue; }
        spmd__p2p_read_peer(p, i);
        if (closed[i] && !pe->dead) spmd__p2p_peer_died(p, i, "connection closed");
    }
}

/* ---- the tick: heartbeats, then the layer above's hook ------------------- */

static uint64_t hb_rx(void *arg, int i) { return ((spmd__p2p *)arg)->peers[i].rx; }
static int hb_gone(void *arg, int i) {
    const peer *pe = &((spmd__p2p *)arg)->peers[i];
    return pe->dead || pe->left || pe->fd < 0;
}
static void hb_ping(void *arg, int i) {
    spmd__p2p *p = arg;
    if (!p->peers[i].sq) spmd__p2p_enqueue(p, i, F_PING, 0, 0, 0, NULL, 0, 0, NULL); /* else bytes are on their way */
}

/* A watched peer went silent: the group fails naming it. */
static void peer_silent(spmd__p2p *p, int i, const char *msg) {
    if (!spmd__mesh_mark_failed_by(p->m, SPMD_ERR_REMOTE, i, msg)) return;
    spmd__p2p_abort_locked(p, SPMD_ERR_REMOTE, msg);
    spmd__p2p_fail_everything(p, SPMD_ERR_REMOTE, msg);
}

/* How long the progress thread may sleep before its next tick (and before
 * its clock, mesh.h's clock_ms, gets too old). */
static int until_tick(const spmd__p2p *p, int timeout) {
    int64_t left = p->next_tick - spmd__now_ms();
    if (left < 0) left = 0;
    if (p->m->clock_wanted && left > SPMD__MESH_CLOCK_MS) left = SPMD__MESH_CLOCK_MS;
    return left < timeout ? (int)left : timeout;
}

static void tick(spmd__p2p *p) {
    int64_t now = spmd__now_ms();
    atomic_store_explicit(&p->m->clock_ms, now, memory_order_relaxed);
    if (now < p->next_tick) return;
    if (p->hb) {
        char msg[SPMD__ERRLEN];
        spmd__elock_lock(&p->mu);
        int silent = spmd__hb_tick(p->hb, now, msg, sizeof msg);
        if (silent >= 0) peer_silent(p, silent, msg);
        spmd__elock_unlock(&p->mu);
        p->next_tick = spmd__hb_due(p->hb);
    } else {
        p->next_tick = now + TICK_MS;
    }
    if (p->m->on_tick) p->m->on_tick(p->m->hook_arg);
}

static void *progress_main(void *arg) {
    spmd__p2p *p = arg;
    spmd__mesh *g = p->m;
    spmd__wait_slice_thread();
    struct epoll_event evs[64];
    char *closed = calloc((size_t)g->world, 1);
    if (!closed) return NULL;
    while (!atomic_load(&p->stop)) {
        int busy = 0;
        if (p->nshm) {
            /* every ring's flags as our state wants them before sleeping */
            spmd__elock_lock(&p->mu);
            /* A ring some thread stopped spinning on during the last nap is
             * left to its spinners for one more nap: they are usually back
             * within microseconds (an RPC agent between calls), and taking
             * a frame from under them hands it to a thread that must be
             * woken.  It is armed (and read) once a nap passes without
             * them; a doorbell meanwhile is served at once. */
            for (int i = 0; i < g->world; i++) {
                peer *pe = &p->peers[i];
                pe->spun_nap = p->nap && pe->spun;
                pe->spun = 0;
                if (!pe->spun_nap) busy |= spmd__p2p_settle(p, i, 0);
            }
            if (!p->nap && p->spun) p->nap_ms = NAP_MIN_MS;
            p->nap = p->spun;
            p->spun = p->nap_asked = 0;
            spmd__p2p_unlock_engine(p);
        }
        int n = epoll_wait(p->epfd, evs, 64, until_tick(p, busy ? 0 : p->nap ? p->nap_ms : 1000));
        if (n < 0 && errno != EINTR) break;
        spmd__elock_lock(&p->mu);
        memset(closed, 0, (size_t)g->world);
        for (int k = 0; k < n; k++) {
            uint32_t i = evs[k].data.u32;
            if (i == (uint32_t)g->world) {
                uint64_t v;
                ssize_t r = read(p->evfd, &v, sizeof v);
                (void)r;
                continue;
            }
            peer *pe = &p->peers[i];
            if (pe->dead) continue;
            if (pe->shm) {
                closed[i] = !spmd__path_disarm(pe->path);
                continue;
            }
            if (evs[k].events & EPOLLOUT) {
                if (spmd__p2p_flush_peer(p, (int)i) < 0) { spmd__p2p_peer_died(p, (int)i, strerror(errno)); continue; }
            }
            if (evs[k].events & (EPOLLIN | EPOLLERR | EPOLLHUP | EPOLLRDHUP)) spmd__p2p_read_peer(p, (int)i);
        }
        if (p->nshm) {
            uint64_t seen = n == 0 && p->nap ? rx_total(p) : 0;
            service_shm(p, closed, n == 0);
            if (n == 0 && p->nap) {
                int found = rx_total(p) != seen;
                p->nap_ms = found ? NAP_MIN_MS : p->nap_ms * 2 > NAP_MAX_MS ? NAP_MAX_MS : p->nap_ms * 2;
            }
        }
        spmd__p2p_unlock_engine(p);
        tick(p);
    }
    free(closed);
    return NULL;
}

spmd_status spmd__p2p_start(spmd__mesh *g, char *err, size_t errlen) {
    /* before any thread of ours runs; without g->p2p the hooks do nothing */
    g->fail_pending = spmd__p2p_fail_pending;
    g->tell_peers = spmd__p2p_tell_peers;
    spmd__p2p *p = calloc(1, sizeof *p);
    if (!p) return spmd__fail(err, errlen, SPMD_ERR_NOMEM, "out of memory");
    p->m = g;
    long cma_min = -1;
    if (spmd__env_int("SPMD_P2P_CMA_MIN_BYTES", 1, 1L << 40, &cma_min) != SPMD_OK) cma_min = -1;
    p->cma_min = cma_min > 0 ? (size_t)cma_min : CMA_MIN_DEFAULT;
    p->cma_min_ring = cma_min > 0 ? (size_t)cma_min : spmd__shm_ring_bytes(g->shm);
    long par_min = PARALLEL_MIN_DEFAULT;
    if (spmd__env_int("SPMD_P2P_PARALLEL_MIN_BYTES", 0, 1L << 40, &par_min) != SPMD_OK) par_min = PARALLEL_MIN_DEFAULT;
    g->p2p_parallel_min = (size_t)par_min;
    p->nap_ms = NAP_MIN_MS;
    p->peers = calloc((size_t)g->world, sizeof *p->peers);
    p->epfd = epoll_create1(EPOLL_CLOEXEC);
    p->evfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (!p->peers || p->epfd < 0 || p->evfd < 0) {
        int e = errno;
        if (p->epfd >= 0) close(p->epfd);
        if (p->evfd >= 0) close(p->evfd);
        free(p->peers);
        free(p);
        return spmd__fail_errno(err, errlen, SPMD_ERR_SYSTEM, e, "creating the progress thread's epoll");
    }
    pthread_mutex_init(&p->copy_mu, NULL); /* p->mu: zeroed by calloc is free */
    struct epoll_event ev = {.events = EPOLLIN, .data.u32 = (uint32_t)g->world};
    epoll_ctl(p->epfd, EPOLL_CTL_ADD, p->evfd, &ev);
    for (int i = 0; i < g->world; i++) {
        p->peers[i].fd = g->fd[SPMD__CH_P2P][i];
        p->peers[i].path = g->path[SPMD__CH_P2P][i];
        if (p->peers[i].fd < 0 || !p->peers[i].path) continue;
        p->peers[i].shm = spmd__path_is_shm(p->peers[i].path);
        p->nshm += p->peers[i].shm;
        struct epoll_event pev = {.events = EPOLLIN | EPOLLRDHUP, .data.u32 = (uint32_t)i};
        epoll_ctl(p->epfd, EPOLL_CTL_ADD, p->peers[i].fd, &pev);
    }
    /* where this kernel lets ranks read each other: its helper starts at
     * the first large read (NULL when out of memory: one thread reads) */
    if (g->cma && g->p2p_parallel_min) p->par = spmd__cma_parallel_new();
    g->p2p = p;
    if (g->world > 1) {
        spmd__hb_ops ops = {.arg = p, .rx = hb_rx, .gone = hb_gone, .ping = hb_ping};
        p->hb = spmd__hb_start(g, &ops);
        p->next_tick = spmd__now_ms();
        int rc = pthread_create(&p->thread, NULL, progress_main, p);
        if (!rc) pthread_setname_np(p->thread, "spmd-progress"); /* top -H, perf, gdb */
        if (rc) {
            spmd__hb_free(p->hb);
            spmd__cma_parallel_free(p->par);
            g->p2p = NULL;
            close(p->epfd);
            close(p->evfd);
            free(p->peers);
            free(p);
            return spmd__fail_errno(err, errlen, SPMD_ERR_SYSTEM, rc, "starting the progress thread");
        }
        p->running = 1;
    }
    return SPMD_OK;
}

void spmd__p2p_stop(spmd__mesh *g) {
    if (g->ext) { g->ext->stop(g); return; }
    spmd__p2p *p = g->p2p;
    if (!p) return;
    /* Goodbye to every live peer, then let the queues drain (bounded).  A
     * rank leaving a failed group says why first: a peer still inside the
     * collective that failed here may not have had the first notice yet
     * (it travels on another connection), and must not take our goodbye for
     * the cause. */
    char why[SPMD__ERRLEN];
    spmd_status failed = (spmd_status)atomic_load(&g->failed);
    if (failed) {
        pthread_mutex_lock(&g->fail_mu);
        snprintf(why, sizeof why, "left the group after it failed: %s", g->fail_msg);
        pthread_mutex_unlock(&g->fail_mu);
    }
    spmd__elock_lock(&p->mu);
    if (failed) spmd__p2p_abort_locked(p, failed, why);
    for (int i = 0; i < g->world; i++) {
        peer *pe = &p->peers[i];
        if (i == g->rank || pe->dead || pe->fd < 0) continue;
        spmd__p2p_enqueue(p, i, F_BYE, 0, 0, 0, NULL, 0, 0, NULL);
    }
    int64_t deadline = spmd__now_ms() + 5000;
    for (;;) {
        int busy = 0;
        for (int i = 0; i < g->world; i++)
            if (p->peers[i].sq && !p->peers[i].dead) busy = 1;
        if (!busy || spmd__now_ms() >= deadline || !p->running) break;
        /* let the progress thread write (leaving happens once per group) */
        spmd__elock_unlock(&p->mu);
        struct timespec ts = {0, 1000000L};
        nanosleep(&ts, NULL);
        spmd__elock_lock(&p->mu);
    }
    spmd__elock_unlock(&p->mu);
    atomic_store(&p->stop, 1);
    uint64_t one = 1;
    ssize_t r = write(p->evfd, &one, sizeof one);
    (void)r;
    if (p->running) pthread_join(p->thread, NULL);
    spmd__hb_free(p->hb);
    spmd__elock_lock(&p->mu);
    char msg[SPMD__ERRLEN];
    snprintf(msg, sizeof msg, "group %s destroyed while the operation was pending", g->name);
    spmd__p2p_fail_everything(p, SPMD_ERR_ABORTED, msg);
    for (int i = 0; i < g->world; i++) {
        peer *pe = &p->peers[i];
        while (pe->sq) { frame *f = pe->sq; pe->sq = f->next; free(f->owned); free(f); }
        if (pe->ux) { free(pe->ux->data); free(pe->ux); }
        free(pe->abort_text);
    }
    while (p->ux) { unexp *u = p->ux; p->ux = u->next; free(u->data); free(u); }
    spmd__elock_unlock(&p->mu);
    close(p->epfd);
    close(p->evfd);
    pthread_mutex_destroy(&p->copy_mu);
    spmd__cma_parallel_free(p->par);
    free(p->peers);
    free(p);
    g->p2p = NULL;
}
