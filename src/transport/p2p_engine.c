/* p2p_engine.c — point-to-point messages: framing, matching and the progress
 * thread that drives every p2p socket of a group with epoll.
 *
 * Wire: every frame starts with 24 bytes, little-endian:
 *     u8 type | u8 dtype+1 (0: none) | u16 zero | u32 tag | u64 len | u64 id
 *   EAGER    payload of `len` bytes follows (len <= EAGER_MAX)
 *   RTS      "I have `len` bytes for you with this tag" (large message, id)
 *   CTS      receiver to sender: matched, send message `id` now
 *   DATA     payload of message `id` (len bytes) follows
 *   RGET     as RTS, for a pair that may read each other's memory (cma.c):
 *            24 bytes follow, the buffer's address, the seal's address and
 *            the seal; the receiver reads the message itself, then sends
 *   FIN      receiver to sender: message `id` read (tag 0) or not (tag: the
 *            negative status)
 *   NACK     receiver to sender: message `id` refused, receiver expected `len` bytes
 *            (of its dtype)
 *   REFUSED  receiver to sender: an eager message with `tag` was refused
 *            (expected `len` bytes of its dtype); the send had completed,
 *            so the sender only logs it: the channel stays usable
 *   BYE      the sender is leaving the group (after an ABORT saying why
 *            when its group had failed)
 *   ABORT    the sender's group failed; payload (len <= ABORT_MAX) is the reason,
 *            id is 1 + the rank it blames (0: none)
 *   PING     a heartbeat (heartbeat.c): only its arrival counts
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
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>
#include "elock.h"
#include "heartbeat.h"
#include "mesh.h"
#include "path.h"

#define HDR 24
#define EAGER_MAX (64u * 1024u)
#define ABORT_MAX 1024u
#define TICK_MS 1000 /* the tick's period when heartbeats are off */

enum { F_EAGER = 1, F_RTS, F_CTS, F_DATA, F_NACK, F_REFUSED, F_BYE, F_ABORT, F_RGET, F_FIN, F_PING, F_MAX };
#define RGET_LEN 24u /* RGET's payload: address, seal address, seal */
/* Smallest send read by cross-memory attach where the pair allows it
 * (SPMD_P2P_CMA_MIN_BYTES sets both); smaller ones go through the ring or
 * the connection.  A ring pair starts higher: at 32 KiB the ring's two
 * pipelined copies (5.8 µs) beat a read's page pinning and FIN (7.5 µs),
 * at 64 KiB the read wins (13 µs against 18). */
#define CMA_MIN_DEFAULT (32u * 1024u)
#define CMA_MIN_RING_DEFAULT (64u * 1024u)

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
    uint32_t type; /* F_EAGER (data held), F_RTS (id, len only) or F_RGET (and cma) */
    uint32_t tag;
    uint64_t len, id;
    uint64_t cma[3];
    char *data;
    struct unexp *next;
} unexp;

typedef struct {
    int fd;              /* the TCP connection: epoll watches it (bytes, doorbells, close) */
    spmd__path *path;    /* how bytes move: the connection itself or shared-memory rings */
    int shm;
    int dead, left;
    int spinners;        /* our threads polling this peer's ring themselves */
    int spun, spun_nap;  /* a spinner stopped since the progress thread's last look / before this nap */
    uint64_t rx;         /* bytes received so far (the heartbeat's evidence of life) */
    frame *sq, *sq_tail;
    atomic_int queued;   /* sq != NULL, for spinners that look without the lock */
    int want_out;
    /* reader state */
    unsigned char hdr[HDR];
    size_t hdr_got;
    int in_payload;
    uint32_t type, tag;
    int dt;              /* the frame's dtype, -1: none */
    uint64_t len, id;
    uint64_t plen;       /* the payload's length (len, or RGET_LEN) */
    unsigned char rget[RGET_LEN];
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
    spmd__elock mu;                  /* elock.h: released with a plain store */
    int epfd, evfd;
    pthread_t thread;
    int running;
    atomic_int stop;
    peer *peers;
    spmd__preq *posted, *posted_tail; /* receives not matched yet, in post order */
    unexp *ux, *ux_tail;             /* unexpected messages, in arrival order */
    uint64_t next_id;
    int nshm;                        /* peers reached by shared memory */
    size_t cma_min, cma_min_ring;    /* sends from this size go by RGET where the pair allows (TCP, ring pair) */
    spmd__preq *copies;              /* receives matched to an RGET, to be read outside the lock */
    pthread_mutex_t copy_mu;         /* ... one at a time */
    spmd__hb *hb;                    /* heartbeats, NULL when off */
    int64_t next_tick;               /* monotonic ms (progress thread only) */
    /* A spinner that stops arms its rings for the progress thread.  While
     * spinners keep coming and going (an RPC agent stops between every
     * call), the progress thread naps (NAP_MIN_MS to NAP_MAX_MS) instead of sleeping, and
     * their arms skip the slow fence: its membarrier interrupts every core
     * (a VM exit each on a guest), 10-20 µs a call.  A message whose
     * doorbell that loses is found when the nap ends. */
    int nap;                         /* the progress thread naps (under mu) */
    int spun;                        /* a spinner stopped since it last looked (under mu) */
    int nap_asked;                   /* woken to start napping, not there yet (under mu) */
    int nap_ms;                      /* this nap's length (progress thread only) */
};

/* A nap starts at NAP_MIN_MS and doubles, up to NAP_MAX_MS, each time it
 * ends with nothing found that a doorbell should have announced: every
 * wake-up costs the rank's core a timer interrupt and two switches (~4% of a
 * large ping-pong at 1 ms), and a lost doorbell needs the weak fence to lose
 * a race of a few hundred nanoseconds. */
#define NAP_MIN_MS 1
#define NAP_MAX_MS 8

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

/* A send whose buffer a peer may be reading by cross-memory attach is handed
 * back early (failed, withdrawn): change its seal first, so that a read
 * racing with the caller's reuse of the buffer is told (cma.c). */
static void revoke_seal(spmd__preq *w) { __atomic_store_n(&w->seal, 0, __ATOMIC_SEQ_CST); }

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

static void peer_died(spmd__p2p *p, int i, const char *why);

/* Frames wait for room in peer i's ring and no thread of ours polls it:
 * ask its reader to ring the doorbell once it has read (Dekker: when room
 * appeared meanwhile, write now).  -1 when the path failed. */
static int watch_room(spmd__p2p *p, int i) {
    peer *pe = &p->peers[i];
    while (pe->sq && spmd__path_arm(pe->path, 0, 1))
        if (flush_peer(p, i) < 0) return -1;
    return 0;
}

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
    atomic_store_explicit(&pe->queued, 1, memory_order_relaxed);
    if (was_empty && flush_peer(p, i) < 0) peer_died(p, i, strerror(errno));
    else if (pe->sq && pe->shm && !pe->spinners && watch_room(p, i) < 0) peer_died(p, i, strerror(errno));
    return SPMD_OK;
}

/* ---- failure ---------------------------------------------------------------- */

static void abort_locked(spmd__p2p *p, spmd_status st, const char *msg);

/* A connection that ended because its link stopped carrying packets (the
 * kernel's keepalive or retransmission gave up, or the route went away),
 * not because the peer closed it. */
static int link_lost(const char *why) {
    static const int codes[] = {ETIMEDOUT, EHOSTUNREACH, ENETUNREACH, ENETDOWN};
    for (size_t k = 0; k < sizeof codes / sizeof codes[0]; k++)
        if (!strcmp(why, strerror(codes[k]))) return 1;
    return 0;
}

static void peer_died(spmd__p2p *p, int i, const char *why) {
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

/* The mesh's fail_pending hook: fail every pending p2p operation with st/msg. */
static void fail_pending(spmd__mesh *g, spmd_status st, const char *msg) {
    spmd__p2p *p = g->p2p;
    if (!p) return;
    spmd__elock_lock(&p->mu);
    fail_everything(p, st, msg);
    spmd__elock_unlock(&p->mu);
}

static void abort_locked(spmd__p2p *p, spmd_status st, const char *msg) {
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
        enqueue(p, i, F_ABORT, (uint32_t)(int32_t)st, n, blame, msg, n, 1, NULL);
        if (pe->shm) spmd__path_kick(pe->path); /* the peer may wait for nothing from us */
    }
}

/* The mesh's tell_peers hook: queue an abort notice (text) to every live peer. */
static void tell_peers(spmd__mesh *g, spmd_status st, const char *msg) {
    spmd__p2p *p = g->p2p;
    if (!p) return;
    spmd__elock_lock(&p->mu);
    abort_locked(p, st, msg);
    spmd__elock_unlock(&p->mu);
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
        if (u->type != F_EAGER) enqueue(p, u->src, with_dt(F_NACK, w->dtype), u->tag, w->len, u->id, NULL, 0, 0, NULL);
        else enqueue(p, u->src, with_dt(F_REFUSED, w->dtype), u->tag, w->len, 0, NULL, 0, 0, NULL);
        fail_work(w, SPMD_ERR_MISMATCH, msg);
        return;
    }
    if (u->type == F_EAGER) {
        if (u->len) memcpy(w->buf, u->data, u->len);
        complete_req(w, SPMD_OK, NULL);
        return;
    }
    if (u->type == F_RGET) { /* read it from the sender's memory once the lock is released */
        w->id = u->id;
        w->peer = u->src;
        memcpy(w->cma, u->cma, sizeof w->cma);
        w->next = p->copies;
        p->copies = w;
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
    pe->plen = pe->len;
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
    case F_RGET:
        pe->plen = RGET_LEN;
        pe->dst = (char *)pe->rget;
        pe->in_payload = 1;
        return 0;
    case F_FIN: {
        spmd__preq *w = list_take_id(&pe->rts_wait, pe->id);
        if (!w) return 0; /* cancelled meanwhile (the reader found the seal changed) */
        w->source = i;
        int code = (int32_t)pe->tag;
        if (!code) {
            complete_req(w, SPMD_OK, NULL);
            return 0;
        }
        char a[96];
        describe(a, sizeof a, w->len, w->dtype);
        snprintf(msg, sizeof msg, "send of %s with tag %d: rank %d could not read it from this process (%s)", a,
                 w->tag, i, spmd_status_str(code < 0 && code > -100 ? (spmd_status)code : SPMD_ERR_SYSTEM));
        fail_work(w, code < 0 && code > -100 ? (spmd_status)code : SPMD_ERR_SYSTEM, msg);
        return 0;
    }
    case F_BYE:
        pe->left = 1;
        atomic_store(&p->m->peer_left[i], 1);
        return 0;
    case F_PING:
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

/* An RGET's payload is in: match it like an RTS. */
static int on_rget(spmd__p2p *p, int i, char *why, size_t whylen) {
    peer *pe = &p->peers[i];
    unexp u = {.src = i, .dt = pe->dt, .type = F_RGET, .tag = pe->tag, .len = pe->len, .id = pe->id};
    for (int k = 0; k < 3; k++) u.cma[k] = spmd__get_u64(pe->rget + 8 * k);
    if (!p->m->cma || !p->m->cma[i].ok) {
        snprintf(why, whylen, "RGET from a rank this one may not read");
        return -1;
    }
    spmd__preq *w = take_posted(p, i, pe->tag);
    if (w) {
        deliver_unexpected(p, w, &u);
        return 0;
    }
    unexp *q = malloc(sizeof *q);
    if (!q) {
        snprintf(why, whylen, "out of memory");
        return -1;
    }
    *q = u;
    arrived(p, q);
    return 0;
}

static void on_payload_done(spmd__p2p *p, int i) {
    peer *pe = &p->peers[i];
    pe->in_payload = 0;
    if (pe->type == F_RGET) {
        char why[SPMD__ERRLEN], msg[SPMD__ERRLEN];
        pe->dst = NULL;
        if (on_rget(p, i, why, sizeof why) < 0) {
            snprintf(msg, sizeof msg, "protocol error from rank %d: %s", i, why);
            pe->left = 0;
            peer_died(p, i, msg);
        }
        return;
    }
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
        int code = (int32_t)pe->tag;
        int blame = pe->id >= 1 && pe->id <= (uint64_t)p->m->world ? (int)pe->id - 1 : -1;
        spmd__elock_unlock(&p->mu);
        spmd_status st = code < 0 && code > -100 ? (spmd_status)code : SPMD_ERR_ABORTED;
        spmd__mesh_fail_by(p->m, st, blame, 0, "rank %d reported: %s", i, text);
        spmd__elock_lock(&p->mu);
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
            uint64_t want = pe->plen - pe->got;
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
            peer_died(p, i, spmd__path_strerror(errno));
            return;
        }
        pe->rx += (uint64_t)n;
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
            if (pe->in_payload && pe->plen == 0) on_payload_done(p, i);
        } else {
            pe->got += (uint64_t)n;
            if (pe->got == pe->plen) on_payload_done(p, i);
        }
    }
}

/* ---- cross-memory reads, outside the lock ------------------------------- */

/* Release the engine's lock, first reading every matched RGET message out
 * of its sender's memory (the lock is dropped around each copy, so other
 * peers' traffic goes on meanwhile), then telling the sender with FIN. */
static void unlock_engine(spmd__p2p *p) {
    while (p->copies) {
        spmd__preq *w = p->copies;
        p->copies = w->next;
        w->next = NULL;
        spmd__elock_unlock(&p->mu);
        char why[SPMD__ERRLEN];
        /* one copy at a time, as when payloads were read under the lock:
         * a window of receives into one buffer (osu_bw's) stays race-free */
        pthread_mutex_lock(&p->copy_mu);
        spmd_status st =
            spmd__cma_read_sealed(p->m, w->peer, w->buf, w->cma[0], w->len, w->cma[1], w->cma[2], why, sizeof why);
        pthread_mutex_unlock(&p->copy_mu);
        spmd__elock_lock(&p->mu);
        /* the receive completes before its sender hears of it */
        const int src = w->peer;
        const uint64_t len = w->len, id = w->id;
        if (st) {
            char msg[SPMD__ERRLEN];
            snprintf(msg, sizeof msg, "receive from rank %d with tag %d: %s", w->peer, w->tag, why);
            fail_work(w, st, msg);
        } else {
            complete_req(w, SPMD_OK, NULL);
        }
        if (!p->peers[src].dead) enqueue(p, src, F_FIN, (uint32_t)(int32_t)st, len, id, NULL, 0, 0, NULL);
    }
    spmd__elock_unlock(&p->mu);
}

/* ---- waiting ------------------------------------------------------------ */

/* A thread waiting for a p2p operation drives the paths itself instead of
 * waiting for the progress thread to wake up: that wake-up is most of a small
 * message's latency.  Never blocks. */
static void poll_locked(spmd__p2p *p, int which) {
    spmd__mesh *g = p->m;
    for (int i = 0; i < g->world; i++) {
        if (i == g->rank || (which >= 0 && i != which)) continue;
        peer *pe = &p->peers[i];
        if (pe->dead || pe->fd < 0) continue;
        if (pe->sq && flush_peer(p, i) < 0) { peer_died(p, i, strerror(errno)); continue; }
        read_peer(p, i);
    }
}

void spmd__p2p_poll(spmd__mesh *g, int which) {
    if (g && g->ext) { g->ext->poll(g, which); return; }
    spmd__p2p *p = g ? g->p2p : NULL;
    if (!p || g->world == 1) return;
    if (!spmd__elock_try(&p->mu)) return; /* someone is already progressing */
    poll_locked(p, which);
    unlock_engine(p);
}

static void spin_end_locked(spmd__p2p *p, int which);

int spmd__p2p_poll_spin(spmd__mesh *g, int which, int (*done)(void *), void *arg) {
    spmd__p2p *p = g->p2p;
    if (!p || g->world == 1) return 0;
    if (!spmd__elock_try(&p->mu)) return 0;
    poll_locked(p, which);
    int ended = done(arg);
    if (ended && p->nshm) spin_end_locked(p, which);
    unlock_engine(p);
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
        if (pe->sq && flush_peer(p, i) < 0) {
            peer_died(p, i, strerror(errno));
            return 0;
        }
        read_peer(p, i);
    }
    return 1;
}

/* weak: our progress thread naps (see spmd__p2p.nap) */
static int settle(spmd__p2p *p, int i, int weak) {
    peer *pe = &p->peers[i];
    if (!pe->shm) return 0;
    pe->path->nap = weak;
    int busy = settle_rounds(p, i);
    pe->path->nap = 0;
    return busy;
}

static void spin_begin_locked(spmd__p2p *p, int which) {
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
    spin_begin_locked(p, which);
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
    spin_end_locked(p, which);
    unlock_engine(p);
}

static void spin_end_locked(spmd__p2p *p, int which) {
    spmd__mesh *g = p->m;
    for (int i = 0; i < g->world; i++) {
        peer *pe = &p->peers[i];
        if (!pe->shm || (which >= 0 && i != which)) continue;
        if (--pe->spinners) continue;
        p->spun = pe->spun = 1;
        /* still busy: let the progress thread take over; or it sleeps long:
         * have it nap, so the next hand-backs are cheap (once) */
        int wake = settle(p, i, p->nap) || (!p->nap && !p->nap_asked);
        if (wake) {
            p->nap_asked = 1;
            uint64_t one = 1;
            ssize_t r = write(p->evfd, &one, sizeof one);
            (void)r;
        }
    }
}

/* ---- the progress thread ------------------------------------------------- */

/* Shared-memory peers have no readiness the kernel can report: look at every
 * ring after each wake-up.  A doorbell or the close of the pair's connection
 * is what wakes us; a closed connection after the rings are drained is a
 * departure (after BYE) or a death. */
static uint64_t rx_total(const spmd__p2p *p) {
    uint64_t sum = 0;
    for (int i = 0; i < p->m->world; i++) sum += p->peers[i].rx;
    return sum;
}

static void service_shm(spmd__p2p *p, const char *closed, int nap_over) {
    spmd__mesh *g = p->m;
    for (int i = 0; i < g->world; i++) {
        peer *pe = &p->peers[i];
        if (!pe->shm || pe->dead) continue;
        if (nap_over && pe->spun_nap) continue; /* its spinners come back to it (progress_main) */
        if (pe->sq && flush_peer(p, i) < 0) { peer_died(p, i, strerror(errno)); continue; }
        read_peer(p, i);
        if (closed[i] && !pe->dead) peer_died(p, i, "connection closed");
    }
}

/* ---- the tick: heartbeats, then the layer above's hook ------------------- */

static uint64_t hb_rx(void *arg, int i) { return ((spmd__p2p *)arg)->peers[i].rx; }
static int hb_gone(void *arg, int i) {
    const peer *pe = &((spmd__p2p *)arg)->peers[i];
    return pe->dead || pe->left || pe->fd < 0;
}
static void hb_ping(void *arg, int i) {
    spmd__p2p *p = arg;
    if (!p->peers[i].sq) enqueue(p, i, F_PING, 0, 0, 0, NULL, 0, 0, NULL); /* else bytes are on their way */
}

/* A watched peer went silent: the group fails naming it. */
static void peer_silent(spmd__p2p *p, int i, const char *msg) {
    if (!spmd__mesh_mark_failed_by(p->m, SPMD_ERR_REMOTE, i, msg)) return;
    abort_locked(p, SPMD_ERR_REMOTE, msg);
    fail_everything(p, SPMD_ERR_REMOTE, msg);
}

/* How long the progress thread may sleep before its next tick (and before
 * its clock, mesh.h's clock_ms, gets too old). */
static int until_tick(const spmd__p2p *p, int timeout) {
    int64_t left = p->next_tick - spmd__now_ms();
    if (left < 0) left = 0;
    if (p->m->clock_wanted && left > SPMD__MESH_CLOCK_MS) left = SPMD__MESH_CLOCK_MS;
    return left < timeout ? (int)left : timeout;
}

static void tick(spmd__p2p *p) {
    int64_t now = spmd__now_ms();
    atomic_store_explicit(&p->m->clock_ms, now, memory_order_relaxed);
    if (now < p->next_tick) return;
    if (p->hb) {
        char msg[SPMD__ERRLEN];
        spmd__elock_lock(&p->mu);
        int silent = spmd__hb_tick(p->hb, now, msg, sizeof msg);
        if (silent >= 0) peer_silent(p, silent, msg);
        spmd__elock_unlock(&p->mu);
        p->next_tick = spmd__hb_due(p->hb);
    } else {
        p->next_tick = now + TICK_MS;
    }
    if (p->m->on_tick) p->m->on_tick(p->m->hook_arg);
}

static void *progress_main(void *arg) {
    spmd__p2p *p = arg;
    spmd__mesh *g = p->m;
    struct epoll_event evs[64];
    char *closed = calloc((size_t)g->world, 1);
    if (!closed) return NULL;
    while (!atomic_load(&p->stop)) {
        int busy = 0;
        if (p->nshm) {
            /* every ring's flags as our state wants them before sleeping */
            spmd__elock_lock(&p->mu);
            /* A ring some thread stopped spinning on during the last nap is
             * left to its spinners for one more nap: they are usually back
             * within microseconds (an RPC agent between calls), and taking
             * a frame from under them hands it to a thread that must be
             * woken.  It is armed (and read) once a nap passes without
             * them; a doorbell meanwhile is served at once. */
            for (int i = 0; i < g->world; i++) {
                peer *pe = &p->peers[i];
                pe->spun_nap = p->nap && pe->spun;
                pe->spun = 0;
                if (!pe->spun_nap) busy |= settle(p, i, 0);
            }
            if (!p->nap && p->spun) p->nap_ms = NAP_MIN_MS;
            p->nap = p->spun;
            p->spun = p->nap_asked = 0;
            unlock_engine(p);
        }
        int n = epoll_wait(p->epfd, evs, 64, until_tick(p, busy ? 0 : p->nap ? p->nap_ms : 1000));
        if (n < 0 && errno != EINTR) break;
        spmd__elock_lock(&p->mu);
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
        if (p->nshm) {
            uint64_t seen = n == 0 && p->nap ? rx_total(p) : 0;
            service_shm(p, closed, n == 0);
            if (n == 0 && p->nap) {
                int found = rx_total(p) != seen;
                p->nap_ms = found ? NAP_MIN_MS : p->nap_ms * 2 > NAP_MAX_MS ? NAP_MAX_MS : p->nap_ms * 2;
            }
        }
        unlock_engine(p);
        tick(p);
    }
    free(closed);
    return NULL;
}

spmd_status spmd__p2p_start(spmd__mesh *g, char *err, size_t errlen) {
    /* before any thread of ours runs; without g->p2p the hooks do nothing */
    g->fail_pending = fail_pending;
    g->tell_peers = tell_peers;
    spmd__p2p *p = calloc(1, sizeof *p);
    if (!p) return spmd__fail(err, errlen, SPMD_ERR_NOMEM, "out of memory");
    p->m = g;
    long cma_min = -1;
    if (spmd__env_int("SPMD_P2P_CMA_MIN_BYTES", 1, 1L << 40, &cma_min) != SPMD_OK) cma_min = -1;
    p->cma_min = cma_min > 0 ? (size_t)cma_min : CMA_MIN_DEFAULT;
    p->cma_min_ring = cma_min > 0 ? (size_t)cma_min : CMA_MIN_RING_DEFAULT;
    p->nap_ms = NAP_MIN_MS;
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
    pthread_mutex_init(&p->copy_mu, NULL); /* p->mu: zeroed by calloc is free */
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
        spmd__hb_ops ops = {.arg = p, .rx = hb_rx, .gone = hb_gone, .ping = hb_ping};
        p->hb = spmd__hb_start(g, &ops);
        p->next_tick = spmd__now_ms();
        int rc = pthread_create(&p->thread, NULL, progress_main, p);
        if (!rc) pthread_setname_np(p->thread, "spmd-progress"); /* top -H, perf, gdb */
        if (rc) {
            spmd__hb_free(p->hb);
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
    /* Goodbye to every live peer, then let the queues drain (bounded).  A
     * rank leaving a failed group says why first: a peer still inside the
     * collective that failed here may not have had the first notice yet
     * (it travels on another connection), and must not take our goodbye for
     * the cause. */
    char why[SPMD__ERRLEN];
    spmd_status failed = (spmd_status)atomic_load(&g->failed);
    if (failed) {
        pthread_mutex_lock(&g->fail_mu);
        snprintf(why, sizeof why, "left the group after it failed: %s", g->fail_msg);
        pthread_mutex_unlock(&g->fail_mu);
    }
    spmd__elock_lock(&p->mu);
    if (failed) abort_locked(p, failed, why);
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
        /* let the progress thread write (leaving happens once per group) */
        spmd__elock_unlock(&p->mu);
        struct timespec ts = {0, 1000000L};
        nanosleep(&ts, NULL);
        spmd__elock_lock(&p->mu);
    }
    spmd__elock_unlock(&p->mu);
    atomic_store(&p->stop, 1);
    uint64_t one = 1;
    ssize_t r = write(p->evfd, &one, sizeof one);
    (void)r;
    if (p->running) pthread_join(p->thread, NULL);
    spmd__hb_free(p->hb);
    spmd__elock_lock(&p->mu);
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
    spmd__elock_unlock(&p->mu);
    close(p->epfd);
    close(p->evfd);
    pthread_mutex_destroy(&p->copy_mu);
    free(p->peers);
    free(p);
    g->p2p = NULL;
}

/* ---- posting ------------------------------------------------------------ */

/* A posted operation waits for something from peer i (-1: any peer): when
 * its poster will not drive the engine itself, the progress thread must be
 * woken by that peer's next message. */
static void expect_from(spmd__p2p *p, int which) {
    for (int i = 0; i < p->m->world; i++)
        if (which < 0 || i == which) settle(p, i, p->nap);
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
        st = enqueue(p, w->peer, with_dt(F_RGET, w->dtype), (uint32_t)w->tag, w->len, w->id, body, RGET_LEN, 1, NULL);
        if (st) list_remove(&pe->rts_wait, w);
        else if (!w->waiting) expect_from(p, w->peer);
    } else if (w->len <= EAGER_MAX) {
        st = enqueue(p, w->peer, with_dt(F_EAGER, w->dtype), (uint32_t)w->tag, w->len, 0, w->buf, w->len, 0, w);
    } else {
        w->id = ++p->next_id;
        w->next = pe->rts_wait;
        pe->rts_wait = w;
        st = enqueue(p, w->peer, with_dt(F_RTS, w->dtype), (uint32_t)w->tag, w->len, w->id, NULL, 0, 0, NULL);
        if (st) list_remove(&pe->rts_wait, w);
        else if (!w->waiting) expect_from(p, w->peer);
    }
    unlock_engine(p);
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
        if (!matches(w, u->src, u->tag)) continue;
        if (prev) prev->next = u->next;
        else p->ux = u->next;
        if (p->ux_tail == u) p->ux_tail = prev;
        deliver_unexpected(p, w, u);
        free(u->data);
        free(u);
        unlock_engine(p);
        return SPMD_OK;
    }
    if (w->peer != SPMD_ANY_SOURCE && (p->peers[w->peer].dead || p->peers[w->peer].left)) {
        spmd__elock_unlock(&p->mu);
        return spmd__fail(err, errlen, SPMD_ERR_REMOTE, "receive from rank %d: it has left the group", w->peer);
    }
    w->next = NULL;
    if (p->posted_tail) p->posted_tail->next = w;
    else p->posted = w;
    p->posted_tail = w;
    /* Messages nobody waited for stay in the rings (no doorbell): the one
     * this receive wants may be there already. */
    int which = w->peer == SPMD_ANY_SOURCE ? -1 : w->peer;
    for (int i = 0; i < g->world; i++) {
        peer *pe = &p->peers[i];
        if ((which < 0 || i == which) && pe->shm && !pe->dead && spmd__path_pending(pe->path)) read_peer(p, i);
    }
    if (!w->waiting) {
        expect_from(p, which);
    } else if (w->will_spin && p->nshm && p->posted_tail == w) {
        /* still unmatched (the last posted): its poster will spin on it */
        spin_begin_locked(p, which);
        w->spin_begun = 1;
    }
    unlock_engine(p);
    return SPMD_OK;
}

void spmd__p2p_cancel(spmd__mesh *g, spmd__preq *w) {
    if (g && g->ext) { g->ext->cancel(g, w); return; }
    spmd__p2p *p = g ? g->p2p : NULL;
    if (!p) return;
    spmd__elock_lock(&p->mu);
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
    if (found) {
        revoke_seal(w);
        fail_work(w, SPMD_ERR_ABORTED, "operation cancelled before the peer was ready");
    }
    spmd__elock_unlock(&p->mu);
}
