/* src/transport/mesh.h — the transport layer's object: one mesh per group,
 * owning every path to every peer and the group's failure state.
 *
 *   paths      per peer, a p2p channel (driven by the progress engine,
 *              p2p_engine.c) and a collective channel (driven by whichever
 *              thread runs the current collective, xfer.c); each channel is a
 *              TCP connection or a shared-memory ring (path.h)
 *   cma        which peers' memory this rank may read directly (cma.c)
 *   failure    set once, never cleared: a dead peer, a protocol error, an
 *              abort reported by another rank, or the caller's abort; every
 *              waiter wakes through fail_eventfd (failure.c)
 *
 * Nothing here knows about groups, collectives' arguments or tensors: the
 * group layer (src/group) embeds a mesh and drives it. */
#ifndef SPMD_TRANSPORT_MESH_H
#define SPMD_TRANSPORT_MESH_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include "common/common.h"
#include "spmd/group.h" /* SPMD_ANY_SOURCE, SPMD_ANY_TAG */
#include "spmd/status.h"

typedef struct spmd__p2p spmd__p2p;   /* p2p_engine.c */
typedef struct spmd__preq spmd__preq; /* a posted send or receive (below) */
typedef struct spmd__path spmd__path; /* path.h */
typedef struct spmd__shm_link spmd__shm_link; /* shm_link.c */
typedef struct spmd__mesh_ext spmd__mesh_ext; /* below */

/* What this rank knows of a peer's process for cross-memory attach (cma.c). */
typedef struct {
    int ok;             /* both ranks can read each other: large collective messages go by CMA */
    int local;          /* same kernel and pid namespace, both willing to share memory */
    int pid;
    uint64_t token_addr, token;
} spmd__cma_peer;

/* Channels of a pair of ranks. */
enum { SPMD__CH_P2P = 0, SPMD__CH_COLL = 1, SPMD__NCHAN = 2 };

/* Which ranks share a host (by shared-memory rings), known alike by every
 * rank; `hosts` > 1 with the same number of ranks on each is what
 * hierarchical collectives need (else hosts == 0). */
typedef struct {
    int hosts, per_host;
    int my_host, my_index;        /* this rank's host and its place on it */
    int *member;                  /* [hosts * per_host]: rank of host h, index i at h*per_host+i */
} spmd__topology;

/* Asked about once a second while the rendezvous waits for peers: non-zero
 * means give up, and why says why.  missing: the ranks above this one that
 * have not connected yet.  (The group uses it to end a rendezvous whose
 * store refused a client: group/rdzv_watch.c.) */
typedef struct spmd__rdzv_watch {
    int (*check)(void *arg, const int *missing, int nmissing, char *why, size_t len);
    void *arg;
} spmd__rdzv_watch;

typedef struct spmd__mesh {
    int rank, world;
    int local_world;              /* ranks on this host, as the launcher says (spin policy) */
    int oversubscribed;           /* more ranks on this host than cores: spin briefly, sleep early */
    uint64_t spin_ns;             /* busy-poll budget of a waiter before it sleeps (SPMD_SPIN_US) */
    char name[64];                /* the group's name, for messages */
    int timeout_ms;               /* default deadline of blocking waits */
    uint64_t job_id;
    spmd__rdzv_watch watch;       /* see above; check NULL: none */

    int *fd[SPMD__NCHAN];         /* [world] TCP connection per channel, -1 for self */
    spmd__path **path[SPMD__NCHAN]; /* [world] how each channel moves bytes (NULL for self) */
    spmd__shm_link *shm;          /* shared-memory rings with the peers under this kernel, or NULL */
    spmd__topology topo;          /* hosts and their ranks (shm_link.c) */

    spmd__p2p *p2p;
    spmd__cma_peer *cma;          /* [world], NULL until negotiated */
    uint64_t cma_token;           /* peers read it to know they read the right process */
    size_t cma_min;               /* smaller collective messages stay inline (SPMD_CMA_MIN_BYTES) */
    size_t p2p_parallel_min;      /* p2p messages read by two threads from here (0: never; cma_parallel.c) */

    /* failure: set once, never cleared */
    atomic_int failed;            /* 0 ok; else the spmd_status of the failure */
    pthread_mutex_t fail_mu;
    char fail_msg[SPMD__ERRLEN];
    int fail_eventfd;             /* readable once failed != 0 */
    int fail_culprit;             /* the rank the failure blames, -1 none (under fail_mu) */
    atomic_int *peer_left;        /* [world] 1 after the peer said goodbye */

    /* Set by the layer above before the progress thread starts (the group's
     * flight recorder); both may be NULL.  on_fail runs once, on the thread
     * that records the first failure, before any waiter can see it (so a
     * program that exits on the error still leaves its record); it must not
     * call back into the mesh.  on_tick runs on the progress thread about
     * once a second (more often with short heartbeats), with no lock held. */
    void (*on_fail)(void *arg, spmd_status st, int culprit, const char *msg);
    void (*on_tick)(void *arg);
    /* called with the p2p engine's lock held as each send or receive is
     * posted, before it can complete (the recorder numbers it there) */
    void (*on_post)(void *arg, spmd__preq *r);
    /* called with the p2p engine's lock held for a blocking send or receive
     * done at once by the quick path (p2p_quick.c), which posts nothing */
    void (*on_done_now)(void *arg, int send, int peer, int tag, size_t len, int dtype);
    void *hook_arg;
    /* How a failure reaches the engine that moves this mesh's point-to-point
     * traffic, set by that engine before it runs (spmd__p2p_start, or the MPI
     * link's attach; NULL before): fail_pending fails every pending
     * operation, tell_peers queues an abort notice to every live peer.
     * failure.c calls them for the first failure only, knowing no engine. */
    void (*fail_pending)(struct spmd__mesh *m, spmd_status st, const char *msg);
    void (*tell_peers)(struct spmd__mesh *m, spmd_status st, const char *msg);
    /* CLOCK_MONOTONIC in ms as the progress thread last read it: when
     * clock_wanted (set before the thread starts), at most about
     * SPMD__MESH_CLOCK_MS old while the thread runs (a clock for the flight
     * recorder that costs a load instead of a clock_gettime) */
    _Atomic int64_t clock_ms;
    int clock_wanted;

    /* A mesh over another library (MPI, mpi_link.c): no paths, no progress
     * thread; point-to-point, the collective wire and failure notices go
     * through ext's operations.  NULL for spmd's own transport. */
    const spmd__mesh_ext *ext;
    void *ext_state;
    int caller_thread_only;       /* transport calls must stay on the caller's thread
                                     (MPI below MPI_THREAD_MULTIPLE): no executor thread */
} spmd__mesh;

#define SPMD__MESH_CLOCK_MS 100

/* The operations of a mesh over another library.  The p2p functions below
 * and spmd__xfer (xfer.h) hand their calls to these when m->ext is set
 * (failures reach it through the mesh's fail_pending / tell_peers). */
struct spmd__coll_ctx;
struct spmd__xfer_op;
struct spmd__preq;
struct spmd__mesh_ext {
    const char *name; /* what spmd_group_backend() says, e.g. "mpi" */
    spmd_status (*xfer)(struct spmd__coll_ctx *c, const struct spmd__xfer_op *sends, int nsends,
                        const struct spmd__xfer_op *recvs, int nrecvs);
    spmd_status (*post_send)(struct spmd__mesh *m, struct spmd__preq *r, char *err, size_t errlen);
    spmd_status (*post_recv)(struct spmd__mesh *m, struct spmd__preq *r, char *err, size_t errlen);
    void (*poll)(struct spmd__mesh *m, int peer);
    /* Wait (driving progress) until (*state & done_bit) or the deadline: SPMD_OK or SPMD_ERR_TIMEOUT. */
    spmd_status (*wait)(struct spmd__mesh *m, struct spmd__preq *r, const atomic_int *state, int done_bit,
                        int64_t deadline);
    void (*cancel)(struct spmd__mesh *m, struct spmd__preq *r);
    void (*stop)(struct spmd__mesh *m); /* say goodbye, fail what is pending, free ext_state */
};

/* ---- which paths (mode.c) ---------------------------------------------------- */
enum { SPMD__TRANSPORT_TCP = 0, SPMD__TRANSPORT_AUTO = 1, SPMD__TRANSPORT_SHM = 2 };
int spmd__transport_mode(void);      /* SPMD_TRANSPORT */
int spmd__transport_wants_shm(void); /* rings and shared gradients allowed */
int spmd__transport_wants_cma(void); /* cross-memory attach allowed */
int spmd__transport_wants_encrypt(void); /* SPMD_ENCRYPT=1: encrypted TCP links (path_sealed.c) */

/* ---- life cycle (failure.c) ---------------------------------------------- */
/* Allocate the per-peer arrays and the failure eventfd; every fd -1. */
spmd_status spmd__mesh_init(spmd__mesh *m, int rank, int world);
/* Close every path and connection, free the arrays (engine stopped first). */
void spmd__mesh_close(spmd__mesh *m);
int64_t spmd__mesh_deadline(const spmd__mesh *m);
/* Connect to every peer (connect.c): TCP mesh through the store, then
 * cross-memory attach and shared-memory rings where the pair allows
 * (SPMD_TRANSPORT).  m->job_id, name and timeout must be set. */
struct spmd_store;
spmd_status spmd__mesh_connect(spmd__mesh *m, struct spmd_store *store, const char *bind_host, int64_t deadline,
                               char *err, size_t errlen);

/* ---- failure (failure.c) ------------------------------------------------- */
/* Record the failure and wake waiters (no p2p locking); 1 if first. */
int spmd__mesh_mark_failed(spmd__mesh *m, spmd_status st, const char *msg);
/* The same, naming the rank at fault (a dead or silent peer; -1: none). */
int spmd__mesh_mark_failed_by(spmd__mesh *m, spmd_status st, int culprit, const char *msg);
/* Mark the mesh failed (first call wins), wake every waiter, and if
 * `tell_peers`, send an abort notice with the message to every live peer;
 * every pending p2p operation fails. */
void spmd__mesh_fail(spmd__mesh *m, spmd_status st, int tell_peers, const char *fmt, ...)
    SPMD__PRINTF(4, 5);
/* The same, naming the rank at fault (-1: none); the abort notice carries it. */
void spmd__mesh_fail_by(spmd__mesh *m, spmd_status st, int culprit, int tell_peers, const char *fmt, ...)
    SPMD__PRINTF(5, 6);
/* SPMD_OK, or the failure status with its message copied to msg. */
spmd_status spmd__mesh_check(spmd__mesh *m, char *msg, size_t msglen);

/* ---- point-to-point (p2p_engine.c) ---------------------------------------- */
/* One posted send or receive.  The engine completes it exactly once through
 * `complete` (from any thread); after that it never touches it again. */
struct spmd__preq {
    int send;
    void *buf;
    size_t len;
    int peer;        /* dst for sends, src (or SPMD_ANY_SOURCE) for receives; rewritten
                        under the engine's lock when an any-source receive matches */
    int poll_peer;   /* the peer as posted: read by waiters without a lock */
    int tag;         /* rewritten with the message's tag on match */
    int dtype;       /* spmd_dtype of the elements (checked against the other side), -1: none */
    int source;      /* the sender, once matched */
    int waiting;     /* the poster waits for it at once (blocking call): it drives the engine itself */
    int will_spin;   /* set by a poster that spins on it next through group/work.c's wait, which
                        ends a spin the post began (rpc spins its own way and leaves it 0) */
    int spin_begun;  /* a will_spin receive's post began its poster's spin (spmd__p2p_spin_begin)
                        under the lock it held anyway: the poster ends it */
    int recorded;    /* on_post numbers it: a group's send or receive (the flight recorder's);
                        the layers that post their own (rpc) leave it 0 */
    uint64_t id;     /* rendezvous id */
    uint64_t seal;   /* a send read by cross-memory attach: what the reader must find here after the
                        payload (changed before the buffer is handed back early) */
    uint64_t cma[3]; /* a receive matched to such a send: the sender's address, seal address, seal */
    spmd__preq *next;
    void (*complete)(spmd__preq *r, spmd_status st, const char *msg);
};

spmd_status spmd__p2p_start(spmd__mesh *m, char *err, size_t errlen);
/* Say goodbye to every peer, flush, stop the thread, fail what is pending. */
void spmd__p2p_stop(spmd__mesh *m);
spmd_status spmd__p2p_post_send(spmd__mesh *m, spmd__preq *r, char *err, size_t errlen);
spmd_status spmd__p2p_post_recv(spmd__mesh *m, spmd__preq *r, char *err, size_t errlen);
/* Progress p2p traffic with `peer` (-1: every peer) on the calling thread,
 * without blocking; used by waiters. */
void spmd__p2p_poll(spmd__mesh *m, int peer);
/* A blocking send or receive of a small message with a peer reached by
 * shared memory, done in its ring without posting anything (p2p_quick.c).
 * Each answers DONE, NOT_YET (a receive whose message is not there yet: ask
 * again when spmd__p2p_ready says so; spin: from now on the caller spins on
 * the peer's ring, so its writer need not wake our progress thread, until
 * spmd__p2p_quick_recv_end or an answer other than NOT_YET) or GENERAL: post
 * it the general way, which finds everything as it was (a failure, a
 * mismatch, a full ring, another frame first are all the general path's to
 * handle). */
enum { SPMD__QUICK_GENERAL = -1, SPMD__QUICK_NOT_YET = 0, SPMD__QUICK_DONE = 1 };
#define SPMD__P2P_QUICK_MAX (8u * 1024u) /* larger messages take the general path */
typedef struct {
    int peer, tag, dt; /* a given peer and tag, not ANY */
    void *buf;
    size_t len;        /* bytes */
    int spinning;      /* NOT_YET began a spin on the peer's ring (0 to start) */
} spmd__quick_recv;
int spmd__p2p_quick_send(spmd__mesh *m, int peer, int tag, int dt, const void *buf, size_t len);
int spmd__p2p_quick_recv(spmd__mesh *m, spmd__quick_recv *q, int spin);
void spmd__p2p_quick_recv_end(spmd__mesh *m, spmd__quick_recv *q);
/* Sends and receives the quick path did so far (tests). */
void spmd__p2p_quick_stats(spmd__mesh *m, unsigned long *sends, unsigned long *recvs);
/* Whether spmd__p2p_poll(m, peer) may have something to do: bytes on a
 * ring, frames queued to it, or a TCP peer (which cannot be told without a
 * system call).  No lock, no system call: spinning waiters call it first. */
int spmd__p2p_ready(spmd__mesh *m, int peer);
/* A waiter polls the rings of `peer` (-1: every peer) itself for a while:
 * their writers need not wake our progress thread meanwhile. */
void spmd__p2p_spin_begin(spmd__mesh *m, int peer);
void spmd__p2p_spin_end(spmd__mesh *m, int peer);
/* Spins begun on peer's rings and not yet ended (tests check none leak). */
int spmd__p2p_spinners(spmd__mesh *m, int peer);
/* spmd__p2p_poll for a spinner: when done(arg) says its operation has
 * completed, its spin ends (spmd__p2p_spin_end) under the same lock, and 1
 * is returned.  Saves a lock round per blocking call. */
int spmd__p2p_poll_spin(spmd__mesh *m, int peer, int (*done)(void *), void *arg);
/* Withdraw a posted receive (or a large send not yet cleared) that has not
 * matched yet: completes it with SPMD_ERR_ABORTED; nothing when it matched. */
void spmd__p2p_cancel(spmd__mesh *m, spmd__preq *r);
/* Large receives offered to the engine's second reading thread so far, and
 * the chunks that thread copied (cma_parallel.c; tests and benchmarks). */
void spmd__p2p_parallel_stats(spmd__mesh *m, unsigned long *reads, unsigned long *helped);

/* ---- cross-memory attach (cma.c) ------------------------------------------ */
#define SPMD__BOOT_ID_LEN 40
/* The running kernel's boot id and our pid namespace; 0 when unknown. */
int spmd__kernel_identity(char boot_id[SPMD__BOOT_ID_LEN], uint64_t *pidns);
/* Settle with every peer, over the idle collective channel, whether large
 * collective messages may be read straight from its memory. */
spmd_status spmd__cma_negotiate(spmd__mesh *m, int64_t deadline, char *err, size_t errlen);
/* Read len bytes at the peer's address addr into dst (checks the peer's token). */
spmd_status spmd__cma_read(spmd__mesh *m, int peer, void *dst, uint64_t addr, size_t len, char *err,
                           size_t errlen);
/* The same with the sender's own seal: after the payload, the 8 bytes at the
 * peer's seal_addr must still read `seal` (point-to-point sends, p2p_engine.c). */
spmd_status spmd__cma_read_sealed(spmd__mesh *m, int peer, void *dst, uint64_t addr, size_t len, uint64_t seal_addr,
                                  uint64_t seal, char *err, size_t errlen);
/* The bytes alone, no token or seal: only for a piece of a message whose
 * seal is read once every piece is in (cma_parallel.c). */
spmd_status spmd__cma_copy(spmd__mesh *m, int peer, void *dst, uint64_t addr, size_t len, char *err, size_t errlen);

#endif
