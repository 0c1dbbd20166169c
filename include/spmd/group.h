/* spmd/group.h — process groups, point-to-point messages and collectives.
 *
 * A group is N ranks (processes) joined by a full mesh of TCP connections.
 * Every call returns spmd_status; the detailed message of the last failure on a
 * group is spmd_group_errmsg(g), of a work handle spmd_work_errmsg(w).
 *
 * Threads: each group runs one progress thread for point-to-point traffic and
 * one executor for collectives, which runs collectives in the order they were
 * issued (the same order on every rank keeps them matched).  A group may be used
 * from several threads; collectives issued concurrently from different threads
 * are ordered by issue time, so the application must issue them in the same
 * order on every rank, as with torch.distributed.
 *
 * Buffers: (void *buf, size_t count, spmd_dtype).  A buffer handed to an async
 * call must stay valid and untouched until spmd_work_wait() returns.
 */
#ifndef SPMD_GROUP_H
#define SPMD_GROUP_H

#include <stddef.h>
#include <stdint.h>
#include "spmd/status.h"
#include "spmd/store.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    SPMD_F32 = 0,
    SPMD_F64,
    SPMD_F16,
    SPMD_BF16,
    SPMD_I8,
    SPMD_U8,
    SPMD_I32,
    SPMD_I64,
    SPMD_DTYPE_COUNT
} spmd_dtype;

typedef enum {
    SPMD_SUM = 0,
    SPMD_AVG,
    SPMD_PROD,
    SPMD_MIN,
    SPMD_MAX,
    SPMD_BAND,
    SPMD_BOR,
    SPMD_BXOR,
    SPMD_OP_COUNT
} spmd_op;

/* Size in bytes of one element; 0 for an unknown dtype. */
size_t spmd_dtype_size(spmd_dtype dt);
const char *spmd_dtype_name(spmd_dtype dt); /* "float32"...; "?" if unknown */
const char *spmd_op_name(spmd_op op);       /* "sum"...; "?" if unknown */
/* Parse "float"/"f32"/"float32", "sum"/"avg"...: SPMD_ERR_INVALID if unknown. */
spmd_status spmd_dtype_parse(const char *s, spmd_dtype *out);
spmd_status spmd_op_parse(const char *s, spmd_op *out);

typedef struct spmd_group spmd_group;
typedef struct spmd_work spmd_work;

#define SPMD_ANY_SOURCE (-1)
#define SPMD_ANY_TAG (-1)
#define SPMD_DEFAULT_TIMEOUT_MS (30 * 60 * 1000)

typedef struct {
    /* Where to rendezvous: NULL or "env://" reads MASTER_ADDR/MASTER_PORT (and
     * the Slurm / Open MPI / PMI variables); "tcp://host:port"; "file:///path"
     * (a file shared by every rank holds the store address). */
    const char *init_method;
    int rank;           /* -1: from the environment */
    int world_size;     /* -1: from the environment */
    spmd_store *store;  /* an existing store to use (not owned); NULL: make one */
    int timeout_ms;     /* deadline of every blocking call; <= 0: SPMD_TIMEOUT or 30 min */
    const char *name;   /* for messages; NULL: "default" */
    /* How bytes move: "spmd" (spmd's own TCP and shared-memory transport,
     * SPMD_TRANSPORT picks the paths), "mpi" (the ranks of MPI_COMM_WORLD,
     * every byte through MPI: needs spmd built with SPMD_WITH_MPI), or "auto":
     * MPI when built with it and started by an MPI launcher (mpirun, srun
     * --mpi) or the application initialized MPI, unless spmd's own rendezvous
     * is configured (init_method, store, MASTER_ADDR/MASTER_PORT); else spmd.
     * NULL: SPMD_BACKEND, else "auto".  See spmd/mpi.h. */
    const char *backend;
} spmd_group_opts;

#define SPMD_GROUP_OPTS_DEFAULT {NULL, -1, -1, NULL, 0, NULL, NULL}

/* Form a group.  Blocks until every rank has joined (or the deadline).  On
 * failure *out is untouched and err (if not NULL) receives the reason. */
spmd_status spmd_group_init(const spmd_group_opts *opts, spmd_group **out, char *err,
                            size_t errlen);
/* Leave the group: stops its threads, closes its sockets, frees it.  Pending
 * work fails with SPMD_ERR_ABORTED.  NULL is fine. */
void spmd_group_destroy(spmd_group *g);

int spmd_group_rank(const spmd_group *g);
int spmd_group_size(const spmd_group *g);
int spmd_group_local_rank(const spmd_group *g);       /* LOCAL_RANK, or 0 */
int spmd_group_local_size(const spmd_group *g);       /* LOCAL_WORLD_SIZE, or 1 */
/* How this rank reaches its peers: "shm" (shared-memory rings, all on this
 * host), "tcp", or "shm+tcp" (some of each); see SPMD_TRANSPORT.  "mpi" for
 * a group over MPI. */
const char *spmd_group_backend(const spmd_group *g);
spmd_store *spmd_group_store(spmd_group *g);          /* the group's store (not owned); NULL at world size 1 without one */
/* Detailed message of the last failed call made on g by any thread. */
const char *spmd_group_errmsg(const spmd_group *g);
/* Deadline for later blocking calls on g (<= 0: back to the default). */
void spmd_group_set_timeout(spmd_group *g, int timeout_ms);
/* Break the group on purpose (as ncclCommAbort): every pending and later
 * call on every rank fails with SPMD_ERR_ABORTED and `reason`, instead of
 * waiting for a rank that will never come.  The group must still be destroyed. */
void spmd_group_abort(spmd_group *g, const char *reason);

/* ---- flight recorder (docs/RELIABILITY.md) ------------------------------
 * Every group keeps its last operations (SPMD_RECORDER_ENTRIES collectives
 * and as many point-to-point ones; 0 turns it off): kind, number, count,
 * dtype, op, root or peer, tag, issue/start/end times, state.  When the group
 * fails, each rank writes its record to $SPMD_RECORDER_DIR/<group>.<rank>.rec
 * (spmdrun sets the directory and prints a diagnosis from the records). */
/* Write g's record now to path (NULL: the file in SPMD_RECORDER_DIR). */
spmd_status spmd_group_dump_record(spmd_group *g, const char *path);
/* Ask every group of this process to write its record (to SPMD_RECORDER_DIR,
 * or stderr when unset) within a second, from its progress thread.  Safe to
 * call from a signal handler: the library installs none itself, so a program
 * that wants `kill -USR1 <pid>` to dump the records installs its own handler
 * calling this. */
void spmd_request_record_dump(void);

/* ---- work handles ----------------------------------------------------- */

/* Wait until the work finishes or timeout_ms passes (< 0: the group's
 * deadline).  Returns the work's status, or SPMD_ERR_TIMEOUT (the work goes on). */
spmd_status spmd_work_wait(spmd_work *w, int timeout_ms);
/* Non-blocking: SPMD_ERR_AGAIN while running, else the work's status. */
spmd_status spmd_work_test(spmd_work *w);
const char *spmd_work_errmsg(const spmd_work *w);
/* For a receive from SPMD_ANY_SOURCE / SPMD_ANY_TAG: who sent it, which tag. */
int spmd_work_source(const spmd_work *w);
int spmd_work_tag(const spmd_work *w);
/* Release a handle.  If the work is still running, it is waited for first
 * (a buffer must never be written after the caller believes it is free). */
void spmd_work_free(spmd_work *w);

/* ---- point-to-point --------------------------------------------------- */
/* Messages between a pair of ranks with the same tag arrive in send order.
 * The receive's count and dtype must equal the send's (else
 * SPMD_ERR_MISMATCH naming both sides, e.g. "rank 1 sent 2 x int32 (8 bytes)
 * ... expects 1 x float64 (8 bytes)").  A mismatch fails only the operations
 * involved and the pair stays usable: the receive always; the send too when
 * it is large (over 64 KiB, which waits for the receiver); a small send has
 * completed by then, and the sender only logs the refusal. */
spmd_status spmd_send(spmd_group *g, const void *buf, size_t count, spmd_dtype dt, int dst,
                      int tag);
/* src may be SPMD_ANY_SOURCE, tag SPMD_ANY_TAG; *source (may be NULL) gets the sender. */
spmd_status spmd_recv(spmd_group *g, void *buf, size_t count, spmd_dtype dt, int src, int tag,
                      int *source);
spmd_status spmd_isend(spmd_group *g, const void *buf, size_t count, spmd_dtype dt, int dst,
                       int tag, spmd_work **work);
spmd_status spmd_irecv(spmd_group *g, void *buf, size_t count, spmd_dtype dt, int src, int tag,
                       spmd_work **work);

/* ---- collectives ------------------------------------------------------ */
/* Every collective must be called by every rank of the group in the same
 * order with matching arguments.  Disagreement (count, dtype, op, root) ends
 * in SPMD_ERR_MISMATCH (or an error reported by the rank that noticed) on
 * every rank instead of a hang.  After a failed collective the group is
 * broken: later calls fail; destroy it.
 *
 * Per-call options: the algorithm (NULL = the selection table) by name,
 * e.g. "ring", "rhd", "rd", "tree", "naive", "butterfly". */
typedef struct {
    const char *algo;
} spmd_coll_opts;

spmd_status spmd_barrier(spmd_group *g);
spmd_status spmd_broadcast(spmd_group *g, void *buf, size_t count, spmd_dtype dt, int root);
/* In place when sendbuf == recvbuf.  recvbuf matters only on root for reduce. */
spmd_status spmd_reduce(spmd_group *g, const void *sendbuf, void *recvbuf, size_t count,
                        spmd_dtype dt, spmd_op op, int root);
spmd_status spmd_all_reduce(spmd_group *g, const void *sendbuf, void *recvbuf, size_t count,
                            spmd_dtype dt, spmd_op op);
/* gather: recvbuf (root only) holds world*count elements, rank r's at r*count. */
spmd_status spmd_gather(spmd_group *g, const void *sendbuf, void *recvbuf, size_t count,
                        spmd_dtype dt, int root);
/* all_gather into one flat buffer of world*count elements. */
spmd_status spmd_all_gather(spmd_group *g, const void *sendbuf, void *recvbuf, size_t count,
                            spmd_dtype dt);
/* all_gather into a list of world buffers of count elements each. */
spmd_status spmd_all_gather_list(spmd_group *g, const void *sendbuf, void *const *recvbufs,
                                 size_t count, spmd_dtype dt);
/* scatter: sendbuf (root only) holds world*count elements. */
spmd_status spmd_scatter(spmd_group *g, const void *sendbuf, void *recvbuf, size_t count,
                         spmd_dtype dt, int root);
/* reduce_scatter: sendbuf holds world*count elements; rank r receives block r
 * reduced over ranks into recvbuf (count elements). */
spmd_status spmd_reduce_scatter(spmd_group *g, const void *sendbuf, void *recvbuf, size_t count,
                                spmd_dtype dt, spmd_op op);
/* all_to_all, equal splits: block j of sendbuf (count elements) goes to rank j;
 * block i of recvbuf comes from rank i. */
spmd_status spmd_all_to_all(spmd_group *g, const void *sendbuf, void *recvbuf, size_t count,
                            spmd_dtype dt);
/* all_to_all, uneven splits: counts and displacements in elements, world entries each. */
spmd_status spmd_all_to_all_v(spmd_group *g, const void *sendbuf, const size_t *sendcounts,
                              const size_t *sdispls, void *recvbuf, const size_t *recvcounts,
                              const size_t *rdispls, spmd_dtype dt);

/* Async forms: same arguments plus opts (may be NULL) and the work handle.
 * The count/displacement arrays of all_to_all_v and the recvbufs array of
 * all_gather_list are copied; the data buffers are not. */
spmd_status spmd_barrier_async(spmd_group *g, const spmd_coll_opts *o, spmd_work **w);
spmd_status spmd_broadcast_async(spmd_group *g, void *buf, size_t count, spmd_dtype dt, int root,
                                 const spmd_coll_opts *o, spmd_work **w);
spmd_status spmd_reduce_async(spmd_group *g, const void *sendbuf, void *recvbuf, size_t count,
                              spmd_dtype dt, spmd_op op, int root, const spmd_coll_opts *o,
                              spmd_work **w);
spmd_status spmd_all_reduce_async(spmd_group *g, const void *sendbuf, void *recvbuf,
                                  size_t count, spmd_dtype dt, spmd_op op,
                                  const spmd_coll_opts *o, spmd_work **w);
spmd_status spmd_gather_async(spmd_group *g, const void *sendbuf, void *recvbuf, size_t count,
                              spmd_dtype dt, int root, const spmd_coll_opts *o, spmd_work **w);
spmd_status spmd_all_gather_async(spmd_group *g, const void *sendbuf, void *recvbuf,
                                  size_t count, spmd_dtype dt, const spmd_coll_opts *o,
                                  spmd_work **w);
spmd_status spmd_all_gather_list_async(spmd_group *g, const void *sendbuf,
                                       void *const *recvbufs, size_t count, spmd_dtype dt,
                                       const spmd_coll_opts *o, spmd_work **w);
spmd_status spmd_scatter_async(spmd_group *g, const void *sendbuf, void *recvbuf, size_t count,
                               spmd_dtype dt, int root, const spmd_coll_opts *o, spmd_work **w);
spmd_status spmd_reduce_scatter_async(spmd_group *g, const void *sendbuf, void *recvbuf,
                                      size_t count, spmd_dtype dt, spmd_op op,
                                      const spmd_coll_opts *o, spmd_work **w);
spmd_status spmd_all_to_all_async(spmd_group *g, const void *sendbuf, void *recvbuf,
                                  size_t count, spmd_dtype dt, const spmd_coll_opts *o,
                                  spmd_work **w);
spmd_status spmd_all_to_all_v_async(spmd_group *g, const void *sendbuf,
                                    const size_t *sendcounts, const size_t *sdispls,
                                    void *recvbuf, const size_t *recvcounts,
                                    const size_t *rdispls, spmd_dtype dt,
                                    const spmd_coll_opts *o, spmd_work **w);

/* ---- subgroups -------------------------------------------------------- */
/* Collective over g: every rank of g calls it with the same ranks list (ranks
 * of g, any order; the subgroup's rank i is ranks[i] sorted ascending).  A rank
 * not in the list gets *out = NULL and SPMD_OK.  Destroy with
 * spmd_group_destroy (before the parent). */
spmd_status spmd_group_new_subgroup(spmd_group *g, const int *ranks, int nranks,
                                    spmd_group **out);
/* The rank in g of the subgroup's rank r (-1 if out of range). */
int spmd_group_parent_rank(const spmd_group *sub, int r);

/* ---- recovery in place (docs/RELIABILITY.md "Recovery in place") ------
 * ULFM's model: a failure revokes the group (every pending and later call on
 * every survivor fails naming the cause; spmd_group_abort revokes on
 * purpose), the survivors agree on who failed and shrink to a new group. */
/* The ranks of g this rank knows to have failed, ascending, into
 * ranks[0..max) (ranks may be NULL): the rank the failure blamed for a death
 * or a silence, and every peer whose process is gone.  Returns how many. */
int spmd_group_failed_ranks(const spmd_group *g, int *ranks, int max);
/* Collective over the survivors of g: they agree on the failed set and build
 * *out, a new group of the survivors with dense ranks in their old order
 * (spmd_group_parent_rank(*out, r) is new rank r's rank in g) and the next
 * epoch.  g is revoked first if it has not failed.  A rank the others decided
 * without (stopped past the heartbeat timeout, say) gets SPMD_ERR_REMOTE
 * saying so.  A rank dying during the shrink, or the store dying with its
 * host (the survivors then meet on the standby store the next rank keeps),
 * starts the next attempt by itself; the call fails only at the deadline.
 * Destroy g and *out in any order.  Not for groups over MPI
 * (SPMD_ERR_UNSUPPORTED). */
spmd_status spmd_group_shrink(spmd_group *g, spmd_group **out, char *err, size_t errlen);
/* 0 for a group made by spmd_group_init; one more per shrink or grow. */
int spmd_group_epoch(const spmd_group *g);
/* 1 once spmd_group_shrink(g) failed because the other survivors decided
 * without this rank (it was stopped or cut off past the heartbeat timeout):
 * it can never rejoin g's successors.  Such a process should exit with
 * SPMD_EXIT_EXCLUDED, which spmdrun --on-failure shrink|replace counts as a
 * lost worker, not as the job's failure. */
int spmd_group_was_excluded(const spmd_group *g);
#define SPMD_EXIT_EXCLUDED 75
/* Collective over the ranks of a healthy g, at a point they choose (a step
 * boundary): admit the next njoin processes calling spmd_group_join and build
 * *out, g's ranks keeping their numbers and the joiners after them
 * (spmd_group_parent_rank is -1 for a joiner), at the next epoch.  Waits for
 * the joiners until g's deadline. */
spmd_status spmd_group_grow(spmd_group *g, int njoin, spmd_group **out, char *err, size_t errlen);
/* How many processes wait in spmd_group_join for g's next grow (read from
 * the store; not collective: ranks reading at different times may differ). */
spmd_status spmd_group_joiners_waiting(spmd_group *g, int *n, char *err, size_t errlen);
/* In a new process: join the running group named opts->name (NULL: "default")
 * of this job (the same store: MASTER_ADDR/MASTER_PORT or opts->store, and
 * the same run id) when its ranks next call spmd_group_grow; *out is the
 * grown group.  Joiners are admitted in the order they arrive. */
spmd_status spmd_group_join(const spmd_group_opts *opts, spmd_group **out, char *err, size_t errlen);

/* ---- spawn ------------------------------------------------------------ */
/* Fork nprocs processes on this host, each with RANK, WORLD_SIZE, LOCAL_RANK,
 * LOCAL_WORLD_SIZE, MASTER_ADDR=127.0.0.1 and a free MASTER_PORT (served by a
 * store in this process) set, and call fn(rank, nprocs, arg) in each; the
 * child exits with fn's return value.  Waits for every child.  On failure
 * (non-zero exit or signal), the remaining children are killed and `report`
 * (if not NULL) tells which rank failed first and how.  Returns SPMD_OK if
 * every rank returned 0. */
/* Inside a job started by a launcher (spmdrun, torchrun, mpirun, srun, a PMI
 * launcher: the environment names this process's rank), nothing is forked:
 * the launcher made the ranks, so this process runs fn(its rank, nprocs, arg)
 * itself and the result is its own; nprocs must equal the job's size, else
 * SPMD_ERR_INVALID naming both.  timeout_ms is then not enforced (the group's
 * deadline still holds for every call). */
typedef int (*spmd_spawn_fn)(int rank, int world_size, void *arg);
spmd_status spmd_spawn(int nprocs, spmd_spawn_fn fn, void *arg, char *report, size_t reportlen);
/* Like spmd_spawn with a deadline: children still running after timeout_ms
 * are killed and the call fails with SPMD_ERR_TIMEOUT. */
spmd_status spmd_spawn_timeout(int nprocs, spmd_spawn_fn fn, void *arg, int timeout_ms,
                               char *report, size_t reportlen);

#ifdef __cplusplus
}
#endif
#endif
