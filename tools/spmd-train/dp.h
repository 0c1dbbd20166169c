/* dp.h — the data-parallel trainer's state, shared by loop.c, sync.c and
 * checkpoint.c. */
#ifndef SPMD_TRAIN_DP_H
#define SPMD_TRAIN_DP_H
#include "ckpt_state.h"
#include "spmd/ckpt.h"
#include "train.h"

typedef struct {
    double data, fwd, bwd, comm, opt;   /* seconds summed over steps */
    double prep;                        /* DDP: spmd_ddp_prepare (buffer broadcast) */
    double ckpt;                        /* the steps blocked by checkpoint saves (the call, the wait to stage) */
    long steps, saves;
} timing;

typedef struct ezero ezero;

typedef struct {
    options o;
    spmd_group *g;          /* NULL for a single process */
    ezero *ez;              /* --elastic --zero: the sharded optimizer (elastic_zero.c) */
    spmd_ddp *ddp;          /* the reducer (world > 1 and --sync ddp) */
    spmd_dcp_saver *saver;  /* --async-checkpoint */
    ckpt_hold hold;         /* what its deferred save copies from, until staged */
    int rank, world;
    spmd_model *model;
    spmd_optim *optim;
    train_data train, test;
    spmd_sampler *train_sampler, *test_sampler;
    float *x, *dlogits;
    int *y;
    float *params, *grads, *buffers;
    size_t nparams, nbuffers;
    /* position: the next step is step_in_epoch of epoch; global_step steps done */
    int epoch;
    long step_in_epoch, global_step;
    long saved_step;        /* the global step of the last checkpoint written (or resumed here), -1: none */
    timing t;
    report rep;
    char err[ERRLEN];
} trainer;

static inline int dp_fail(trainer *t, const char *what, spmd_status st) {
    return report_fail(t->rank, what, st, t->err);
}

extern const double DEFAULT_BUCKET_CAP_MB;   /* sync.c */

/* sync.c: the only place gradients cross ranks (see there). */
spmd_status sync_setup_ddp(trainer *t);
spmd_status sync_prepare(trainer *t);
void sync_hook(void *ctx, int param_index);
spmd_status sync_finish(trainer *t);
/* The whole optimizer state on this rank (after the reducer's sharded steps). */
spmd_status sync_whole_state(trainer *t);
spmd_status sync_check(trainer *t);
void sync_set_err_group(trainer *t);

/* step.c: one optimizer step, and the sharded test evaluation (loop.c, elastic.c) */
spmd_status train_one_step(trainer *t, const float *x, const int *y, size_t b, float *loss);
spmd_status train_evaluate(trainer *t, double *acc);
/* elastic_zero.c: ZeRO-1 under --elastic (t->optim then only holds the
 * hyperparameters and the step count) */
spmd_status ezero_create(ezero **out, const spmd_optim_opts *oo, size_t n);
void ezero_free(ezero *z);
spmd_status ezero_start(ezero *z, int rank, int world);
void ezero_begin_step(ezero *z);
spmd_status ezero_step(trainer *t);
void ezero_commit(ezero *z);
void ezero_die_before_gather(ezero *z); /* SPMD_TRAIN_KILL R:S:gather */
spmd_status ezero_reset(trainer *t, int64_t agreed, int64_t steps, float lr);
spmd_status ezero_whole_state(trainer *t, float **whole, size_t *count);
/* elastic.c: --elastic's epochs (0, or the exit code of a failure, said) */
int elastic_epochs(trainer *t, double *train_time, double *eval_time, long *samples, double *last_acc);

/* checkpoint.c (the format: ckpt_state.h) */
/* With --async-checkpoint the save is deferred: the saver's thread copies
 * the parameters and optimizer state while the next step's forward runs;
 * checkpoint_staged (in every step, before backward: the reducer's sharded
 * step writes parameters during backward, on every rank) waits for it. */
spmd_status checkpoint_save(trainer *t);
void checkpoint_staged(trainer *t);
/* Load the newest complete checkpoint of o.resume_dir; *loaded tells whether
 * there was one, dir which. */
spmd_status checkpoint_load(trainer *t, int *loaded, char *dir, size_t dirlen);

#endif
