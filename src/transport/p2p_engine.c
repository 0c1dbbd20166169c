/* p2p_engine.c — point-to-point messages: posting sends and receives and
 * cancelling them.  The engine's other parts (p2p_internal.h): the progress
 * thread (p2p_progress.c), the wait policy (p2p_wait.c), reading and
 * matching (p2p_read.c, p2p_match.h), sending and failure (p2p_send.c).
 *
 * Small messages go eagerly (the receiver buffers them if no receive is
 * posted yet); large ones wait for the receiver's CTS so they land directly in
 * the posted buffer and a size mismatch is reported to both sides — or, under
 * one kernel, the receiver copies them straight out of the sender's buffer
 * (RGET/FIN: one copy instead of two through a ring or four through TCP).
 * Frames to one peer are written in order; reads never block on the
 * application, so no peer can stall another.  One mutex guards all of it: the
 * user's threads post and may write straight to an idle path, the progress
 * thread does the rest; a cross-memory copy runs outside it.  A peer whose
 * connection ends without BYE is dead: the whole group fails.
 *
 * Waking over shared memory (path.h): a ring's writer rings the doorbell (a
 * system call, and a wake-up of our progress thread) only when the ring's
 * "consumer asleep" flag is up.  It is up only while this rank waits for
 * something from that peer (a posted receive, a CTS/FIN, DATA) and no thread
 * of ours polls the ring itself; otherwise a message waits in the ring, the
 * next receive posted or waiter reads it, and a ring past half full rings
 * anyway (the "idle" flag) so unexpected messages never block their sender
 * for good.  A blocking call polls the ring itself (spmd__p2p_spin_*), so a
 * ping-pong costs no system call at all.
 *
 * The progress thread also ticks: heartbeats (heartbeat.c) and the hook of
 * the layer above (mesh.h's on_tick).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>
#include "p2p_internal.h"

/* A posted operation waits for something from peer i (-1: any peer): when
 * its poster will not drive the engine itself, the progress thread must be
 * woken by that peer's next message. */
static void expect_from(spmd__p2p *p, int which) {
    for (int i = 0; i < p->m->world; i++)
        if (which < 0 || i == which) spmd__p2p_settle(p, i, p->nap);
}

/* Take the engine's lock to post w, unless the mesh has failed (then the
 * lock is not held).  Looked at under the lock: a failure recorded after this
 * sweeps the posted operations under it too, so none is left waiting forever. */
static spmd_status lock_to_post(spmd__mesh *g, spmd__preq *w, char *err, size_t errlen) {
    spmd__p2p *p = g->p2p;
    char msg[SPMD__ERRLEN];
    spmd__elock_lock(&p->mu);
    spmd_status st = spmd__mesh_check(g, msg, sizeof msg);
    if (st) {
        spmd__elock_unlock(&p->mu);
        return spmd__fail(err, errlen, st, "%s", msg);
    }
    if (g->on_post) g->on_post(g->hook_arg, w);
    return SPMD_OK;
}

spmd_status spmd__p2p_post_send(spmd__mesh *g, spmd__preq *w, char *err, size_t errlen) {
    if (g->ext) return g->ext->post_send(g, w, err, errlen);
    spmd__p2p *p = g->p2p;
    spmd_status st = lock_to_post(g, w, err, errlen);
    if (st) return st;
    peer *pe = &p->peers[w->peer];
    if (pe->dead || pe->left) {
        spmd__elock_unlock(&p->mu);
        return spmd__fail(err, errlen, SPMD_ERR_REMOTE, "send to rank %d: it has left the group", w->peer);
    }
    if (w->len >= (pe->shm ? p->cma_min_ring : p->cma_min) && w->len && g->cma && g->cma[w->peer].ok) {
        /* the receiver reads it from our memory: the address, the seal's, the seal */
        w->id = ++p->next_id;
        w->seal = (g->cma_token ^ (w->id * 0x9e3779b97f4a7c15ull)) | 1;
        unsigned char body[RGET_LEN];
        spmd__put_u64(body, (uint64_t)(uintptr_t)w->buf);
        spmd__put_u64(body + 8, (uint64_t)(uintptr_t)&w->seal);
        spmd__put_u64(body + 16, w->seal);
        w->next = pe->rts_wait;
        pe->rts_wait = w;
        st = spmd__p2p_enqueue(p, w->peer, with_dt(F_RGET, w->dtype), (uint32_t)w->tag, w->len, w->id, body, RGET_LEN, 1, NULL);
        if (st) list_remove(&pe->rts_wait, w);
        else if (!w->waiting) expect_from(p, w->peer);
    } else if (w->len <= EAGER_MAX) {
        st = spmd__p2p_enqueue(p, w->peer, with_dt(F_EAGER, w->dtype), (uint32_t)w->tag, w->len, 0, w->buf, w->len, 0, w);
    } else {
        w->id = ++p->next_id;
        w->next = pe->rts_wait;
        pe->rts_wait = w;
        st = spmd__p2p_enqueue(p, w->peer, with_dt(F_RTS, w->dtype), (uint32_t)w->tag, w->len, w->id, NULL, 0, 0, NULL);
        if (st) list_remove(&pe->rts_wait, w);
        else if (!w->waiting) expect_from(p, w->peer);
    }
    spmd__p2p_unlock_engine(p);
    if (st) return spmd__fail(err, errlen, st, "send to rank %d: out of memory", w->peer);
    return SPMD_OK;
}

spmd_status spmd__p2p_post_recv(spmd__mesh *g, spmd__preq *w, char *err, size_t errlen) {
    if (g->ext) return g->ext->post_recv(g, w, err, errlen);
    spmd__p2p *p = g->p2p;
    spmd_status st = lock_to_post(g, w, err, errlen);
    if (st) return st;
    /* An earlier unexpected message that matches wins (arrival order). */
    unexp *prev = NULL;
    for (unexp *u = p->ux; u; prev = u, u = u->next) {
        if (!spmd__p2p_matches(w, u->src, u->tag)) continue;
        if (prev) prev->next = u->next;
        else p->ux = u->next;
        if (p->ux_tail == u) p->ux_tail = prev;
        spmd__p2p_deliver_unexpected(p, w, u);
        free(u->data);
        free(u);
        spmd__p2p_unlock_engine(p);
        return SPMD_OK;
    }
    if (w->peer != SPMD_ANY_SOURCE && (p->peers[w->peer].dead || p->peers[w->peer].left)) {
        spmd__elock_unlock(&p->mu);
        return spmd__fail(err, errlen, SPMD_ERR_REMOTE, "receive from rank %d: it has left the group", w->peer);
    }
    spmd__p2p_post(&p->posted, &p->posted_tail, w);
    /* Messages nobody waited for stay in the rings (no doorbell): the one
     * this receive wants may be there already. */
    int which = w->peer == SPMD_ANY_SOURCE ? -1 : w->peer;
    for (int i = 0; i < g->world; i++) {
        peer *pe = &p->peers[i];
        if ((which < 0 || i == which) && pe->shm && !pe->dead && spmd__path_pending(pe->path)) spmd__p2p_read_peer(p, i);
    }
    if (!w->waiting) {
        expect_from(p, which);
    } else if (w->will_spin && p->nshm && p->posted_tail == w) {
        /* still unmatched (the last posted): its poster will spin on it */
        spmd__p2p_spin_begin_locked(p, which);
        w->spin_begun = 1;
    }
    spmd__p2p_unlock_engine(p);
    return SPMD_OK;
}

void spmd__p2p_cancel(spmd__mesh *g, spmd__preq *w) {
    if (g && g->ext) { g->ext->cancel(g, w); return; }
    spmd__p2p *p = g ? g->p2p : NULL;
    if (!p) return;
    spmd__elock_lock(&p->mu);
    int found = spmd__p2p_unpost(&p->posted, &p->posted_tail, w);
    /* A large send still waiting for the receiver's go-ahead can be withdrawn too. */
    for (int i = 0; i < g->world && !found; i++) {
        peer *pe = &p->peers[i];
        for (spmd__preq **pw = &pe->rts_wait; *pw; pw = &(*pw)->next)
            if (*pw == w) { *pw = w->next; w->next = NULL; found = 1; break; }
    }
    if (found) {
        revoke_seal(w);
        fail_work(w, SPMD_ERR_ABORTED, "operation cancelled before the peer was ready");
    }
    spmd__elock_unlock(&p->mu);
}

void spmd__p2p_parallel_stats(spmd__mesh *m, unsigned long *reads, unsigned long *helped) {
    spmd__p2p *p = m && !m->ext ? m->p2p : NULL;
    *reads = p ? spmd__cma_parallel_jobs(p->par) : 0;
    *helped = p ? spmd__cma_parallel_helped(p->par) : 0;
}
