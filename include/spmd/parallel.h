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

/* ---- pipeline parallelism over point-to-point --------------------------------
 *
 * A layer list cut into stages [cuts[s], cuts[s+1]), stage s on rank s of a
 * pipeline group.  A step splits the batch into micro-batches and runs the
 * stage's schedule: a table of forward (F) and backward (B) actions.
 * Activations go to the next stage and their gradients back with
 * isend/irecv; the receive for the next action is posted before the current
 * one computes, so transfers overlap compute.  The last stage computes the
 * cross-entropy of each micro-batch; gradients are scaled by 1/microbatches
 * and accumulate in the stage's parameters' gradients, so after a step they
 * equal the whole batch's (mean loss).  Each in-flight micro-batch needs its
 * own activations: GPipe keeps all micro-batches alive, 1F1B at most
 * stages - stage on stage `stage`. */
typedef enum { SPMD_SCHEDULE_GPIPE = 0, SPMD_SCHEDULE_1F1B } spmd_schedule_kind;
spmd_status spmd_schedule_parse(const char *s, spmd_schedule_kind *out);   /* "gpipe", "1f1b" */
const char *spmd_schedule_name(spmd_schedule_kind k);

typedef struct {
    char op;      /* 'F' or 'B' */
    int mb;       /* micro-batch */
} spmd_pipe_action;
/* Stage `stage`'s table: 2 * microbatches actions into out. */
spmd_status spmd_pipe_schedule(spmd_schedule_kind k, int stages, int stage, int microbatches,
                               spmd_pipe_action *out);

/* Cut points balancing the parameter count: cuts[0] = 0 < cuts[1] < ... <
 * cuts[stages] = layers; each stage at least one layer. */
spmd_status spmd_pipe_balance(const spmd_layers *L, int stages, int *cuts, char *err,
                              size_t errlen);

typedef struct spmd_pipe spmd_pipe;
typedef struct {
    spmd_schedule_kind schedule;
    int microbatches;
    const int *cuts;      /* stages + 1 entries; NULL: spmd_pipe_balance */
    uint64_t seed;        /* as spmd_build_opts: every stage holds the whole model's slice */
    int dropout;
} spmd_pipe_opts;
#define SPMD_PIPE_OPTS_DEFAULT {SPMD_SCHEDULE_1F1B, 4, NULL, 1234, 1}

/* g: the pipeline group (its size is the number of stages; rank = stage).
 * Collective only in that every stage must build with the same list and opts. */
spmd_status spmd_pipe_create(spmd_group *g, const spmd_layers *L, const spmd_pipe_opts *o,
                             spmd_pipe **out, char *err, size_t errlen);
void spmd_pipe_free(spmd_pipe *p);
/* The stage's model: its parameters and gradients (spmd_model_params/grads)
 * are the stage's; step the optimizer on them.  Train/eval via spmd_pipe_train. */
spmd_model *spmd_pipe_model(spmd_pipe *p);
void spmd_pipe_train(spmd_pipe *p, int training);
/* The stage's micro-batch slots (models sharing the parameters, each with
 * its own activations and dropout RNG; slot 0 is spmd_pipe_model): at most
 * the number of micro-batches.  A checkpoint keeps every slot's RNG. */
int spmd_pipe_num_slots(const spmd_pipe *p);
spmd_model *spmd_pipe_slot_model(spmd_pipe *p, int i);
/* Seed the dropout RNG of every activation slot (slot i: stream * 1024 + i). */
void spmd_pipe_seed_dropout(spmd_pipe *p, uint64_t seed, uint64_t stream);
/* SyncBatchNorm in every micro-batch slot of the stage (spmd_model_set_syncbn;
 * reduce NULL: plain BatchNorm).  Safe with a group over the stage's
 * data-parallel replicas: they run the same schedule table, so each
 * micro-batch's forward and backward reduce at the same action everywhere. */
spmd_status spmd_pipe_set_syncbn(spmd_pipe *p, spmd_bn_reduce_fn reduce, void *ctx);
int spmd_pipe_stage(const spmd_pipe *p);
int spmd_pipe_stages(const spmd_pipe *p);
void spmd_pipe_cut(const spmd_pipe *p, int *first, int *last);
/* One step over a batch of B samples (B divisible by microbatches): x
 * (B, C, H, W) on stage 0 (else ignored), targets (B) on the last stage.
 * Adds to the gradients (zero them before).  The last stage gets the mean
 * loss in *loss and the argmax hits in *correct (both may be NULL). */
spmd_status spmd_pipe_step(spmd_pipe *p, const float *x, const int *targets, int B, float *loss,
                           int *correct);
/* Forward only (eval): the last stage's logits (B, classes) into logits. */
spmd_status spmd_pipe_forward(spmd_pipe *p, const float *x, int B, float *logits);
typedef struct {
    double total_s;       /* the last step, wall clock */
    double compute_s;     /* forward, loss and backward */
    double wait_s;        /* waiting for activations / gradients / sends */
    double bubble_s;      /* total - compute: idle time of this stage */
    int max_live;         /* micro-batches whose activations were alive at once */
    int slots;            /* activation sets allocated (GPipe: microbatches; 1F1B: <= stages - stage) */
    size_t act_bytes;     /* activation + cache memory of all slots */
} spmd_pipe_stats;
void spmd_pipe_last_stats(const spmd_pipe *p, spmd_pipe_stats *s);
const char *spmd_pipe_errmsg(const spmd_pipe *p);

/* ---- device mesh: data x pipeline x tensor subgroups -------------------------
 *
 * A world of dp * pp * tp ranks cut as torch's DeviceMesh (and Megatron) do,
 * the tensor dimension innermost: rank = (d * pp + p) * tp + t.  Each rank
 * gets its coordinates and three subgroups: the ranks that differ only in d
 * (its data-parallel group: gradients averaged there), only in p (its
 * pipeline: stage = p) and only in t (its tensor-parallel group).  A
 * dimension of size 1 gives a group of one.  Collective over g. */
typedef struct {
    int dp, pp, tp;          /* sizes */
    int d, p, t;             /* this rank's coordinates */
    spmd_group *dp_group, *pp_group, *tp_group;
} spmd_mesh;
spmd_status spmd_mesh_create(spmd_group *g, int dp, int pp, int tp, spmd_mesh *out, char *err,
                             size_t errlen);
/* Destroys the subgroups (before the parent group). */
void spmd_mesh_destroy(spmd_mesh *m);

/* ---- tensor parallelism: Megatron's column- and row-parallel Linear ----------
 *
 * Layers of a layer list (spmd/nn.h custom layers) whose weight is sharded
 * over a tensor-parallel group of tp ranks (rank t):
 *   column-parallel  nn.Linear(C, OC) with rows [t*OC/tp, (t+1)*OC/tp) of the
 *                    weight and bias here; output (B, OC/tp), or all-gathered
 *                    to (B, OC) when gather_output; backward all-reduces the
 *                    input gradient (the input is replicated).
 *   row-parallel     nn.Linear(C, OC) with columns [t*C/tp, (t+1)*C/tp) of the
 *                    weight; input (B, C/tp) (a column-parallel output), the
 *                    partial outputs all-reduced, the (whole) bias added once.
 * A column-parallel layer, element-wise layers, then a row-parallel one is
 * Megatron's MLP: one all_reduce forward, one backward.  Each shard is
 * initialised as its slice of the unsharded layer from the same seed, so a
 * tensor-parallel model starts (and trains) as the plain one.  The spmd_tp
 * object owns the layers' state and must outlive every model built from them. */
typedef struct spmd_tp spmd_tp;
spmd_status spmd_tp_create(spmd_group *g, spmd_tp **out);
void spmd_tp_free(spmd_tp *tp);
spmd_status spmd_tp_column_linear(spmd_tp *tp, spmd_layers *L, int out_features, int bias,
                                  int gather_output, const char *name);
spmd_status spmd_tp_row_linear(spmd_tp *tp, spmd_layers *L, int out_features, int bias,
                               const char *name);
/* Built-in architectures with their Linear layers sharded: "mlp" (fc1
 * column, fc2 row) and "cnn" (fc1 column, fc2 row); input as spmd_layers_arch. */
spmd_status spmd_tp_arch(spmd_tp *tp, const char *arch, int num_classes, int in_c, int in_h,
                         int in_w, spmd_layers **out, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif
#endif
