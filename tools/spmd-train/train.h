/* train.h — spmd-train's parts (tools/spmd-train/, docs/TRAINING.md):
 *   options.c     the command line: every flag, its checks, --help
 *   input.c       the data sets (Fashion-MNIST, CIFAR-10) and batch filling
 *   sync.c        data-parallel gradient synchronisation and --check-sync
 *   checkpoint.c  --checkpoint-dir / --resume of the data-parallel trainer
 *   ckpt_state.c  the checkpoints of both (DCP layout), model_gather.c --save-model with --pp/--tp
 *   report.c      progress lines, --metrics, --plot, errors
 *   loop.c        the data-parallel trainer (DDP or average_gradients)
 *   parallel.c    the model-parallel trainer (--pp, --tp, --zero)
 *   main.c        picks one of the two
 * One set of options serves both trainers; the few that only one of them
 * can honour are refused with the reason by options.c. */
#ifndef SPMD_TRAIN_H
#define SPMD_TRAIN_H
#include <stdio.h>
#include "spmd/data.h"
#include "spmd/ddp.h"
#include "spmd/group.h"
#include "spmd/nn.h"
#include "spmd/parallel.h"

#define ERRLEN 512

/* ---- options (options.c) ---------------------------------------------------- */

typedef struct {
    const char *model;
    const char *dataset;     /* "fashion-mnist" | "cifar10" */
    const char *data;
    int epochs;
    long steps;              /* 0: no limit */
    int batch;
    float lr, momentum, weight_decay;
    spmd_optim_kind optimizer;
    uint64_t seed;
    int threads;
    const char *ckpt_dir;    /* --checkpoint-dir: DCP checkpoints in DIR/step-N */
    int resume;
    const char *resume_dir;  /* --resume [DIR]: a step-N folder or a root (its newest); default ckpt_dir */
    int async_ckpt;          /* --async-checkpoint: written by a background thread (spmd_dcp_saver) */
    int allow_nonfinite;     /* --allow-nonfinite-checkpoint */
    const char *metrics;
    const char *plot;
    int quiet;
    int dropout;
    int log_every;
    int eval;
    long train_samples;      /* 0: the whole training set */
    long test_samples;       /* 0: the whole test set */
    int prefetch;            /* batches prepared ahead by a loader thread; 0: none */
    int sync_average;        /* 1: --sync average (seed 000's average_gradients) */
    int no_overlap;          /* DDP: reduce every bucket after backward */
    int no_shared_grads;     /* DDP: gradients in private memory, buckets through all_reduce */
    int no_shard_step;       /* DDP: every rank runs the whole optimizer step */
    float bucket_cap_mb;     /* DDP: 0 = DEFAULT_BUCKET_CAP_MB */
    spmd_ddp_compression compression;
    int sync_bn;
    int check_sync;
    int lr_linear;           /* the learning rate scales with the number of replicas */
    int elastic;             /* --elastic: survive lost ranks in place (elastic.c) */
    const char *save_model;  /* --save-model: the trained state_dict (spmd_model_save) */
    const char *load_model;  /* --load-model: start from this state_dict (spmd_model_load) */
    /* model parallelism (parallel.c) */
    int pp, tp, microbatches, zero;
    spmd_schedule_kind schedule;
} options;

/* 0 to run, 1 for --help (usage printed), -1 on a usage error (said why). */
int train_parse_args(int argc, char **argv, options *o);
/* The model-parallel trainer runs: --pp or --tp > 1, or --zero. */
int train_is_parallel(const options *o);
/* --elastic's refusals and what it implies (options.c): 0, or -1 (said why). */
int elastic_check_options(options *o);
/* 1 in a replacement process: --elastic and SPMD_JOIN=1 (spmdrun --on-failure replace) */
int elastic_joining(const options *o);

/* ---- the data (input.c) ------------------------------------------------------ */

typedef struct {
    int cifar;
    spmd_dataset fm;
    spmd_cifar cf;
} train_data;

/* Load one split of o->dataset from o->data; err names the file. */
spmd_status train_data_load(const options *o, spmd_split split, train_data *d, char *err, size_t errlen);
size_t train_data_len(const train_data *d);
/* Keep the first n examples only (n < length). */
void train_data_truncate(train_data *d, size_t n);
/* The shape of one example and the number of classes. */
void train_data_shape(const train_data *d, int *c, int *h, int *w, int *classes);
/* Batch number `batch_no` of a run made of examples idx[0..count): normalised
 * inputs x (count x c x h x w) and labels y; CIFAR-10 training batches
 * (augment) are cropped and flipped from seed and batch_no, so a batch is the
 * same whoever fills it, and whenever. */
spmd_status train_data_fill(const train_data *d, const size_t *idx, size_t count, int augment,
                            uint64_t seed, uint64_t batch_no, float *x, int *y);
void train_data_free(train_data *d);

/* A run over one epoch's batches of a rank, through a prefetching iterator
 * (spmd_prefetch) when o->prefetch > 0, else filled on the caller's thread. */
typedef struct {
    const train_data *d;
    int augment;
    uint64_t seed, first_batch_no;
    spmd_prefetch *pf;
    spmd_batch_iter it;
    uint64_t next_no;
    float *x;          /* the synchronous path's batch */
    int *y;
} batch_source;

/* Batches of indices[0..n) in slices of `batch`, starting at batch `skip`;
 * batch k is numbered first_batch_no + k. */
spmd_status batch_source_open(batch_source *s, const train_data *d, int augment, uint64_t seed,
                              const size_t *indices, size_t n, size_t batch, size_t skip,
                              uint64_t first_batch_no, int prefetch, float *x, int *y, char *err,
                              size_t errlen);
/* 1: a batch in *x, *y (count *n, valid until the next call); 0: the end;
 * -1: an error (err names it). */
int batch_source_next(batch_source *s, const float **x, const int **y, size_t *n, char *err, size_t errlen);
void batch_source_close(batch_source *s);

/* ---- reporting (report.c) ---------------------------------------------------- */

typedef struct {
    long step;
    float loss;
} loss_point;

typedef struct {
    int reporter;       /* this rank prints and writes metrics and the plot */
    int quiet, tty;
    FILE *metrics;
    loss_point *losses;
    size_t nlosses, cap_losses;
    double *accs;
    int naccs;
} report;

/* Opens --metrics on the reporter; -1 (said why) when it cannot. */
int report_open(report *r, const options *o, int reporter, int rank);
void report_close(report *r);
void report_say(const report *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* One logging window: a metrics record and a point of the loss curve. */
void report_step(report *r, long step, int epoch, float loss, double samples_per_s);
/* A test evaluation: a metrics record and a point of the accuracy curve. */
void report_eval(report *r, int epoch, long step, double acc, long long correct, long long total);
/* The progress line (see report.c). */
void report_progress(const report *r, int epoch, int epochs, long step_in_epoch, long steps_per_epoch,
                     long global_step, float loss, double sps, double eta_s, int final);
/* --plot: 0, or -1 (said why). */
int report_plot(const report *r, const options *o, int world);
/* "spmd-train: rank R: what: cause" on stderr; returns 1 (the exit code).
 * cause: err when it says something, else the status' text. */
int report_fail(int rank, const char *what, spmd_status st, const char *err);
/* The rank the launcher gave this process (for messages before the group
 * exists), or -1 when none says. */
int report_env_rank(void);
double report_now(void);

/* ---- the two trainers ---------------------------------------------------------- */

int train_data_parallel(const options *o);   /* loop.c */
int train_model_parallel(const options *o);  /* parallel.c */

/* One rank of a group: a launcher's environment names a rank (loop.c). */
int train_launched(void);

#endif
