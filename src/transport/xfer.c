/* xfer.c — the collective wire (xfer.h) on each pair's collective channel.
 *
 * Every message carries a 24-byte header (xhdr.h: kind, sequence number,
 * descriptor, mode, length) checked on arrival against what this rank is
 * running, so ranks that called different collectives, in a different order,
 * with different arguments or algorithms fail with SPMD_ERR_MISMATCH before a
 * byte of payload is accepted (desync.c says what differs; the context's
 * names, deadline and error: coll_ctx.c).
 *
 * Modes:
 *   INLINE  the payload follows.
 *   CMA     an 8-byte address follows; the receiver reads the payload from
 *           the sender's memory (cma.c) and answers with an ACK.  Used for
 *           messages of g->cma_min bytes or more between ranks that agreed
 *           at connect time, when the caller waits on the collective.
 *   ACK     a header alone: one CMA message was read, its sender may return.
 * Acknowledgements share the stream with the receiver's own messages to the
 * sender, so headers are read per peer and dispatched: an ACK completes the
 * oldest CMA send to that peer (ACKs are only counted: the call returns once
 * every one has come, so which send an ACK completes does not matter),
 * anything else starts the oldest receive.
 *
 * All sends and receives of one spmd__xfer call progress together on
 * non-blocking sockets: first a short busy-poll (the latency of a small
 * collective is a few microseconds, far less than a sleep/wake), then poll()
 * with the group's failure eventfd so a dead peer or a remote abort wakes us.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include "path.h"
#include "xfer.h"
#include "xhdr.h"

#define XHDR SPMD__XHDR
#define SPIN_MAX_BYTES (256u * 1024u)
#define DESC 8                              /* a CMA message's payload: the sender's address */
#define PULL_PIECE ((size_t)1 << 20)        /* one process_vm_readv call at most, so other ops keep moving */

/* Message modes (the header's fourth word). */
enum { M_INLINE = SPMD__XM_INLINE, M_CMA = SPMD__XM_CMA, M_ACK = SPMD__XM_ACK };

typedef enum {
    P_WRITE,     /* send: header (+ payload, or + descriptor) going out */
    P_AWAIT_ACK, /* send by CMA: the receiver has not read it yet */
    P_HDR,       /* recv: waiting for its header */
    P_PAYLOAD,   /* recv: inline payload coming in */
    P_DESC,      /* recv by CMA: the sender's address coming in */
    P_PULL,      /* recv by CMA: reading the sender's memory */
    P_DONE
} phase;

typedef struct {
    int peer, slot, send;
    char *buf;
    size_t len;
    phase ph;
    int cma;
    unsigned char hdr[XHDR + DESC]; /* send: header (+ descriptor); recv by CMA: the descriptor */
    size_t done;                    /* bytes of the current phase moved */
} xop;

/* Per-peer state of one transfer call: the connection is a byte stream in
 * each direction, so at most one message is half-written and one header
 * half-read at a time. */
typedef struct {
    int peer, fd;
    spmd__path *path;
    int writing;                /* index of the send op half-written, -1 */
    int reading;                /* index of the recv op whose payload/descriptor is coming, -1 */
    unsigned char in[XHDR];     /* header being read */
    size_t in_done;
    unsigned acks_due;          /* acknowledgements of CMA reads still to write */
    unsigned char ack[XHDR];
    size_t ack_done;            /* bytes of the current acknowledgement written */
    int shm;                    /* the path is shared-memory rings */
    int armed, closed;          /* asleep on the rings; the connection ended */
} xslot;

typedef struct {
    spmd__coll_ctx *c;
    xop *ops;
    xslot *slots;
    int n, nslots;
} xcall;

static void make_hdr(const spmd__coll_ctx *c, unsigned char *h, uint32_t mode, size_t len) {
    spmd__xhdr_put(c, h, c->agreeing && mode == M_INLINE ? SPMD__XM_AGREE : mode, len);
}

/* A header from `peer` is for this collective?  (Length checked by the caller.) */
static spmd_status check_hdr(spmd__coll_ctx *c, int peer, const unsigned char *h, spmd__xhdr *x) {
    if (!spmd__xhdr_get(h, x))
        return spmd__coll_fail(c, SPMD_ERR_PROTOCOL, "%s: garbage on the collective channel from rank %d",
                               spmd__coll_kind_name(c->kind), peer);
    if (x->kind == (uint32_t)c->kind && x->seq == c->seq && x->desc == c->desc &&
        (x->mode == SPMD__XM_AGREE) == c->agreeing)
        return SPMD_OK;
    return spmd__desync_header(c, peer, x, 1);
}

/* The collective connection to `peer` ended.  If the peer failed its group
 * first, its abort notice is already on the way over the p2p connection:
 * give the progress thread a moment to deliver it, so the error names the
 * real cause rather than the closed socket. */
static spmd_status peer_gone(spmd__coll_ctx *c, int peer, const char *how) {
    spmd__mesh *g = c->m;
    struct pollfd p = {.fd = g->fail_eventfd, .events = POLLIN, .revents = 0};
    int64_t until = spmd__now_ms() + 1000;
    while (!atomic_load(&g->failed) && !atomic_load(&g->peer_left[peer]) && spmd__now_ms() < until) {
        if (poll(&p, 1, 50) < 0 && errno != EINTR) break;
    }
    char fmsg[SPMD__ERRLEN];
    spmd_status st = spmd__mesh_check(g, fmsg, sizeof fmsg);
    if (st) return spmd__coll_fail(c, st, "%s", fmsg);
    if (atomic_load(&g->peer_left[peer]))
        return spmd__coll_fail(c, SPMD_ERR_REMOTE, "%s #%u: rank %d destroyed the group while rank %d was still in it",
                               spmd__coll_kind_name(c->kind), c->seq, peer, g->rank);
    return spmd__coll_fail(c, SPMD_ERR_REMOTE, "%s #%u: rank %d %s", spmd__coll_kind_name(c->kind), c->seq, peer, how);
}

/* errno of a failed send/recv on the connection to peer, as a status. */
static spmd_status sock_error(spmd__coll_ctx *c, int peer) {
    char how[256];
    int e = errno;
    snprintf(how, sizeof how, "%s: %s", e == EBADMSG ? "cannot be trusted" : "is unreachable", spmd__path_strerror(e));
    return peer_gone(c, peer, how);
}

/* Bytes op o puts on the wire in phase P_WRITE. */
static size_t wire_len(const xop *o) { return XHDR + (o->cma ? DESC : o->len); }

/* Write what the slot has to write.  1 = progress, 0 = would block or
 * nothing to write, < 0 = error status. */
static int slot_write(xcall *x, xslot *s) {
    int progressed = 0;
    for (;;) {
        struct iovec iov[2];
        int k = 0;
        xop *o = NULL;
        if (s->writing < 0 && s->ack_done == 0 && s->acks_due == 0) {
            for (int i = 0; i < x->n; i++)
                if (x->ops[i].slot == s - x->slots && x->ops[i].send && x->ops[i].ph == P_WRITE) {
                    s->writing = i;
                    break;
                }
        }
        if (s->writing >= 0) {
            o = &x->ops[s->writing];
            size_t hl = o->cma ? XHDR + DESC : XHDR;
            if (o->done < hl) {
                iov[k].iov_base = o->hdr + o->done;
                iov[k++].iov_len = hl - o->done;
                if (!o->cma && o->len) { iov[k].iov_base = o->buf; iov[k++].iov_len = o->len; }
            } else {
                iov[k].iov_base = o->buf + (o->done - XHDR);
                iov[k++].iov_len = wire_len(o) - o->done;
            }
        } else if (s->ack_done > 0 || s->acks_due > 0) {
            if (s->ack_done == 0) make_hdr(x->c, s->ack, M_ACK, 0);
            iov[k].iov_base = s->ack + s->ack_done;
            iov[k++].iov_len = XHDR - s->ack_done;
        } else {
            return progressed;
        }
        ssize_t n = spmd__path_writev(s->path, iov, k);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return progressed;
        if (n < 0) return sock_error(x->c, s->peer);
        progressed = 1;
        if (o) {
            o->done += (size_t)n;
            if (o->done == wire_len(o)) {
                o->ph = o->cma ? P_AWAIT_ACK : P_DONE;
                o->done = 0;
                s->writing = -1;
            }
        } else {
            s->ack_done += (size_t)n;
            if (s->ack_done == XHDR) {
                s->ack_done = 0;
                s->acks_due--;
            }
        }
    }
}

/* The first op of the slot (by index) with the given direction and phase, -1. */
static int first_op(const xcall *x, const xslot *s, int send, phase ph) {
    for (int i = 0; i < x->n; i++)
        if (x->ops[i].slot == s - x->slots && x->ops[i].send == send && x->ops[i].ph == ph) return i;
    return -1;
}

/* A whole header arrived on slot s: an acknowledgement completes the oldest
 * CMA send to that peer; a data header starts the oldest waiting receive. */
static spmd_status dispatch_hdr(xcall *x, xslot *s) {
    spmd__coll_ctx *c = x->c;
    spmd__xhdr h;
    spmd_status st = check_hdr(c, s->peer, s->in, &h);
    if (st) return st;
    uint32_t mode = h.mode;
    uint64_t len = h.len;
    const char *mine = spmd__coll_kind_name(c->kind);
    if (mode == M_ACK) {
        int i = first_op(x, s, 1, P_AWAIT_ACK);
        if (i < 0)
            return spmd__coll_fail(c, SPMD_ERR_PROTOCOL, "%s #%u: unexpected acknowledgement from rank %d", mine,
                                   c->seq, s->peer);
        x->ops[i].ph = P_DONE;
        return SPMD_OK;
    }
    int i = first_op(x, s, 0, P_HDR);
    if (i < 0)
        return spmd__coll_fail(c, SPMD_ERR_MISMATCH, "%s #%u: rank %d sent a message rank %d does not expect",
                               mine, c->seq, s->peer, c->m->rank);
    xop *o = &x->ops[i];
    if (len != o->len)
        return spmd__coll_fail(c, SPMD_ERR_MISMATCH,
                               "%s #%u: rank %d sent %llu bytes where rank %d expected %zu "
                               "(count or dtype differ across ranks?)",
                               mine, c->seq, s->peer, (unsigned long long)len, c->m->rank, o->len);
    if (mode == M_CMA && !c->m->cma[s->peer].ok)
        return spmd__coll_fail(c, SPMD_ERR_PROTOCOL, "%s #%u: rank %d offered its memory, which we cannot read",
                               mine, c->seq, s->peer);
    o->cma = mode == M_CMA;
    o->ph = o->cma ? P_DESC : P_PAYLOAD;
    o->done = 0;
    if (o->ph == P_PAYLOAD && o->len == 0) o->ph = P_DONE;
    else s->reading = i;
    return SPMD_OK;
}

/* Does slot s need bytes from its peer now? */
static int wants_read(const xcall *x, const xslot *s) {
    return s->reading >= 0 || first_op(x, s, 0, P_HDR) >= 0 || first_op(x, s, 1, P_AWAIT_ACK) >= 0;
}

/* Read what the slot is owed.  1 = progress, 0 = would block or nothing
 * wanted, < 0 = error status. */
static int slot_read(xcall *x, xslot *s) {
    int progressed = 0;
    while (wants_read(x, s)) {
        void *dst;
        size_t want;
        xop *o = s->reading >= 0 ? &x->ops[s->reading] : NULL;
        if (!o) {
            dst = s->in + s->in_done;
            want = XHDR - s->in_done;
        } else if (o->ph == P_DESC) {
            dst = o->hdr + o->done;
            want = DESC - o->done;
        } else {
            dst = o->buf + o->done;
            want = o->len - o->done;
        }
        ssize_t n = spmd__path_read(s->path, dst, want);
        if (n == 0) return peer_gone(x->c, s->peer, "closed its connection (died?)");
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return progressed;
        if (n < 0) return sock_error(x->c, s->peer);
        progressed = 1;
        if (!o) {
            s->in_done += (size_t)n;
            if (s->in_done == XHDR) {
                s->in_done = 0;
                spmd_status st = dispatch_hdr(x, s);
                if (st) return st;
            }
            continue;
        }
        o->done += (size_t)n;
        if (o->ph == P_DESC && o->done == DESC) {
            o->ph = P_PULL;
            o->done = 0;
            s->reading = -1;
        } else if (o->ph == P_PAYLOAD && o->done == o->len) {
            o->ph = P_DONE;
            s->reading = -1;
        }
    }
    return progressed;
}

/* Read the next piece of a CMA message from the sender's memory. */
static spmd_status pull(xcall *x, xop *o) {
    size_t piece = o->len - o->done < PULL_PIECE ? o->len - o->done : PULL_PIECE;
    char why[SPMD__ERRLEN];
    uint64_t addr = spmd__get_u64(o->hdr) + o->done;
    spmd_status st = spmd__cma_read(x->c->m, o->peer, o->buf + o->done, addr, piece, why, sizeof why);
    /* A peer that failed its group (or is gone) is not the cause: its abort
     * notice, naming the cause, is on the way. */
    if (st == SPMD_ERR_REMOTE) return peer_gone(x->c, o->peer, why);
    if (st) return spmd__coll_fail(x->c, st, "%s #%u: %s", spmd__coll_kind_name(x->c->kind), x->c->seq, why);
    o->done += piece;
    if (o->done == o->len) {
        o->ph = P_DONE;
        x->slots[o->slot].acks_due++;
    }
    return SPMD_OK;
}

static int call_finished(const xcall *x) {
    for (int i = 0; i < x->n; i++)
        if (x->ops[i].ph != P_DONE) return 0;
    for (int i = 0; i < x->nslots; i++)
        if (x->slots[i].acks_due || x->slots[i].ack_done) return 0;
    return 1;
}

/* Bytes still to move (what decides whether spinning pays). */
static size_t bytes_left(const xcall *x) {
    size_t left = 0;
    for (int i = 0; i < x->n; i++) {
        const xop *o = &x->ops[i];
        if (o->ph == P_WRITE) left += wire_len(o) - o->done;
        else if (o->ph == P_HDR) left += XHDR + o->len;
        else if (o->ph == P_PAYLOAD) left += o->len - o->done;
        else if (o->ph != P_DONE) left += XHDR;
    }
    return left;
}

static spmd_status timed_out(const xcall *x) {
    spmd__coll_ctx *c = x->c;
    char who[160] = "";
    size_t used = 0;
    for (int k = 0; k < x->n && used + 40 < sizeof who; k++) {
        const xop *o = &x->ops[k];
        if (o->ph == P_DONE) continue;
        size_t moved = o->ph == P_PAYLOAD || o->ph == P_PULL ? o->done
                       : o->ph == P_WRITE && !o->cma && o->done > XHDR ? o->done - XHDR
                       : o->ph == P_AWAIT_ACK ? o->len : 0;
        used += (size_t)snprintf(who + used, sizeof who - used, " %s rank %d (%zu/%zu bytes)",
                                 o->send ? "sending to" : "receiving from", o->peer, moved, o->len);
    }
    return spmd__coll_fail(c, SPMD_ERR_TIMEOUT, "%s #%u timed out on rank %d,%s", spmd__coll_kind_name(c->kind),
                           c->seq, c->m->rank, who);
}

/* Stuck for a while: do the peers we are not reading from run what we run?
 * (Ranks that disagree may each wait for a message the other never sends.) */
static spmd_status watch(xcall *x) {
    unsigned char *reading = calloc((size_t)x->c->m->world, 1);
    if (!reading) return SPMD_OK; /* only a diagnosis: try again later */
    for (int i = 0; i < x->nslots; i++)
        if (wants_read(x, &x->slots[i]) || x->slots[i].in_done) reading[x->slots[i].peer] = 1;
    spmd_status st = spmd__desync_watch(x->c, reading);
    free(reading);
    return st;
}

static spmd_status run(xcall *x, struct pollfd *pfds) {
    spmd__coll_ctx *c = x->c;
    spmd__mesh *g = c->m;
    uint64_t spin_start = 0, idle_since = 0, next_watch = 0;
    const uint64_t watch_ns = (uint64_t)SPMD__DESYNC_WATCH_MS * 1000000u;
    for (;;) {
        int progressed = 0, pulling = 0;
        for (int i = 0; i < x->nslots; i++) {
            int r = slot_write(x, &x->slots[i]);
            if (r < 0) return (spmd_status)r;
            progressed |= r;
            if ((r = slot_read(x, &x->slots[i])) < 0) return (spmd_status)r;
            progressed |= r;
        }
        for (int k = 0; k < x->n; k++) {
            if (x->ops[k].ph != P_PULL) continue;
            spmd_status st = pull(x, &x->ops[k]);
            if (st) return st;
            progressed = pulling = 1;
        }
        if (call_finished(x)) return SPMD_OK;
        if (progressed || pulling) { spin_start = idle_since = 0; continue; }
        /* Nothing moved: busy-poll a little, then sleep in poll().  Spinning
         * only pays while little is left to move: a large transfer waits on
         * the kernel's buffers, and a poll wake-up is cheap next to it. */
        uint64_t now = spmd__now_ns();
        if (!spin_start) spin_start = now;
        if (bytes_left(x) <= SPIN_MAX_BYTES && now - spin_start < c->spin_ns) {
            if (c->yield_in_spin) sched_yield();
            continue;
        }
        char fmsg[SPMD__ERRLEN];
        spmd_status st = spmd__mesh_check(g, fmsg, sizeof fmsg);
        if (st) return spmd__coll_fail(c, st, "%s", fmsg);
        if (!idle_since) idle_since = now, next_watch = now + watch_ns;
        if (now >= next_watch) {
            if ((st = watch(x))) return st;
            next_watch = now + watch_ns;
        }
        int np = 0, busy = 0;
        for (int i = 0; i < x->nslots; i++) {
            xslot *s = &x->slots[i];
            int writing = s->writing >= 0 || s->acks_due || s->ack_done || first_op(x, s, 1, P_WRITE) >= 0;
            int reading = wants_read(x, s);
            if (s->closed && (reading || writing)) return peer_gone(c, s->peer, "closed its connection (died?)");
            short ev = 0;
            if (s->shm) {
                /* rings: announce the sleep; the peer's doorbell (or the
                 * connection's close) makes the socket readable */
                if (reading || writing) {
                    s->armed = 1;
                    busy |= spmd__path_arm(s->path, reading, writing);
                    ev = POLLIN;
                }
            } else {
                if (writing) ev |= POLLOUT;
                if (reading) ev |= POLLIN;
            }
            if (!ev) continue;
            pfds[np].fd = s->fd;
            pfds[np].events = ev;
            pfds[np++].revents = 0;
        }
        pfds[np].fd = g->fail_eventfd;
        pfds[np].events = POLLIN;
        pfds[np++].revents = 0;
        int left = spmd__ctx_left_ms(c);
        if (left == 0) return timed_out(x);
        int wait_ms = (int)((next_watch - now) / 1000000u) + 1;
        if (left >= 0 && left < wait_ms) wait_ms = left;
        int r = busy ? 0 : poll(pfds, (nfds_t)np, wait_ms);
        if (r < 0 && errno != EINTR) return spmd__coll_fail(c, SPMD_ERR_SYSTEM, "poll: %s", strerror(errno));
        for (int i = 0; i < x->nslots; i++) {
            xslot *s = &x->slots[i];
            if (!s->armed) continue;
            s->armed = 0;
            if (!spmd__path_disarm(s->path)) s->closed = 1; /* read what is left first */
        }
        spin_start = 0;
    }
}

spmd_status spmd__xfer(spmd__coll_ctx *c, const spmd__xfer_op *sends, int nsends,
                       const spmd__xfer_op *recvs, int nrecvs) {
    spmd__mesh *g = c->m;
    if (g->ext) return g->ext->xfer(c, sends, nsends, recvs, nrecvs);
    int n = nsends + nrecvs;
    if (n == 0) return SPMD_OK;
    enum { STACK = 16 };
    xop stack_ops[STACK];
    xslot stack_slots[STACK];
    struct pollfd stack_pfds[STACK + 1];
    xcall x = {c, stack_ops, stack_slots, n, 0};
    struct pollfd *pfds = stack_pfds;
    if (n > STACK) {
        x.ops = calloc((size_t)n, sizeof *x.ops);
        x.slots = calloc((size_t)n, sizeof *x.slots);
        pfds = calloc((size_t)n + 1, sizeof *pfds);
        if (!x.ops || !x.slots || !pfds) {
            free(x.ops);
            free(x.slots);
            free(pfds);
            return spmd__coll_fail(c, SPMD_ERR_NOMEM, "out of memory");
        }
    }
    spmd_status st = SPMD_OK;
    for (int k = 0; k < n; k++) {
        const spmd__xfer_op *in = k < nsends ? &sends[k] : &recvs[k - nsends];
        if (in->peer < 0 || in->peer >= g->world || in->peer == g->rank) {
            st = spmd__coll_fail(c, SPMD_ERR_INVALID, "internal: transfer with rank %d", in->peer);
            goto out;
        }
        xop *o = &x.ops[k];
        o->peer = in->peer;
        o->buf = in->buf;
        o->len = in->len;
        o->send = k < nsends;
        o->done = 0;
        o->cma = o->send && c->use_cma && !c->agreeing && in->len >= g->cma_min && g->cma && g->cma[in->peer].ok;
        o->ph = o->send ? P_WRITE : P_HDR;
        if (o->send) {
            make_hdr(c, o->hdr, o->cma ? M_CMA : M_INLINE, in->len);
            if (o->cma) spmd__put_u64(o->hdr + XHDR, (uint64_t)(uintptr_t)in->buf);
        }
        int s = 0;
        while (s < x.nslots && x.slots[s].peer != in->peer) s++;
        if (s == x.nslots) {
            xslot *sl = &x.slots[x.nslots++];
            memset(sl, 0, sizeof *sl);
            sl->peer = in->peer;
            sl->fd = g->fd[SPMD__CH_COLL][in->peer];
            sl->path = g->path[SPMD__CH_COLL][in->peer];
            sl->shm = spmd__path_is_shm(sl->path);
            sl->writing = sl->reading = -1;
        }
        o->slot = s;
    }
    st = run(&x, pfds);
out:
    if (x.ops != stack_ops) {
        free(x.ops);
        free(x.slots);
        free(pfds);
    }
    return st;
}

spmd_status spmd__xsend(spmd__coll_ctx *c, int peer, const void *buf, size_t len) {
    spmd__xfer_op s = {peer, (void *)buf, len};
    return spmd__xfer(c, &s, 1, NULL, 0);
}

spmd_status spmd__xrecv(spmd__coll_ctx *c, int peer, void *buf, size_t len) {
    spmd__xfer_op r = {peer, buf, len};
    return spmd__xfer(c, NULL, 0, &r, 1);
}

spmd_status spmd__xsendrecv(spmd__coll_ctx *c, int speer, const void *sbuf, size_t slen, int rpeer,
                            void *rbuf, size_t rlen) {
    spmd__xfer_op s = {speer, (void *)sbuf, slen}, r = {rpeer, rbuf, rlen};
    return spmd__xfer(c, &s, 1, &r, 1);
}
