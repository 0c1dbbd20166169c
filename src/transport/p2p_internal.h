/* p2p_internal.h — the p2p engine's state, shared by its files:
 *   p2p_engine.c    posting and cancelling (the entry points of mesh.h)
 *   p2p_quick.c     blocking small messages over a ring, without a request
 *   p2p_progress.c  the progress thread: epoll, shared-memory rings, the tick
 *   p2p_wait.c      the wait policy: polling callers, the rings' wake-up flags
 *   p2p_read.c      reading frames, delivering them to receives, CMA reads
 *   p2p_send.c      writing frames, failure of a peer or of the group
 *   p2p_match.h     the matching rules (shared with mpi_p2p.c)
 * Each calls only the files below it.  One lock (mu) guards all of it.
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
 */
#ifndef SPMD_TRANSPORT_P2P_INTERNAL_H
#define SPMD_TRANSPORT_P2P_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include "cma_parallel.h"
#include "elock.h"
#include "heartbeat.h"
#include "mesh.h"
#include "p2p_match.h"
#include "path.h"

#define HDR 24
#define EAGER_MAX (64u * 1024u)
#define ABORT_MAX 1024u
#define TICK_MS 1000 /* the tick's period when heartbeats are off */

enum { F_EAGER = 1, F_RTS, F_CTS, F_DATA, F_NACK, F_REFUSED, F_BYE, F_ABORT, F_RGET, F_FIN, F_PING, F_MAX };
#define RGET_LEN 24u /* RGET's payload: address, seal address, seal */
/* Smallest send read by cross-memory attach where the pair allows it
 * (SPMD_P2P_CMA_MIN_BYTES sets both); smaller ones go through the ring or
 * the connection.  A ring pair starts at the ring's size: below it the
 * ring's two pipelined copies beat a read's page pinning and FIN (world-2
 * ping-pong, 128 KiB rings: 2.2 µs against 7.8 at 64 KiB; even at 128 KiB,
 * where the message no longer fits whole; the read wins from 256 KiB). */
#define CMA_MIN_DEFAULT (32u * 1024u)
/* From this size a receiver reads a message with two threads where it can
 * (SPMD_P2P_PARALLEL_MIN_BYTES, 0: never; cma_parallel.c). */
#define PARALLEL_MIN_DEFAULT (512L * 1024L)

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
    spmd__cma_parallel *par;         /* ... by two threads from m->p2p_parallel_min bytes (NULL: one) */
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
    unsigned long quick_sends, quick_recvs; /* done by the quick path (p2p_quick.c; under mu) */
};

/* A nap starts at NAP_MIN_MS and doubles, up to NAP_MAX_MS, each time it
 * ends with nothing found that a doorbell should have announced: every
 * wake-up costs the rank's core a timer interrupt and two switches (~4% of a
 * large ping-pong at 1 ms), and a lost doorbell needs the weak fence to lose
 * a race of a few hundred nanoseconds. */
#define NAP_MIN_MS 1
#define NAP_MAX_MS 8

/* A request is done: hand it back to its owner. */
static inline void complete_req(spmd__preq *r, spmd_status st, const char *msg) { r->complete(r, st, msg); }

/* The type word with a dtype (-1: none) in its second byte. */
static inline uint32_t with_dt(uint32_t type, int dt) { return type | (uint32_t)(dt >= 0 ? dt + 1 : 0) << 8; }

static inline void hdr_put(unsigned char *h, uint32_t type, uint32_t tag, uint64_t len, uint64_t id) {
    spmd__put_u32(h, type);
    spmd__put_u32(h + 4, tag);
    spmd__put_u64(h + 8, len);
    spmd__put_u64(h + 16, id);
}

static inline void list_remove(spmd__preq **head, spmd__preq *w) {
    for (spmd__preq **p = head; *p; p = &(*p)->next)
        if (*p == w) { *p = w->next; w->next = NULL; return; }
}

static inline spmd__preq *list_take_id(spmd__preq **head, uint64_t id) {
    for (spmd__preq **p = head; *p; p = &(*p)->next)
        if ((*p)->id == id) { spmd__preq *w = *p; *p = w->next; w->next = NULL; return w; }
    return NULL;
}

static inline void fail_work(spmd__preq *w, spmd_status st, const char *msg) { w->complete(w, st, msg); }

/* A send whose buffer a peer may be reading by cross-memory attach is handed
 * back early (failed, withdrawn): change its seal first, so that a read
 * racing with the caller's reuse of the buffer is told (cma.c). */
static inline void revoke_seal(spmd__preq *w) { __atomic_store_n(&w->seal, 0, __ATOMIC_SEQ_CST); }

/* p2p_wait.c: end a spin begun by spmd__p2p_spin_begin_locked (under mu). */
void spmd__p2p_spin_end_locked(spmd__p2p *p, int which);

/* ---- p2p_send.c (under mu) --------------------------------------------------- */
/* Write as much of peer i's queue as its path takes; -1 when the path failed
 * (the caller then calls spmd__p2p_peer_died). */
int spmd__p2p_flush_peer(spmd__p2p *p, int i);
/* Queue a frame to peer i and try to write it at once (copy: the payload is
 * copied; w: completed once the frame is written). */
spmd_status spmd__p2p_enqueue(spmd__p2p *p, int i, uint32_t type, uint32_t tag, uint64_t len, uint64_t id,
                              const void *payload, size_t plen, int copy, spmd__preq *w);
/* Peer i's path ended: the group fails (unless it said BYE first). */
void spmd__p2p_peer_died(spmd__p2p *p, int i, const char *why);
/* An ABORT to every live peer; fail every operation in flight. */
void spmd__p2p_abort_locked(spmd__p2p *p, spmd_status st, const char *msg);
void spmd__p2p_fail_everything(spmd__p2p *p, spmd_status st, const char *msg);
/* The mesh's fail_pending and tell_peers hooks (take mu themselves). */
void spmd__p2p_fail_pending(spmd__mesh *g, spmd_status st, const char *msg);
void spmd__p2p_tell_peers(spmd__mesh *g, spmd_status st, const char *msg);

/* ---- p2p_read.c (under mu) ---------------------------------------------------- */
/* A receive meets a message kept unexpected (u stays the caller's to free). */
void spmd__p2p_deliver_unexpected(spmd__p2p *p, spmd__preq *w, unexp *u);
/* Read everything available from peer i. */
void spmd__p2p_read_peer(spmd__p2p *p, int i);
/* Release mu, first doing the matched RGETs' cross-memory reads. */
void spmd__p2p_unlock_engine(spmd__p2p *p);

/* ---- p2p_wait.c (under mu) ---------------------------------------------------- */
/* Set peer i's ring flags for a progress thread about to sleep (weak: it
 * naps); 1 when work keeps coming. */
int spmd__p2p_settle(spmd__p2p *p, int i, int weak);
/* A caller polls peer `which`'s ring itself (-1: every peer's). */
void spmd__p2p_spin_begin_locked(spmd__p2p *p, int which);

#endif
