/* p2p_send.c — the p2p engine (p2p_internal.h): writing frames to a peer
 * (at once when its path takes them, the rest queued in order) and failure:
 * a peer that dies fails the group, whose abort every live peer is told. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/uio.h>
#include <unistd.h>
#include "p2p_internal.h"

static void set_out(spmd__p2p *p, int i, int want) {
    peer *pe = &p->peers[i];
    if (pe->shm) want = 0; /* a full ring is waited for with its sleep flag, not EPOLLOUT */
    if (pe->want_out == want || pe->fd < 0) return;
    struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP | (want ? EPOLLOUT : 0), .data.u32 = (uint32_t)i};
    epoll_ctl(p->epfd, EPOLL_CTL_MOD, pe->fd, &ev);
    pe->want_out = want;
}

/* Write as much of peer i's queue as the socket takes.  Returns -1 when the
 * connection failed (the caller handles the failure). */
int spmd__p2p_flush_peer(spmd__p2p *p, int i) {
    peer *pe = &p->peers[i];
    while (pe->sq) {
        frame *f = pe->sq;
        size_t total = HDR + f->plen;
        struct iovec iov[2];
        int n = 0;
        if (f->off < HDR) {
            iov[n].iov_base = f->hdr + f->off;
            iov[n++].iov_len = HDR - f->off;
            if (f->plen) {
                iov[n].iov_base = (void *)(f->owned ? f->owned : f->payload);
                iov[n++].iov_len = f->plen;
            }
        } else {
            iov[n].iov_base = (char *)(f->owned ? f->owned : f->payload) + (f->off - HDR);
            iov[n++].iov_len = total - f->off;
        }
        ssize_t w = spmd__path_writev(pe->path, iov, n);
        if (w < 0) {
            if (errno == EINTR) continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) { set_out(p, i, 1); return 0; }
            return -1;
        }
        f->off += (size_t)w;
        if (f->off < total) continue;
        pe->sq = f->next;
        if (!pe->sq) {
            pe->sq_tail = NULL;
            atomic_store_explicit(&pe->queued, 0, memory_order_relaxed);
        }
        if (f->w) {
            spmd__preq *done = f->w;
            done->source = i;
            complete_req(done, SPMD_OK, NULL);
        }
        free(f->owned);
        free(f);
    }
    set_out(p, i, 0);
    return 0;
}

/* Frames wait for room in peer i's ring and no thread of ours polls it:
 * ask its reader to ring the doorbell once it has read (Dekker: when room
 * appeared meanwhile, write now).  -1 when the path failed. */
static int watch_room(spmd__p2p *p, int i) {
    peer *pe = &p->peers[i];
    while (pe->sq && spmd__path_arm(pe->path, 0, 1))
        if (spmd__p2p_flush_peer(p, i) < 0) return -1;
    return 0;
}

/* Queue a frame to peer i and try to write it at once. */
spmd_status spmd__p2p_enqueue(spmd__p2p *p, int i, uint32_t type, uint32_t tag, uint64_t len,
                           uint64_t id, const void *payload, size_t plen, int copy, spmd__preq *w) {
    peer *pe = &p->peers[i];
    unsigned char hdr[HDR];
    hdr_put(hdr, type, tag, len, id);
    size_t sent = 0;
    if (!pe->sq && !pe->dead) {
        /* Nothing queued: write straight from here, and only queue what did
         * not fit (most small messages never allocate a frame). */
        struct iovec iov[2] = {{hdr, HDR}, {(void *)(uintptr_t)payload, plen}};
        ssize_t n;
        do n = spmd__path_writev(pe->path, iov, plen ? 2 : 1);
        while (n < 0 && errno == EINTR);
        if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
            spmd__p2p_peer_died(p, i, strerror(errno));
            return SPMD_OK; /* the failure completes w */
        }
        if (n == (ssize_t)(HDR + plen)) {
            if (w) {
                w->source = i;
                complete_req(w, SPMD_OK, NULL);
            }
            return SPMD_OK;
        }
        if (n > 0) sent = (size_t)n;
    }
    frame *f = calloc(1, sizeof *f);
    if (!f) return SPMD_ERR_NOMEM;
    memcpy(f->hdr, hdr, HDR);
    f->off = sent;
    if (copy && plen) {
        f->owned = malloc(plen);
        if (!f->owned) { free(f); return SPMD_ERR_NOMEM; }
        memcpy(f->owned, payload, plen);
    } else {
        f->payload = payload;
    }
    f->plen = plen;
    f->w = w;
    int was_empty = pe->sq == NULL;
    if (pe->sq_tail) pe->sq_tail->next = f;
    else pe->sq = f;
    pe->sq_tail = f;
    atomic_store_explicit(&pe->queued, 1, memory_order_relaxed);
    if (was_empty && spmd__p2p_flush_peer(p, i) < 0) spmd__p2p_peer_died(p, i, strerror(errno));
    else if (pe->sq && pe->shm && !pe->spinners && watch_room(p, i) < 0) spmd__p2p_peer_died(p, i, strerror(errno));
    return SPMD_OK;
}

/* ---- failure ---------------------------------------------------------------- */

/* A connection that ended because its link stopped carrying packets (the
 * kernel's keepalive or retransmission gave up, or the route went away),
 * not because the peer closed it. */
static int link_lost(const char *why) {
    static const int codes[] = {ETIMEDOUT, EHOSTUNREACH, ENETUNREACH, ENETDOWN};
    for (size_t k = 0; k < sizeof codes / sizeof codes[0]; k++)
        if (!strcmp(why, strerror(codes[k]))) return 1;
    return 0;
}

void spmd__p2p_peer_died(spmd__p2p *p, int i, const char *why) {
    peer *pe = &p->peers[i];
    if (pe->dead) return;
    char msg[SPMD__ERRLEN];
    if (!pe->left) {
        /* Record the group's failure before anyone can see this peer as
         * merely gone, so every caller gets the real cause. */
        if (link_lost(why))
            snprintf(msg, sizeof msg, "rank %d is unreachable (%s: is the link down?)", i, why);
        else
            snprintf(msg, sizeof msg, "rank %d died or closed its connection (%s)", i, why);
        int first = spmd__mesh_mark_failed_by(p->m, SPMD_ERR_REMOTE, i, msg);
        pe->dead = 1;
        if (pe->fd >= 0) epoll_ctl(p->epfd, EPOLL_CTL_DEL, pe->fd, NULL);
        if (first) {
            spmd__p2p_abort_locked(p, SPMD_ERR_REMOTE, msg);
            spmd__p2p_fail_everything(p, SPMD_ERR_REMOTE, msg);
        }
        return;
    }
    /* It said goodbye first: not a failure, but nothing more can come. */
    pe->dead = 1;
    if (pe->fd >= 0) epoll_ctl(p->epfd, EPOLL_CTL_DEL, pe->fd, NULL);
    snprintf(msg, sizeof msg, "rank %d has left the group", i);
    for (spmd__preq **pw = &p->posted; *pw;) {
        spmd__preq *w = *pw;
        if (w->peer == i) {
            *pw = w->next;
            fail_work(w, SPMD_ERR_REMOTE, msg);
        } else {
            pw = &w->next;
        }
    }
    p->posted_tail = NULL;
    for (spmd__preq *w = p->posted; w; w = w->next) p->posted_tail = w;
}

/* The mesh's fail_pending hook: fail every pending p2p operation with st/msg. */
void spmd__p2p_fail_pending(spmd__mesh *g, spmd_status st, const char *msg) {
    spmd__p2p *p = g->p2p;
    if (!p) return;
    spmd__elock_lock(&p->mu);
    spmd__p2p_fail_everything(p, st, msg);
    spmd__elock_unlock(&p->mu);
}

void spmd__p2p_abort_locked(spmd__p2p *p, spmd_status st, const char *msg) {
    spmd__mesh *g = p->m;
    size_t n = strlen(msg);
    if (n > ABORT_MAX) n = ABORT_MAX;
    pthread_mutex_lock(&g->fail_mu);
    uint64_t blame = (uint64_t)(g->fail_culprit + 1);
    pthread_mutex_unlock(&g->fail_mu);
    for (int i = 0; i < g->world; i++) {
        peer *pe = &p->peers[i];
        if (i == g->rank || pe->dead || pe->fd < 0) continue;
        /* the tag field carries the failure's status code, the id the rank it blames */
        spmd__p2p_enqueue(p, i, F_ABORT, (uint32_t)(int32_t)st, n, blame, msg, n, 1, NULL);
        if (pe->shm) spmd__path_kick(pe->path); /* the peer may wait for nothing from us */
    }
}

/* The mesh's tell_peers hook: queue an abort notice (text) to every live peer. */
void spmd__p2p_tell_peers(spmd__mesh *g, spmd_status st, const char *msg) {
    spmd__p2p *p = g->p2p;
    if (!p) return;
    spmd__elock_lock(&p->mu);
    spmd__p2p_abort_locked(p, st, msg);
    spmd__elock_unlock(&p->mu);
}


/* Fail every operation in flight (group failed or destroyed). */
void spmd__p2p_fail_everything(spmd__p2p *p, spmd_status st, const char *msg) {
    spmd__mesh *g = p->m;
    while (p->posted) {
        spmd__preq *w = p->posted;
        p->posted = w->next;
        fail_work(w, st, msg);
    }
    p->posted_tail = NULL;
    for (int i = 0; i < g->world; i++) {
        peer *pe = &p->peers[i];
        while (pe->rts_wait) {
            spmd__preq *w = pe->rts_wait;
            pe->rts_wait = w->next;
            revoke_seal(w);
            fail_work(w, st, msg);
        }
        while (pe->data_wait) { spmd__preq *w = pe->data_wait; pe->data_wait = w->next; fail_work(w, st, msg); }
        for (frame *f = pe->sq; f; f = f->next)
            if (f->w) { fail_work(f->w, st, msg); f->w = NULL; }
        if (pe->rw) { fail_work(pe->rw, st, msg); pe->rw = NULL; pe->dst = NULL; }
    }
}
