/* parallel.c — the model-parallel trainer: pipeline and tensor parallelism
 * and ZeRO-1 (seed 004; docs/PARALLEL.md).
 *
 * The world is cut into dp x pp x tp (spmd_mesh_create, dp = world / (pp x
 * tp)).  Each data-parallel replica takes its share of the global batch
 * (batch-size per replica); the model is the layer list of --model (with its
 * Linear layers sharded when --tp > 1), cut into --pp stages balanced by
 * parameter count and run with --schedule over --microbatches; gradients are
 * averaged over the data-parallel group, by the ZeRO-1 step with --zero.
 * The rank holding the last stage of replica 0 (tensor rank 0) reports: the
 * per-step breakdown (data, compute = forward + backward, bubble = pipeline
 * idle, step = optimizer + gradient averaging, in ms), samples/s of the
 * training steps, and the evaluation's time apart. */
#include <stdlib.h>
#include <string.h>
#include "ckpt_state.h"
#include "spmd/syncbn.h"
#include "train.h"

typedef struct {
    options o;
    spmd_group *g;
    spmd_mesh mesh;
    spmd_tp *tp;
    spmd_layers *L;
    spmd_pipe *pipe;
    spmd_model *model;   /* owned when !pipe */
    spmd_model *whole;   /* the unsharded model: --tp > 1 (global shapes), --load-model and rank 0's --save-model */
    spmd_optim *optim;
    spmd_zero *zero;
    spmd_dcp_saver *saver;   /* --async-checkpoint */
    ckpt_hold hold;          /* what its deferred save copies from, until staged before the next step */
    uint64_t *slot_rng;      /* --pp > 1: microbatches x 4 words, the slots' dropout RNG (checkpoints) */
    train_data d[2];
    size_t in_size;
    int first, last, reporter, rank;
    /* the position to start from (a resumed checkpoint's) and the last saved */
    int start_epoch;
    long start_step_in_epoch, start_step, saved_step;
    report rep;
    char err[ERRLEN];
} ptrainer;

/* Test accuracy: each replica evaluates its share in whole batches. */
static int evaluate(ptrainer *t, int epoch, long step, float *x, int *y, double *acc) {
    const int B = t->o.batch, dp = t->mesh.dp;
    size_t n = train_data_len(&t->d[1]), batches = n / ((size_t)B * dp);
    double hits[2] = {0, 0};
    size_t *idx = malloc(sizeof(size_t) * (size_t)B);
    float *logits = malloc(sizeof(float) * (size_t)B * 10);   /* the pipeline's output */
    if (!idx || !logits) {
        free(idx), free(logits);
        return report_fail(t->rank, "evaluation", SPMD_ERR_NOMEM, NULL);
    }
    if (t->pipe) spmd_pipe_train(t->pipe, 0);
    else spmd_model_train(t->model, 0);
    int rc = 0;
    for (size_t b = 0; b < batches && !rc; b++) {
        for (int i = 0; i < B; i++) idx[i] = (b * dp + (size_t)t->mesh.d) * B + (size_t)i;
        train_data_fill(&t->d[1], idx, (size_t)B, 0, 0, 0, x, y);
        const float *lg = logits;
        if (t->pipe) {
            if (spmd_pipe_forward(t->pipe, x, B, logits))
                rc = report_fail(t->rank, "evaluation", SPMD_ERR_INVALID, spmd_pipe_errmsg(t->pipe));
        } else {
            spmd_status st = spmd_model_forward(t->model, x, B, &lg);
            if (st) rc = report_fail(t->rank, "evaluation", st, NULL);
        }
        if (!rc && t->last) {
            int c = 0;
            spmd_cross_entropy(NULL, lg, y, B, 10, &c);
            hits[0] += c;
            hits[1] += B;
        }
    }
    free(logits);
    free(idx);
    if (t->pipe) spmd_pipe_train(t->pipe, 1);
    else spmd_model_train(t->model, 1);
    if (rc) return rc;
    if (t->last && dp > 1) spmd_all_reduce(t->mesh.dp_group, hits, hits, 2, SPMD_F64, SPMD_SUM);
    *acc = hits[1] > 0 ? hits[0] / hits[1] : 0;
    report_eval(&t->rep, epoch, step, *acc, (long long)hits[0], (long long)hits[1]);
    return 0;
}

/* This replica's indices of epoch `epoch`, batch after batch: step s takes
 * the (s x dp + d)-th slice of B of one shuffle shared by every rank — the
 * data-parallel trainer's DistributedSampler permutation, so after k steps
 * both trainers have seen the same k x dp x B samples of the epoch (what a
 * resume in another layout relies on). */
static void replica_indices(size_t *mine, size_t *perm, size_t n, size_t steps, size_t B, int dp, int d,
                            uint64_t seed, int epoch) {
    spmd_permutation(n, seed + (uint64_t)epoch, perm);
    for (size_t s = 0; s < steps; s++) memcpy(mine + s * B, perm + (s * (size_t)dp + (size_t)d) * B, B * sizeof *mine);
}

/* ---- checkpoints (the format: ckpt_state.h) ---------------------------------- */

static void par_layout(ptrainer *t, ckpt_layout *L) {
    memset(L, 0, sizeof *L);
    L->model = t->model;
    L->params = spmd_model_params(t->model, NULL);
    L->buffers = spmd_model_buffers(t->model, NULL);
    L->whole = t->o.tp > 1 ? t->whole : NULL;
    L->t = t->mesh.t;
    L->param_groups = t->o.pp == 1;   /* a pipeline stage knows its own parameters only */
    if (t->pipe && t->slot_rng) {     /* every micro-batch slot's dropout stream, as it is now */
        memset(t->slot_rng, 0, sizeof(uint64_t) * 4 * (size_t)t->o.microbatches);
        for (int i = 0; i < spmd_pipe_num_slots(t->pipe) && i < t->o.microbatches; i++)
            memcpy(t->slot_rng + 4 * i, spmd_model_rng(spmd_pipe_slot_model(t->pipe, i))->s, 4 * sizeof(uint64_t));
        L->slot_rng = t->slot_rng;
        L->slot_rows = t->o.microbatches;
    }
    if (t->zero) {
        L->optim = spmd_zero_optim(t->zero);
        spmd_zero_shard(t->zero, &L->state_off, &L->state_count);
    } else {
        L->optim = t->optim;
        spmd_model_params(t->model, &L->state_count);
    }
}

static void par_state(const ptrainer *t, const ckpt_layout *L, int epoch, long step_in_epoch, long step,
                      int64_t *s) {
    memset(s, 0, sizeof(int64_t) * CK_STATE_N);
    s[CK_EPOCH] = epoch;
    s[CK_STEP_IN_EPOCH] = step_in_epoch;
    s[CK_GLOBAL_STEP] = step;
    s[CK_OPTIM_STEPS] = spmd_optim_steps(L->optim);
    s[CK_WORLD] = spmd_group_size(t->g);
    s[CK_REPLICAS] = t->mesh.dp;
    s[CK_BATCH] = t->o.batch;
    s[CK_PP] = t->o.pp;
    s[CK_TP] = t->o.tp;
    s[CK_ZERO] = t->o.zero;
    s[CK_VERSION] = 1;
}

static int par_save(ptrainer *t, int epoch, long step_in_epoch, long step) {
    ckpt_layout L;
    int64_t s[CK_STATE_N];
    char dir[4200];
    par_layout(t, &L);
    par_state(t, &L, epoch, step_in_epoch, step, s);
    spmd_status st = ckpt_save(t->g, t->saver, &t->hold, t->o.ckpt_dir, &L, s, spmd_model_rng(t->model)->s, t->o.model, dir,
                               sizeof dir, t->err, sizeof t->err);
    if (st != SPMD_OK) return report_fail(t->rank, "checkpoint", st, t->err);
    t->saved_step = step;
    return 0;
}

/* --resume: the newest checkpoint, resharded into this layout. */
static int par_resume(ptrainer *t, size_t steps_per_epoch) {
    char dir[4200];
    int found = 0;
    spmd_status st = ckpt_find(t->g, t->o.resume_dir, dir, sizeof dir, &found, t->err, sizeof t->err);
    if (st != SPMD_OK) return report_fail(t->rank, "resume", st, t->err);
    if (!found) {
        report_say(&t->rep, "no checkpoint in %s yet: starting from scratch\n", t->o.resume_dir);
        return 0;
    }
    ckpt_layout L;
    int64_t now[CK_STATE_N], s[CK_STATE_N];
    uint64_t rng[4];
    int rng_ok = 0, exact;
    par_layout(t, &L);
    par_state(t, &L, 0, 0, 0, now);
    st = ckpt_load(t->g, dir, &L, t->o.model, now, t->o.allow_nonfinite, s, rng, &rng_ok, t->err, sizeof t->err);
    if (st != SPMD_OK) return report_fail(t->rank, "resume", st, t->err);
    ckpt_position(s, t->mesh.dp, t->o.batch, (long)steps_per_epoch, &t->start_epoch, &t->start_step_in_epoch, &exact);
    t->start_step = (long)s[CK_GLOBAL_STEP];
    /* the dropout streams: restored where the same rank runs the same part
     * of the same layout (a pipeline stage: every micro-batch slot's, with
     * the same micro-batch count), else fresh ones from the seed, the rank's
     * stream and the step */
    uint64_t stream = (uint64_t)t->mesh.d * (uint64_t)t->o.pp + (uint64_t)t->mesh.p;
    if (!rng_ok && t->pipe) spmd_pipe_seed_dropout(t->pipe, t->o.seed, stream + ((uint64_t)t->start_step << 24));
    else if (!rng_ok) spmd_model_seed_dropout(t->model, t->o.seed, stream + ((uint64_t)t->start_step << 24));
    else if (t->pipe)   /* the words trainer.pipe_rng keeps (slot 0's are trainer.rng's) */
        for (int i = 0; i < spmd_pipe_num_slots(t->pipe) && i < t->o.microbatches; i++)
            memcpy(spmd_model_rng(spmd_pipe_slot_model(t->pipe, i))->s, t->slot_rng + 4 * i, 4 * sizeof(uint64_t));
    else memcpy(spmd_model_rng(t->model)->s, rng, sizeof rng);   /* the words trainer.rng keeps */
    if (strcmp(t->o.resume_dir, t->o.ckpt_dir ? t->o.ckpt_dir : "") == 0) t->saved_step = t->start_step;
    report_say(&t->rep, "resumed from %s: epoch %d, step %ld%s\n", dir, t->start_epoch + 1, t->start_step,
               exact ? "" : " (the saved samples per step do not divide this run's: the position in the epoch "
                            "is rounded down, some samples are seen twice)");
    return 0;
}

/* --load-model with --pp or --tp > 1: every rank reads the whole state_dict
 * (a file of another model or shape is refused naming the tensor) and takes
 * its part; the status is agreed, so no rank trains while another stopped. */
static int par_load_model(ptrainer *t) {
    ckpt_layout L;
    par_layout(t, &L);
    spmd_status st = spmd_model_load(t->whole, t->o.load_model, t->err, sizeof t->err);
    if (st == SPMD_OK) st = ckpt_scatter_model(&L, t->whole, t->err, sizeof t->err);
    int32_t mine = st == SPMD_OK ? INT32_MAX : t->rank, first = mine;
    if (spmd_all_reduce(t->g, &mine, &first, 1, SPMD_I32, SPMD_MIN) != SPMD_OK)
        return report_fail(t->rank, "--load-model", SPMD_ERR_INVALID, spmd_group_errmsg(t->g));
    if (st != SPMD_OK) return report_fail(t->rank, "--load-model", st, t->err);
    if (first != INT32_MAX) {
        snprintf(t->err, sizeof t->err, "rank %d could not load %s (its message says why)", (int)first,
                 t->o.load_model);
        return report_fail(t->rank, "--load-model", SPMD_ERR_MISMATCH, t->err);
    }
    /* the whole model stays only where it is needed further */
    if (t->o.tp == 1 && !(t->o.save_model && t->rank == 0)) {
        spmd_model_free(t->whole);
        t->whole = NULL;
    }
    return 0;
}

/* --save-model with --pp or --tp > 1: the stages and blocks gathered into a
 * whole model on rank 0, which writes it; the status is agreed. */
static int par_save_model(ptrainer *t) {
    ckpt_layout L;
    par_layout(t, &L);
    spmd_status st = ckpt_gather_model(t->g, &L, t->mesh.d == 0, t->rank == 0 ? t->whole : NULL, t->err,
                                       sizeof t->err);
    if (st == SPMD_OK && t->rank == 0) st = spmd_model_save(t->whole, t->o.save_model, t->err, sizeof t->err);
    int32_t code = (int32_t)st;
    if (spmd_broadcast(t->g, &code, 1, SPMD_I32, 0) != SPMD_OK)
        return report_fail(t->rank, "--save-model", SPMD_ERR_INVALID, spmd_group_errmsg(t->g));
    if (code != SPMD_OK)
        return report_fail(t->rank, "--save-model", (spmd_status)code,
                           t->rank == 0 ? t->err : "rank 0 could not write it");
    if (t->rank == 0 && !t->o.quiet)
        printf("model state_dict (gathered from every stage and block) written to %s\n", t->o.save_model);
    return 0;
}

static int train(ptrainer *t) {
    const options *o = &t->o;
    const int B = o->batch, dp = t->mesh.dp;
    size_t ntrain = train_data_len(&t->d[0]);
    size_t steps_per_epoch = ntrain / ((size_t)B * dp);
    if (steps_per_epoch == 0 && o->epochs > 0) {
        fprintf(stderr, "spmd-train: %zu training samples make no global batch of %d x %d\n", ntrain, B, dp);
        return 1;
    }
    if (o->load_model && (o->pp > 1 || o->tp > 1) && par_load_model(t)) return 1;
    if (o->resume && par_resume(t, steps_per_epoch)) return 1;
    size_t np;
    float *params = spmd_model_params(t->model, &np), *grads = spmd_model_grads(t->model, NULL);
    float *x = malloc(sizeof(float) * t->in_size * (size_t)B), *dl = malloc(sizeof(float) * (size_t)B * 10);
    int *y = malloc(sizeof(int) * (size_t)B);
    size_t *perm = malloc(sizeof(size_t) * (ntrain + 1)), *mine = malloc(sizeof(size_t) * (steps_per_epoch * B + 1));
    int rc = 1;
    if (!x || !dl || !y || !perm || !mine) goto out;
    long step = t->start_step;
    double acc = -1, t_data = 0, t_comp = 0, t_bub = 0, t_opt = 0, t_win = report_now();
    double t_warm = 0, bub_all = 0, comp_all = 0, t_eval = 0, t_eval_warm = 0;   /* from step 10 on: the summary */
    long warm_step = -1;
    int win = 0;
    if (o->epochs == 0 && o->eval) {   /* --epochs 0: evaluate the model as it is */
        double e0 = report_now();
        if (evaluate(t, 0, 0, x, y, &acc)) goto out;
        t_eval += report_now() - e0;
        report_say(&t->rep, "test accuracy %.4f\n", acc);
    }
    int end_epoch = t->start_epoch;   /* the position the run ends at */
    long end_step_in_epoch = t->start_step_in_epoch;
    for (int ep = t->start_epoch; ep < o->epochs && (o->steps == 0 || step < o->steps); ep++) {
        replica_indices(mine, perm, ntrain, steps_per_epoch, (size_t)B, dp, t->mesh.d, o->seed, ep);
        size_t s0 = ep == t->start_epoch ? (size_t)t->start_step_in_epoch : 0;
        batch_source src;
        spmd_status st0 = batch_source_open(&src, &t->d[0], 1, o->seed, mine, steps_per_epoch * B, (size_t)B, s0,
                                            (uint64_t)(step - (long)s0), o->prefetch, x, y, t->err, sizeof t->err);
        if (st0) {
            report_fail(t->rank, "batches", st0, t->err);
            goto out;
        }
        size_t s = s0;
        for (; s < steps_per_epoch && (o->steps == 0 || step < o->steps); s++, step++) {
            double t0 = report_now();
            if (step == 10 || (warm_step < 0 && o->steps && o->steps <= 10)) t_warm = t0, warm_step = step;
            const float *bx;
            const int *by;
            size_t bn;
            if (batch_source_next(&src, &bx, &by, &bn, t->err, sizeof t->err) != 1) {
                batch_source_close(&src);
                report_fail(t->rank, "input", SPMD_ERR_INVALID, t->err);
                goto out;
            }
            double t1 = report_now();
            float loss = 0;
            spmd_model_zero_grad(t->model);
            spmd_pipe_stats ps = {0};
            if (t->pipe) {
                if (spmd_pipe_step(t->pipe, bx, by, B, &loss, NULL)) {
                    batch_source_close(&src);
                    report_fail(t->rank, "training step", SPMD_ERR_INVALID, spmd_pipe_errmsg(t->pipe));
                    goto out;
                }
                spmd_pipe_last_stats(t->pipe, &ps);
            } else {
                const float *lg;
                spmd_status st = spmd_model_forward(t->model, bx, B, &lg);
                if (!st) loss = spmd_cross_entropy(dl, lg, by, B, 10, NULL);
                if (!st) st = spmd_model_backward(t->model, dl, NULL, NULL);
                if (st) {
                    batch_source_close(&src);
                    report_fail(t->rank, "training step", st, NULL);
                    goto out;
                }
            }
            double t2 = report_now();
            ckpt_staged(t->saver, &t->hold);   /* a deferred save has copied the state it changes */
            spmd_status st = SPMD_OK;
            if (t->zero) st = spmd_zero_step(t->zero, params, grads);
            else {
                if (dp > 1) st = spmd_all_reduce(t->mesh.dp_group, grads, grads, np, SPMD_F32, SPMD_SUM);
                for (size_t i = 0; dp > 1 && i < np; i++) grads[i] *= 1.0f / (float)dp;
                if (!st) spmd_optim_step(t->optim, params, grads);
            }
            if (st) {
                batch_source_close(&src);
                report_fail(t->rank, "gradient averaging / step", st,
                            t->zero ? spmd_zero_errmsg(t->zero) : spmd_group_errmsg(t->mesh.dp_group));
                goto out;
            }
            double t3 = report_now();
            t_data += t1 - t0;
            t_comp += t->pipe ? ps.compute_s : t2 - t1;
            t_bub += t->pipe ? ps.bubble_s : 0;
            if (warm_step >= 0) {
                bub_all += t->pipe ? ps.bubble_s : 0;
                comp_all += t->pipe ? ps.compute_s : t2 - t1;
            }
            t_opt += t3 - t2;
            win++;
            if (t->last && dp > 1) spmd_all_reduce(t->mesh.dp_group, &loss, &loss, 1, SPMD_F32, SPMD_SUM);
            loss /= (float)dp;
            if ((step + 1) % o->log_every == 0) {
                double el = report_now() - t_win, sps = (double)B * dp * win / el;
                report_step(&t->rep, step + 1, ep, loss, sps);
                report_say(&t->rep,
                           "step %ld  loss %.4f  %.0f samples/s  per step: data %.2f ms  compute %.2f ms  "
                           "bubble %.2f ms  step %.2f ms\n",
                           step + 1, (double)loss, sps, 1e3 * t_data / win, 1e3 * t_comp / win, 1e3 * t_bub / win,
                           1e3 * t_opt / win);
                t_data = t_comp = t_bub = t_opt = 0, win = 0, t_win = report_now();
            }
        }
        batch_source_close(&src);
        end_epoch = s == steps_per_epoch ? ep + 1 : ep;
        end_step_in_epoch = s == steps_per_epoch ? 0 : (long)s;
        if (o->eval) {
            double e0 = report_now();
            if (evaluate(t, ep, step, x, y, &acc)) goto out;
            double e = report_now() - e0;
            t_eval += e;
            if (warm_step >= 0) t_eval_warm += e;
            report_say(&t->rep, "epoch %d  test accuracy %.4f  (evaluation %.2f s)\n", ep + 1, acc, e);
            t_win = report_now();   /* the next window counts training only */
        }
        if (o->ckpt_dir && s == steps_per_epoch && par_save(t, ep + 1, 0, step)) goto out;
    }
    /* the state at the end, unless the last epoch's checkpoint is it already */
    if (o->ckpt_dir && t->saved_step != step && par_save(t, end_epoch, end_step_in_epoch, step)) goto out;
    /* --async-checkpoint: the last save is on disk (or failed) before the run ends */
    if (t->saver) {
        spmd_status sw = spmd_dcp_save_wait(t->saver, t->err, sizeof t->err);
        if (sw != SPMD_OK) {
            report_fail(t->rank, "checkpoint (written in the background)", sw, t->err);
            goto out;
        }
    }
    if (t->reporter) {
        printf("done: %ld steps, dp %d x pp %d x tp %d%s%s", step, t->mesh.dp, t->mesh.pp, t->mesh.tp,
               t->pipe ? (o->schedule == SPMD_SCHEDULE_GPIPE ? ", gpipe" : ", 1f1b") : "", t->zero ? ", zero-1" : "");
        long n = step - warm_step;
        /* training throughput: the evaluations' time is reported apart */
        if (warm_step >= 0 && n > 0)
            printf(": %.0f samples/s (training) from step %ld, last stage per step: compute %.2f ms, bubble %.2f ms",
                   (double)B * dp * n / (report_now() - t_warm - t_eval_warm), warm_step, 1e3 * comp_all / n,
                   1e3 * bub_all / n);
        if (acc >= 0) printf("; test accuracy %.4f, evaluation %.2f s", acc, t_eval);
        printf("\n");
        fflush(stdout);
    }
    rc = 0;
    if (o->save_model && (o->pp > 1 || o->tp > 1)) {
        rc = par_save_model(t);
    } else if (o->save_model && t->reporter) {   /* --pp 1 --tp 1: the whole model on every rank */
        spmd_status st = spmd_model_save(t->model, o->save_model, t->err, sizeof t->err);
        if (st) rc = report_fail(t->rank, "--save-model", st, t->err);
        else report_say(&t->rep, "model state_dict written to %s\n", o->save_model);
    }
    if (!rc && report_plot(&t->rep, o, spmd_group_size(t->g))) rc = 1;
out:
    free(x), free(dl), free(y), free(perm), free(mine);
    return rc;
}

static int build(ptrainer *t) {
    const options *o = &t->o;
    t->d[0].cifar = strcmp(o->dataset, "cifar10") == 0;
    int c = t->d[0].cifar ? 3 : 0, hw = t->d[0].cifar ? 32 : 0;
    if (o->tp > 1) {
        if (spmd_tp_create(t->mesh.tp_group, &t->tp) ||
            spmd_tp_arch(t->tp, o->model, 10, c, hw, hw, &t->L, t->err, sizeof t->err)) return -1;
    } else if (spmd_layers_arch(o->model, 10, c, hw, hw, &t->L, t->err, sizeof t->err)) {
        return -1;
    }
    /* the unsharded model: the global shapes of tensor-parallel blocks, and
     * what rank 0 gathers a sharded model into for --save-model */
    if (o->tp > 1 || (o->load_model && o->pp > 1) || (o->save_model && o->pp > 1 && t->rank == 0)) {
        spmd_layers *W;
        spmd_build_opts bo = {o->model, o->seed, o->dropout, 0, 0};
        if (spmd_layers_arch(o->model, 10, c, hw, hw, &W, t->err, sizeof t->err)) return -1;
        spmd_status st = spmd_model_build(W, &bo, &t->whole, t->err, sizeof t->err);
        spmd_layers_free(W);
        if (st) return -1;
    }
    int ic, ih, iw;
    spmd_layers_shape(t->L, -1, &ic, &ih, &iw, NULL);
    t->in_size = (size_t)ic * ih * iw;
    if (o->pp > 1) {
        spmd_pipe_opts po = {o->schedule, o->microbatches, NULL, o->seed, o->dropout};
        if (spmd_pipe_create(t->mesh.pp_group, t->L, &po, &t->pipe, t->err, sizeof t->err)) return -1;
        t->model = spmd_pipe_model(t->pipe);
        if (!(t->slot_rng = calloc((size_t)o->microbatches * 4, sizeof(uint64_t)))) {
            snprintf(t->err, sizeof t->err, "out of memory");
            return -1;
        }
    } else {
        spmd_build_opts bo = {o->model, o->seed, o->dropout, 0, 0};
        if (spmd_model_build(t->L, &bo, &t->model, t->err, sizeof t->err)) return -1;
        if (o->load_model && o->tp == 1 && spmd_model_load(t->model, o->load_model, t->err, sizeof t->err))
            return -1;   /* --zero alone: the whole model here (with --tp > 1: par_load_model) */
    }
    /* --sync-bn: a stage's (or the whole model's) BatchNorm layers reduce over
     * its data-parallel replicas, which run the same schedule; the models
     * --tp supports have none, as in the data-parallel trainer a no-op */
    if (o->sync_bn && t->mesh.dp > 1 &&
        (t->pipe ? spmd_pipe_set_syncbn(t->pipe, spmd_syncbn_group_reduce, t->mesh.dp_group)
                 : spmd_model_set_syncbn(t->model, spmd_syncbn_group_reduce, t->mesh.dp_group))) {
        snprintf(t->err, sizeof t->err, "cannot make the BatchNorm layers SyncBatchNorm");
        return -1;
    }
    /* the ranks of a tensor-parallel group share the dropout stream: the
     * activations before a column-parallel layer are replicated and must be
     * masked alike (the masks after it then repeat per shard) */
    uint64_t stream = (uint64_t)t->mesh.d * (uint64_t)o->pp + (uint64_t)t->mesh.p;
    if (t->pipe) spmd_pipe_seed_dropout(t->pipe, o->seed, stream);
    else spmd_model_seed_dropout(t->model, o->seed, stream);
    return 0;
}

static int setup(ptrainer *t) {
    const options *o = &t->o;
    spmd_nn_set_threads(o->threads > 0 ? o->threads : spmd_nn_default_threads());
    if (spmd_group_init(NULL, &t->g, t->err, sizeof t->err))
        return report_fail(report_env_rank(), "cannot join the group", SPMD_ERR_INVALID, t->err);
    int world = spmd_group_size(t->g);
    t->rank = spmd_group_rank(t->g);
    if (world % (o->pp * o->tp) != 0) {
        fprintf(stderr, "spmd-train: the world of %d ranks is not divisible by --pp %d x --tp %d\n", world, o->pp, o->tp);
        return 1;
    }
    if (spmd_mesh_create(t->g, world / (o->pp * o->tp), o->pp, o->tp, &t->mesh, t->err, sizeof t->err) || build(t))
        return report_fail(t->rank, "setup", SPMD_ERR_INVALID, t->err);
    t->first = t->mesh.p == 0;
    t->last = t->mesh.p == o->pp - 1;
    t->reporter = t->last && t->mesh.d == 0 && t->mesh.t == 0;
    spmd_optim_opts oo = SPMD_OPTIM_OPTS_SGD;
    if (o->optimizer == SPMD_OPTIM_ADAM) oo = (spmd_optim_opts)SPMD_OPTIM_OPTS_ADAM;
    if (o->optimizer == SPMD_OPTIM_ADAMW) oo = (spmd_optim_opts)SPMD_OPTIM_OPTS_ADAMW;
    /* linear scaling: by the replicas, whose batches make the global one */
    oo.lr = o->lr_linear ? o->lr * (float)t->mesh.dp : o->lr;
    if (o->optimizer == SPMD_OPTIM_SGD) oo.momentum = o->momentum;
    oo.weight_decay = o->weight_decay;
    size_t np;
    spmd_model_params(t->model, &np);
    if (o->zero ? spmd_zero_create(t->mesh.dp_group, &oo, np, 1, &t->zero, t->err, sizeof t->err)
                : spmd_optim_create(&oo, np, &t->optim)) {
        if (!t->err[0]) snprintf(t->err, sizeof t->err, "invalid optimizer options");
        return report_fail(t->rank, "optimizer", SPMD_ERR_INVALID, t->err);
    }
    spmd_status st = train_data_load(o, SPMD_SPLIT_TRAIN, &t->d[0], t->err, sizeof t->err);
    if (!st && o->eval) st = train_data_load(o, SPMD_SPLIT_TEST, &t->d[1], t->err, sizeof t->err);
    if (st) return report_fail(t->rank, t->d[0].cifar ? "cannot load CIFAR-10" : "cannot load Fashion-MNIST", st, t->err);
    if (o->train_samples) train_data_truncate(&t->d[0], (size_t)o->train_samples);
    if (o->test_samples) train_data_truncate(&t->d[1], (size_t)o->test_samples);
    if (report_open(&t->rep, o, t->reporter, t->rank)) return 1;
    if (o->async_ckpt && (st = spmd_dcp_saver_new(t->g, &t->saver, t->err, sizeof t->err)) != SPMD_OK)
        return report_fail(t->rank, "--async-checkpoint", st, t->err);
    report_say(&t->rep, "spmd-train: %s on %s, world %d = dp %d x pp %d x tp %d, batch %d per replica%s, lr %g%s\n",
               o->model, o->dataset, world, t->mesh.dp, o->pp, o->tp, o->batch, o->zero ? ", ZeRO-1" : "",
               (double)oo.lr, o->prefetch ? ", input prefetched" : "");
    return 0;
}

int train_model_parallel(const options *o) {
    ptrainer *t = calloc(1, sizeof *t);
    if (!t) return report_fail(-1, "setup", SPMD_ERR_NOMEM, NULL);
    t->o = *o;
    t->saved_step = -1;
    int rc = setup(t);
    if (rc == 0) rc = train(t);
    report_close(&t->rep);
    spmd_zero_free(t->zero);
    spmd_dcp_saver_free(t->saver);   /* before the group: it holds a subgroup */
    ckpt_hold_free(&t->hold);
    spmd_optim_free(t->optim);
    if (t->pipe) spmd_pipe_free(t->pipe);
    else spmd_model_free(t->model);
    free(t->slot_rng);
    spmd_model_free(t->whole);
    spmd_layers_free(t->L);
    spmd_tp_free(t->tp);
    train_data_free(&t->d[0]);
    train_data_free(&t->d[1]);
    spmd_mesh_destroy(&t->mesh);
    spmd_group_destroy(t->g);
    free(t);
    return rc;
}
