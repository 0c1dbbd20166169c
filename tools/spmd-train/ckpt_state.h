/* ckpt_state.h — spmd-train's checkpoints: torch.distributed.checkpoint's
 * layout (DIR/step-N/.metadata and one file per rank, spmd/ckpt.h), written
 * by every rank at once in every mode and loaded at any world size and
 * layout (docs/TRAINING.md "Checkpoints").
 *
 * Each rank describes what it holds as boxes of the global tensors, under
 * the keys torch's dcp.save({"model": model.state_dict(), "optim":
 * get_optimizer_state_dict(model, opt)}) uses: model.<param>, model.<bn
 * buffer>, optim.state.<param>.momentum_buffer (SGD) or .exp_avg, .exp_avg_sq
 * and .step (Adam, AdamW), optim.param_groups.0.<key> (torch 2.6's
 * hyperparameter keys of torch.optim.SGD, Adam, AdamW, and params: the
 * parameter names; not by pipeline stages); then the trainer's own items: trainer.state (the
 * position, int64), trainer.rng (one row of dropout RNG words per rank) and
 * the bytes items trainer.model and trainer.optimizer; a pipeline stage
 * also trainer.pipe_rng (world x microbatches x 4 int64: every micro-batch
 * slot's dropout RNG words). */
#ifndef SPMD_TRAIN_CKPT_STATE_H
#define SPMD_TRAIN_CKPT_STATE_H
#include "spmd/ckpt.h"
#include "train.h"

/* What one rank holds. */
typedef struct {
    spmd_model *model;        /* whole, a pipeline stage, or tensor-parallel shards */
    float *params, *buffers;  /* its memory (the DDP reducer's when shared) */
    const spmd_model *whole;  /* tensor parallelism: the unsharded model (global shapes); else NULL */
    int t;                    /* tensor-parallel rank: a sharded tensor is block t of its dim */
    spmd_optim *optim;        /* its state covers params[state_off, state_off + state_count) */
    size_t state_off, state_count;
    uint64_t *slot_rng;       /* a pipeline stage: slot_rows x 4 words, every micro-batch slot's dropout
                                 RNG (rows past the stage's slots zero); saved and loaded; else NULL */
    int slot_rows;            /* the micro-batch count: every stage saves that many rows */
    int param_groups;         /* 1: the rank knows every parameter's name (not a pipeline stage): the
                                 optimizer's param_groups are saved (optim.param_groups.0.*) */
} ckpt_layout;

/* The boxes of L's tensors this rank holds, as spmd_dcp_shard under torch's
 * keys (with_optim 0: the model's only); 0, or -1 (out of memory: free it). */
typedef struct {
    spmd_dcp_shard *s;
    size_t n, cap;
    char **names;  /* owned key strings */
    size_t nnames;
    float *steps;  /* Adam's per-tensor step (a 0-d float32, as torch 2.x) */
    int64_t *slot_rng;  /* a copy of L->slot_rng (the next forward changes it) */
    spmd_dcp_bytes items[16];  /* optim.param_groups.0.<key>: pickles of torch's values */
    size_t nitems;
} ckpt_boxes;
int ckpt_boxes_build(const ckpt_layout *L, int with_optim, ckpt_boxes *b);
void ckpt_boxes_free(ckpt_boxes *b);

/* trainer.state: the position and the layout that saved it. */
enum {
    CK_EPOCH,          /* the epoch the next step belongs to */
    CK_STEP_IN_EPOCH,  /* steps of that epoch done */
    CK_GLOBAL_STEP,    /* steps done in all */
    CK_OPTIM_STEPS,    /* the optimizer's step count */
    CK_WORLD,
    CK_REPLICAS,       /* data-parallel replicas: a step takes REPLICAS x BATCH samples */
    CK_BATCH,
    CK_PP, CK_TP, CK_ZERO,
    CK_VERSION,        /* 1 */
    CK_STATE_N
};

/* What an --async-checkpoint save still needs until the saver's thread has
 * copied it (spmd_dcp_save_async_deferred): the boxes, and copies of what
 * the next step changes before its optimizer step (BatchNorm buffers in
 * forward, the dropout RNG, the position).  Zero-initialised; kept across
 * saves (the buffer copy is reused). */
typedef struct {
    ckpt_boxes b;
    float *buffers;
    size_t buffers_cap;
    int64_t state[CK_STATE_N], rng[4];
} ckpt_hold;

/* Save into root/step-<global step> (collective over g; NULL: one process).
 * rng: this rank's dropout RNG (4 words).  The status is agreed.  saver
 * non-NULL (--async-checkpoint; hold then too): a deferred save — this
 * returns once the save is started, the parameters and optimizer state are
 * copied into the saver's staging buffer by its thread while the next step's
 * forward runs, and ckpt_staged must be called before anything changes them
 * (a failure of the previous background save is returned here, or by
 * spmd_dcp_save_wait at the end). */
spmd_status ckpt_save(spmd_group *g, spmd_dcp_saver *saver, ckpt_hold *hold, const char *root, const ckpt_layout *L,
                      const int64_t state[CK_STATE_N], const uint64_t rng[4], const char *model_name, char *dir,
                      size_t dirlen, char *err, size_t errlen);

/* Wait until the last deferred save has copied this rank's state (at once
 * when none is pending; saver NULL: nothing), and release hold's boxes. */
void ckpt_staged(spmd_dcp_saver *saver, ckpt_hold *hold);
/* After spmd_dcp_saver_free (nothing copies from it any more). */
void ckpt_hold_free(ckpt_hold *hold);

/* The checkpoint to resume (collective): path is a step-N directory (it has
 * a .metadata) or a root whose newest complete step-N is taken (a killed
 * save has no .metadata and is skipped).  *found 0: none there. */
spmd_status ckpt_find(spmd_group *g, const char *path, char *dir, size_t dirlen, int *found, char *err,
                      size_t errlen);

/* Load dir into L's memory (collective: every rank returns the same status;
 * a rank whose load failed is named to the others).  state receives
 * trainer.state; *rng_ok is 1 and rng this rank's saved RNG words when the
 * checkpoint was saved by the same world and layout (else the caller
 * re-seeds).  Non-finite floats are refused naming the key unless
 * allow_nonfinite (then a warning). */
spmd_status ckpt_load(spmd_group *g, const char *dir, const ckpt_layout *L, const char *model_name,
                      const int64_t layout_now[CK_STATE_N], int allow_nonfinite, int64_t state[CK_STATE_N],
                      uint64_t rng[4], int *rng_ok, char *err, size_t errlen);

/* The position in a run taking replicas x batch samples per step with
 * per_epoch steps per epoch, from a saved one: the samples of the epoch
 * already seen are kept (both trainers take an epoch's samples in the order
 * of one permutation shared by every rank).  *exact 0: the saved count is
 * not a multiple of the new step's, the position is rounded down. */
void ckpt_position(const int64_t state[CK_STATE_N], int replicas, int batch, long per_epoch, int *epoch,
                   long *step_in_epoch, int *exact);

/* model_gather.c — --save-model with --pp or --tp > 1: every parameter and buffer of this
 * rank's model (L's, no optimizer) is sent to rank 0 of g, which assembles
 * them into `whole` (ranks other than 0 pass NULL).  owner: this rank's
 * copy is the one to send (data-parallel replica 0); tensors replicated over
 * the tensor-parallel group go from t = 0 only.  Collective over g. */
spmd_status ckpt_gather_model(spmd_group *g, const ckpt_layout *L, int owner, spmd_model *whole, char *err,
                              size_t errlen);

/* --load-model with --pp or --tp > 1: this rank's parameters and buffers
 * (L's boxes) copied out of `whole`, the unsharded model every rank loaded
 * the state_dict into (a TP block at its offsets, a stage its tensors).
 * Local; a box whole does not hold is SPMD_ERR_MISMATCH. */
spmd_status ckpt_scatter_model(const ckpt_layout *L, spmd_model *whole, char *err, size_t errlen);

#endif
