/* spmd/dist_autograd.h — distributed autograd and a distributed optimizer
 * over spmd's RPC, for the training stack (libspmdnn).
 *
 * spmd's layers are explicit (llm.c style: a forward and a backward per
 * layer), so a piece of model that lives on another worker is a MODULE: a
 * forward, a backward and its parameters, registered by name on the worker
 * that owns it.  Other workers refer to it through an RRef.
 *
 *   every worker:  spmd_dag_create(rpc, &d);  spmd_dag_add_module(d, &stage);   then a barrier
 *   the driver:    spmd_dag_module_rref(d, 1, "stage1", &s1);  ...
 *                  spmd_dag_context_new(d, &ctx);                       // one per step
 *                  spmd_dag_forward(d, ctx, s1, x, -1, &r1, &h);        // records send/recv pair r1
 *                  spmd_dag_forward(d, ctx, s2, h, r1, &r2, &logits);  // r2's input came from r1
 *                  ... loss and dlogits locally ...
 *                  spmd_dag_backward(d, ctx, r2, dlogits, NULL);        // r2's owner, then r1's
 *                  spmd_dist_optim_step(opt, ctx);                      // every module, through its RRef
 *                  spmd_dag_context_release(d, ctx);
 *
 * What is recorded: each forward through a module RRef is one record — the
 * driver keeps (record, owner, module, parent record), the owner keeps what
 * the module's backward needs, under (context, record).  Backward walks from
 * a record to its parents, sending each gradient to the worker and context
 * that ran that forward.  Gradients are kept per context on the owners (not
 * in the parameters); the distributed optimizer applies a context's
 * gradients on every owner.  Several chains (micro-batches) may share a
 * context; their gradients add up.
 */
#ifndef SPMD_DIST_AUTOGRAD_H
#define SPMD_DIST_AUTOGRAD_H

#include "spmd/nn.h"
#include "spmd/rpc.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct spmd_dag spmd_dag;

typedef struct {
    const char *name;       /* unique on its worker, < SPMD_RPC_MAX_NAME characters */
    float *params;          /* nparams floats, owned by the caller, stepped in place */
    size_t nparams;
    /* in -> out; *saved keeps what backward needs (freed by free_saved). */
    spmd_status (*forward)(void *self, const spmd_rpc_msg *in, spmd_rpc_msg *out, void **saved);
    /* dout (gradients of out) -> din (gradients of in, appended to din);
     * parameter gradients are ADDED to grads (nparams floats). */
    spmd_status (*backward)(void *self, void *saved, const spmd_rpc_msg *dout, spmd_rpc_msg *din,
                            float *grads);
    void (*free_saved)(void *self, void *saved);
    void *self;
} spmd_dag_module;

/* Registers the dist-autograd handlers on r (every worker, before the first
 * call reaches it). */
spmd_status spmd_dag_create(spmd_rpc *r, spmd_dag **out);
/* After spmd_rpc_shutdown's peers are done with it (e.g. after a graceful shutdown). */
void spmd_dag_free(spmd_dag *d);
const char *spmd_dag_errmsg(const spmd_dag *d);

/* A module owned here (the struct is copied; params and self are not). */
spmd_status spmd_dag_add_module(spmd_dag *d, const spmd_dag_module *m);
/* An RRef to module `name` on worker owner (fails if it has no such module). */
spmd_status spmd_dag_module_rref(spmd_dag *d, int owner, const char *name, spmd_rref **out);

/* A new context (ids are unique across workers). */
spmd_status spmd_dag_context_new(spmd_dag *d, int64_t *ctx);
/* Forward `in` through the module; parent: the record whose output `in` is
 * (-1: a leaf input).  *rec names this record for spmd_dag_backward / later
 * parents.  The module RRef must outlive the context. */
spmd_status spmd_dag_forward(spmd_dag *d, int64_t ctx, spmd_rref *module, const spmd_rpc_msg *in,
                             int parent, int *rec, spmd_rpc_msg **out);
spmd_status spmd_dag_forward_async(spmd_dag *d, int64_t ctx, spmd_rref *module,
                                   const spmd_rpc_msg *in, int parent, int *rec,
                                   spmd_rpc_future **out);
/* Backward from record rec given the gradient of its output; *din (may be
 * NULL) receives the gradient of the chain's leaf input. */
spmd_status spmd_dag_backward(spmd_dag *d, int64_t ctx, int rec, const spmd_rpc_msg *dout,
                              spmd_rpc_msg **din);
/* On the owner: the gradients of a local module in context ctx (NULL if
 * none were computed).  Valid until the context is released. */
const float *spmd_dag_grads(spmd_dag *d, int64_t ctx, const char *module);
/* On the owner: copy a local module's parameters (params, if not NULL) and
 * its gradients of context ctx (grads, if not NULL; an error if it has none)
 * into the caller's buffers of nparams floats, under the module's lock.  Use
 * it instead of reading the module's memory directly: remote forward,
 * backward and step calls run on the RPC pool's threads. */
spmd_status spmd_dag_module_snapshot(spmd_dag *d, const char *module, int64_t ctx, float *params, float *grads);
/* Free the context's records and gradients on every worker. */
spmd_status spmd_dag_context_release(spmd_dag *d, int64_t ctx);

/* ---- distributed optimizer ------------------------------------------------ */
typedef struct spmd_dist_optim spmd_dist_optim;
/* One optimizer per module, living on the module's owner (torch's
 * DistributedOptimizer); modules: RRefs from spmd_dag_module_rref (not owned). */
spmd_status spmd_dist_optim_create(spmd_dag *d, const spmd_optim_opts *o, spmd_rref *const *modules,
                                   int n, spmd_dist_optim **out);
/* Step every module with its gradients of context ctx (concurrently). */
spmd_status spmd_dist_optim_step(spmd_dist_optim *o, int64_t ctx);
void spmd_dist_optim_free(spmd_dist_optim *o);

#ifdef __cplusplus
}
#endif
#endif
