/* elastic.c — spmd-train --elastic: the data-parallel trainer over
 * spmd/elastic.h, so a lost rank costs at most one step and no restart
 * (docs/RELIABILITY.md, "Training on top"; docs/TRAINING.md).
 *
 * The replica's state registered with spmd_elastic: the parameters, the
 * optimizer state, the BatchNorm buffers (kept: forward changes them before
 * the step commits) and the position {epoch, samples of the epoch's list
 * consumed, global step, optimizer steps}.  A step commits when its
 * gradient sync returned SPMD_OK (the update is then applied); any failed
 * call on the group sends every survivor into spmd_elastic_recover, whose
 * reset callback (on_reset) rebinds the trainer to the new group: the DDP
 * reducer rebuilt over it, the sampler's rest of the epoch re-dealt over the
 * new world (spmd_sampler_reshard), the test set's deal, the learning rate
 * (--lr-scaling linear), the reporter (the new rank 0).
 *
 * Joiners.  At each step boundary the members ask whether processes wait to
 * join (spmd_elastic_joiners_waiting: one store read on rank 0 and a 4-byte
 * broadcast) and admit them (spmd_elastic_grow): a joiner — spmd-train
 * --elastic started with SPMD_JOIN=1, as spmdrun --on-failure replace does —
 * calls spmd_group_join instead of forming the group, builds nothing bound
 * to it, and receives the whole state from the members
 * (spmd_elastic_join_sync); the next step runs at the larger world.
 *
 * SPMD_TRAIN_KILL=R:S[,R:S...] (a demonstration and the tests): the process
 * that started as rank R SIGKILLs itself when global step S begins (R:S:gather:
 * with --zero, before that step's parameter all_gather). */
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "dp.h"
#include "spmd/elastic.h"
#include "spmd/syncbn.h"

enum { POS_EPOCH, POS_CONSUMED, POS_STEP, POS_OPTIM_STEPS, POS_N };

typedef struct {
    trainer *t;
    spmd_elastic *e;
    int64_t pos[POS_N];
    long deal_steps; /* steps done on the sampler's current deal */
    int first_rank;  /* the rank this process started as (SPMD_TRAIN_KILL) */
} elastic_run;

/* Wall-clock seconds: comparable between processes (bench/elastic_bench.sh
 * subtracts the kill's from the recovery's). */
static double wall_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Does SPMD_TRAIN_KILL name this process and this step?  1: as the step
 * begins ("R:S"); 2: with --zero, before the step's parameter all_gather
 * ("R:S:gather", after the gradients' all_reduce and the shards' update). */
static int kill_now(const elastic_run *r, long step) {
    const char *s = getenv("SPMD_TRAIN_KILL");
    while (s && *s) {
        char *end;
        long rank = strtol(s, &end, 10), at = -1;
        if (*end == ':') at = strtol(end + 1, &end, 10);
        int gather = !strncmp(end, ":gather", 7);
        if (gather) end += 7;
        if (rank == r->first_rank && at == step) return 1 + gather;
        s = *end == ',' ? end + 1 : NULL;
    }
    return 0;
}

/* The reset callback: everything bound to the old group or world follows g. */
static spmd_status on_reset(void *ctx, spmd_group *g, int world_before, int world_after) {
    elastic_run *r = ctx;
    trainer *t = r->t;
    spmd_status st;
    spmd_ddp_free(t->ddp); /* before the old group goes */
    t->ddp = NULL;
    t->g = g;
    t->rank = spmd_group_rank(g);
    t->world = world_after;
    t->rep.reporter = t->rank == 0;
    if (t->o.sync_bn &&
        (st = spmd_model_set_syncbn(t->model, world_after > 1 ? spmd_syncbn_group_reduce : NULL,
                                    world_after > 1 ? g : NULL)) != SPMD_OK) {
        snprintf(t->err, sizeof t->err, "SyncBatchNorm on the new group");
        return st;
    }
    if (world_after > 1 && !t->o.sync_average && (st = sync_setup_ddp(t)) != SPMD_OK) return st;
    spmd_optim_set_steps(t->optim, r->pos[POS_OPTIM_STEPS]);
    float lr = t->o.lr_linear ? t->o.lr * (float)world_after : t->o.lr;
    if (t->o.lr_linear) spmd_optim_set_lr(t->optim, lr);
    /* --zero: the shards of the agreed step re-dealt over the new world */
    if (t->ez && (st = ezero_reset(t, spmd_elastic_commits(r->e), r->pos[POS_OPTIM_STEPS], lr)) != SPMD_OK)
        return st;
    t->epoch = (int)r->pos[POS_EPOCH];
    t->global_step = r->pos[POS_STEP];
    if ((uint64_t)t->epoch != spmd_sampler_epoch(t->train_sampler) &&
        (st = spmd_sampler_set_epoch(t->train_sampler, (uint64_t)t->epoch)) != SPMD_OK)
        return st;
    if ((st = spmd_sampler_reshard(t->train_sampler, t->rank, world_after, (size_t)r->pos[POS_CONSUMED], t->err,
                                   sizeof t->err)) != SPMD_OK)
        return st;
    r->deal_steps = 0;
    if (t->test_sampler) {
        spmd_sampler_opts so = SPMD_SAMPLER_OPTS_DEFAULT;
        so.dataset_len = train_data_len(&t->test);
        so.num_replicas = world_after;
        so.rank = t->rank;
        so.shuffle = 0;
        spmd_sampler_free(t->test_sampler);
        t->test_sampler = NULL;
        if ((st = spmd_sampler_init(&so, &t->test_sampler, t->err, sizeof t->err)) != SPMD_OK) return st;
    }
    (void)world_before;
    return SPMD_OK;
}

/* A failed recovery's message into t->err, with the reset callback's
 * (on_reset's own words, in t->err) when it failed. */
static void say_elastic_error(elastic_run *r) {
    char cb[sizeof r->t->err];
    snprintf(cb, sizeof cb, "%s", r->t->err);
    snprintf(r->t->err, sizeof r->t->err, "%s%s%.300s", spmd_elastic_errmsg(r->e), cb[0] ? ": " : "", cb);
}

/* After a failed call: the survivors agree and go on.  0, or the exit code. */
static int recover(elastic_run *r, const char *what) {
    trainer *t = r->t;
    int failed[16], nf = spmd_group_failed_ranks(t->g, failed, 16);
    char names[128] = "";
    for (int i = 0, o = 0; i < nf && i < 16 && o < (int)sizeof names - 8; i++)
        o += snprintf(names + o, sizeof names - (size_t)o, "%s%d", i ? ", " : "", failed[i]);
    long step = t->global_step;
    t->err[0] = '\0'; /* what the reset callback may say */
    if (spmd_elastic_recover(r->e) != SPMD_OK) {
        say_elastic_error(r);
        int rc = dp_fail(t, "elastic recovery", SPMD_ERR_REMOTE);
        /* left out by the others (stopped past the heartbeat timeout, then
         * resumed): a lost worker to spmdrun, not the job's failure */
        return spmd_group_was_excluded(spmd_elastic_group(r->e)) ? SPMD_EXIT_EXCLUDED : rc;
    }
    spmd_elastic_info in = spmd_elastic_last(r->e);
    report_say(&t->rep,
               "elastic: %s failed at step %ld (rank(s) %s gone): world %d -> %d (epoch %d) in %.3f s, "
               "the step in flight %s; going on from step %ld at %.6f\n",
               what, step + 1, nf ? names : "?", in.world_before, in.world_after, in.epoch, in.seconds,
               in.steps_lost ? "redone" : "committed everywhere", t->global_step + 1, wall_now());
    return 0;
}

/* One line of the step log: the mean loss of the steps up to STEP. */
static void log_step(trainer *t, long step, int epoch, int world, double mean_loss) {
    report_step(&t->rep, step, epoch, (float)mean_loss, 0.0);
    report_say(&t->rep, "epoch %d step %ld: loss %.4f (world %d)\n", epoch + 1, step, mean_loss, world);
}

/* After a recovery, so that the log names every global step once: the steps
 * of a --log-every interval this rank ran but had not logged yet, and the
 * step in flight when the others committed it although it failed here (a
 * lost rank reached some survivors' reduction but not this one's).  LOSS is
 * this rank's loss of that step, NAN when it failed before the forward pass
 * ended. */
static void log_after_recovery(trainer *t, long before, int epoch, int world, double loss_sum, long interval,
                               float loss) {
    int committed = t->global_step > before;
    if (committed && !isnan(loss)) {
        loss_sum += loss;
        interval++;
    }
    if (!interval && !committed) return;
    long step = committed ? t->global_step : before;
    if (!interval) {
        report_say(&t->rep, "epoch %d step %ld: loss not known here (world %d)\n", epoch + 1, step, world);
        return;
    }
    log_step(t, step, epoch, world, loss_sum / interval);
}

/* Admit n waiting processes at this step boundary.  0, or the exit code. */
static int grow(elastic_run *r, int n) {
    trainer *t = r->t;
    t->err[0] = '\0';
    if (spmd_elastic_grow(r->e, n) != SPMD_OK) {
        say_elastic_error(r);
        return dp_fail(t, "elastic grow", SPMD_ERR_REMOTE);
    }
    spmd_elastic_info in = spmd_elastic_last(r->e);
    report_say(&t->rep, "elastic: %d process(es) joined after step %ld: world %d -> %d (epoch %d) in %.3f s\n", n,
               t->global_step, in.world_before, in.world_after, in.epoch, in.seconds);
    return 0;
}

/* Under spmdrun --on-failure replace (SPMD_ON_FAILURE=replace) a new process
 * is starting for each one lost: take them in now, so the world is whole
 * again whatever their start-up costs (a polled joiner could come after the
 * run's end).  0, or the exit code. */
static int await_replacements(elastic_run *r) {
    const char *of = getenv("SPMD_ON_FAILURE");
    spmd_elastic_info in = spmd_elastic_last(r->e);
    int lost = in.world_before - in.world_after;
    if (!of || strcmp(of, "replace") != 0 || lost <= 0) return 0;
    report_say(&r->t->rep, "elastic: waiting for %d replacement(s) (--on-failure replace)\n", lost);
    return grow(r, lost);
}

/* A failure of the group (to recover from) rather than of this rank. */
static int group_failed(trainer *t, spmd_status st) {
    return t->g && (st == SPMD_ERR_REMOTE || st == SPMD_ERR_ABORTED || spmd_group_failed_ranks(t->g, NULL, 0) > 0);
}

static int register_state(elastic_run *r) {
    trainer *t = r->t;
    size_t ns = 0;
    float *os = spmd_optim_state(t->optim, &ns);
    spmd_status st = spmd_elastic_create(t->g, &r->e, t->err, sizeof t->err);
    /* --zero: the parameters' all_gather comes before the commit and may
     * break half-way: they are restored like the buffers */
    if (!st) st = spmd_elastic_add_state(r->e, "params", t->params, t->nparams * sizeof(float),
                                         t->ez ? SPMD_ELASTIC_KEEP : 0);
    if (!st) st = spmd_elastic_add_state(r->e, "optimizer", os, ns * sizeof(float), 0);
    if (!st) st = spmd_elastic_add_state(r->e, "buffers", t->buffers, t->nbuffers * sizeof(float), SPMD_ELASTIC_KEEP);
    if (!st) st = spmd_elastic_add_state(r->e, "position", r->pos, sizeof r->pos, 0);
    if (st && r->e) snprintf(t->err, sizeof t->err, "%s", spmd_elastic_errmsg(r->e));
    if (st) return dp_fail(t, "elastic setup", st);
    spmd_elastic_set_reset(r->e, on_reset, r);
    return 0;
}

/* One epoch's steps from the sampler's current deal.  0, or the exit code. */
static int epoch_steps(elastic_run *r, double *train_time, long *samples, int *stopped) {
    trainer *t = r->t;
    const size_t B = (size_t)t->o.batch;
    int rc;
    for (;;) { /* once per deal: a recovery re-deals the rest of the epoch */
        size_t n = spmd_sampler_num_samples(t->train_sampler);
        long per_deal = (long)((n + B - 1) / B);
        double mark = report_now();
        batch_source src;
        spmd_status st = batch_source_open(&src, &t->train, 1, t->o.seed, spmd_sampler_indices(t->train_sampler),
                                           n, B, (size_t)r->deal_steps,
                                           (uint64_t)t->epoch * 1000003u + (uint64_t)r->pos[POS_CONSUMED],
                                           t->o.prefetch, t->x, t->y, t->err, sizeof t->err);
        if (st != SPMD_OK) return dp_fail(t, "batches", st);
        double loss_sum = 0.0;
        long interval = 0;
        int failed = 0, joiners = 0;
        float loss = NAN; /* the step in flight's, for log_after_recovery */
        for (;;) {
            const float *x;
            const int *y;
            size_t bn;
            loss = NAN;
            if ((st = spmd_elastic_joiners_waiting(r->e, &joiners)) != SPMD_OK) {
                failed = 1;   /* a broadcast on the group: it failed */
                break;
            }
            if (joiners) break;
            int got = batch_source_next(&src, &x, &y, &bn, t->err, sizeof t->err);
            if (got < 0) {
                batch_source_close(&src);
                return dp_fail(t, "input", SPMD_ERR_INVALID);
            }
            if (!got) break;
            int kill = kill_now(r, t->global_step + 1);
            if (kill == 2 && t->ez) ezero_die_before_gather(t->ez);
            if (kill == 1) {
                fprintf(stderr, "spmd-train: rank %d SIGKILLs itself as step %ld begins (SPMD_TRAIN_KILL) at %.6f\n",
                        t->rank, t->global_step + 1, wall_now());
                raise(SIGKILL);
            }
            spmd_elastic_begin_step(r->e);
            if (t->ez) ezero_begin_step(t->ez);
            if ((st = train_one_step(t, x, y, bn, &loss)) != SPMD_OK) {
                if (!group_failed(t, st)) {
                    batch_source_close(&src);
                    return dp_fail(t, "training step", st);
                }
                failed = 1;
                break;
            }
            /* committed: the position follows, then the count */
            r->deal_steps++;
            t->step_in_epoch++;
            t->global_step++;
            r->pos[POS_STEP] = t->global_step;
            r->pos[POS_OPTIM_STEPS] = spmd_optim_steps(t->optim);
            r->pos[POS_CONSUMED] = (int64_t)spmd_sampler_consumed(t->train_sampler, (size_t)r->deal_steps, B);
            spmd_elastic_commit(r->e);
            if (t->ez) ezero_commit(t->ez);
            *samples += (long)bn * t->world;
            loss_sum += loss;
            *stopped = t->o.steps && t->global_step >= t->o.steps;
            int last = r->deal_steps == per_deal;
            if (++interval == t->o.log_every || last || *stopped) {
                log_step(t, t->global_step, t->epoch, t->world, loss_sum / interval);
                loss_sum = 0.0;
                interval = 0;
            }
            if (*stopped) break;
        }
        batch_source_close(&src); /* before a re-deal frees its indices */
        *train_time += report_now() - mark;
        if (joiners && !failed) {
            if ((rc = grow(r, joiners))) return rc;
            continue;
        }
        if (!failed) return 0;
        long before = t->global_step;
        int epoch = t->epoch, world = t->world;
        if ((rc = recover(r, "training step"))) return rc;
        log_after_recovery(t, before, epoch, world, loss_sum, interval, loss);
        if ((rc = await_replacements(r))) return rc;
        if (*stopped) return 0;
    }
}

int elastic_epochs(trainer *t, double *train_time, double *eval_time, long *samples, double *last_acc) {
    elastic_run r;
    memset(&r, 0, sizeof r);
    r.t = t;
    r.first_rank = elastic_joining(&t->o) ? -1 : t->rank;
    if (!t->g) return report_fail(t->rank, "--elastic", SPMD_ERR_INVALID, "needs a launcher (spmdrun)");
    int rc = register_state(&r);
    /* a member holds its shards from the start; a joiner gets them at its reset */
    if (!rc && t->ez && !elastic_joining(&t->o) && ezero_start(t->ez, t->rank, t->world) != SPMD_OK)
        rc = dp_fail(t, "ZeRO-1 shards", SPMD_ERR_NOMEM);
    if (!rc && elastic_joining(&t->o)) {
        if (spmd_elastic_join_sync(r.e) != SPMD_OK) {
            snprintf(t->err, sizeof t->err, "%s", spmd_elastic_errmsg(r.e));
            rc = dp_fail(t, "joining", SPMD_ERR_REMOTE);
        } else {
            fprintf(stderr, "spmd-train: joined as rank %d of %d after step %ld (epoch %d) at %.6f\n", t->rank,
                    t->world, t->global_step, t->epoch + 1, wall_now());
        }
    }
    int stopped = t->o.steps && t->global_step >= t->o.steps;
    for (; !rc && t->epoch < t->o.epochs && !stopped;) {
        spmd_status st;
        if (r.pos[POS_CONSUMED] == 0 && r.deal_steps == 0 &&
            (st = spmd_sampler_set_epoch(t->train_sampler, (uint64_t)t->epoch)) != SPMD_OK) {
            rc = dp_fail(t, "sampler", st);
            break;
        }
        r.pos[POS_EPOCH] = t->epoch;
        if ((rc = epoch_steps(&r, train_time, samples, &stopped))) break;
        while (t->o.eval) { /* the evaluation's reduction can fail too: recover, evaluate again */
            double acc, e0 = report_now();
            if ((st = train_evaluate(t, &acc)) == SPMD_OK) {
                *eval_time += report_now() - e0;
                *last_acc = acc;
                report_say(&t->rep, "epoch %d%s: test accuracy %.4f (world %d)\n", t->epoch + 1,
                           stopped ? " (partial)" : "", acc, t->world);
                break;
            }
            if (!group_failed(t, st)) {
                rc = dp_fail(t, "evaluation", st);
                break;
            }
            if ((rc = recover(&r, "evaluation")) || (rc = await_replacements(&r))) break;
        }
        if (rc || stopped) break;
        /* the next epoch: dealt whole over the current world */
        t->epoch++;
        t->step_in_epoch = 0;
        r.deal_steps = 0;
        r.pos[POS_CONSUMED] = 0;
        r.pos[POS_EPOCH] = t->epoch;
    }
    spmd_elastic_free(r.e); /* t->g is the current group */
    return rc;
}
