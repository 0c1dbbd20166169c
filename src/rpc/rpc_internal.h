/* rpc_internal.h — the RPC agent's structures, shared by the files of src/rpc.
 *
 * Wire (wire.c): every message starts with one fixed-size frame
 * (RPC_FRAME_BYTES) on tag RPC_TAG_FRAME: the head, then inline the meta
 * block (tensor table, RRef table, payload) and the bytes of the first
 * tensors that fit.  The rest follows on a tag of its own (frame.body_tag,
 * unique per sender), each part at a size the frame announced, so the
 * receiver posts exact receives straight into the tensors' memory.
 *
 * Receiving (rx.c): one receive of the frame tag is posted at a time; the
 * thread holding the "receive role" drives the transport and processes what
 * arrives: the dispatcher thread, or a caller waiting for its reply (which
 * then needs no hand-off from another thread).
 *
 * The files, from the top down (each calls only files below it):
 *   agent.c      init, the public calls            shutdown.c  shutdown
 *   dispatch.c   what a received frame means
 *   rref.c       RRef handles, registering and releasing their users
 *   request.c    sending a request, waiting for its future
 *   pool.c       the handler threads, answers
 *   wire.c       a message as a frame and its body
 *   rx.c, p2p.c, batch.c   the receive role (below)
 *   future.c     futures, the pending table, the watchdog
 *   rref_owner.c the owner's table of values and users
 *   msg.c        messages              handlers.c  registered handlers
 *   state.c      error text, broken flag, references, accessors
 *   bufcache.c   reused tensor memory and message structures
 * Two things call upward, through hooks the agent sets at init: the receive
 * role hands each frame to dispatch.c (on_frame), and freeing or copying a
 * message that holds RRefs releases or registers users (release_user,
 * add_user, rref.c).  One mutual call remains, and it is the design: the
 * receive role.  A thread that polls for its own message (p2p.c's spin)
 * processes the frames that arrive meanwhile (rx.c), answering them sends
 * (batch.c, p2p.c), and a send polls again — rx.c, p2p.c and batch.c call
 * each other. */
#ifndef SPMD_RPC_INTERNAL_H
#define SPMD_RPC_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdint.h>
#include <string.h>
#include "common/common.h"
#include "spmd/rpc.h"

#define RPC_MAGIC 0x43505253u   /* "SRPC" */
#define RPC_VERSION 2
/* Every message pays its frame's copies (into and out of a ring, often twice
 * more through the transport's buffer for unexpected messages): 1 KiB keeps
 * small calls one message (160-byte head + 864 inline bytes) and made both no-op
 * latency and throughput better than 2 or 4 KiB (docs/PERFORMANCE.md). */
#define RPC_FRAME_BYTES 1024
#define RPC_TAG_FRAME 7
#define RPC_TAG_BODY0 64        /* body tags: RPC_TAG_BODY0 + (seq mod 2^28) */
#define RPC_MAX_RREFS 16        /* per message */
#define RPC_PACK_MAX 65536      /* small non-inline tensors up to this much travel as one message */
#define RPC_PACK_EACH 8192      /* ... when they average under this size */
#define RPC_F_PACKED 1          /* frame flag: the non-inline tensors' bytes are one body message */
#define RPC_F_META_SEP 2        /* frame flag: the meta block is the first body message */

enum {
    RPC_K_CALL = 1,   /* run handler name on args, answer with RPC_K_RESP */
    RPC_K_RESP,
    RPC_K_REMOTE,     /* run handler, keep the result as RRef rref_id (user fork_id) */
    RPC_K_TO_HERE,    /* a copy of RRef rref_id's value */
    RPC_K_RREF_CALL,  /* run handler with RRef rref_id's value */
    RPC_K_FORK,       /* register user fork_id of rref_id */
    RPC_K_DELETE,     /* release user fork_id of rref_id */
    RPC_K_SD_READY,   /* shutdown: this worker's application is done (to rank 0) */
    RPC_K_SD_QUERY,   /* shutdown: rank 0 asks for counters (aux[0] = round) */
    RPC_K_SD_STATE,   /* shutdown: aux = round, active, requests sent, requests received */
    RPC_K_SD_FIN,     /* shutdown: rank 0 says stop; answered by SD_FIN back */
    RPC_K_LAST
};

typedef struct {
    uint32_t magic;
    uint8_t version, kind;
    uint16_t flags;
    int32_t status;       /* responses: SPMD_OK or the error (message in the payload) */
    uint32_t body_tag;    /* 0: no body messages */
    uint64_t id;          /* request id, echoed by the response */
    uint64_t rref_id, fork_id;
    uint64_t aux[4];
    uint32_t ntensors, nrrefs, payload_len, meta_len;
    uint64_t data_len;    /* tensor bytes in all */
    uint32_t inline_len;  /* bytes of inl used: the meta block (unless RPC_F_META_SEP), then data */
    uint32_t n_inline;    /* the first n_inline tensors' bytes are in inl */
    uint32_t nsub;        /* the first frame of a message: how many frames the message holds (batch.c) */
    char name[SPMD_RPC_MAX_NAME];
} rpc_frame_head;

#define RPC_INLINE_BYTES (RPC_FRAME_BYTES - sizeof(rpc_frame_head))
typedef struct {
    rpc_frame_head h;
    unsigned char inl[RPC_INLINE_BYTES];
} rpc_frame;

typedef struct {
    int owner;
    uint64_t rref_id, fork_id;
    int taken;
} rpc_rref_desc;

struct spmd_rpc_msg {
    int n;
    spmd_rpc_tensor t[SPMD_RPC_MAX_TENSORS];
    unsigned char owned[SPMD_RPC_MAX_TENSORS];   /* data malloc'ed by the message */
    unsigned char *payload;
    size_t plen;
    int nrrefs;
    rpc_rref_desc rr[RPC_MAX_RREFS];
    spmd_rpc *agent;   /* set when the message carries RRefs */
};

struct spmd_rpc_future {
    spmd_rpc *r;
    int local;             /* a call to oneself: completed by a pool thread, not by a frame */
    pthread_cond_t cv;     /* with r->fmu */
    int refs, done, taken, counted;
    atomic_int settled;    /* done and callbacks run: waiters may return */
    spmd_status st;
    char err[SPMD__ERRLEN];
    spmd_rpc_msg *result;
    uint64_t id;
    int dst;
    int64_t deadline;      /* ms, 0: none */
    struct rpc_cb { spmd_rpc_future_cb fn; void *ctx; struct rpc_cb *next; } *cbs;
    struct spmd_rpc_future *hnext;
};

typedef struct rpc_entry {
    uint64_t rref_id;
    int state;             /* 0 being created, 1 ready, 2 creation failed */
    spmd_rpc_msg *value;
    char err[SPMD__ERRLEN];
    uint64_t *forks;
    int nforks, capforks;
    int busy;              /* tasks holding a pointer */
    pthread_mutex_t vmu;   /* serialises handlers on the value */
    struct rpc_entry *next;
} rpc_entry;

struct spmd_rpc_call {
    spmd_rpc *r;
    int caller, kind, deferred, failed;   /* deferred: 1 by the handler, 2 deferred but failed */
    atomic_int refs;                      /* the handler's, and the finish's once deferred */
    uint64_t id, rref_id, fork_id;
    char name[SPMD_RPC_MAX_NAME];
    spmd_rpc_msg *args, *result;
    char err[SPMD__ERRLEN];
    spmd_rpc_future *local;   /* a call to oneself: complete this directly */
    rpc_entry *entry;
    struct spmd_rpc_call *next;
};

typedef struct rpc_handler {
    char name[SPMD_RPC_MAX_NAME];
    spmd_rpc_handler fn;
    void *ctx;
    int has_sig, inline_ok;
    spmd_rpc_sig sig;
    spmd_rpc_shape *shapes;
    struct rpc_handler *next;
} rpc_handler;

#define RPC_BUCKETS 1024

struct spmd_rpc {
    spmd_group *g;          /* private subgroup */
    spmd_group *env_group;  /* spmd_rpc_init_env's own group, destroyed last */
    int rank, world, timeout_ms;
    char (*names)[SPMD_RPC_MAX_NAME];
    char errmsg[SPMD__ERRLEN];

    pthread_mutex_t mu;     /* handlers, entries, errmsg, shutdown state */
    rpc_handler *handlers;
    rpc_entry *entries;

    pthread_mutex_t fmu;    /* futures and the pending table */
    spmd_rpc_future *pending[RPC_BUCKETS];
    uint64_t next_id;
    atomic_uint body_seq;
    atomic_ullong next_fork;
    atomic_long active;     /* outstanding outgoing requests + calls being served */
    atomic_ullong sent_req, recv_req;
    atomic_int broken;      /* the group failed or shut down: new calls fail at once */
    atomic_int users;       /* threads using the group (spmd__rpc_enter): shutdown waits for them */
    char broken_msg[SPMD__ERRLEN];

    /* handler pool */
    pthread_mutex_t qmu;
    pthread_cond_t qcv;
    spmd_rpc_call *qhead, *qtail;
    atomic_int q_len;            /* calls queued (read without qmu) */
    int qstop, q_idle, q_woken;  /* with qmu: pool threads asleep on qcv, and signalled */
    atomic_int q_stopping;       /* qstop, for pool threads busy receiving */
    atomic_int q_mine;           /* the pool thread holding the receive role queued a call it runs itself */
    atomic_int q_spinning;       /* pool threads looking for the next call before they sleep */
    pthread_t *pool;
    int nthreads;

    /* receiving frames (rx.c): the posted receive of the frame tag and who
     * holds the receive role (changes under rxmu) */
    pthread_mutex_t rxmu;
    pthread_cond_t dcv;          /* the dispatcher sleeps here until a frame waits and nobody holds the role */
    struct rpc_rx *rx;           /* [2]: the receive posted now (rx_cur) and the frame being processed */
    int rx_cur;
    atomic_int rx_holder;        /* RPC_RX_NONE, _DISPATCHER, _WAITER or _POOL */
    atomic_int rx_pool_want;     /* idle pool threads asking the dispatcher for the role */
    atomic_int rx_want;          /* waiters asking for it */
    atomic_int rx_live;          /* set once the dispatcher runs: pool threads may receive */
    atomic_int rx_done;          /* the posted receive completed: a frame (or the group's failure) waits */
    atomic_int rx_stop;          /* the dispatcher must stop: shutdown's FIN exchange is over, or the group failed */
    int disp_sleeping;

    /* calls up from the lower files (see the top of this file), set at init */
    void (*on_frame)(spmd_rpc *r, int src, const rpc_frame *f, size_t room);
    void (*release_user)(spmd_rpc *r, int owner, uint64_t rref_id, uint64_t fork_id);
    spmd_status (*add_user)(spmd_rpc *r, int owner, uint64_t rref_id, uint64_t fork_id, char *err, size_t errlen);

    pthread_t dispatcher, watchdog;
    int have_dispatcher, have_watchdog;
    pthread_cond_t wcv;     /* with fmu: wakes the watchdog to stop */
    int wstop;

    /* shutdown (rank 0 collects, with mu) */
    pthread_cond_t scv;
    /* the agent's memory outlives spmd_rpc_shutdown while futures, RRef
     * handles or messages with RRefs still refer to it */
    atomic_int refs;
    int sd_ready, sd_states, sd_fin_acks, sd_fin;
    uint64_t sd_round, sd_sum[3];
};

enum { RPC_RX_NONE = 0, RPC_RX_DISPATCHER, RPC_RX_WAITER, RPC_RX_POOL };

/* A handler or worker name into a SPMD_RPC_MAX_NAME buffer (a bad frame's
 * may be unterminated: at most SPMD_RPC_MAX_NAME - 1 bytes are read). */
static inline void spmd__rpc_name_copy(char *dst, const char *src) {
    size_t n = strnlen(src, SPMD_RPC_MAX_NAME - 1);
    memcpy(dst, src, n);
    dst[n] = 0;
}

/* one step of a busy wait */
static inline void spmd__rpc_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

/* msg.c */
size_t spmd__rpc_tensor_bytes(const spmd_rpc_tensor *t);
spmd_status spmd__rpc_msg_add_desc(spmd_rpc_msg *m, spmd_rpc *r, int owner, uint64_t rref_id,
                                   uint64_t fork_id);
void spmd__rpc_msg_handover(const spmd_rpc_msg *m);
spmd_status spmd__rpc_msg_copy(spmd_rpc *r, const spmd_rpc_msg *m, int handover, spmd_rpc_msg **out);
/* bufcache.c: tensor memory of messages (large buffers are reused) */
void *spmd__rpc_data_alloc(size_t bytes);
void spmd__rpc_data_free(void *p, size_t bytes);
void spmd__rpc_data_trim(void);   /* free what the cache holds */
/* bufcache.c: message structures, kept for reuse */
spmd_rpc_msg *spmd__rpc_msg_alloc(void);   /* uninitialised */
void spmd__rpc_msg_dealloc(spmd_rpc_msg *m);
void spmd__rpc_msg_trim(void);   /* free the spare messages */
/* p2p.c: one message to or from a peer of the agent's group, waited for
 * (spinning first, then asleep; the group's timeout cancels it) */
spmd_status spmd__rpc_p2p(spmd_rpc *r, int send, void *buf, size_t n, int peer, int tag, char *err,
                          size_t errlen);
/* Release the RRefs a message holds that nobody took (what freeing it does,
 * without freeing its tensors): a call's arguments at its answer, so the
 * releases go ahead of it (docs/RPC.md). */
void spmd__rpc_msg_release_rrefs(spmd_rpc_msg *m);
/* Keep this thread counted as polling the transport across a short gap
 * before it polls again (a caller between its request and its wait, a pool
 * thread between its answer and its next receive), so a frame arriving in
 * the gap rings no doorbell and wakes no thread.  The next spmd__rpc_spin
 * takes the hold over; anything that may sleep or run a handler first must
 * drop it (spmd__rpc_unhold). */
void spmd__rpc_hold(spmd_rpc *r);
void spmd__rpc_unhold(void);
/* Poll the transport until stop(ctx) or budget_ns passed; 1 when stop held.
 * rx: frames that arrive meanwhile are processed (the caller holds the
 * receive role); dispatcher: keep going while frames come, and leave the
 * role to an idle pool thread or (once the traffic pauses) to a waiter. */
int spmd__rpc_spin(spmd_rpc *r, int peer, int (*stop)(void *), void *ctx, uint64_t budget_ns, int rx,
                   int dispatcher);
uint64_t spmd__rpc_spin_budget(spmd_rpc *r, size_t bytes);
/* rx.c */
spmd_status spmd__rpc_rx_start(spmd_rpc *r, char *err, size_t errlen);
void spmd__rpc_rx_stop(spmd_rpc *r);          /* wakes the dispatcher to leave */
void *spmd__rpc_dispatcher_main(void *arg);
int spmd__rpc_rx_process(spmd_rpc *r);        /* holder: handle the completed receive; 0 when it failed for good */
/* A waiter drives reception itself until stop(ctx) or budget_ns passed
 * (taking the role when it is free or its holder leaves it); 1 when stop
 * held. */
int spmd__rpc_drive_while_waiting(spmd_rpc *r, int (*stop)(void *), void *ctx, uint64_t budget_ns);
/* An idle pool thread takes the role (the dispatcher leaves it to it) and
 * receives until stop(ctx) (1) or a spin budget without traffic (2); 0 when
 * it did not get the role. */
int spmd__rpc_pool_receive(spmd_rpc *r, int (*stop)(void *), void *ctx);
/* dispatch.c: one received frame (its body is still to be received) */
void spmd__rpc_on_frame(spmd_rpc *r, int src, const rpc_frame *f, size_t room);
/* wire.c */
/* batch: the message may wait in this thread's batch (batch.c) when it
 * fits the frame */
spmd_status spmd__rpc_send(spmd_rpc *r, int dst, rpc_frame *f, const spmd_rpc_msg *m, int batch, char *err,
                           size_t errlen);
/* room: the bytes after f's head that belong to f */
spmd_status spmd__rpc_recv_body(spmd_rpc *r, int src, const rpc_frame *f, size_t room, spmd_rpc_msg **out,
                                char *err, size_t errlen);
/* batch.c: a thread answering a burst of calls (the receive role's holder,
 * a pool thread with more calls queued) sends the inline-only answers to
 * one caller as one message; it sends them when the burst ends. */
void spmd__rpc_batch_begin(spmd_rpc *r);     /* this thread may batch for r ... */
void spmd__rpc_batch_end(spmd_rpc *r);       /* ... no more (sends what it holds) */
int spmd__rpc_batching(spmd_rpc *r);         /* this thread batches for r and more work waits */
spmd_status spmd__rpc_batch_add(spmd_rpc *r, int dst, const rpc_frame *f, char *err, size_t errlen);
void spmd__rpc_flush(spmd_rpc *r);           /* send this thread's batch, if any */
/* every frame of a received message, in order */
void spmd__rpc_on_message(spmd_rpc *r, int src, const rpc_frame *f);
void spmd__rpc_frame_init(rpc_frame *f, int kind, uint64_t id, const char *name);
void spmd__rpc_send_small(spmd_rpc *r, int dst, int kind, const uint64_t aux[4]);
/* future.c */
spmd_rpc_future *spmd__rpc_future_new(spmd_rpc *r, int dst, int timeout_ms);
void spmd__rpc_future_complete(spmd_rpc_future *f, spmd_status st, spmd_rpc_msg *result,
                               const char *err);
void spmd__rpc_pending_add(spmd_rpc *r, spmd_rpc_future *f);
spmd_rpc_future *spmd__rpc_pending_take(spmd_rpc *r, uint64_t id);
void spmd__rpc_fail_all(spmd_rpc *r, spmd_status st, const char *msg);
void spmd__rpc_future_expire(spmd_rpc *r, spmd_rpc_future *f);   /* past its deadline */
void *spmd__rpc_watchdog(void *arg);
/* request.c: send a request of kind (with rref ids) and return its future */
spmd_status spmd__rpc_request(spmd_rpc *r, int dst, int kind, const char *fn, uint64_t rref_id,
                              uint64_t fork_id, const spmd_rpc_msg *args, int timeout_ms,
                              spmd_rpc_future **out);
/* pool.c */
spmd_status spmd__rpc_pool_start(spmd_rpc *r, int n);
void spmd__rpc_pool_stop(spmd_rpc *r);
void spmd__rpc_enqueue(spmd_rpc *r, spmd_rpc_call *c);
spmd_rpc_call *spmd__rpc_call_new(spmd_rpc *r, int caller, int kind, uint64_t id, const char *name);
void spmd__rpc_reply(spmd_rpc_call *c, spmd_status st);
int spmd__rpc_serve_inline(spmd_rpc_call *c);
void spmd__rpc_execute(spmd_rpc_call *c);
/* rref_owner.c */
rpc_entry *spmd__rpc_entry_create(spmd_rpc *r, uint64_t rref_id, uint64_t fork_id);
rpc_entry *spmd__rpc_entry_get(spmd_rpc *r, uint64_t rref_id);   /* busy++ */
void spmd__rpc_entry_put(spmd_rpc *r, rpc_entry *e);             /* busy-- */
void spmd__rpc_entry_set(spmd_rpc *r, rpc_entry *e, spmd_status st, spmd_rpc_msg *value,
                         const char *err);
spmd_status spmd__rpc_entry_wait(spmd_rpc *r, rpc_entry *e, char *err, size_t errlen);
spmd_status spmd__rpc_fork_add(spmd_rpc *r, uint64_t rref_id, uint64_t fork_id, char *err,
                               size_t errlen);
spmd_status spmd__rpc_fork_del(spmd_rpc *r, uint64_t rref_id, uint64_t fork_id, char *err,
                               size_t errlen);
void spmd__rpc_entries_free(spmd_rpc *r);
spmd_rpc_msg *spmd__rpc_entry_value(spmd_rpc *r, uint64_t rref_id);   /* the ready value, or NULL */
/* rref.c */
spmd_status spmd__rpc_fork_add_remote(spmd_rpc *r, int owner, uint64_t rref_id, uint64_t fork_id,
                                      char *err, size_t errlen);
void spmd__rpc_release_desc(spmd_rpc *r, int owner, uint64_t rref_id, uint64_t fork_id);
/* state.c */
void spmd__rpc_agent_live(void);   /* one more agent alive (spmd__rpc_unref counts it down) */
void spmd__rpc_set_broken(spmd_rpc *r, const char *why);
/* Around a use of the agent's group by an application thread: 0 (and no
 * use) once the agent is broken, so shutdown can destroy the group safely. */
int spmd__rpc_enter(spmd_rpc *r);
void spmd__rpc_leave(spmd_rpc *r);
void spmd__rpc_ref(spmd_rpc *r);
void spmd__rpc_unref(spmd_rpc *r);
spmd_status spmd__rpc_error(spmd_rpc *r, spmd_status st, const char *fmt, ...) SPMD__PRINTF(3, 4);
/* handlers.c */
const rpc_handler *spmd__rpc_handler_find(spmd_rpc *r, const char *name, rpc_handler *copy);
int spmd__rpc_handler_is_inline(spmd_rpc *r, const char *name);
int spmd__rpc_check_sig(const rpc_handler *h, const spmd_rpc_msg *m, char *err, size_t errlen);

#endif
