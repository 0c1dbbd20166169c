/* reply.c — a store client's output and its end: replies queued in its
 * output buffer (charged to the store's memory total; a client whose reply
 * would pass SPMD_STORE_MAX_BYTES waits until others drain), flushing them,
 * and dropping the connection.  Below the operations (ops.c) and the
 * reading side (conn.c), which both answer and drop through it. */
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

int spmd__store_queue_raw(spmd_store_server *s, conn *c, const void *bytes, size_t n) {
    if (reserve_out(s, c, n)) return -1;
    memcpy(c->out + c->out_len, bytes, n);
    c->out_len += n;
    s->unsent += n;
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
