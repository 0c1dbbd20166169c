/* loop.c — the data-parallel trainer: every rank holds the whole model and
 * trains on its DistributedSampler shard; gradients cross ranks in sync.c
 * (the DDP reducer: rank 0's parameters and buffers broadcast at
 * construction, buckets all-reduced while backward still runs; or, with
 * --sync average, seed 000's average_gradients).  --sync-bn makes BatchNorm
 * layers SyncBatchNorm.  After each epoch the test set is evaluated sharded
 * across ranks and the counts all-reduced (seed 004). */
#include <cblas.h>
#include <stdlib.h>
#include <string.h>
#include "dp.h"
#include "spmd/syncbn.h"

/* One rank of a group: a launcher's environment names a rank — the same
 * families the library forms the group from (src/group/envinfo.c):
 * torchrun/spmdrun (RANK, WORLD_SIZE), mpirun (OMPI_COMM_WORLD_*, PMIx),
 * srun (SLURM_PROCID; with or without --mpi), MPICH (PMI_*). */
int train_launched(void) {
    static const char *const vars[] = {"WORLD_SIZE",   "RANK",         "OMPI_COMM_WORLD_SIZE",
                                       "PMIX_RANK",    "PMI_SIZE",     "PMI_RANK",
                                       "SLURM_PROCID"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++)
        if (getenv(vars[i]) && *getenv(vars[i])) return 1;
    return 0;
}

/* Uneven inputs.  Every rank must run the same number of steps, or the ranks
 * with more batches wait forever in a collective the others never join.
 * The DistributedSampler pads the data set to a multiple of the world size
 * (as torch's does), so every rank has the same number of samples and so of
 * batches, and --steps counts global steps: the counts are always equal and
 * the reducer's join (spmd_ddp_join) is not needed.  This check (one small
 * all_reduce per epoch) turns a future violation into an error instead of a
 * hang. */
static spmd_status check_equal_batches(trainer *t, long batches) {
    if (!t->g || t->world == 1) return SPMD_OK;
    int64_t v[2] = {batches, ~(int64_t)batches};
    spmd_status st = spmd_all_reduce(t->g, v, v, 2, SPMD_I64, SPMD_MAX);
    if (st != SPMD_OK) {
        sync_set_err_group(t);
        return st;
    }
    if (v[0] != ~v[1]) {
        snprintf(t->err, sizeof t->err, "ranks have between %lld and %lld batches left this epoch (here %ld)",
                 (long long)~v[1], (long long)v[0], batches);
        return SPMD_ERR_MISMATCH;
    }
    return SPMD_OK;
}

static int setup(trainer *t) {
    spmd_status st;
    if (train_launched()) {
        spmd_group_opts go = SPMD_GROUP_OPTS_DEFAULT;
        go.name = "spmd-train";
        /* a replacement joins the running group (elastic.c) */
        st = elastic_joining(&t->o) ? spmd_group_join(&go, &t->g, t->err, sizeof t->err)
                                    : spmd_group_init(&go, &t->g, t->err, sizeof t->err);
        /* before the group exists, the launcher's word is the rank */
        if (st != SPMD_OK) return report_fail(report_env_rank(), "cannot join the group", st, t->err);
        t->rank = spmd_group_rank(t->g);
        t->world = spmd_group_size(t->g);
    } else {
        t->rank = 0;
        t->world = 1;
    }
    int threads = t->o.threads ? t->o.threads : spmd_nn_default_threads();
    spmd_nn_set_threads(threads);

    /* the test split only when it will be evaluated */
    if ((st = train_data_load(&t->o, SPMD_SPLIT_TRAIN, &t->train, t->err, sizeof t->err)) ||
        (t->o.eval && (st = train_data_load(&t->o, SPMD_SPLIT_TEST, &t->test, t->err, sizeof t->err))))
        return dp_fail(t, t->train.cifar ? "cannot load CIFAR-10"
                                         : "cannot load Fashion-MNIST (install dataset-fashion-mnist or pass --data)",
                       st);
    if (t->o.train_samples) train_data_truncate(&t->train, (size_t)t->o.train_samples);
    if (t->o.test_samples) train_data_truncate(&t->test, (size_t)t->o.test_samples);

    int c, h, w, classes;
    train_data_shape(&t->train, &c, &h, &w, &classes);
    spmd_model_opts mo = SPMD_MODEL_OPTS_DEFAULT;
    mo.arch = t->o.model;
    mo.seed = t->o.seed;
    mo.dropout = t->o.dropout;
    mo.num_classes = classes;
    if (t->train.cifar) mo.in_c = 3, mo.in_h = 32, mo.in_w = 32;
    if ((st = spmd_model_create(&mo, &t->model, t->err, sizeof t->err)) != SPMD_OK)
        return dp_fail(t, "cannot build the model", st);
    spmd_model_seed_dropout(t->model, t->o.seed, (uint64_t)t->rank);
    /* the data must be the model's input before anything reads it */
    const train_data *sets[2] = {&t->train, t->o.eval ? &t->test : NULL};
    for (int k = 0; k < 2; k++) {
        char e[300];
        if (!sets[k]) continue;
        train_data_shape(sets[k], &c, &h, &w, NULL);
        if (spmd_model_check_input(t->model, c, h, w, e, sizeof e) == SPMD_OK) continue;
        snprintf(t->err, sizeof t->err, "the %s images in %s: %s", k ? "test" : "training",
                 t->o.data ? t->o.data : SPMD_DATASET_DEFAULT_DIR, e);
        return dp_fail(t, "the data set does not fit the model", SPMD_ERR_MISMATCH);
    }
    if (t->o.load_model && (st = spmd_model_load(t->model, t->o.load_model, t->err, sizeof t->err)) != SPMD_OK)
        return dp_fail(t, "--load-model", st);
    t->params = spmd_model_params(t->model, &t->nparams);
    t->grads = spmd_model_grads(t->model, NULL);
    t->buffers = spmd_model_buffers(t->model, &t->nbuffers);

    spmd_optim_opts oo = SPMD_OPTIM_OPTS_SGD;
    if (t->o.optimizer == SPMD_OPTIM_ADAM) oo = (spmd_optim_opts)SPMD_OPTIM_OPTS_ADAM;
    if (t->o.optimizer == SPMD_OPTIM_ADAMW) oo = (spmd_optim_opts)SPMD_OPTIM_OPTS_ADAMW;
    oo.lr = t->o.lr_linear ? t->o.lr * (float)t->world : t->o.lr;
    oo.momentum = t->o.momentum;
    oo.weight_decay = t->o.weight_decay;
    /* --elastic --zero: the state lives in shards (elastic_zero.c) */
    int sharded = t->o.elastic && t->o.zero;
    if ((st = spmd_optim_create(&oo, sharded ? 1 : t->nparams, &t->optim)) != SPMD_OK ||
        (sharded && (st = ezero_create(&t->ez, &oo, t->nparams)) != SPMD_OK))
        return dp_fail(t, "cannot create the optimizer", st);

    spmd_sampler_opts so = SPMD_SAMPLER_OPTS_DEFAULT;
    so.dataset_len = train_data_len(&t->train);
    so.num_replicas = t->world;
    so.rank = t->rank;
    so.shuffle = 1;
    so.seed = t->o.seed;
    if ((st = spmd_sampler_init(&so, &t->train_sampler, t->err, sizeof t->err)) != SPMD_OK)
        return dp_fail(t, "train sampler", st);
    so.dataset_len = train_data_len(&t->test);
    so.shuffle = 0;
    if (t->o.eval && (st = spmd_sampler_init(&so, &t->test_sampler, t->err, sizeof t->err)) != SPMD_OK)
        return dp_fail(t, "test sampler", st);

    train_data_shape(&t->train, &c, &h, &w, NULL);
    t->x = malloc(sizeof(float) * (size_t)c * h * w * (size_t)t->o.batch);
    t->y = malloc(sizeof(int) * (size_t)t->o.batch);
    t->dlogits = malloc(sizeof(float) * (size_t)t->o.batch * (size_t)classes);
    if (!t->x || !t->y || !t->dlogits) return dp_fail(t, "batch buffers", SPMD_ERR_NOMEM);

    /* SyncBatchNorm needs other ranks: at world 1 it is plain BatchNorm */
    if (t->o.sync_bn && t->world > 1 &&
        (st = spmd_model_set_syncbn(t->model, spmd_syncbn_group_reduce, t->g)) != SPMD_OK)
        return dp_fail(t, "SyncBatchNorm", st);
    /* every rank starts from rank 0's weights: the reducer broadcasts them at
     * construction (as DDP's constructor does), the plain path by hand */
    if (t->g && t->world > 1 && !t->o.sync_average && !elastic_joining(&t->o)) {
        if ((st = sync_setup_ddp(t)) != SPMD_OK) return dp_fail(t, "DDP reducer", st);
    } else if (t->g && !elastic_joining(&t->o)) {   /* a joiner gets the state in elastic.c */
        if ((st = spmd_broadcast(t->g, t->params, t->nparams, SPMD_F32, 0)) != SPMD_OK ||
            (t->nbuffers && (st = spmd_broadcast(t->g, t->buffers, t->nbuffers, SPMD_F32, 0)) != SPMD_OK)) {
            sync_set_err_group(t);
            return dp_fail(t, "broadcast of the initial parameters", st);
        }
    }
    if (report_open(&t->rep, &t->o, t->rank == 0, t->rank)) return 1;
    if (t->o.async_ckpt && (st = spmd_dcp_saver_new(t->g, &t->saver, t->err, sizeof t->err)) != SPMD_OK)
        return dp_fail(t, "--async-checkpoint", st);
    if (t->o.resume && !elastic_joining(&t->o)) {   /* a joiner takes the state from the running ranks */
        int loaded;
        char dir[4200];
        if ((st = checkpoint_load(t, &loaded, dir, sizeof dir)) != SPMD_OK) return dp_fail(t, "resume", st);
        if (loaded)
            report_say(&t->rep, "resumed from %s: epoch %d, step %ld\n", dir, t->epoch + 1, t->global_step);
        /* resumed from the folder it saves into: that step is saved already */
        if (loaded && t->o.ckpt_dir && strcmp(t->o.ckpt_dir, t->o.resume_dir) == 0) t->saved_step = t->global_step;
        else
            report_say(&t->rep, "no checkpoint in %s yet: starting from scratch\n", t->o.resume_dir);
    }
    return 0;
}

static void say_setup(trainer *t) {
    char limit[48] = "", lr[64];
    if (t->o.steps) snprintf(limit, sizeof limit, ", at most %ld steps", t->o.steps);
    if (t->o.lr_linear && t->world > 1)
        snprintf(lr, sizeof lr, "%g (%g x %d ranks, linear scaling)", (double)(t->o.lr * (float)t->world),
                 (double)t->o.lr, t->world);
    else
        snprintf(lr, sizeof lr, "%g", (double)t->o.lr);
    report_say(&t->rep,
               "spmd-train: %s on %s (%zu parameters), world %d%s%s%s, batch %d per rank, %s lr %s, %d epoch(s)%s\n"
               "BLAS: OpenBLAS %s kernels, %d thread(s) per rank; input: %s\n",
               t->o.model, t->o.dataset, t->nparams, t->world, t->g ? " (backend " : "",
               t->g ? spmd_group_backend(t->g) : "", t->g ? ")" : "", t->o.batch, spmd_optim_name(t->optim), lr,
               t->o.epochs, limit, openblas_get_corename(), openblas_get_num_threads(),
               t->o.prefetch ? "prefetched by a loader thread" : "loaded on the training thread");
    if (t->ddp)
        report_say(&t->rep, "gradient sync: DDP reducer, %d bucket(s) (cap %g MiB), %s, %s, compression %s%s\n",
                   spmd_ddp_num_buckets(t->ddp),
                   t->o.bucket_cap_mb > 0.0f ? (double)t->o.bucket_cap_mb : DEFAULT_BUCKET_CAP_MB,
                   t->o.no_overlap ? "all reduced after backward" : "overlapped with backward",
                   !spmd_ddp_grads_shared(t->ddp) ? "all_reduce"
                   : spmd_ddp_step_shared(t->ddp) && !t->o.compression
                       ? "summed in shared memory, optimizer step sharded"
                       : "summed in shared memory",
                   t->o.compression == SPMD_DDP_COMPRESS_FP16   ? "fp16"
                   : t->o.compression == SPMD_DDP_COMPRESS_BF16 ? "bf16"
                                                                : "none",
                   spmd_model_is_syncbn(t->model) ? ", SyncBatchNorm" : "");
    else if (t->world > 1)
        report_say(&t->rep, "gradient sync: average_gradients (one all_reduce of the whole buffer after backward)%s\n",
                   spmd_model_is_syncbn(t->model) ? ", SyncBatchNorm" : "");
}

/* The epochs: 0, or the exit code of a failure (said). */
static int epochs(trainer *t, double *train_time, double *eval_time, long *samples, double *last_acc) {
    spmd_status st;
    int stopped = t->o.steps && t->global_step >= t->o.steps;
    for (; t->epoch < t->o.epochs && !stopped; t->epoch++) {
        if ((st = spmd_sampler_set_epoch(t->train_sampler, (uint64_t)t->epoch)) != SPMD_OK)
            return dp_fail(t, "sampler", st);
        size_t n = spmd_sampler_num_samples(t->train_sampler), B = (size_t)t->o.batch;
        long per_epoch = (long)((n + B - 1) / B);
        if ((st = check_equal_batches(t, per_epoch - t->step_in_epoch)) != SPMD_OK)
            return dp_fail(t, "uneven inputs", st);
        double mark = report_now(), interval_start = mark;
        batch_source src;
        if ((st = batch_source_open(&src, &t->train, 1, t->o.seed, spmd_sampler_indices(t->train_sampler), n, B,
                                    (size_t)t->step_in_epoch, (uint64_t)t->epoch * (uint64_t)per_epoch,
                                    t->o.prefetch, t->x, t->y, t->err, sizeof t->err)) != SPMD_OK)
            return dp_fail(t, "batches", st);
        const long first_step = t->step_in_epoch;
        double loss_sum = 0.0;
        long interval_steps = 0, interval_samples = 0;
        for (;;) {
            const float *x;
            const int *y;
            size_t bn;
            double t0 = report_now();
            int got = batch_source_next(&src, &x, &y, &bn, t->err, sizeof t->err);
            t->t.data += report_now() - t0;
            if (got < 0) {
                batch_source_close(&src);
                return dp_fail(t, "input", SPMD_ERR_INVALID);
            }
            if (!got) break;
            float loss;
            if ((st = train_one_step(t, x, y, bn, &loss)) != SPMD_OK) {
                batch_source_close(&src);
                return dp_fail(t, "training step", st);
            }
            t->step_in_epoch++;
            t->global_step++;
            loss_sum += loss;
            interval_steps++;
            interval_samples += (long)bn * t->world;
            int last = t->step_in_epoch == per_epoch;
            stopped = t->o.steps && t->global_step >= t->o.steps;
            if (interval_steps == t->o.log_every || last || stopped) {
                double tn = report_now();
                float mean = (float)(loss_sum / interval_steps);
                double sps = interval_samples / (tn - interval_start);
                report_step(&t->rep, t->global_step, t->epoch, mean, sps);
                if (t->rep.tty || last || stopped || t->global_step % (10L * t->o.log_every) == 0) {
                    /* the rest of the run at this epoch's pace so far */
                    long left = per_epoch - t->step_in_epoch + (long)(t->o.epochs - t->epoch - 1) * per_epoch;
                    if (t->o.steps && t->o.steps - t->global_step < left) left = t->o.steps - t->global_step;
                    long done = t->step_in_epoch - first_step;
                    double eta = done > 0 ? (tn - mark) / (double)done * (double)left : -1.0;
                    report_progress(&t->rep, t->epoch, t->o.epochs, t->step_in_epoch, per_epoch, t->global_step,
                                    mean, sps, eta, last || stopped);
                }
                loss_sum = 0.0;
                interval_steps = 0;
                interval_samples = 0;
                interval_start = tn;
            }
            *samples += (long)bn * t->world;
            if (stopped) break;
        }
        batch_source_close(&src);   /* an early stop ends the loader here */
        *train_time += report_now() - mark;
        int finished_epoch = t->step_in_epoch == per_epoch;
        if (t->o.eval && (finished_epoch || stopped)) {
            double acc, e0 = report_now();
            if ((st = train_evaluate(t, &acc)) != SPMD_OK) return dp_fail(t, "evaluation", st);
            *eval_time += report_now() - e0;
            *last_acc = acc;
            report_say(&t->rep, "epoch %d%s: test accuracy %.4f\n", t->epoch + 1, finished_epoch ? "" : " (partial)",
                       acc);
        }
        if (finished_epoch) {
            t->step_in_epoch = 0;
            if (t->o.ckpt_dir) {
                t->epoch++;   /* the checkpoint names the next position */
                st = checkpoint_save(t);
                t->epoch--;
                if (st != SPMD_OK) return dp_fail(t, "checkpoint", st);
                t->saved_step = t->global_step;
            }
        }
        if (stopped && !finished_epoch) break;
    }
    return 0;
}

static int run(trainer *t) {
    spmd_status st;
    double train_time = 0.0, eval_time = 0.0, last_acc = -1.0;
    long samples = 0;   /* all ranks */
    say_setup(t);
    if (t->o.epochs == 0 && t->o.eval) {   /* --epochs 0: evaluate the model as it is */
        double e0 = report_now();
        if ((st = train_evaluate(t, &last_acc)) != SPMD_OK) return dp_fail(t, "evaluation", st);
        eval_time += report_now() - e0;
        report_say(&t->rep, "test accuracy %.4f\n", last_acc);
    }
    int rc = t->o.elastic ? elastic_epochs(t, &train_time, &eval_time, &samples, &last_acc)
                          : epochs(t, &train_time, &eval_time, &samples, &last_acc);
    if (rc) return rc;
    /* the state at the end, unless the last epoch's checkpoint is it already */
    if (t->o.ckpt_dir && t->saved_step != t->global_step) {
        if ((st = checkpoint_save(t)) != SPMD_OK) return dp_fail(t, "checkpoint", st);
        t->saved_step = t->global_step;
    }
    /* --async-checkpoint: the last save is on disk (or failed) before the run ends */
    if (t->saver && (st = spmd_dcp_save_wait(t->saver, t->err, sizeof t->err)) != SPMD_OK)
        return dp_fail(t, "checkpoint (written in the background)", st);
    if (t->rank == 0) {
        double n = t->t.steps ? (double)t->t.steps : 1.0;
        /* training throughput: the steps alone; the evaluation is timed apart */
        printf("spmd-train: %s, world %d: %ld steps, %ld samples in %.2f s: %.0f samples/s (training)", t->o.model,
               t->world, t->t.steps, samples, train_time, train_time > 0 ? samples / train_time : 0.0);
        if (last_acc >= 0) printf(", test accuracy %.4f (evaluation %.2f s)", last_acc, eval_time);
        printf("\n");
        /* data: waiting for the batch (the loader's lag with --prefetch);
         * communication: for DDP the wait inside spmd_ddp_finish (what
         * overlap did not hide), for average_gradients the whole all_reduce */
        printf("time per step: data %.3f ms, forward %.3f ms, backward %.3f ms, communication "
               "%.3f ms, optimizer %.3f ms",
               1e3 * t->t.data / n, 1e3 * t->t.fwd / n, 1e3 * t->t.bwd / n, 1e3 * t->t.comm / n, 1e3 * t->t.opt / n);
        if (t->ddp && t->nbuffers) printf(", buffer broadcast %.3f ms", 1e3 * t->t.prep / n);
        printf("\n");
        /* what the saves cost the training (bench/ckpt_bench.sh's train mode):
         * the call, and with --async-checkpoint the wait for the deferred copy */
        if (t->t.saves && t->t.steps && train_time > 0)
            printf("checkpoint stall: %ld save(s)%s, %.3f ms per save, %.3f %% of a step (%.2f ms)\n", t->t.saves,
                   t->saver ? " in the background" : "", 1e3 * t->t.ckpt / (double)t->t.saves,
                   100.0 * t->t.ckpt / (double)t->t.saves / (train_time / n), 1e3 * train_time / n);
        fflush(stdout);
    }
    if (t->o.check_sync && (st = sync_check(t)) != SPMD_OK) return dp_fail(t, "check-sync", st);
    if (t->o.save_model && t->rank == 0) {
        if ((st = spmd_model_save(t->model, t->o.save_model, t->err, sizeof t->err)) != SPMD_OK)
            return dp_fail(t, "--save-model", st);
        report_say(&t->rep, "model state_dict written to %s\n", t->o.save_model);
    }
    return report_plot(&t->rep, &t->o, t->world) == 0 ? 0 : 1;
}

int train_data_parallel(const options *o) {
    trainer *t = calloc(1, sizeof *t);
    if (!t) return report_fail(-1, "setup", SPMD_ERR_NOMEM, NULL);
    t->o = *o;
    t->saved_step = -1;
    int rc = setup(t);
    if (rc == 0) rc = run(t);
    report_close(&t->rep);
    free(t->x);
    free(t->y);
    free(t->dlogits);
    spmd_sampler_free(t->train_sampler);
    spmd_sampler_free(t->test_sampler);
    spmd_optim_free(t->optim);
    ezero_free(t->ez);
    spmd_ddp_free(t->ddp);
    spmd_dcp_saver_free(t->saver);   /* before the group: it holds a subgroup */
    ckpt_hold_free(&t->hold);
    spmd_model_free(t->model);
    train_data_free(&t->train);
    train_data_free(&t->test);
    spmd_group_destroy(t->g);
    free(t);
    return rc;
}
