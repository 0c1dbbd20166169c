/* p2p_engine.c — point-to-point messages: framing, matching and the progress
 * thread that drives every p2p socket of a group with epoll.
 *
 * Wire: every frame starts with 24 bytes, little-endian:
 *     u8 type | u8 dtype+1 (0: none) | u16 zero | u32 tag | u64 len | u64 id
 *   EAGER    payload of `len` bytes follows (len <= EAGER_MAX)
 *   RTS      "I have `len` bytes for you with this tag" (large message, id)
 *   CTS      receiver to sender: matched, send message `id` now
 *   DATA     payload of message `id` (len bytes) follows
 *   NACK     receiver to sender: message `id` refused, receiver expected `len` bytes
 *            (of its dtype)
 *   REFUSED  receiver to sender: an eager message with `tag` was refused
 *            (expected `len` bytes of its dtype); the send had completed,
 *            so the sender only logs it: the channel stays usable
 *   BYE      the sender is leaving the group cleanly
 *   ABORT    the sender's group failed; payload (len <= ABORT_MAX) is the reason
 *
 * Small messages go eagerly (the receiver buffers them if no receive is
 * posted yet); large ones wait for the receiver's CTS so they land directly in
 * the posted buffer and a size mismatch is reported to both sides.  Frames to
 * one peer are written in order; reads never block on the application, so no
 * peer can stall another.  One mutex guards all of it: the user's threads post
 * and may write straight to an idle socket, the progress thread does the rest.
 * A peer whose connection ends without BYE is dead: the whole group fails.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>
#include "mesh.h"
#include "path.h"

#define HDR 24
#define EAGER_MAX (64u * 1024u)
#define ABORT_MAX 1024u

enum { F_EAGER = 1, F_RTS, F_CTS, F_DATA, F_NACK, F_REFUSED, F_BYE, F_ABORT, F_MAX };

typedef struct frame {
    unsigned char hdr[HDR];
    const char *payload; /* borrowed (user buffer) unless `owned` */
    char *owned;
    size_t plen;
    size_t off;          /* bytes of hdr+payload already written */
    spmd__preq *w;        /* completed when the frame is fully written (eager, data) */
    struct frame *next;
} frame;

/* A message that arrived before its receive was posted. */
typedef struct unexp {
    int src;
    int dt;        /* the sender's dtype, -1 when it named none */
    uint32_t type; /* F_EAGER (data held) or F_RTS (id, len only) */
    uint32_t tag;
    uint64_t len, id;
    char *data;
    struct unexp *next;
} unexp;

typedef struct {
    int fd;              /* the TCP connection: epoll watches it (bytes, doorbells, close) */
    spmd__path *path;    /* how bytes move: the connection itself or shared-memory rings */
    int shm;
    int dead, left;
    frame *sq, *sq_tail;
    int want_out;
    /* reader state */
    unsigned char hdr[HDR];
    size_t hdr_got;
    int in_payload;
    uint32_t type, tag;
    int dt;              /* the frame's dtype, -1: none */
    uint64_t len, id;
    char *dst;           /* where the payload goes (NULL: discard) */
    uint64_t got;
    spmd__preq *rw;       /* receive completed by this payload, if any */
    unexp *ux;           /* unexpected eager message being filled */
    char *abort_text;
    /* sends waiting for CTS/NACK, receives waiting for DATA */
    spmd__preq *rts_wait, *data_wait;
} peer;

struct spmd__p2p {
    spmd__mesh *m;
    pthread_mutex_t mu;
    pthread_cond_t drained;
    int epfd, evfd;
    pthread_t thread;
    int running;
    atomic_int stop;
    peer *peers;
    spmd__preq *posted, *posted_tail; /* receives not matched yet, in post order */
    unexp *ux, *ux_tail;             /* unexpected messages, in arrival order */
    uint64_t next_id;
    int nshm;                        /* peers reached by shared memory */
    atomic_int spinners;             /* waiters polling the rings themselves (spmd__p2p_spin_*) */
    pthread_mutex_t watch_mu;        /* orders the rings' sleep flags between spinners */
};

/* A request is done: hand it back to its owner. */
static void complete_req(spmd__preq *r, spmd_status st, const char *msg) { r->complete(r, st, msg); }

/* ---- small helpers ------------------------------------------------------ */

/* The type word with a dtype (-1: none) in its second byte. */
static uint32_t with_dt(uint32_t type, int dt) { return type | (uint32_t)(dt >= 0 ? dt + 1 : 0) << 8; }

static void hdr_put(unsigned char *h, uint32_t type, uint32_t tag, uint64_t len, uint64_t id) {
    spmd__put_u32(h, type);
    spmd__put_u32(h + 4, tag);
    spmd__put_u64(h + 8, len);
    spmd__put_u64(h + 16, id);
}

static void list_remove(spmd__preq **head, spmd__preq *w) {
    for (spmd__preq **p = head; *p; p = &(*p)->next)
        if (*p == w) { *p = w->next; w->next = NULL; return; }
}

static spmd__preq *list_take_id(spmd__preq **head, uint64_t id) {
    for (spmd__preq **p = head; *p; p = &(*p)->next)
        if ((*p)->id == id) { spmd__preq *w = *p; *p = w->next; w->next = NULL; return w; }
    return NULL;
}

static void set_out(spmd__p2p *p, int i, int want) {
    peer *pe = &p->peers[i];
    if (pe->shm) want = 0; /* a full ring is waited for with its sleep flag, not EPOLLOUT */
    if (pe->want_out == want || pe->fd < 0) return;
    struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP | (want ? EPOLLOUT : 0), .data.u32 = (uint32_t)i};
    epoll_ctl(p->epfd, EPOLL_CTL_MOD, pe->fd, &ev);
    pe->want_out = want;
}

static void fail_work(spmd__preq *w, spmd_status st, const char *msg) { w->complete(w, st, msg); }

/* Fail every operation in flight (group failed or destroyed). */
static void fail_everything(spmd__p2p *p, spmd_status st, const char *msg) {
    spmd__mesh *g = p->m;
    while (p->posted) {
        spmd__preq *w = p->posted;
        p->posted = w->next;
        fail_work(w, st, msg);
    }
    p->posted_tail = NULL;
    for (int i = 0; i < g->world; i++) {
        peer *pe = &p->peers[i];
        while (pe->rts_wait) { spmd__preq *w = pe->rts_wait; pe->rts_wait = w->next; fail_work(w, st, msg); }
        while (pe->data_wait) { spmd__preq *w = pe->data_wait; pe->data_wait = w->next; fail_work(w, st, msg); }
        for (frame *f = pe->sq; f; f = f->next)
            if (f->w) { fail_work(f->w, st, msg); f->w = NULL; }
        if (pe->rw) { fail_work(pe->rw, st, msg); pe->rw = NULL; pe->dst = NULL; }
    }
    pthread_cond_broadcast(&p->drained);
}

/* ---- sending -------------------------------------------------------------- */

/* Write as much of peer i's queue as the socket takes.  Returns -1 when the
 * connection failed (the caller handles the failure). */
static int flush_peer(spmd__p2p *p, int i) {
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
        if (!pe->sq) pe->sq_tail = NULL;
        if (f->w) {
            spmd__preq *done = f->w;
            done->source = i;
            complete_req(done, SPMD_OK, NULL);
        }
        free(f->owned);
        free(f);
    }
    set_out(p, i, 0);
    pthread_cond_broadcast(&p->drained);
    return 0;
}

static void peer_died(spmd__p2p *p, int i, const char *why);

/* Queue a frame to peer i and try to write it at once. */
static spmd_status enqueue(spmd__p2p *p, int i, uint32_t type, uint32_t tag, uint64_t len,
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
            peer_died(p, i, strerror(errno));
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
    if (was_empty && flush_peer(p, i) < 0) peer_died(p, i, strerror(errno));
    return SPMD_OK;
}

/* ---- failure ---------------------------------------------------------------- */

static void abort_locked(spmd__p2p *p, spmd_status st, const char *msg);

static void peer_died(spmd__p2p *p, int i, const char *why) {
    peer *pe = &p->peers[i];
    if (pe->dead) return;
    char msg[SPMD__ERRLEN];
    if (!pe->left) {
        /* Record the group's failure before anyone can see this peer as
         * merely gone, so every caller gets the real cause. */
        snprintf(msg, sizeof msg, "rank %d died or closed its connection (%s)", i, why);
        int first = spmd__mesh_mark_failed(p->m, SPMD_ERR_REMOTE, msg);
        pe->dead = 1;
        if (pe->fd >= 0) epoll_ctl(p->epfd, EPOLL_CTL_DEL, pe->fd, NULL);
        if (first) {
            abort_locked(p, SPMD_ERR_REMOTE, msg);
            fail_everything(p, SPMD_ERR_REMOTE, msg);
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

void spmd__p2p_fail_all(spmd__mesh *g, spmd_status st, const char *msg) {
    if (g->ext) { g->ext->fail_all(g, st, msg); return; }
    spmd__p2p *p = g->p2p;
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    fail_everything(p, st, msg);
    pthread_mutex_unlock(&p->mu);
}

static void abort_locked(spmd__p2p *p, spmd_status st, const char *msg) {
    spmd__mesh *g = p->m;
    size_t n = strlen(msg);
    if (n > ABORT_MAX) n = ABORT_MAX;
    for (int i = 0; i < g->world; i++) {
        peer *pe = &p->peers[i];
        if (i == g->rank || pe->dead || pe->fd < 0) continue;
        /* the tag field carries the failure's status code */
        enqueue(p, i, F_ABORT, (uint32_t)(int32_t)st, n, 0, msg, n, 1, NULL);
    }
}

void spmd__p2p_broadcast_abort(spmd__mesh *g, spmd_status st, const char *msg) {
    if (g->ext) { g->ext->broadcast_abort(g, st, msg); return; }
    spmd__p2p *p = g->p2p;
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    abort_locked(p, st, msg);
    pthread_mutex_unlock(&p->mu);
}

/* ---- matching ----------------------------------------------------------- */

static int matches(const spmd__preq *w, int src, uint32_t tag) {
    return (w->peer == SPMD_ANY_SOURCE || w->peer == src) &&
           (w->tag == SPMD_ANY_TAG || (uint32_t)w->tag == tag);
}

static spmd__preq *take_posted(spmd__p2p *p, int src, uint32_t tag) {
    spmd__preq *prev = NULL;
    for (spmd__preq *w = p->posted; w; prev = w, w = w->next) {
        if (!matches(w, src, tag)) continue;
        if (prev) prev->next = w->next;
        else p->posted = w->next;
        if (p->posted_tail == w) p->posted_tail = prev;
        w->next = NULL;
        return w;
    }
    return NULL;
}

/* "3 x float32 (12 bytes)", or "12 bytes" when the dtype is unknown. */
static void describe(char *buf, size_t len, uint64_t bytes, int dt) {
    size_t es = dt >= 0 ? spmd_dtype_size((spmd_dtype)dt) : 0;
    if (es && bytes % es == 0)
        snprintf(buf, len, "%llu x %s (%llu bytes)", (unsigned long long)(bytes / es), spmd_dtype_name((spmd_dtype)dt),
                 (unsigned long long)bytes);
    else
        snprintf(buf, len, "%llu bytes", (unsigned long long)bytes);
}

/* A message of (got, gdt) meets a receive of (want, wdt): do they match?
 * The dtypes are compared when both sides named one. */
static int fits(uint64_t got, int gdt, size_t want, int wdt) {
    return got == want && (gdt < 0 || wdt < 0 || gdt == wdt);
}

static void mismatch_msg(char *buf, size_t len, int self, int src, uint32_t tag, uint64_t got, int gdt,
                         size_t want, int wdt) {
    char a[96], b[96];
    describe(a, sizeof a, got, gdt);
    describe(b, sizeof b, want, wdt);
    snprintf(buf, len, "%s mismatch: rank %d sent %s with tag %u but rank %d's receive expects %s",
             got == want ? "type" : "size", src, a, tag, self, b);
}

/* A receive w meets a message from src: an eager payload in `data` (already
 * complete), or an RTS.  Complete or advance w accordingly. */
static void deliver_unexpected(spmd__p2p *p, spmd__preq *w, unexp *u) {
    char msg[SPMD__ERRLEN];
    w->source = u->src;
    w->tag = (int)u->tag;
    if (!fits(u->len, u->dt, w->len, w->dtype)) {
        mismatch_msg(msg, sizeof msg, p->m->rank, u->src, u->tag, u->len, u->dt, w->len, w->dtype);
        if (u->type == F_RTS) enqueue(p, u->src, with_dt(F_NACK, w->dtype), u->tag, w->len, u->id, NULL, 0, 0, NULL);
        else enqueue(p, u->src, with_dt(F_REFUSED, w->dtype), u->tag, w->len, 0, NULL, 0, 0, NULL);
        fail_work(w, SPMD_ERR_MISMATCH, msg);
        return;
    }
    if (u->type == F_EAGER) {
        if (u->len) memcpy(w->buf, u->data, u->len);
        complete_req(w, SPMD_OK, NULL);
        return;
    }
    /* RTS: ask for the data, which lands straight into w->buf. */
    w->id = u->id;
    w->peer = u->src;
    peer *pe = &p->peers[u->src];
    w->next = pe->data_wait;
    pe->data_wait = w;
    enqueue(p, u->src, F_CTS, u->tag, u->len, u->id, NULL, 0, 0, NULL);
}

/* A complete unexpected entry: give it to a posted receive or queue it. */
static void arrived(spmd__p2p *p, unexp *u) {
    spmd__preq *w = take_posted(p, u->src, u->tag);
    if (w) {
        deliver_unexpected(p, w, u);
        free(u->data);
        free(u);
        return;
    }
    u->next = NULL;
    if (p->ux_tail) p->ux_tail->next = u;
    else p->ux = u;
    p->ux_tail = u;
}

/* ---- reading ------------------------------------------------------------- */

/* A header is complete: decide where its payload goes.  Returns -1 on a
 * protocol violation. */
static int on_header(spmd__p2p *p, int i, char *why, size_t whylen) {
    peer *pe = &p->peers[i];
    uint32_t word = spmd__get_u32(pe->hdr);
    pe->type = word & 0xff;
    pe->dt = (int)((word >> 8) & 0xff) - 1;
    if ((word >> 16) || pe->dt >= SPMD_DTYPE_COUNT) {
        snprintf(why, whylen, "bad frame type word 0x%08x", word);
        return -1;
    }
    pe->tag = spmd__get_u32(pe->hdr + 4);
    pe->len = spmd__get_u64(pe->hdr + 8);
    pe->id = spmd__get_u64(pe->hdr + 16);
    pe->dst = NULL;
    pe->rw = NULL;
    pe->ux = NULL;
    pe->got = 0;
    pe->in_payload = 0;
    char msg[SPMD__ERRLEN];
    switch (pe->type) {
    case F_EAGER: {
        if (pe->len > EAGER_MAX) {
            snprintf(why, whylen, "eager frame of %llu bytes exceeds %u", (unsigned long long)pe->len, EAGER_MAX);
            return -1;
        }
        spmd__preq *w = take_posted(p, i, pe->tag);
        if (w) {
            w->source = i;
            w->tag = (int)pe->tag;
            if (!fits(pe->len, pe->dt, w->len, w->dtype)) {
                mismatch_msg(msg, sizeof msg, p->m->rank, i, pe->tag, pe->len, pe->dt, w->len, w->dtype);
                enqueue(p, i, with_dt(F_REFUSED, w->dtype), pe->tag, w->len, 0, NULL, 0, 0, NULL);
                fail_work(w, SPMD_ERR_MISMATCH, msg);
            } else {
                pe->rw = w;
                pe->dst = w->buf;
            }
        } else {
            unexp *u = calloc(1, sizeof *u);
            char *data = pe->len ? malloc(pe->len) : NULL;
            if (!u || (pe->len && !data)) {
                free(u);
                free(data);
                snprintf(why, whylen, "out of memory buffering a %llu-byte message", (unsigned long long)pe->len);
                return -1;
            }
            u->src = i;
            u->dt = pe->dt;
            u->type = F_EAGER;
            u->tag = pe->tag;
            u->len = pe->len;
            u->data = data;
            pe->ux = u;
            pe->dst = data;
        }
        pe->in_payload = 1;
        return 0;
    }
    case F_RTS: {
        spmd__preq *w = take_posted(p, i, pe->tag);
        unexp u = {.src = i, .dt = pe->dt, .type = F_RTS, .tag = pe->tag, .len = pe->len, .id = pe->id};
        if (w) {
            deliver_unexpected(p, w, &u);
        } else {
            unexp *q = malloc(sizeof *q);
            if (!q) { snprintf(why, whylen, "out of memory"); return -1; }
            *q = u;
            arrived(p, q);
        }
        return 0;
    }
    case F_CTS: {
        spmd__preq *w = list_take_id(&pe->rts_wait, pe->id);
        if (!w) { /* the send was cancelled (its caller timed out): nothing to send */
            SPMD_LOGW("rank %d: rank %d is ready for message %llu, which was cancelled", p->m->rank, i,
                      (unsigned long long)pe->id);
            return 0;
        }
        return enqueue(p, i, F_DATA, (uint32_t)w->tag, w->len, w->id, w->buf, w->len, 0, w) ? -1 : 0;
    }
    case F_DATA: {
        spmd__preq *w = list_take_id(&pe->data_wait, pe->id);
        if (!w || w->len != pe->len) {
            snprintf(why, whylen, "DATA for unknown message %llu", (unsigned long long)pe->id);
            if (w) fail_work(w, SPMD_ERR_PROTOCOL, why);
            return -1;
        }
        pe->rw = w;
        pe->dst = w->buf;
        pe->in_payload = 1;
        return 0;
    }
    case F_NACK: {
        spmd__preq *w = list_take_id(&pe->rts_wait, pe->id);
        if (!w) return 0; /* cancelled meanwhile */
        char a[96], b[96];
        describe(a, sizeof a, w->len, w->dtype);
        describe(b, sizeof b, pe->len, pe->dt);
        snprintf(msg, sizeof msg, "%s mismatch: this send of %s with tag %d was refused by rank %d, whose receive expects %s",
                 w->len == pe->len ? "type" : "size", a, w->tag, i, b);
        fail_work(w, SPMD_ERR_MISMATCH, msg);
        return 0;
    }
    case F_REFUSED: {
        /* Our small send completed when it was written; the receive that
         * refused it failed with both sides' sizes.  Nothing else is owed. */
        char b[96];
        describe(b, sizeof b, pe->len, pe->dt);
        SPMD_LOGW("rank %d: rank %d refused a message with tag %u: its receive expected %s", p->m->rank, i, pe->tag, b);
        return 0;
    }
    case F_BYE:
        pe->left = 1;
        atomic_store(&p->m->peer_left[i], 1);
        return 0;
    case F_ABORT:
        if (pe->len > ABORT_MAX) { snprintf(why, whylen, "abort text too long"); return -1; }
        pe->abort_text = calloc(1, pe->len + 1);
        if (!pe->abort_text) { snprintf(why, whylen, "out of memory"); return -1; }
        pe->dst = pe->abort_text;
        pe->in_payload = 1;
        return 0;
    }
    snprintf(why, whylen, "unknown frame type %u", pe->type);
    return -1;
}

static void on_payload_done(spmd__p2p *p, int i) {
    peer *pe = &p->peers[i];
    pe->in_payload = 0;
    if (pe->rw) {
        spmd__preq *w = pe->rw;
        pe->rw = NULL;
        w->source = i;
        w->tag = (int)pe->tag;
        complete_req(w, SPMD_OK, NULL);
    } else if (pe->ux) {
        unexp *u = pe->ux;
        pe->ux = NULL;
        arrived(p, u);
    } else if (pe->type == F_ABORT && pe->abort_text) {
        char *text = pe->abort_text;
        pe->abort_text = NULL;
        pthread_mutex_unlock(&p->mu);
        int code = (int32_t)pe->tag;
        spmd_status st = code < 0 && code > -100 ? (spmd_status)code : SPMD_ERR_ABORTED;
        spmd__mesh_fail(p->m, st, 0, "rank %d reported: %s", i, text);
        pthread_mutex_lock(&p->mu);
        free(text);
    }
    pe->dst = NULL;
}

/* Read everything available from peer i. */
static void read_peer(spmd__p2p *p, int i) {
    peer *pe = &p->peers[i];
    char why[SPMD__ERRLEN];
    while (!pe->dead) {
        ssize_t n;
        if (!pe->in_payload) {
            n = spmd__path_read(pe->path, pe->hdr + pe->hdr_got, HDR - pe->hdr_got);
        } else {
            uint64_t want = pe->len - pe->got;
            if (want > (1u << 30)) want = 1u << 30;
            if (pe->dst) {
                n = spmd__path_read(pe->path, pe->dst + pe->got, (size_t)want);
            } else { /* discard */
                char sink[4096];
                n = spmd__path_read(pe->path, sink, want < sizeof sink ? (size_t)want : sizeof sink);
            }
        }
        if (n == 0) {
            peer_died(p, i, "connection closed");
            return;
        }
        if (n < 0) {
            if (errno == EINTR) continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) return;
            peer_died(p, i, strerror(errno));
            return;
        }
        if (!pe->in_payload) {
            pe->hdr_got += (size_t)n;
            if (pe->hdr_got < HDR) continue;
            pe->hdr_got = 0;
            if (on_header(p, i, why, sizeof why) < 0) {
                char msg[SPMD__ERRLEN];
                snprintf(msg, sizeof msg, "protocol error from rank %d: %s", i, why);
                pe->left = 0;
                peer_died(p, i, msg);
                return;
            }
            if (pe->in_payload && pe->len == 0) on_payload_done(p, i);
        } else {
            pe->got += (uint64_t)n;
            if (pe->got == pe->len) on_payload_done(p, i);
        }
    }
}

/* A thread waiting for a p2p operation drives the sockets itself for a few
 * microseconds instead of waiting for the progress thread to wake up: that
 * wake-up is most of a small message's latency.  Never blocks. */
void spmd__p2p_poll(spmd__mesh *g, int which) {
    if (g && g->ext) { g->ext->poll(g, which); return; }
    spmd__p2p *p = g ? g->p2p : NULL;
    if (!p || g->world == 1) return;
    if (pthread_mutex_trylock(&p->mu)) return; /* someone is already progressing */
    for (int i = 0; i < g->world; i++) {
        if (i == g->rank || (which >= 0 && i != which)) continue;
        peer *pe = &p->peers[i];
        if (pe->dead || pe->fd < 0) continue;
        if (pe->sq && flush_peer(p, i) < 0) { peer_died(p, i, strerror(errno)); continue; }
        read_peer(p, i);
    }
    pthread_mutex_unlock(&p->mu);
}

/* ---- waiting ------------------------------------------------------------ */

/* The rings' "consumer asleep" flags tell a sending peer whether it must ring
 * the doorbell.  They are up exactly while no waiter of ours polls the rings
 * itself (spinners == 0): then the progress thread is the one to wake.  A
 * waiter that starts spinning lowers them (the peer's sends cost no system
 * call); the last one to stop raises them again and, Dekker-style, looks for
 * bytes that came meanwhile, waking the progress thread if there are. */
static void raise_flags(spmd__p2p *p, int up) {
    spmd__mesh *g = p->m;
    int pending = 0;
    for (int i = 0; i < g->world; i++) {
        peer *pe = &p->peers[i];
        /* (shm and path never change after start; a departed peer's ring
         * stays mapped, so its flag is harmless to touch) */
        if (!pe->shm) continue;
        if (up) pending |= spmd__path_arm(pe->path, 1, 0);
        else spmd__path_lower(pe->path);
    }
    if (pending) {
        uint64_t one = 1;
        ssize_t r = write(p->evfd, &one, sizeof one);
        (void)r;
    }
}

void spmd__p2p_spin_begin(spmd__mesh *g) {
    spmd__p2p *p = g ? g->p2p : NULL;
    if (!p || !p->nshm) return;
    pthread_mutex_lock(&p->watch_mu);
    if (atomic_fetch_add(&p->spinners, 1) == 0) raise_flags(p, 0);
    pthread_mutex_unlock(&p->watch_mu);
}

void spmd__p2p_spin_end(spmd__mesh *g) {
    spmd__p2p *p = g ? g->p2p : NULL;
    if (!p || !p->nshm) return;
    pthread_mutex_lock(&p->watch_mu);
    if (atomic_fetch_sub(&p->spinners, 1) == 1) raise_flags(p, 1);
    pthread_mutex_unlock(&p->watch_mu);
}

/* ---- the progress thread ------------------------------------------------- */

/* Shared-memory peers have no readiness the kernel can report: look at every
 * ring after each wake-up.  A doorbell or the close of the pair's connection
 * is what wakes us; a closed connection after the rings are drained is a
 * departure (after BYE) or a death. */
static void service_shm(spmd__p2p *p, const char *closed) {
    spmd__mesh *g = p->m;
    for (int i = 0; i < g->world; i++) {
        peer *pe = &p->peers[i];
        if (!pe->shm || pe->dead) continue;
        if (pe->sq && flush_peer(p, i) < 0) { peer_died(p, i, strerror(errno)); continue; }
        read_peer(p, i);
        if (closed[i] && !pe->dead) peer_died(p, i, "connection closed");
    }
}

static void *progress_main(void *arg) {
    spmd__p2p *p = arg;
    spmd__mesh *g = p->m;
    struct epoll_event evs[64];
    char *closed = calloc((size_t)g->world, 1);
    if (!closed) return NULL;
    while (!atomic_load(&p->stop)) {
        int timeout = 1000;
        if (p->nshm) {
            /* Sleep long only when the flags are up (nobody spins) and no
             * ring has bytes or, for a queue we could not write, room. */
            int busy = 0;
            pthread_mutex_lock(&p->watch_mu);
            int spinning = atomic_load(&p->spinners) > 0;
            pthread_mutex_unlock(&p->watch_mu);
            pthread_mutex_lock(&p->mu);
            for (int i = 0; i < g->world; i++) {
                peer *pe = &p->peers[i];
                if (pe->shm && !pe->dead) busy |= spmd__path_arm(pe->path, !spinning, pe->sq != NULL);
            }
            pthread_mutex_unlock(&p->mu);
            timeout = busy ? 0 : spinning ? 1 : 1000;
        }
        int n = epoll_wait(p->epfd, evs, 64, timeout);
        if (n < 0 && errno != EINTR) break;
        pthread_mutex_lock(&p->mu);
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
                if (flush_peer(p, (int)i) < 0) { peer_died(p, (int)i, strerror(errno)); continue; }
            }
            if (evs[k].events & (EPOLLIN | EPOLLERR | EPOLLHUP | EPOLLRDHUP)) read_peer(p, (int)i);
        }
        if (p->nshm) service_shm(p, closed);
        pthread_mutex_unlock(&p->mu);
    }
    free(closed);
    return NULL;
}

spmd_status spmd__p2p_start(spmd__mesh *g, char *err, size_t errlen) {
    spmd__p2p *p = calloc(1, sizeof *p);
    if (!p) return spmd__fail(err, errlen, SPMD_ERR_NOMEM, "out of memory");
    p->m = g;
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
    pthread_mutex_init(&p->mu, NULL);
    pthread_mutex_init(&p->watch_mu, NULL);
    pthread_cond_init(&p->drained, NULL);
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
    g->p2p = p;
    if (g->world > 1) {
        int rc = pthread_create(&p->thread, NULL, progress_main, p);
        if (rc) {
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
    /* Goodbye to every live peer, then let the queues drain (bounded). */
    pthread_mutex_lock(&p->mu);
    for (int i = 0; i < g->world; i++) {
        peer *pe = &p->peers[i];
        if (i == g->rank || pe->dead || pe->fd < 0) continue;
        enqueue(p, i, F_BYE, 0, 0, 0, NULL, 0, 0, NULL);
    }
    int64_t deadline = spmd__now_ms() + 5000;
    for (;;) {
        int busy = 0;
        for (int i = 0; i < g->world; i++)
            if (p->peers[i].sq && !p->peers[i].dead) busy = 1;
        if (!busy || spmd__now_ms() >= deadline || !p->running) break;
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 50 * 1000000L;
        if (ts.tv_nsec >= 1000000000L) { ts.tv_sec++; ts.tv_nsec -= 1000000000L; }
        pthread_cond_timedwait(&p->drained, &p->mu, &ts);
    }
    pthread_mutex_unlock(&p->mu);
    atomic_store(&p->stop, 1);
    uint64_t one = 1;
    ssize_t r = write(p->evfd, &one, sizeof one);
    (void)r;
    if (p->running) pthread_join(p->thread, NULL);
    pthread_mutex_lock(&p->mu);
    char msg[SPMD__ERRLEN];
    snprintf(msg, sizeof msg, "group %s destroyed while the operation was pending", g->name);
    fail_everything(p, SPMD_ERR_ABORTED, msg);
    for (int i = 0; i < g->world; i++) {
        peer *pe = &p->peers[i];
        while (pe->sq) { frame *f = pe->sq; pe->sq = f->next; free(f->owned); free(f); }
        if (pe->ux) { free(pe->ux->data); free(pe->ux); }
        free(pe->abort_text);
    }
    while (p->ux) { unexp *u = p->ux; p->ux = u->next; free(u->data); free(u); }
    pthread_mutex_unlock(&p->mu);
    close(p->epfd);
    close(p->evfd);
    pthread_cond_destroy(&p->drained);
    pthread_mutex_destroy(&p->mu);
    pthread_mutex_destroy(&p->watch_mu);
    free(p->peers);
    free(p);
    g->p2p = NULL;
}

/* ---- posting ------------------------------------------------------------ */

spmd_status spmd__p2p_post_send(spmd__mesh *g, spmd__preq *w, char *err, size_t errlen) {
    if (g->ext) return g->ext->post_send(g, w, err, errlen);
    spmd__p2p *p = g->p2p;
    char msg[SPMD__ERRLEN];
    spmd_status st = spmd__mesh_check(g, msg, sizeof msg);
    if (st) return spmd__fail(err, errlen, st, "%s", msg);
    pthread_mutex_lock(&p->mu);
    peer *pe = &p->peers[w->peer];
    if (pe->dead || pe->left) {
        pthread_mutex_unlock(&p->mu);
        return spmd__fail(err, errlen, SPMD_ERR_REMOTE, "send to rank %d: it has left the group", w->peer);
    }
    if (w->len <= EAGER_MAX) {
        st = enqueue(p, w->peer, with_dt(F_EAGER, w->dtype), (uint32_t)w->tag, w->len, 0, w->buf, w->len, 0, w);
    } else {
        w->id = ++p->next_id;
        w->next = pe->rts_wait;
        pe->rts_wait = w;
        st = enqueue(p, w->peer, with_dt(F_RTS, w->dtype), (uint32_t)w->tag, w->len, w->id, NULL, 0, 0, NULL);
        if (st) list_remove(&pe->rts_wait, w);
    }
    pthread_mutex_unlock(&p->mu);
    if (st) return spmd__fail(err, errlen, st, "send to rank %d: out of memory", w->peer);
    return SPMD_OK;
}

spmd_status spmd__p2p_post_recv(spmd__mesh *g, spmd__preq *w, char *err, size_t errlen) {
    if (g->ext) return g->ext->post_recv(g, w, err, errlen);
    spmd__p2p *p = g->p2p;
    char msg[SPMD__ERRLEN];
    spmd_status st = spmd__mesh_check(g, msg, sizeof msg);
    if (st) return spmd__fail(err, errlen, st, "%s", msg);
    pthread_mutex_lock(&p->mu);
    /* An earlier unexpected message that matches wins (arrival order). */
    unexp *prev = NULL;
    for (unexp *u = p->ux; u; prev = u, u = u->next) {
        if (!matches(w, u->src, u->tag)) continue;
        if (prev) prev->next = u->next;
        else p->ux = u->next;
        if (p->ux_tail == u) p->ux_tail = prev;
        deliver_unexpected(p, w, u);
        free(u->data);
        free(u);
        pthread_mutex_unlock(&p->mu);
        return SPMD_OK;
    }
    if (w->peer != SPMD_ANY_SOURCE && (p->peers[w->peer].dead || p->peers[w->peer].left)) {
        pthread_mutex_unlock(&p->mu);
        return spmd__fail(err, errlen, SPMD_ERR_REMOTE, "receive from rank %d: it has left the group", w->peer);
    }
    w->next = NULL;
    if (p->posted_tail) p->posted_tail->next = w;
    else p->posted = w;
    p->posted_tail = w;
    pthread_mutex_unlock(&p->mu);
    return SPMD_OK;
}

void spmd__p2p_cancel(spmd__mesh *g, spmd__preq *w) {
    if (g && g->ext) { g->ext->cancel(g, w); return; }
    spmd__p2p *p = g ? g->p2p : NULL;
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    int found = 0;
    spmd__preq *prev = NULL;
    for (spmd__preq *x = p->posted; x; prev = x, x = x->next) {
        if (x != w) continue;
        if (prev) prev->next = x->next;
        else p->posted = x->next;
        if (p->posted_tail == x) p->posted_tail = prev;
        found = 1;
        break;
    }
    /* A large send still waiting for the receiver's go-ahead can be withdrawn too. */
    for (int i = 0; i < g->world && !found; i++) {
        peer *pe = &p->peers[i];
        for (spmd__preq **pw = &pe->rts_wait; *pw; pw = &(*pw)->next)
            if (*pw == w) { *pw = w->next; w->next = NULL; found = 1; break; }
    }
    if (found) fail_work(w, SPMD_ERR_ABORTED, "operation cancelled before the peer was ready");
    pthread_mutex_unlock(&p->mu);
}
