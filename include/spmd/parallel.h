/* spmd/parallel.h — model parallelism on spmd's groups: ZeRO-1, pipeline
 * schedules, tensor-parallel Linear layers and a device mesh.
 *
 * These are the training stack's (libspmdnn) counterparts of
 * torch.distributed.optim.ZeroRedundancyOptimizer,
 * torch.distributed.pipelining (ScheduleGPipe, Schedule1F1B), Megatron's
 * ColumnParallelLinear / RowParallelLinear and torch's DeviceMesh.  They use
 * only the public group API (point-to-point and collectives) and the
 * layer-list models of spmd/nn.h.  Every call returns spmd_status; a failed
 * creation leaves nothing allocated and fills err (when given) with the
 * reason naming the value. */
#ifndef SPMD_PARALLEL_H
#define SPMD_PARALLEL_H

#include <stddef.h>
#include <stdint.h>
#include "spmd/group.h"
#include "spmd/nn.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- ZeRO-1: the optimizer state sharded over a group -----------------------
 *
 * The n parameters (one flat buffer, e.g. spmd_model_params) are cut into
 * world contiguous shards of ceil(n / world) elements (the last ones shorter
 * or empty); rank r keeps the optimizer state of shard r only (1/world of
 * the plain optimizer's), steps that shard, and the new parameters are
 * all-gathered into every rank's buffer.  The update of each element is the
 * plain optimizer's (spmd_optim_update), so the parameters are bit-identical
 * to spmd_optim_step on the same gradients.  Works on any group and
 * transport, with DDP (gradients already averaged: average_grads 0) or
 * without (average_grads 1: the step all-reduces and averages them first).
 * g NULL: a group of one. */
typedef struct spmd_zero spmd_zero;

spmd_status spmd_zero_create(spmd_group *g, const spmd_optim_opts *o, size_t n,
                             int average_grads, spmd_zero **out, char *err, size_t errlen);
void spmd_zero_free(spmd_zero *z);
/* Collective over the group.  grads: n floats (averaged in place when
 * average_grads); params: n floats, every rank's made equal. */
spmd_status spmd_zero_step(spmd_zero *z, float *params, float *grads);
/* This rank's shard [*offset, *offset + *count) of the parameters. */
void spmd_zero_shard(const spmd_zero *z, size_t *offset, size_t *count);
/* The shard's optimizer (its state is this rank's part; set the lr here). */
spmd_optim *spmd_zero_optim(spmd_zero *z);
/* Floats of optimizer state this rank holds, and the plain optimizer's count
 * for all n parameters (the memory ZeRO saves). */
size_t spmd_zero_local_state_floats(const spmd_zero *z);
size_t spmd_zero_full_state_floats(const spmd_zero *z);
/* consolidate_state_dict: collective; rank `to` receives the whole state in
 * the plain optimizer's layout (spmd_optim_state of an optimizer over n:
 * momentum, or exp_avg then exp_avg_sq) in state (full_state_floats; other
 * ranks may pass NULL) and the step count in *steps (may be NULL). */
spmd_status spmd_zero_consolidate_state_dict(spmd_zero *z, int to, float *state, int64_t *steps);
/* The inverse (resume): every rank passes the whole state and keeps its shard. */
spmd_status spmd_zero_load_state_dict(spmd_zero *z, const float *state, int64_t steps);
const char *spmd_zero_errmsg(const spmd_zero *z);

#ifdef __cplusplus
}
#endif
#endif
