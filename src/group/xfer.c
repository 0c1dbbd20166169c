/* xfer.c — the transfer API of coll.h on the collective channel.
 *
 * Every message carries a 24-byte header:
 *     u32 magic|kind | u32 sequence | u32 descriptor hash | u32 zero | u64 len
 * checked on arrival against what this rank is running, so ranks that called
 * different collectives, in a different order or with different arguments fail
 * with SPMD_ERR_MISMATCH before a byte of payload is accepted.
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
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include "exec_internal.h"

#define XHDR 24
#define XMAGIC 0xC0u
#define SPIN_MAX_BYTES (256u * 1024u)

int spmd__ctx_rank(const spmd__coll_ctx *c) { return c->g->rank; }
int spmd__ctx_world(const spmd__coll_ctx *c) { return c->g->world; }
size_t spmd__ctx_segment_bytes(const spmd__coll_ctx *c) { return c->segment_bytes; }

void *spmd__scratch(spmd__coll_ctx *c, int slot, size_t bytes) {
    if (slot < 0 || slot >= SPMD__SCRATCH_SLOTS) return NULL;
    if (bytes == 0) bytes = 1;
    if (c->scratch_len[slot] < bytes) {
        void *p = NULL;
        if (posix_memalign(&p, 64, bytes) != 0) return NULL;
        free(c->scratch[slot]);
        c->scratch[slot] = p;
        c->scratch_len[slot] = bytes;
    }
    return c->scratch[slot];
}

spmd_status spmd__coll_fail(spmd__coll_ctx *c, spmd_status st, const char *fmt, ...) {
    if (!c->err[0] || st) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(c->err, sizeof c->err, fmt, ap);
        va_end(ap);
    }
    return st;
}

typedef struct {
    int peer, fd;
    char *buf;
    size_t len;
    unsigned char hdr[XHDR];
    size_t done;   /* bytes of header + payload moved */
    int send;
} xop;

static void make_hdr(const spmd__coll_ctx *c, unsigned char *h, size_t len) {
    spmd__put_u32(h, (XMAGIC << 24) | (uint32_t)c->kind);
    spmd__put_u32(h + 4, c->seq);
    spmd__put_u32(h + 8, c->desc);
    spmd__put_u32(h + 12, 0);
    spmd__put_u64(h + 16, (uint64_t)len);
}

static spmd_status check_hdr(spmd__coll_ctx *c, const xop *o) {
    const unsigned char *h = o->hdr;
    uint32_t mk = spmd__get_u32(h), seq = spmd__get_u32(h + 4), desc = spmd__get_u32(h + 8);
    uint64_t len = spmd__get_u64(h + 16);
    int me = c->g->rank;
    const char *mine = spmd__coll_kind_name(c->kind);
    if ((mk >> 24) != XMAGIC || spmd__get_u32(h + 12) != 0)
        return spmd__coll_fail(c, SPMD_ERR_PROTOCOL, "%s: garbage on the collective channel from rank %d",
                               mine, o->peer);
    spmd__coll_kind k = (spmd__coll_kind)(mk & 0xff);
    if (k != c->kind || seq != c->seq)
        return spmd__coll_fail(c, SPMD_ERR_MISMATCH,
                               "collective mismatch: rank %d is in %s #%u while rank %d is in %s #%u "
                               "(collectives called in a different order on different ranks?)",
                               o->peer, spmd__coll_kind_name(k), seq, me, mine, c->seq);
    if (desc != c->desc)
        return spmd__coll_fail(c, SPMD_ERR_MISMATCH,
                               "%s #%u: rank %d and rank %d passed different arguments "
                               "(count, dtype, reduce op or root differ)",
                               mine, c->seq, o->peer, me);
    if (len != o->len)
        return spmd__coll_fail(c, SPMD_ERR_MISMATCH,
                               "%s #%u: rank %d sent %llu bytes where rank %d expected %zu "
                               "(count or dtype differ across ranks?)",
                               mine, c->seq, o->peer, (unsigned long long)len, me, o->len);
    return SPMD_OK;
}

/* The collective connection to `peer` ended.  If the peer failed its group
 * first, its abort notice is already on the way over the p2p connection:
 * give the progress thread a moment to deliver it, so the error names the
 * real cause rather than the closed socket. */
static spmd_status peer_gone(spmd__coll_ctx *c, int peer, const char *how) {
    spmd_group *g = c->g;
    struct pollfd p = {.fd = g->fail_eventfd, .events = POLLIN, .revents = 0};
    int64_t until = spmd__now_ms() + 1000;
    while (!atomic_load(&g->failed) && !atomic_load(&g->peer_left[peer]) && spmd__now_ms() < until) {
        if (poll(&p, 1, 50) < 0 && errno != EINTR) break;
    }
    char fmsg[SPMD__ERRLEN];
    spmd_status st = spmd__group_check(g, fmsg, sizeof fmsg);
    if (st) return spmd__coll_fail(c, st, "%s", fmsg);
    if (atomic_load(&g->peer_left[peer]))
        return spmd__coll_fail(c, SPMD_ERR_REMOTE, "%s #%u: rank %d destroyed the group while rank %d was still in it",
                               spmd__coll_kind_name(c->kind), c->seq, peer, g->rank);
    return spmd__coll_fail(c, SPMD_ERR_REMOTE, "%s #%u: rank %d %s", spmd__coll_kind_name(c->kind), c->seq, peer, how);
}

/* Move as many bytes of op o as the socket takes now.  1 = progress, 0 = would
 * block, <0 = error status. */
static int step(spmd__coll_ctx *c, xop *o) {
    size_t total = XHDR + o->len;
    int progressed = 0;
    while (o->done < total) {
        ssize_t n;
        if (o->send) {
            struct iovec iov[2];
            int k = 0;
            if (o->done < XHDR) {
                iov[k].iov_base = o->hdr + o->done;
                iov[k++].iov_len = XHDR - o->done;
                if (o->len) { iov[k].iov_base = o->buf; iov[k++].iov_len = o->len; }
            } else {
                iov[k].iov_base = o->buf + (o->done - XHDR);
                iov[k++].iov_len = total - o->done;
            }
            struct msghdr mh;
            memset(&mh, 0, sizeof mh);
            mh.msg_iov = iov;
            mh.msg_iovlen = (size_t)k;
            n = sendmsg(o->fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
        } else if (o->done < XHDR) {
            n = recv(o->fd, o->hdr + o->done, XHDR - o->done, MSG_DONTWAIT);
        } else {
            n = recv(o->fd, o->buf + (o->done - XHDR), total - o->done, MSG_DONTWAIT);
        }
        if (n > 0) {
            size_t before = o->done;
            o->done += (size_t)n;
            progressed = 1;
            if (!o->send && before < XHDR && o->done >= XHDR) {
                spmd_status st = check_hdr(c, o);
                if (st) return st;
            }
            continue;
        }
        if (n == 0 && !o->send) return peer_gone(c, o->peer, "closed its connection (died?)");
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
        char how[128];
        snprintf(how, sizeof how, "is unreachable: %s", strerror(errno));
        return peer_gone(c, o->peer, how);
    }
    return progressed;
}

/* Is op k blocked behind an earlier unfinished op in the same direction to the same peer? */
static int queued_behind(const xop *ops, int k) {
    for (int j = 0; j < k; j++)
        if (ops[j].peer == ops[k].peer && ops[j].send == ops[k].send && ops[j].done < XHDR + ops[j].len)
            return 1;
    return 0;
}

spmd_status spmd__xfer(spmd__coll_ctx *c, const spmd__xfer_op *sends, int nsends,
                       const spmd__xfer_op *recvs, int nrecvs) {
    spmd_group *g = c->g;
    int n = nsends + nrecvs;
    if (n == 0) return SPMD_OK;
    xop stack_ops[16];
    xop *ops = stack_ops;
    if (n > 16) {
        ops = calloc((size_t)n, sizeof *ops);
        if (!ops) return spmd__coll_fail(c, SPMD_ERR_NOMEM, "out of memory");
    }
    for (int k = 0; k < n; k++) {
        const spmd__xfer_op *x = k < nsends ? &sends[k] : &recvs[k - nsends];
        if (x->peer < 0 || x->peer >= g->world || x->peer == g->rank) {
            if (ops != stack_ops) free(ops);
            return spmd__coll_fail(c, SPMD_ERR_INVALID, "internal: transfer with rank %d", x->peer);
        }
        ops[k].peer = x->peer;
        ops[k].fd = g->coll_fd[x->peer];
        ops[k].buf = x->buf;
        ops[k].len = x->len;
        ops[k].done = 0;
        ops[k].send = k < nsends;
        if (ops[k].send) make_hdr(c, ops[k].hdr, x->len);
    }
    spmd_status st = SPMD_OK;
    int remaining = n;
    uint64_t spin_start = 0;
    struct pollfd pstack[17];
    struct pollfd *pfds = n + 1 <= 17 ? pstack : malloc(sizeof(struct pollfd) * (size_t)(n + 1));
    if (!pfds) {
        if (ops != stack_ops) free(ops);
        return spmd__coll_fail(c, SPMD_ERR_NOMEM, "out of memory");
    }
    while (remaining > 0) {
        int progressed = 0;
        for (int k = 0; k < n; k++) {
            if (ops[k].done == XHDR + ops[k].len) continue;
            if (queued_behind(ops, k)) continue;
            int r = step(c, &ops[k]);
            if (r < 0) { st = (spmd_status)r; goto out; }
            if (r > 0) progressed = 1;
            if (ops[k].done == XHDR + ops[k].len) remaining--;
        }
        if (remaining == 0) break;
        if (progressed) { spin_start = 0; continue; }
        /* Nothing moved: busy-poll a little, then sleep in poll().  Spinning
         * only pays while little is left to move: a large transfer waits on
         * the kernel's buffers, and a poll wake-up is cheap next to it. */
        uint64_t now = spmd__now_ns();
        if (!spin_start) spin_start = now;
        size_t left_bytes = 0;
        for (int k = 0; k < n; k++) left_bytes += XHDR + ops[k].len - ops[k].done;
        if (left_bytes <= SPIN_MAX_BYTES && now - spin_start < c->spin_ns) {
            if (c->yield_in_spin) sched_yield();
            continue;
        }
        char fmsg[SPMD__ERRLEN];
        st = spmd__group_check(g, fmsg, sizeof fmsg);
        if (st) { spmd__coll_fail(c, st, "%s", fmsg); goto out; }
        int np = 0;
        for (int k = 0; k < n; k++) {
            if (ops[k].done == XHDR + ops[k].len || queued_behind(ops, k)) continue;
            pfds[np].fd = ops[k].fd;
            pfds[np].events = ops[k].send ? POLLOUT : POLLIN;
            pfds[np++].revents = 0;
        }
        pfds[np].fd = g->fail_eventfd;
        pfds[np].events = POLLIN;
        pfds[np++].revents = 0;
        int left = spmd__remaining_ms(c->deadline);
        if (left == 0) {
            char who[160] = "";
            size_t used = 0;
            for (int k = 0; k < n && used + 40 < sizeof who; k++)
                if (ops[k].done < XHDR + ops[k].len)
                    used += (size_t)snprintf(who + used, sizeof who - used, " %s rank %d (%zu/%zu bytes)",
                                             ops[k].send ? "sending to" : "receiving from", ops[k].peer,
                                             ops[k].done > XHDR ? ops[k].done - XHDR : 0, ops[k].len);
            st = spmd__coll_fail(c, SPMD_ERR_TIMEOUT, "%s #%u timed out on rank %d,%s",
                                 spmd__coll_kind_name(c->kind), c->seq, g->rank, who);
            goto out;
        }
        int r = poll(pfds, (nfds_t)np, left < 0 || left > 1000 ? 1000 : left);
        if (r < 0 && errno != EINTR) {
            st = spmd__coll_fail(c, SPMD_ERR_SYSTEM, "poll: %s", strerror(errno));
            goto out;
        }
        spin_start = 0;
    }
out:
    if (pfds != pstack) free(pfds);
    if (ops != stack_ops) free(ops);
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
