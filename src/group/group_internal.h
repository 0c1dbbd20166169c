/* src/group/group_internal.h — the inside of a process group.
 *
 * A group owns:
 *   - a store handle (rendezvous, subgroup creation),
 *   - a transport mesh (transport/mesh.h): two channels to every peer (TCP
 *     or shared-memory rings), the p2p channel driven by the progress
 *     engine, the collective channel by whichever thread executes the
 *     current collective, and the failure state;
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
#include "transport/arena.h"
#include "transport/mesh.h"
#include "recorder.h"
#include "spmd/group.h"
#include "spmd/store.h"

typedef struct spmd__exec spmd__exec; /* executor.c */

struct spmd_group {
    spmd__mesh t;                 /* every path to every peer, and the failure state */
    int rank, world;
    int local_rank, local_world;
    char name[64];
    int timeout_ms;               /* default deadline of blocking calls (mirrored in t) */

    spmd_store *store_root;       /* owned when own_store_client */
    spmd_store *store;            /* prefixed handle for this group (owned) */
    spmd_store_server *store_server; /* owned when this rank hosts the store */
    int64_t refusal_seen_ms;      /* when the rendezvous first saw a refused client (rdzv_watch.c) */
    int own_store_client;
    char store_prefix[200];       /* this group's key prefix in the store */
    char bind_host[256];          /* address this rank listens on */

    spmd__exec *exec;
    spmd__rec *rec;               /* the flight recorder, NULL when off (recorder.h) */

    /* subgroups */
    spmd_group *parent;
    int *parent_ranks;            /* [world] rank in parent (subgroups only) */
    int subgroup_counter;

    /* recovery in place (shrink.c) */
    int epoch;                    /* 0 at init, one more per shrink */
    int excluded;                 /* a shrink of this group decided without this rank */
    int shrink_attempts;          /* spmd_group_shrink calls on this group (collective: alike on survivors) */
    int store_host;               /* the rank of this group that hosts its store, -1: none (a launcher does) */
    spmd_store_server *standby_server; /* owned: the standby store this rank hosts (standby.c) */
    char standby_addr[300];       /* "port host" of the standby store, "" when there is none */
    char launcher_standby[1024];  /* a launcher's store (store_host -1): "host:port,..." of the stores its
                                   * successors host, in the order to try when it is gone (SPMD_STORE_STANDBY) */

    /* last error message of a call on this group */
    pthread_mutex_t err_mu;
    char errmsg[SPMD__ERRLEN];
};

/* Record the detailed message of a failed call on g (thread-safe); returns st. */
spmd_status spmd__group_error(spmd_group *g, spmd_status st, const char *fmt, ...)
    SPMD__PRINTF(3, 4);
/* The failure state is the mesh's (transport/mesh.h); these are its group
 * spellings. */
#define spmd__group_fail(g, ...) spmd__mesh_fail(&(g)->t, __VA_ARGS__)
#define spmd__group_check(g, msg, len) spmd__mesh_check(&(g)->t, msg, len)
int64_t spmd__group_deadline(const spmd_group *g);
/* SPMD_TIMEOUT, else SPMD_DEFAULT_TIMEOUT_MS (accessors.c). */
int spmd__group_default_timeout_ms(void);

/* ---- work handles (work.c) ---------------------------------------------- */
typedef enum { SPMD__W_SEND, SPMD__W_RECV, SPMD__W_COLL } spmd__work_kind;

struct spmd_work {
    spmd__preq req;           /* p2p: what the transport's engine sees (first member) */
    spmd__work_kind kind;
    spmd_group *g;
    atomic_int state;         /* work.c: done, owner sleeping, completer gone */
    int blocking;             /* a blocking call's: only `owner` waits for it */
    pthread_t owner;
    spmd_status status;
    atomic_int cv_state;      /* work.c: mu and cv made only for a waiter that sleeps */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    char errmsg[SPMD__ERRLEN];
    struct spmd_work *next;   /* executor queue */
    uint64_t rec_ticket;      /* p2p: its entry in the flight recorder */
    uint64_t spun_ns;         /* blocking p2p: spun already by the quick path (work.c spins that less) */
    /* collective fields (executor.c) */
    spmd__coll_args args;
    /* Run the collective on the waiting thread if it is next in line: the
     * executor's spmd__exec_help, set when it queues the work (a waiter
     * helps the executor without work.c calling up into it). */
    void (*help)(spmd_work *w);
    /* Someone polls w (spmd_work_test) rather than waiting: make sure the
     * executor runs it now (spmd__exec_kick; a small one may have been
     * queued for its waiter without waking the executor). */
    void (*kick)(spmd_work *w);
};

spmd_work *spmd__work_new(spmd_group *g, spmd__work_kind kind);
/* The same in caller-owned memory (a blocking call's handle on its stack),
 * and its end: everything spmd_work_free does but free(). */
void spmd__work_init(spmd_work *w, spmd_group *g, spmd__work_kind kind);
/* A blocking receive by the engine's quick path (transport/p2p_quick.c),
 * spinning on its peer's ring as a waiter spins: SPMD__QUICK_DONE, or
 * SPMD__QUICK_GENERAL with *spun_ns the time it spun. */
int spmd__work_quick_recv(spmd_group *g, spmd__quick_recv *q, uint64_t *spun_ns);
void spmd__work_release(spmd_work *w);
/* Complete a work: store status/message, wake waiters.  After this call the
 * completer must not touch w again. */
void spmd__work_complete(spmd_work *w, spmd_status st, const char *msg);
/* 1 once w is complete (its status and message final). */
int spmd__work_done(spmd_work *w);

/* SPMD_BIND=core: pin this process's calling thread (and the threads it
 * starts later) to a core of its own among the host's ranks (bind.c). */
void spmd__group_bind(int local_rank, int local_world);

/* ---- group life cycle (init.c; a bare group: alloc.c), shared with subgroup.c */
/* Claim the rank, agree on the world size and job id through g->store,
 * build the mesh and start the threads. */
spmd_status spmd__group_connect(spmd_group *g, const char *bind_host, char *err, size_t errlen);
/* End the mesh's rendezvous early when the store refused a client (rdzv_watch.c). */
void spmd__group_watch_rdzv(spmd_group *g);
spmd_group *spmd__group_alloc(int rank, int world);
/* Collective: when a rank of g hosts g's store, the next rank starts a
 * standby store and every rank learns its address (standby.c). */
spmd_status spmd__group_standby_start(spmd_group *g, char *err, size_t errlen);
/* The store prefix of g's lineage: g's without the "e<epoch>/" of a shrink
 * or grow (shrink.c). */
void spmd__group_base_prefix(const spmd_group *g, char *out, size_t outlen);
/* The successor of g at `epoch`: rank `rank` of n, keys under the lineage's
 * prefix + "e<epoch>/" on a new connection to root's server (NULL: no
 * store); takes parent_ranks.  Not connected yet.  NULL on failure (err). */
spmd_group *spmd__group_successor(const spmd_group *g, int rank, int n, int epoch, int *parent_ranks,
                                  spmd_store *root, char *err, size_t errlen);
/* A connection to the standby store with g's prefix, into *root and *store. */
spmd_status spmd__group_standby_connect(spmd_group *g, spmd_store **root, spmd_store **store, char *err,
                                        size_t errlen);
/* A launcher's store: g's stand-ins from SPMD_STORE_STANDBY (standby.c). */
void spmd__group_launcher_standby(spmd_group *g);
/* The launcher's store is gone: connect to the first of g's stand-ins that
 * is not gone too (a refusal is final), into *root and *store with g's
 * prefix; *rest gets the stand-ins after it (the new group's). */
spmd_status spmd__group_launcher_standby_connect(spmd_group *g, spmd_store **root, spmd_store **store, char *rest,
                                                 size_t restlen, char *err, size_t errlen);
void spmd__group_free(spmd_group *g);

/* ---- collective executor (executor.c) ----------------------------------- */
spmd_status spmd__exec_start(spmd_group *g, char *err, size_t errlen);
void spmd__exec_stop(spmd_group *g);
/* Run (w == NULL: blocking) or submit (async, *w receives the handle) a
 * collective.  Takes ownership of the malloc()ed arrays inside *a. */
spmd_status spmd__group_collective(spmd_group *g, spmd__coll_args *a, spmd_work **w);
void spmd__coll_args_free(spmd__coll_args *a);   /* work.c: what a collective's work holds */
/* Run w on the calling thread if it is next and the executor is idle. */
void spmd__exec_help(spmd_work *w);
/* Wake the executor if w waits in its queue for a waiter (executor.c's top). */
void spmd__exec_kick(spmd_work *w);

/* ---- memory shared by the ranks of one host (shared_mem.c) ---------------- */
/* transport/arena.h's arena for this group's ranks. */
spmd__arena *spmd__group_shm_alloc(spmd_group *g, size_t bytes);
/* Collective: map every rank's arena (arena.h), agreeing through g's collectives. */
spmd_status spmd__group_shm_connect(spmd_group *g, spmd__arena *s, uint64_t layout, int *shared, char *err,
                                    size_t errlen);

#endif
