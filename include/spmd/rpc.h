/* spmd/rpc.h — remote procedure calls between the ranks of a group, and
 * remote references (RRefs): torch.distributed.rpc without pickle.
 *
 * A worker registers handlers by name (a C function and, optionally, the
 * shapes of its arguments).  A call names the handler and carries a message:
 * a list of typed tensors (dtype, shape, data) plus a small byte payload.
 * Nothing executable crosses the wire; the callee checks every frame and
 * answers a bad one with an error, and keeps serving.
 *
 *   spmd_rpc *r;  spmd_rpc_init(group, NULL, &r, err, sizeof err);   // collective
 *   spmd_rpc_register(r, "add", add_fn, NULL, NULL);                   // any time, but
 *   spmd_barrier(g);              // before others call it: an unknown name is an error
 *   spmd_rpc_msg *a = spmd_rpc_msg_new();  spmd_rpc_msg_add_tensor(a, SPMD_F32, 1, &n, x);
 *   spmd_rpc_msg *res;  spmd_rpc_sync(r, 1, "add", a, -1, &res);
 *   spmd_rpc_shutdown(r, 1);                                            // graceful, collective
 *
 * Threads: a caller waiting for its reply receives it itself; idle handler
 * threads (a pool, spmd_rpc_opts.threads) and a dispatcher thread receive
 * otherwise, and a call an idle handler thread receives runs on it
 * (docs/RPC.md).  A call to one's own rank skips the wire.  Future callbacks
 * (spmd_rpc_future_then) run on the thread that completes the future (the
 * one that received the reply: a waiting caller, a handler thread, the
 * dispatcher; a handler thread for self calls): they must not wait for
 * other futures.
 *
 * Errors: every call returns spmd_status; the detail of the last failure is
 * spmd_rpc_errmsg(r), of a future spmd_rpc_future_errmsg(f) (a handler's
 * error arrives as SPMD_ERR_REMOTE with "worker NAME (rank R): <message>").
 */
#ifndef SPMD_RPC_H
#define SPMD_RPC_H

#include <stddef.h>
#include <stdint.h>
#include "spmd/group.h"
#include "spmd/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SPMD_RPC_MAX_DIMS 8
#define SPMD_RPC_MAX_NAME 48         /* handler and worker names, with the NUL */
#define SPMD_RPC_MAX_TENSORS 64      /* per message */
#define SPMD_RPC_MAX_PAYLOAD 65536   /* bytes of the byte payload per message */

typedef struct spmd_rpc spmd_rpc;
typedef struct spmd_rpc_msg spmd_rpc_msg;
typedef struct spmd_rpc_future spmd_rpc_future;
typedef struct spmd_rpc_call spmd_rpc_call;
typedef struct spmd_rref spmd_rref;

/* ---- messages ------------------------------------------------------------ */
typedef struct {
    spmd_dtype dtype;
    int ndim;
    int64_t shape[SPMD_RPC_MAX_DIMS];
    void *data;          /* numel * dtype size bytes */
} spmd_rpc_tensor;

spmd_rpc_msg *spmd_rpc_msg_new(void);
void spmd_rpc_msg_free(spmd_rpc_msg *m);   /* releases RRefs it still carries */
/* Append a tensor, copying data (NULL data: zero-filled). */
spmd_status spmd_rpc_msg_add_tensor(spmd_rpc_msg *m, spmd_dtype dt, int ndim, const int64_t *shape,
                                    const void *data);
/* Append a tensor WITHOUT copying: data must stay valid and unchanged until
 * the call that sends m has returned (rpc_async returns after sending). */
spmd_status spmd_rpc_msg_add_tensor_ref(spmd_rpc_msg *m, spmd_dtype dt, int ndim,
                                        const int64_t *shape, const void *data);
spmd_status spmd_rpc_msg_set_payload(spmd_rpc_msg *m, const void *bytes, size_t len);
int spmd_rpc_msg_ntensors(const spmd_rpc_msg *m);
/* NULL when i is out of range.  The data of a received tensor is writable. */
const spmd_rpc_tensor *spmd_rpc_msg_tensor(const spmd_rpc_msg *m, int i);
size_t spmd_rpc_tensor_numel(const spmd_rpc_tensor *t);
const void *spmd_rpc_msg_payload(const spmd_rpc_msg *m, size_t *len);
/* A deep copy (tensors copied; RRefs forked) into *out. */
spmd_status spmd_rpc_msg_copy(spmd_rpc *r, const spmd_rpc_msg *m, spmd_rpc_msg **out);

/* ---- init, workers, shutdown --------------------------------------------- */
typedef struct {
    const char *name;      /* this worker's name; NULL: "worker<rank>" */
    int threads;           /* handler threads; <= 0: SPMD_RPC_THREADS or 4 */
    int timeout_ms;        /* default per-call timeout; <= 0: 60 s (torch's default) */
} spmd_rpc_opts;
#define SPMD_RPC_OPTS_DEFAULT {NULL, 0, 0}

/* Collective over g (every rank calls it): the agent takes a private
 * subgroup of g for its traffic (g stays free for the application and must
 * outlive the agent).  Names are exchanged; duplicates are an error. */
spmd_status spmd_rpc_init(spmd_group *g, const spmd_rpc_opts *o, spmd_rpc **out, char *err,
                          size_t errlen);
/* The same, forming its own group from the environment (spmdrun, mpirun,
 * Slurm, MASTER_ADDR/PORT) as spmd_group_init does. */
spmd_status spmd_rpc_init_env(const spmd_group_opts *go, const spmd_rpc_opts *o, spmd_rpc **out,
                              char *err, size_t errlen);
/* graceful != 0 (collective): wait until no worker has calls, deferred
 * replies or RRef messages outstanding, then stop every agent together.
 * graceful == 0: stop at once; pending futures fail with SPMD_ERR_ABORTED
 * and peers see this worker leave (their calls to it fail).  Frees r. */
spmd_status spmd_rpc_shutdown(spmd_rpc *r, int graceful);

typedef struct {
    char name[SPMD_RPC_MAX_NAME];
    int rank;
} spmd_rpc_worker_info;
int spmd_rpc_rank(const spmd_rpc *r);
int spmd_rpc_world_size(const spmd_rpc *r);
spmd_status spmd_rpc_worker_by_name(spmd_rpc *r, const char *name, spmd_rpc_worker_info *out);
spmd_status spmd_rpc_worker_by_rank(spmd_rpc *r, int rank, spmd_rpc_worker_info *out);
const char *spmd_rpc_errmsg(const spmd_rpc *r);
/* The agent's private group (diagnostics and tests). */
spmd_group *spmd_rpc_group(spmd_rpc *r);

/* ---- handlers ------------------------------------------------------------ */
/* Expected shape of one argument tensor: dim sizes of -1 (and ndim -1) match anything. */
typedef struct {
    spmd_dtype dtype;
    int ndim;
    int64_t shape[SPMD_RPC_MAX_DIMS];
} spmd_rpc_shape;
typedef struct {
    int nargs;                    /* -1: any number of tensors, unchecked */
    const spmd_rpc_shape *args;   /* nargs entries */
    size_t max_payload;           /* payload bytes allowed (0: none) ... */
    int any_payload;              /* ... unless this is set: any up to SPMD_RPC_MAX_PAYLOAD */
} spmd_rpc_sig;

/* A handler reads spmd_rpc_call_args, fills spmd_rpc_call_result and returns
 * SPMD_OK, or fails the call with spmd_rpc_call_fail (the message goes to
 * the caller).  To answer later (torch's @rpc.functions.async_execution) it
 * calls spmd_rpc_call_defer and returns; then anyone, on any thread, calls
 * spmd_rpc_call_finish exactly once. */
typedef spmd_status (*spmd_rpc_handler)(spmd_rpc_call *call, void *ctx);

/* sig NULL: arguments unchecked.  Replacing a name is allowed.  Names
 * starting with "__" are the library's (dist_autograd.h). */
spmd_status spmd_rpc_register(spmd_rpc *r, const char *name, spmd_rpc_handler fn, void *ctx,
                              const spmd_rpc_sig *sig);
/* The same for a short handler that never blocks (no waits, no nested
 * calls, no locks held long): it runs on the thread that receives the call
 * instead of a pool thread, which saves a thread hand-off per call (as a
 * Mercury callback runs in the progress context).  It may still defer. */
spmd_status spmd_rpc_register_inline(spmd_rpc *r, const char *name, spmd_rpc_handler fn, void *ctx,
                                     const spmd_rpc_sig *sig);

const spmd_rpc_msg *spmd_rpc_call_args(const spmd_rpc_call *c);
/* The arguments, writable (e.g. to take their RRefs). */
spmd_rpc_msg *spmd_rpc_call_args_mut(spmd_rpc_call *c);
spmd_rpc_msg *spmd_rpc_call_result(spmd_rpc_call *c);
int spmd_rpc_call_caller(const spmd_rpc_call *c);      /* the caller's rank */
spmd_rpc *spmd_rpc_call_agent(const spmd_rpc_call *c);
/* For calls through an RRef: the owner's value (NULL otherwise). */
spmd_rpc_msg *spmd_rpc_call_rref_value(spmd_rpc_call *c);
spmd_status spmd_rpc_call_fail(spmd_rpc_call *c, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
void spmd_rpc_call_defer(spmd_rpc_call *c);
/* Send the reply of a deferred call (st != SPMD_OK: fails it with the
 * message set by spmd_rpc_call_fail, or st's text) and free c. */
void spmd_rpc_call_finish(spmd_rpc_call *c, spmd_status st);

/* ---- calls and futures ---------------------------------------------------- */
/* timeout_ms: < 0 the agent's default, 0 none.  args may be NULL (no
 * arguments) and may be freed once the call returns. */
spmd_status spmd_rpc_async(spmd_rpc *r, int dst, const char *fn, const spmd_rpc_msg *args,
                           int timeout_ms, spmd_rpc_future **out);
/* *result (owned by the caller) on success. */
spmd_status spmd_rpc_sync(spmd_rpc *r, int dst, const char *fn, const spmd_rpc_msg *args,
                          int timeout_ms, spmd_rpc_msg **result);

/* Wait up to timeout_ms (< 0: until the call's own deadline) for the
 * result; returns the call's status, or SPMD_ERR_TIMEOUT when this wait
 * ends first (the call goes on). */
spmd_status spmd_rpc_future_wait(spmd_rpc_future *f, int timeout_ms);
/* SPMD_ERR_AGAIN while pending, else the call's status. */
spmd_status spmd_rpc_future_test(spmd_rpc_future *f);
/* Take the result (once): *out owned by the caller.  A second take is
 * SPMD_ERR_INVALID ("result already taken"). */
spmd_status spmd_rpc_future_take(spmd_rpc_future *f, spmd_rpc_msg **out);
const char *spmd_rpc_future_errmsg(const spmd_rpc_future *f);
/* fn(f, ctx) once the future completes (at once if it has). */
typedef void (*spmd_rpc_future_cb)(spmd_rpc_future *f, void *ctx);
spmd_status spmd_rpc_future_then(spmd_rpc_future *f, spmd_rpc_future_cb fn, void *ctx);
void spmd_rpc_future_free(spmd_rpc_future *f);

/* ---- RRefs ---------------------------------------------------------------- */
/* Run fn on dst and keep its result there; *out refers to it at once.  A
 * failure of fn surfaces in to_here / rref calls. */
spmd_status spmd_rpc_remote(spmd_rpc *r, int dst, const char *fn, const spmd_rpc_msg *args,
                            int timeout_ms, spmd_rref **out);
int spmd_rref_owner(const spmd_rref *ref);
int spmd_rref_is_owner(const spmd_rref *ref);
/* A copy of the value (waits for its creation). */
spmd_status spmd_rref_to_here(spmd_rref *ref, int timeout_ms, spmd_rpc_msg **out);
/* On the owner only: the value itself (NULL elsewhere or while not created). */
spmd_rpc_msg *spmd_rref_local_value(spmd_rref *ref);
/* Call fn on the owner with the value as spmd_rpc_call_rref_value (calls on
 * one value are serialised). */
spmd_status spmd_rref_call_async(spmd_rref *ref, const char *fn, const spmd_rpc_msg *args,
                                 int timeout_ms, spmd_rpc_future **out);
/* Share: registers a new user with the owner first (so the owner never
 * frees a value a message is carrying), then appends it to m.  Sending m
 * hands its RRefs over to the receiver, which takes them with
 * spmd_rpc_msg_take_rref (m cannot share them a second time); left untaken,
 * freeing the message releases them. */
spmd_status spmd_rpc_msg_add_rref(spmd_rpc_msg *m, spmd_rref *ref);
int spmd_rpc_msg_nrrefs(const spmd_rpc_msg *m);
spmd_status spmd_rpc_msg_take_rref(spmd_rpc_msg *m, int i, spmd_rref **out);
/* Drop this reference; the owner frees the value when the last one is
 * released.  NULL is fine. */
void spmd_rref_release(spmd_rref *ref);
/* On this worker: values owned and the users registered for them, summed. */
void spmd_rpc_rref_counts(spmd_rpc *r, int *owned_values, int *registered_users);

#ifdef __cplusplus
}
#endif
#endif
