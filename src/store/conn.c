/* conn.c — the store server's clients: accepting, the handshake, reading
 * requests into an input buffer (grown only as bytes arrive, never from a
 * length the peer claims) and running them (ops.c); the replies go out and
 * connections end through reply.c.
 *
 * Requests of one connection run one at a time, in order: the next is decoded
 * only when the previous reply has been flushed and nothing is parked.  A peer
 * that breaks the protocol (bad magic, bad length, unknown op, frame cut
 * short) is logged with SPMD_LOGW and dropped; everyone else carries on.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>
#include "store/server_internal.h"

/* Bytes read from one connection per wake-up: a client sending a huge value
 * shares the loop with everyone else. */
#define READ_ROUNDS 16

/* One step of the handshake (store/handshake.h) on what is buffered; returns
 * 1 when the connection is gone or going. */
static int handshake(spmd_store_server *s, conn *c) {
    if (c->in_len == c->in_off) return 0;
    char err[256] = "";
    unsigned char out[SPMD__STORE_SHELLO_LEN];
    size_t outlen = 0;
    int refuse = 0;
    size_t used = spmd__store_hs_server(&c->hs, &s->auth, s->nconns - s->npending >= s->lim.max_conns,
                                        c->in + c->in_off, c->in_len - c->in_off, out, &outlen,
                                        &refuse, err, sizeof err);
    if (refuse == 2) {
        spmd__store_drop(s, c, 1, "refused in the handshake: %s", err);
        return 1;
    }
    c->in_off += used;
    if (outlen) {
        if (spmd__store_queue_raw(s, c, out, outlen)) {
            spmd__store_drop(s, c, 1, "out of memory");
            return 1;
        }
    }
    if (refuse) {
        s->nrefused++; /* the serving thread holds s->mu here */
        s->refused_ns = spmd__now_ns();
        snprintf(s->refused_last, sizeof s->refused_last, "client %s: %s", c->name, err);
        if (spmd__ratelimit_ok(&s->refusals, "store server"))
            SPMD_LOGW("store server: refused client %s: %s", c->name, err);
        c->closing = 1;
        spmd__store_flush(s, c);
        return 1;
    }
    if (c->hs.stage == 2) {
        c->hello_done = 1;
        s->npending--;
        SPMD_LOGD("store server: client %s authenticated", c->name);
    }
    if (!spmd__store_flush(s, c)) return 1;
    return 0;
}

/* Decode and run what is buffered, one request at a time. */
void spmd__store_process(spmd_store_server *s, conn *c) {
    char err[256];
    while (!c->dead && !c->closing && c->in_len > c->in_off) {
        const unsigned char *p = c->in + c->in_off;
        size_t avail = c->in_len - c->in_off;
        if (!c->hello_done) {
            if (handshake(s, c)) return;
            if (!c->hello_done) break;
            continue;
        }
        if (c->parked || c->out_len > c->out_off) break;
        spmd__store_req req;
        spmd__wire_result r = spmd__store_decode_req(p, avail, &req, err, sizeof err);
        if (r == SPMD__WIRE_MORE) break;
        if (r == SPMD__WIRE_BAD) {
            spmd__store_drop(s, c, 1, "%s", err);
            return;
        }
        /* Its reply must fit in the store's memory limit, with the others
         * queued: until it does, this client waits and nothing more of it is read. */
        int room = spmd__store_reply_room(s, c, spmd__store_reply_bound(s, &req));
        if (room == 0) return;
        if (room < 0)
            spmd__store_reply_err(s, c, req.seq, SPMD_ERR_NOMEM, "store server: %s", s->limit_msg);
        else
            spmd__store_execute(s, c, &req);
        if (c->dead) return;
        if (c->stolen) c->stolen = 0; /* the buffer went with the value */
        else c->in_off += req.frame_len;
        if (!spmd__store_flush(s, c)) return;
    }
    if (!c->dead && c->in_off == c->in_len) {
        c->in_off = c->in_len = 0;
        if (c->in_cap > KEEP_CAP) {
            spmd__store_charge(s, 0, c->in_cap);
            free(c->in);
            c->in = NULL;
            c->in_cap = 0;
        }
    }
}

/* Pull what the socket has (bounded per wake-up), then process it. */
void spmd__store_on_readable(spmd_store_server *s, conn *c) {
    int eof = 0;
    for (int round = 0; round < READ_ROUNDS && !c->dead; round++) {
        if (c->in_off && (c->in_off == c->in_len || c->in_cap - c->in_len < IO_CHUNK)) {
            memmove(c->in, c->in + c->in_off, c->in_len - c->in_off);
            c->in_len -= c->in_off;
            c->in_off = 0;
        }
        /* Where the request being received ends, once its length is here
         * (the decoder checks that length; here it only stops the buffer
         * from growing past the request, never ahead of the bytes). */
        size_t end = 0;
        if (c->hello_done && c->in_len - c->in_off >= 4) {
            end = c->in_off + 4 + (size_t)spmd__get_u32(c->in + c->in_off);
            if (end <= c->in_len) {
                if (!c->parked && c->out_off == c->out_len) break; /* serve it first */
                end = 0; /* it waits its turn: read on as before */
            }
        }
        if (c->in_cap - c->in_len < IO_CHUNK && !(end > c->in_len && end <= c->in_cap)) {
            if (c->in_len >= IN_LIMIT) {
                spmd__store_drop(s, c, 1, "%zu bytes buffered without a complete request", c->in_len);
                return;
            }
            size_t cap = c->in_cap ? c->in_cap * 2 : IO_CHUNK;
            if (cap < c->in_len + IO_CHUNK) cap = c->in_len + IO_CHUNK;
            if (end > c->in_cap && end < cap) cap = end; /* just the request */
            if (cap > IN_LIMIT) cap = IN_LIMIT;
            size_t more = cap - c->in_cap;
            if (s->bytes + more > s->lim.max_bytes || cap > s->lim.max_client_bytes) {
                spmd__store_drop(s, c, 1, "a request of over %zu bytes would pass the store's memory limits "
                     "(SPMD_STORE_MAX_BYTES %zu, SPMD_STORE_MAX_CLIENT_BYTES %zu)", c->in_len,
                     s->lim.max_bytes, s->lim.max_client_bytes);
                return;
            }
            unsigned char *p = realloc(c->in, cap);
            if (!p) {
                spmd__store_drop(s, c, 1, "out of memory for its input");
                return;
            }
            spmd__store_charge(s, more, 0);
            c->in = p;
            c->in_cap = cap;
        }
        /* Before the proof checks out, read only the handshake's fixed size. */
        size_t room = c->in_cap - c->in_len;
        if (!c->hello_done) {
            size_t want = spmd__store_hs_want(&c->hs), have = c->in_len - c->in_off;
            if (have >= want) break;
            if (room > want - have) room = want - have;
        }
        ssize_t n = recv(c->fd, c->in + c->in_len, room, 0);
        if (n > 0) {
            c->in_len += (size_t)n;
            continue;
        }
        if (n == 0) { eof = 1; break; }
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) break;
        spmd__store_drop(s, c, 0, "recv: %s", strerror(errno));
        return;
    }
    spmd__store_process(s, c);
    if (!eof || c->dead || c->mem_wait) return; /* (a waiter sees the EOF again once served) */
    /* The peer is gone.  Whole requests before the EOF were served above. */
    if (c->in_len > c->in_off)
        spmd__store_drop(s, c, 1, "connection closed in the middle of a %s (%zu bytes of it received)",
             c->hello_done ? "request" : "handshake", c->in_len - c->in_off);
    else
        spmd__store_drop(s, c, 0, "it closed the connection");
}

/* Too many connections in their handshake: drop the oldest (the list is
 * newest first), which has had the longest to prove itself. */
static void shed_pending(spmd_store_server *s) {
    conn *old = NULL;
    for (conn *c = s->conns; c; c = c->next)
        if (!c->hello_done) old = c;
    if (old) spmd__store_drop(s, old, 1, "%d connections in their handshake (SPMD_STORE_MAX_PENDING)", s->npending);
}

/* Connections that did not finish their handshake in time go. */
void spmd__store_expire_handshakes(spmd_store_server *s, uint64_t now) {
    conn *c = s->conns;
    while (c) {
        conn *next = c->next;
        if (!c->hello_done && !c->dead && now >= c->hs_deadline_ns)
            spmd__store_drop(s, c, 1, "no valid handshake within %d ms (SPMD_HANDSHAKE_TIMEOUT_MS)",
                 s->lim.handshake_ms);
        c = next;
    }
}

void spmd__store_accept_all(spmd_store_server *s) {
    for (;;) {
        int fd = spmd__accept(s->lfd);
        if (fd < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK) return;
            if (errno == ECONNABORTED || errno == EPROTO) continue;
            /* Out of descriptors or memory: stop listening for a moment
             * rather than spin on a listening socket that stays readable. */
            SPMD_LOGW("store server: accept: %s (pausing accepts)", strerror(errno));
            epoll_ctl(s->epfd, EPOLL_CTL_DEL, s->lfd, NULL);
            s->accept_paused = 1;
            s->accept_resume_ns = spmd__now_ns() + ACCEPT_PAUSE_NS;
            return;
        }
        conn *c = calloc(1, sizeof *c);
        if (!c) {
            SPMD_LOGW("store server: out of memory for a new client");
            close(fd);
            continue;
        }
        c->fd = fd;
        spmd__sock_name(fd, 1, c->name, sizeof c->name);
        c->hs_deadline_ns = spmd__now_ns() + (uint64_t)s->lim.handshake_ms * 1000000ull;
        if (s->npending >= s->lim.max_pending) shed_pending(s);
        c->events = EPOLLIN | EPOLLRDHUP;
        struct epoll_event ev = {.events = c->events, .data.ptr = c};
        if (epoll_ctl(s->epfd, EPOLL_CTL_ADD, fd, &ev) != 0) {
            SPMD_LOGW("store server: epoll_ctl add: %s", strerror(errno));
            close(fd);
            free(c);
            continue;
        }
        c->next = s->conns;
        if (s->conns) s->conns->prev = c;
        s->conns = c;
        atomic_fetch_add(&s->nconns, 1);
        s->npending++;
        SPMD_LOGD("store server: client %s connected", c->name);
    }
}
