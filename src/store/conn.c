/* conn.c — the store server's clients: accepting, the handshake, reading
 * requests into an input buffer (grown only as bytes arrive, never from a
 * length the peer claims), writing replies from an output buffer, dropping.
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

/* ---- connections ----------------------------------------------------------- */
static void set_events(spmd_store_server *s, conn *c, uint32_t ev) {
    if (c->dead || c->events == ev) return;
    struct epoll_event e = {.events = ev, .data.ptr = c};
    if (epoll_ctl(s->epfd, EPOLL_CTL_MOD, c->fd, &e) == 0) c->events = ev;
}

void spmd__store_enqueue(spmd_store_server *s, conn *c) {
    if (c->queued || c->dead) return;
    c->queued = 1;
    c->qnext = NULL;
    if (s->qtail) s->qtail->qnext = c; else s->qhead = c;
    s->qtail = c;
}

/* The values a leaving connection set stay; they just belong to nobody. */
static void disown(spmd_store_server *s, conn *c) {
    spmd__store_table_disown(&s->table, c);
    c->owned = 0;
}

void spmd__store_drop(spmd_store_server *s, conn *c, int warn, const char *fmt, ...) {
    if (c->dead) return;
    /* A stranger (still in its handshake) reconnecting in a loop: rate-limited. */
    if (warn && !c->hello_done && !spmd__ratelimit_ok(&s->refusals, "store server")) warn = -1;
    if (warn >= 0 && spmd__log_enabled(warn ? SPMD__LOG_WARN : SPMD__LOG_DEBUG)) {
        char why[512];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(why, sizeof why, fmt, ap);
        va_end(ap);
        spmd__log(warn ? SPMD__LOG_WARN : SPMD__LOG_DEBUG, "store server: %s client %s: %s",
                  warn ? "dropping" : "closing", c->name, why);
    }
    spmd__store_unpark(s, c);
    if (c->owned) disown(s, c);
    if (c->mem_wait) {
        for (conn **pp = &s->waiters; *pp; pp = &(*pp)->wnext)
            if (*pp == c) {
                *pp = c->wnext;
                break;
            }
        c->mem_wait = 0;
        atomic_fetch_sub(&s->nwaiting, 1);
    }
    s->unsent -= c->out_len - c->out_off;
    spmd__store_charge(s, 0, c->in_cap + c->out_cap);
    if (!c->hello_done) s->npending--;
    epoll_ctl(s->epfd, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
    c->fd = -1;
    c->dead = 1;
    if (c->prev) c->prev->next = c->next; else s->conns = c->next;
    if (c->next) c->next->prev = c->prev;
    /* The struct and its buffers live until the end of this loop turn: events
     * already fetched and the work queue may still point at it. */
    c->gnext = s->graveyard;
    s->graveyard = c;
    atomic_fetch_sub(&s->nconns, 1);
    if (s->accept_paused) s->accept_resume_ns = 0; /* a descriptor came free */
}

void spmd__store_free_conn(conn *c) {
    free(c->in);
    free(c->out);
    free(c->watches);
    free(c->park_keys);
    free(c);
}

/* Room for `more` bytes at the end of the output buffer, charged to the
 * store's total (a large reply gets exactly its size, not a doubling). */
static int reserve_out(spmd_store_server *s, conn *c, size_t more) {
    if (c->out_off == c->out_len) c->out_off = c->out_len = 0;
    if (c->out_cap - c->out_len >= more) return 0;
    size_t need = c->out_len + more, cap = c->out_cap ? c->out_cap : 4096;
    while (cap < need && cap < KEEP_OUT_CAP) cap *= 2;
    if (cap < need) cap = need;
    unsigned char *p = realloc(c->out, cap);
    if (!p) return -1;
    spmd__store_charge(s, cap - c->out_cap, 0);
    c->out = p;
    c->out_cap = cap;
    return 0;
}

void spmd__store_charge(spmd_store_server *s, size_t add, size_t release) {
    s->bytes += add;
    s->bytes -= release;
    if (release > add) s->memory_freed = 1;
    if (s->bytes > atomic_load_explicit(&s->peak_bytes, memory_order_relaxed))
        atomic_store_explicit(&s->peak_bytes, s->bytes, memory_order_relaxed);
}

int spmd__store_reply_room(spmd_store_server *s, conn *c, size_t vlen) {
    size_t need = SPMD__STORE_REP_HEAD + vlen, limit = s->lim.max_bytes;
    size_t grow = need > c->out_cap ? need - c->out_cap : 0; /* its buffer is empty here */
    if (need > SMALL_REPLY) limit -= limit / 16;
    if (s->bytes + grow <= limit) return 1;
    if (!s->unsent) { /* nothing queued could make room: this would wait forever */
        snprintf(s->limit_msg, sizeof s->limit_msg,
                 "a reply of %zu bytes would pass the store's memory limit of %zu bytes "
                 "(SPMD_STORE_MAX_BYTES; %zu in use)", need, s->lim.max_bytes, s->bytes);
        return -1;
    }
    if (!c->mem_wait) {
        conn **pp = &s->waiters;
        while (*pp) pp = &(*pp)->wnext;
        *pp = c;
        c->wnext = NULL;
        c->mem_wait = 1;
        atomic_fetch_add(&s->nwaiting, 1);
    }
    set_events(s, c, 0); /* read nothing more from it meanwhile (hang-ups still come) */
    return 0;
}

void spmd__store_wake_waiters(spmd_store_server *s) {
    s->memory_freed = 0;
    while (s->waiters) {
        conn *c = s->waiters;
        s->waiters = c->wnext;
        c->wnext = NULL;
        c->mem_wait = 0;
        atomic_fetch_sub(&s->nwaiting, 1);
        spmd__store_enqueue(s, c);
    }
}

void spmd__store_reply(spmd_store_server *s, conn *c, uint32_t seq, spmd_status st, int64_t num,
                  const void *val, size_t vlen) {
    if (reserve_out(s, c, SPMD__STORE_REP_HEAD + vlen)) {
        spmd__store_drop(s, c, 1, "out of memory for a %zu-byte reply", vlen);
        return;
    }
    size_t n = spmd__store_encode_rep(c->out + c->out_len, seq, st, num, val, (uint32_t)vlen);
    c->out_len += n;
    s->unsent += n;
}

void spmd__store_reply_err(spmd_store_server *s, conn *c, uint32_t seq, spmd_status st,
                      const char *fmt, ...) {
    char msg[SPMD__STORE_MAX_ERRMSG];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (n < 0) n = 0;
    if ((size_t)n >= sizeof msg) n = (int)sizeof msg - 1;
    spmd__store_reply(s, c, seq, st, 0, msg, (size_t)n);
}

/* Send what we can; returns 1 when the output buffer is empty. */
int spmd__store_flush(spmd_store_server *s, conn *c) {
    while (!c->dead && c->out_off < c->out_len) {
        ssize_t n = send(c->fd, c->out + c->out_off, c->out_len - c->out_off, MSG_NOSIGNAL);
        if (n > 0) {
            c->out_off += (size_t)n;
            s->unsent -= (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            set_events(s, c, EPOLLIN | EPOLLRDHUP | EPOLLOUT);
            return 0;
        }
        spmd__store_drop(s, c, 0, "send: %s", strerror(errno));
        return 0;
    }
    if (c->dead) return 0;
    c->out_off = c->out_len = 0;
    if (c->out_cap > KEEP_OUT_CAP) {
        spmd__store_charge(s, 0, c->out_cap);
        free(c->out);
        c->out = NULL;
        c->out_cap = 0;
    }
    set_events(s, c, EPOLLIN | EPOLLRDHUP);
    if (c->closing) {
        spmd__store_drop(s, c, 0, "handshake refused");
        return 0;
    }
    return 1;
}

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
        if (reserve_out(s, c, outlen)) {
            spmd__store_drop(s, c, 1, "out of memory");
            return 1;
        }
        memcpy(c->out + c->out_len, out, outlen);
        c->out_len += outlen;
        s->unsent += outlen;
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
