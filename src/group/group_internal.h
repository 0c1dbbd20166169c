/* src/group/group_internal.h — the inside of a process group.
 *
 * A group owns:
 *   - a store handle (rendezvous, subgroup creation),
 *   - two TCP connections to every peer: the p2p channel, driven by the
 *     group's progress thread (epoll), and the collective channel, driven by
 *     whichever thread executes the current collective;
 *   - the collective executor: a FIFO of submitted collectives run one at a
 *     time in issue order, inline on the caller's thread when the queue is
 *     idle (blocking calls), else on the executor thread (async calls);
 *   - the failure state: a dead peer or an abort reported by another rank
 *     fails everything in flight and everything after, waking waiters
 *     through an eventfd that collective waits include in their poll sets.
 */
#ifndef SPMD_GROUP_INTERNAL_H
#define SPMD_GROUP_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include "coll/coll.h"
#include "common/common.h"
#include "spmd/group.h"
#include "spmd/store.h"

typedef struct spmd__p2p spmd__p2p; /* progress.c */
typedef struct spmd__exec spmd__exec; /* executor.c */

/* What this rank knows of a peer's process for cross-memory attach (cma.c). */
typedef struct {
    int ok;             /* both ranks can read each other: large collective messages go by CMA */
    int pid;
    uint64_t token_addr, token;
} spmd__cma_peer;

struct spmd_group {
    int rank, world;
    int local_rank, local_world;
    char name[64];
    int timeout_ms;               /* default deadline of blocking calls */
    uint64_t job_id;

    spmd_store *store_root;       /* owned when own_store_client */
    spmd_store *store;            /* prefixed handle for this group (owned) */
    spmd_store_server *store_server; /* owned when this rank hosts the store */
    int own_store_client;
    char store_prefix[200];       /* this group's key prefix in the store */
    char bind_host[256];          /* address this rank listens on */

    int *p2p_fd;                  /* [world], -1 for self */
    int *coll_fd;                 /* [world], -1 for self */

    spmd__p2p *p2p;
    spmd__exec *exec;
    spmd__cma_peer *cma;          /* [world], NULL until the mesh is up */
    uint64_t cma_token;           /* peers read it to know they read the right process */
    size_t cma_min;               /* smaller collective messages stay inline (SPMD_CMA_MIN_BYTES) */

    /* failure: set once, never cleared */
    atomic_int failed;            /* 0 ok; else the spmd_status of the failure */
    pthread_mutex_t fail_mu;
    char fail_msg[SPMD__ERRLEN];
    int fail_eventfd;             /* readable once failed != 0 */
    atomic_int *peer_left;        /* [world] 1 after the peer said goodbye */

    /* subgroups */
    spmd_group *parent;
    int *parent_ranks;            /* [world] rank in parent (subgroups only) */
    int subgroup_counter;

    /* last error message of a call on this group */
    pthread_mutex_t err_mu;
    char errmsg[SPMD__ERRLEN];
};

/* Record the detailed message of a failed call on g (thread-safe); returns st. */
spmd_status spmd__group_error(spmd_group *g, spmd_status st, const char *fmt, ...)
    SPMD__PRINTF(3, 4);
/* Mark the whole group failed (first call wins), wake every waiter, and if
 * `tell_peers`, send an abort notice with the message to every live peer. */
void spmd__group_fail(spmd_group *g, spmd_status st, int tell_peers, const char *fmt, ...)
    SPMD__PRINTF(4, 5);
/* Only record the failure and wake waiters (no p2p locking); 1 if first. */
int spmd__group_mark_failed(spmd_group *g, spmd_status st, const char *msg);
/* SPMD_OK, or the failure status with its message copied to msg. */
spmd_status spmd__group_check(spmd_group *g, char *msg, size_t msglen);
int64_t spmd__group_deadline(const spmd_group *g);

/* ---- work handles (work.c) ---------------------------------------------- */
typedef enum { SPMD__W_SEND, SPMD__W_RECV, SPMD__W_COLL } spmd__work_kind;

struct spmd_work {
    spmd__work_kind kind;
    spmd_group *g;
    atomic_int done;
    spmd_status status;
    int source, tag;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    char errmsg[SPMD__ERRLEN];
    /* p2p fields (progress.c) */
    void *buf;
    size_t len;
    int peer;                 /* dst for sends, src (or ANY) for receives; progress.c may
                                 rewrite it under its lock (any-source matched) */
    int poll_peer;            /* the peer as posted: read by waiters without a lock */
    uint64_t id;              /* rendezvous id */
    struct spmd_work *next;   /* intrusive list links used by progress.c / executor.c */
    /* collective fields (executor.c) */
    spmd__coll_args args;
};

spmd_work *spmd__work_new(spmd_group *g, spmd__work_kind kind);
/* Complete a work: store status/message, wake waiters.  After this call the
 * completer must not touch w again. */
void spmd__work_complete(spmd_work *w, spmd_status st, const char *msg);

/* ---- point-to-point progress (progress.c) ------------------------------- */
spmd_status spmd__p2p_start(spmd_group *g, char *err, size_t errlen);
/* Say goodbye to every peer, flush, stop the thread, fail what is pending. */
void spmd__p2p_stop(spmd_group *g);
spmd_status spmd__p2p_post_send(spmd_group *g, spmd_work *w);
spmd_status spmd__p2p_post_recv(spmd_group *g, spmd_work *w);
/* Progress p2p traffic with `peer` (-1: every peer) on the calling thread,
 * without blocking; used by waiters. */
void spmd__p2p_poll(spmd_group *g, int peer);
/* Withdraw a posted receive that has not matched yet (completes it with
 * SPMD_ERR_ABORTED); does nothing when it already matched. */
void spmd__p2p_cancel(spmd_group *g, spmd_work *w);
/* Fail every pending p2p operation with st/msg (group failure). */
void spmd__p2p_fail_all(spmd_group *g, spmd_status st, const char *msg);
/* Queue an abort notice (text) to every live peer. */
void spmd__p2p_broadcast_abort(spmd_group *g, spmd_status st, const char *msg);

/* ---- group life cycle (init.c), shared with subgroup.c ------------------ */
/* Claim the rank, agree on the world size and job id through g->store,
 * build the mesh and start the threads. */
spmd_status spmd__group_connect(spmd_group *g, const char *bind_host, char *err, size_t errlen);
spmd_group *spmd__group_alloc_sub(int rank, int world);
void spmd__group_free_sub(spmd_group *g);

/* ---- collective executor (executor.c) ----------------------------------- */
spmd_status spmd__exec_start(spmd_group *g, char *err, size_t errlen);
void spmd__exec_stop(spmd_group *g);
/* Run (w == NULL: blocking) or submit (async, *w receives the handle) a
 * collective.  Takes ownership of the malloc()ed arrays inside *a. */
spmd_status spmd__group_collective(spmd_group *g, spmd__coll_args *a, spmd_work **w);
void spmd__coll_args_free(spmd__coll_args *a);
/* Run w on the calling thread if it is next and the executor is idle. */
void spmd__exec_help(spmd_work *w);

/* ---- cross-memory attach (cma.c) --------------------------------------- */
#define SPMD__BOOT_ID_LEN 40
/* The running kernel's boot id and our pid namespace; 0 when unknown. */
int spmd__kernel_identity(char boot_id[SPMD__BOOT_ID_LEN], uint64_t *pidns);
/* Settle with every peer, over the idle collective channel, whether large
 * collective messages may be read straight from its memory. */
spmd_status spmd__cma_negotiate(spmd_group *g, int64_t deadline, char *err, size_t errlen);
/* Read len bytes at the peer's address addr into dst (checks the peer's token). */
spmd_status spmd__cma_read(spmd_group *g, int peer, void *dst, uint64_t addr, size_t len, char *err,
                           size_t errlen);

/* ---- mesh building (transport/) ----------------------------------------- */

#endif
