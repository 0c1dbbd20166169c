/* p2p_wait.c — the p2p engine's wait policy (p2p_internal.h): a thread that
 * waits polls the paths itself, and a ring's wake-up flags say when the
 * progress thread must be woken (path.h). */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>
#include "p2p_internal.h"

/* A thread waiting for a p2p operation drives the paths itself instead of
 * waiting for the progress thread to wake up: that wake-up is most of a small
 * message's latency.  Never blocks. */
static void poll_locked(spmd__p2p *p, int which) {
    spmd__mesh *g = p->m;
    for (int i = 0; i < g->world; i++) {
        if (i == g->rank || (which >= 0 && i != which)) continue;
        peer *pe = &p->peers[i];
        if (pe->dead || pe->fd < 0) continue;
        if (pe->sq && spmd__p2p_flush_peer(p, i) < 0) { spmd__p2p_peer_died(p, i, strerror(errno)); continue; }
        spmd__p2p_read_peer(p, i);
    }
}

void spmd__p2p_poll(spmd__mesh *g, int which) {
    if (g && g->ext) { g->ext->poll(g, which); return; }
    spmd__p2p *p = g ? g->p2p : NULL;
    if (!p || g->world == 1) return;
    if (!spmd__elock_try(&p->mu)) return; /* someone is already progressing */
    poll_locked(p, which);
    spmd__p2p_unlock_engine(p);
}


int spmd__p2p_poll_spin(spmd__mesh *g, int which, int (*done)(void *), void *arg) {
    spmd__p2p *p = g->p2p;
    if (!p || g->world == 1) return 0;
    if (!spmd__elock_try(&p->mu)) return 0;
    poll_locked(p, which);
    int ended = done(arg);
    if (ended && p->nshm) spmd__p2p_spin_end_locked(p, which);
    spmd__p2p_unlock_engine(p);
    return ended;
}

int spmd__p2p_ready(spmd__mesh *g, int which) {
    spmd__p2p *p = g ? g->p2p : NULL;
    if (!p || g->world == 1) return 0;
    for (int i = 0; i < g->world; i++) {
        if (i == g->rank || (which >= 0 && i != which)) continue;
        peer *pe = &p->peers[i]; /* shm, path and fd never change after start */
        if (pe->fd < 0) continue;
        if (!pe->shm || atomic_load_explicit(&pe->queued, memory_order_relaxed) || spmd__path_pending(pe->path))
            return 1;
    }
    return 0;
}

/* Does this rank wait for anything from peer i?  A posted receive (any:
 * it may be an any-source one), a CTS, FIN or DATA, or the rest of a frame
 * begun, which the writer adds once it finds room in the ring (a matched
 * receive's payload is on no list while it arrives). */
static int wanted(const spmd__p2p *p, const peer *pe) {
    return p->posted || pe->data_wait || pe->rts_wait || pe->in_payload || pe->hdr_got;
}

/* Put peer i's ring flags where this rank's state wants them before its
 * progress thread may sleep (path.h): "wake me for every message" while we
 * wait for something from it and nobody polls it, else "wake me when half
 * full"; "wake me when there is room" while frames wait to be written.
 * Dekker: when the ring turns out to need work after all, do it here and
 * look again.  Returns 1 when work keeps coming (do not sleep). */
static int settle_rounds(spmd__p2p *p, int i) {
    peer *pe = &p->peers[i];
    for (int round = 0; round < 8; round++) {
        if (!pe->shm || pe->dead || pe->fd < 0) return 0;
        int act;
        if (!pe->spinners && wanted(p, pe)) {
            act = spmd__path_arm(pe->path, 1, pe->sq != NULL);
        } else {
            spmd__path_lower(pe->path);
            act = spmd__path_idle(pe->path);
            if (pe->sq && !pe->spinners) act |= spmd__path_arm(pe->path, 0, 1);
        }
        if (!act) return 0;
        if (pe->sq && spmd__p2p_flush_peer(p, i) < 0) {
            spmd__p2p_peer_died(p, i, strerror(errno));
            return 0;
        }
        spmd__p2p_read_peer(p, i);
    }
    return 1;
}

/* weak: our progress thread naps (see spmd__p2p.nap) */
int spmd__p2p_settle(spmd__p2p *p, int i, int weak) {
    peer *pe = &p->peers[i];
    if (!pe->shm) return 0;
    pe->path->nap = weak;
    int busy = settle_rounds(p, i);
    pe->path->nap = 0;
    return busy;
}

void spmd__p2p_spin_begin_locked(spmd__p2p *p, int which) {
    for (int i = 0; i < p->m->world; i++) {
        peer *pe = &p->peers[i];
        if (!pe->shm || (which >= 0 && i != which)) continue;
        if (pe->spinners++ == 0) spmd__path_lower(pe->path);
    }
}

void spmd__p2p_spin_begin(spmd__mesh *g, int which) {
    spmd__p2p *p = g ? g->p2p : NULL;
    if (!p || !p->nshm) return;
    spmd__elock_lock(&p->mu);
    spmd__p2p_spin_begin_locked(p, which);
    spmd__elock_unlock(&p->mu);
}

int spmd__p2p_spinners(spmd__mesh *g, int which) {
    spmd__p2p *p = g ? g->p2p : NULL;
    if (!p || which < 0 || which >= g->world) return 0;
    spmd__elock_lock(&p->mu);
    int n = p->peers[which].spinners;
    spmd__elock_unlock(&p->mu);
    return n;
}

void spmd__p2p_spin_end(spmd__mesh *g, int which) {
    spmd__p2p *p = g ? g->p2p : NULL;
    if (!p || !p->nshm) return;
    spmd__elock_lock(&p->mu);
    spmd__p2p_spin_end_locked(p, which);
    spmd__p2p_unlock_engine(p);
}

void spmd__p2p_spin_end_locked(spmd__p2p *p, int which) {
    spmd__mesh *g = p->m;
    for (int i = 0; i < g->world; i++) {
        peer *pe = &p->peers[i];
        if (!pe->shm || (which >= 0 && i != which)) continue;
        if (--pe->spinners) continue;
        p->spun = pe->spun = 1;
        /* still busy: let the progress thread take over; or it sleeps long:
         * have it nap, so the next hand-backs are cheap (once) */
        int wake = spmd__p2p_settle(p, i, p->nap) || (!p->nap && !p->nap_asked);
        if (wake) {
            p->nap_asked = 1;
            uint64_t one = 1;
            ssize_t r = write(p->evfd, &one, sizeof one);
            (void)r;
        }
    }
}
