/* p2p_quick.c — the p2p engine (p2p_internal.h): a blocking send or receive
 * of a small message between two ranks that share memory, done in the ring
 * without a request.
 *
 * A small ping-pong over the general path costs about 2,000 instructions a
 * round trip per rank (a work handle made and released, the request's
 * callbacks, three ring reads per frame: header, payload, then "nothing
 * more"), twice what MPICH spends.  Most blocking calls need none of it:
 *   send     nothing is queued to the peer and the whole frame fits in its
 *            ring now: write it as one record, done
 *   receive  no receive posted earlier and no message kept unexpected
 *            could take the peer's message with this tag first, and the
 *            record at the reader's position is a whole eager frame with the
 *            receive's tag and size: copy its payload out, consume it, done
 * Anything else (a full ring, another frame first, a mismatch, a failed
 * group) answers QUICK_GENERAL and the caller takes the general path, which
 * finds everything where it was: the quick path never consumes what it does
 * not deliver.  Matching order holds: a record is taken only when it is the
 * peer's next frame and nothing earlier could claim it or be claimed. */
#define _GNU_SOURCE
#include <stdatomic.h>
#include <string.h>
#include "p2p_internal.h"

/* The quick path applies to peer at all (no lock: these never change after
 * the engine starts). */
static peer *quick_peer(spmd__mesh *g, int i, size_t len) {
    spmd__p2p *p = g->p2p;
    if (g->ext || !p || !p->nshm || len > SPMD__P2P_QUICK_MAX || i < 0 || i >= g->world || i == g->rank) return NULL;
    peer *pe = &p->peers[i];
    return pe->shm ? pe : NULL;
}

/* Under the lock: the peer can still be written to and read from. */
static int usable(spmd__mesh *g, peer *pe) {
    return !atomic_load_explicit(&g->failed, memory_order_relaxed) && !pe->dead && !pe->left && pe->fd >= 0;
}

int spmd__p2p_quick_send(spmd__mesh *g, int to, int tag, int dt, const void *buf, size_t len) {
    peer *pe = quick_peer(g, to, len);
    if (!pe) return SPMD__QUICK_GENERAL;
    spmd__p2p *p = g->p2p;
    unsigned char hdr[HDR];
    hdr_put(hdr, with_dt(F_EAGER, dt), (uint32_t)tag, len, 0);
    struct iovec iov[2] = {{hdr, HDR}, {(void *)(uintptr_t)buf, len}};
    int r = SPMD__QUICK_GENERAL;
    spmd__elock_lock(&p->mu);
    if (usable(g, pe) && !pe->sq && spmd__shm_write_whole(pe->path, iov, len ? 2 : 1) > 0) {
        if (g->on_done_now) g->on_done_now(g->hook_arg, 1, to, tag, len, dt);
        p->quick_sends++;
        r = SPMD__QUICK_DONE;
    }
    spmd__p2p_unlock_engine(p);
    return r;
}

/* Under the lock: deliver the peer's next record to q if it is the whole
 * eager frame q wants. */
static int take_record(spmd__mesh *g, spmd__p2p *p, peer *pe, spmd__quick_recv *q) {
    if (pe->sq && spmd__p2p_flush_peer(p, q->peer) < 0) return SPMD__QUICK_GENERAL; /* the general path fails it */
    size_t n;
    const unsigned char *rec = spmd__shm_record(pe->path, &n);
    if (!rec) return SPMD__QUICK_NOT_YET;
    if (n < HDR) return SPMD__QUICK_GENERAL; /* a frame split across records */
    uint32_t word = spmd__get_u32(rec);
    int fdt = (int)((word >> 8) & 0xff) - 1;
    uint64_t flen = spmd__get_u64(rec + 8);
    if ((word & 0xffu) != F_EAGER || (word >> 16) || fdt >= SPMD_DTYPE_COUNT ||
        spmd__get_u32(rec + 4) != (uint32_t)q->tag || n != HDR + flen || !spmd__p2p_fits(flen, fdt, q->len, q->dt))
        return SPMD__QUICK_GENERAL;
    if (flen) memcpy(q->buf, rec + HDR, (size_t)flen);
    spmd__shm_record_done(pe->path);
    pe->rx += n;
    if (g->on_done_now) g->on_done_now(g->hook_arg, 0, q->peer, q->tag, q->len, q->dt);
    p->quick_recvs++;
    return SPMD__QUICK_DONE;
}

/* Under the lock: a receive posted earlier, or a message kept unexpected,
 * would have a message from src with this tag first. */
static int claimed_first(const spmd__p2p *p, int src, int tag) {
    for (const spmd__preq *w = p->posted; w; w = w->next)
        if (spmd__p2p_matches(w, src, (uint32_t)tag)) return 1;
    for (const unexp *u = p->ux; u; u = u->next)
        if (u->src == src && u->tag == (uint32_t)tag) return 1;
    return 0;
}

static void end_spin_locked(spmd__p2p *p, spmd__quick_recv *q) {
    if (q->spinning) {
        spmd__p2p_spin_end_locked(p, q->peer);
        q->spinning = 0;
    }
}

int spmd__p2p_quick_recv(spmd__mesh *g, spmd__quick_recv *q, int spin) {
    peer *pe = quick_peer(g, q->peer, q->len);
    if (!pe || q->tag < 0) return SPMD__QUICK_GENERAL;
    spmd__p2p *p = g->p2p;
    int r = SPMD__QUICK_GENERAL;
    spmd__elock_lock(&p->mu);
    /* a frame begun by the general reader is its to finish */
    if (usable(g, pe) && !claimed_first(p, q->peer, q->tag) && !pe->hdr_got && !pe->in_payload)
        r = take_record(g, p, pe, q);
    if (r == SPMD__QUICK_NOT_YET && spin && !q->spinning) {
        /* we poll this ring ourselves now: its writer need not wake our progress thread */
        spmd__p2p_spin_begin_locked(p, q->peer);
        q->spinning = 1;
    }
    if (r != SPMD__QUICK_NOT_YET) end_spin_locked(p, q);
    spmd__p2p_unlock_engine(p);
    return r;
}

void spmd__p2p_quick_recv_end(spmd__mesh *g, spmd__quick_recv *q) {
    if (!q->spinning) return;
    spmd__p2p *p = g->p2p;
    spmd__elock_lock(&p->mu);
    end_spin_locked(p, q);
    spmd__p2p_unlock_engine(p);
}

void spmd__p2p_quick_stats(spmd__mesh *g, unsigned long *sends, unsigned long *recvs) {
    spmd__p2p *p = g && !g->ext ? g->p2p : NULL;
    *sends = *recvs = 0;
    if (!p) return;
    spmd__elock_lock(&p->mu);
    *sends = p->quick_sends;
    *recvs = p->quick_recvs;
    spmd__elock_unlock(&p->mu);
}
