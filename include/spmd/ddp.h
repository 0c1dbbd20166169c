/* spmd/ddp.h — data-parallel gradient reduction for any C training loop, in
 * the manner of PyTorch's DistributedDataParallel.
 *
 * Use (one model's np parameters p[i] of n[i] floats, gradients grad[i]):
 *   ```c
 *   static spmd_status train(spmd_group *g, int np, float **p, float **grad, const size_t *n,
 *                            int steps) {
 *       spmd_ddp *d;
 *       spmd_ddp_opts o = SPMD_DDP_OPTS_DEFAULT;
 *       spmd_status st = spmd_ddp_create(g, &o, &d);
 *       if (st) return st;
 *       // optionally spmd_ddp_alloc_grads(d, total, &grads): the gradients, shared
 *       // between the ranks of a host, and then spmd_ddp_alloc_step(d, k, fn, ctx,
 *       // &params, &state): the sharded optimizer step
 *       for (int i = 0; i < np && !st; i++) {   // every parameter, in model order
 *           char name[32];
 *           snprintf(name, sizeof name, "layer%d.weight", i);
 *           st = spmd_ddp_add_param(d, name, p[i], grad[i], n[i]);
 *       }
 *       // buffers (BatchNorm statistics): spmd_ddp_add_buffer(d, name, buf, count)
 *       if (!st) st = spmd_ddp_finalize(d);   // checks the ranks agree, broadcasts rank 0's
 *       for (int s = 0; s < steps && !st; s++) {
 *           st = spmd_ddp_prepare(d);          // start of the step (buffers re-broadcast)
 *           // forward, then backward calling spmd_ddp_grad_ready(d, i) as
 *           // parameter i's gradient is final (last layer first):
 *           for (int i = np - 1; i >= 0 && !st; i--) st = spmd_ddp_grad_ready(d, i);
 *           if (!st) st = spmd_ddp_finish(d); // every bucket in: gradients averaged
 *           // the optimizer step, unless spmd_ddp_stepped(d) (the reducer did it)
 *       }
 *       // a rank that runs out of data early: spmd_ddp_join(d) (see below)
 *       spmd_ddp_free(d);
 *       return st;
 *   }
 *   ```
 *
 * Buckets: gradients are grouped in reverse registration order (the order
 * backward produces them) into buckets of at most bucket_cap_bytes (the first
 * one first_bucket_bytes), and each bucket's all_reduce starts as soon as all
 * its gradients are ready — while backward is still computing earlier layers.
 * Buckets start in the same order on every rank.  After the first step the
 * buckets are rebuilt in the order gradients actually became ready on rank 0,
 * as torch does.
 *
 * Threads: grad_ready, prepare, finish and join are called from one thread
 * (the training loop's); communication runs on the group's executor.
 * Ownership: the parameter/gradient/buffer memory stays the caller's and must
 * stay valid until spmd_ddp_free; names are copied.
 */
#ifndef SPMD_DDP_H
#define SPMD_DDP_H

#include <stddef.h>
#include "spmd/group.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct spmd_ddp spmd_ddp;

typedef enum {
    SPMD_DDP_COMPRESS_NONE = 0,
    SPMD_DDP_COMPRESS_FP16, /* buckets travel as float16 (torch's fp16_compress_hook) */
    SPMD_DDP_COMPRESS_BF16  /* buckets travel as bfloat16 (bf16_compress_hook) */
} spmd_ddp_compression;

/* A communication hook: replaces the bucket's all_reduce.  It must start an
 * async collective on g that leaves the SUM over ranks of `grads` (count
 * floats) in `grads` when *work completes (the reducer divides by the world
 * size afterwards), or finish synchronously and set *work = NULL. */
typedef spmd_status (*spmd_ddp_comm_hook)(void *state, spmd_group *g, float *grads, size_t count,
                                          spmd_work **work);

typedef struct {
    size_t first_bucket_bytes;   /* torch: 1 MiB */
    size_t bucket_cap_bytes;     /* torch: 25 MiB */
    int find_unused_parameters;  /* 1: a parameter never marked ready is reduced as zero;
                                    0: it is an error naming it (no hang) */
    int broadcast_buffers;       /* 1: prepare() broadcasts buffers from rank 0 each step */
    int overlap;                 /* 1: buckets start during backward; 0: all at finish() */
    spmd_ddp_compression compression;
} spmd_ddp_opts;

#define SPMD_DDP_OPTS_DEFAULT {1u << 20, 25u << 20, 0, 1, 1, SPMD_DDP_COMPRESS_NONE}

spmd_status spmd_ddp_create(spmd_group *g, const spmd_ddp_opts *opts, spmd_ddp **out);
void spmd_ddp_free(spmd_ddp *d);
/* Detailed message of the last failure. */
const char *spmd_ddp_errmsg(const spmd_ddp *d);

/* Gradient memory for `count` floats (zero-filled, the reducer's; valid until
 * spmd_ddp_free) that the reducer can sum in place across ranks — torch's
 * gradient_as_bucket_view, the other way round.  Call once, before finalize,
 * and register gradients inside it at the same offsets on every rank.  When
 * every rank does and all run on one host (one kernel, network and pid
 * namespace; SPMD_SHM=0 turns it off), buckets are reduced straight in
 * shared memory, with no sockets and no threads; otherwise through the
 * group's all_reduce as usual.  Hooks and compression use the all_reduce. */
spmd_status spmd_ddp_alloc_grads(spmd_ddp *d, size_t count, float **grads);
/* 1 when finalize found every rank's gradients shared (see alloc_grads). */
int spmd_ddp_grads_shared(const spmd_ddp *d);

/* The sharded optimizer step (ZeroRedundancyOptimizer's division of the
 * work, on one host).  With shared gradients the reducer can also apply the
 * optimizer: each rank updates only the slices of the buckets it sums and
 * writes the new parameters into every rank's memory.  Every rank runs the
 * optimizer over 1/world of the parameters and reads no averaged gradient
 * back, and ends the step with the whole, identical parameters.  The results
 * are the bits of the plain step.  The optimizer state stays sharded: each
 * slice is current only in its owner's memory until spmd_ddp_gather_state
 * (torch: consolidate_state_dict), which every rank calls between steps
 * before one reads its whole state (a checkpoint, a comparison).  The reducer gathers
 * by itself whenever the caller may step on its own next (a finish that did
 * not step, no_sync) and when the buckets are rebuilt.
 *
 * Call after alloc_grads, before finalize: params (count floats, as the
 * gradients) and state (state_arrays arrays of count floats, back to back;
 * NULL when 0) are the reducer's shared memory, zero-filled; the model's
 * parameters and the optimizer's state must live there at the gradients'
 * offsets (spmd_model_use_param_memory, spmd_optim_use_state_memory).
 * During backward and finish the reducer calls fn(ctx, offset, count, avg):
 * apply the optimizer to elements [offset, offset + count) of this rank's
 * params and state, with avg (count floats) their averaged gradient
 * (spmd_optim_update).  Then spmd_ddp_stepped() says whether the step was
 * applied — finish the optimizer's step (spmd_optim_step_done) — or not
 * (a comm hook, compression, join enabled, a bucket not in shared memory,
 * no_sync, gradients not shared): step as usual on the averaged gradients.
 * The gradients are not left averaged after a sharded step.  A gradient's
 * grad_ready must follow the last read of its parameter in the step, as
 * backward's does. */
typedef void (*spmd_ddp_step_fn)(void *ctx, size_t offset, size_t count, const float *avg);
spmd_status spmd_ddp_alloc_step(spmd_ddp *d, size_t state_arrays, spmd_ddp_step_fn fn, void *ctx,
                                float **params, float **state);
/* 1 when the last finish applied the optimizer step (see alloc_step). */
int spmd_ddp_stepped(const spmd_ddp *d);
/* Collective: make every rank's optimizer state whole after sharded steps,
 * each reading the other ranks' slices from their memory.  Between steps
 * (after finish, before the next backward), on every rank. */
spmd_status spmd_ddp_gather_state(spmd_ddp *d);
/* 1 when finalize found every rank's step memory shared: steps will be
 * sharded unless a hook, compression or join rules it out. */
int spmd_ddp_step_shared(const spmd_ddp *d);

/* Register parameter i (in registration order, starting at 0) with its
 * gradient buffer.  Only SPMD_F32 (float) gradients are supported. */
spmd_status spmd_ddp_add_param(spmd_ddp *d, const char *name, float *param, float *grad, size_t count);
spmd_status spmd_ddp_add_buffer(spmd_ddp *d, const char *name, float *buf, size_t count);
/* Collective: verify that every rank registered the same parameters (count
 * and sizes; a mismatch fails on every rank naming the rank and the
 * parameter), broadcast parameters and buffers from rank 0, build buckets. */
spmd_status spmd_ddp_finalize(spmd_ddp *d);

/* Replace the all_reduce of every bucket (NULL: back to the built-in). */
spmd_status spmd_ddp_set_comm_hook(spmd_ddp *d, spmd_ddp_comm_hook hook, void *state);

/* Gradient accumulation: while on, finish() does no communication and
 * gradients keep accumulating locally (torch's no_sync()); the first step
 * after turning it off reduces the accumulated sum. */
void spmd_ddp_set_no_sync(spmd_ddp *d, int on);

/* Start of a step (before forward). */
spmd_status spmd_ddp_prepare(spmd_ddp *d);
/* Parameter i's gradient is final for this step.  Call each once per step. */
spmd_status spmd_ddp_grad_ready(spmd_ddp *d, int i);
/* Adapter with the signature of the training stack's backward hook
 * (void (*)(void *ctx, int param_index)); ctx is the spmd_ddp.  Errors are
 * kept and returned by the next finish(). */
void spmd_ddp_grad_ready_hook(void *ctx, int param_index);
/* Wait for every bucket; leaves the average over ranks in each gradient
 * (unless spmd_ddp_stepped: then the optimizer step is done instead). */
spmd_status spmd_ddp_finish(spmd_ddp *d);

/* Uneven inputs (torch's Join): a rank that has no more batches calls
 * spmd_ddp_join(), which takes part in the other ranks' remaining steps with
 * zero gradients until every rank has joined.  Then, as torch's Join, the
 * rank that joined last broadcasts its parameters and buffers, so every
 * replica ends with the same model (optimizer state stays per rank).
 * First call spmd_ddp_set_join_enabled(d, 1) on every rank (before the first
 * prepare()), and begin every step with spmd_ddp_prepare() (which then also
 * counts the ranks still training); without it join fails with
 * SPMD_ERR_INVALID. */
spmd_status spmd_ddp_join(spmd_ddp *d);
/* Enable the bookkeeping that join needs (one tiny all_reduce per step);
 * must be the same on every rank and set before the first prepare(). */
void spmd_ddp_set_join_enabled(spmd_ddp *d, int on);

/* Timings of the last step, in seconds: time spent inside finish() waiting
 * for communication, and the number of buckets. */
double spmd_ddp_last_wait_seconds(const spmd_ddp *d);
int spmd_ddp_num_buckets(const spmd_ddp *d);

#ifdef __cplusplus
}
#endif
#endif
