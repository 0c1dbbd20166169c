/* tests/mp/elastic_replica.h — the training loop test_elastic_train and
 * test_elastic_faults run over spmd_elastic: SGD with momentum on NP
 * parameters over NS samples dealt by the DistributedSampler, a KEEP buffer
 * changed before each commit, and a per-sample count of how often each
 * sample was trained on (state too); finish() checks a run's end on every
 * rank (bit-identical replicas, one committed count, every sample seen). */
#ifndef SPMD_TEST_MP_ELASTIC_REPLICA_H
#define SPMD_TEST_MP_ELASTIC_REPLICA_H

#include <signal.h>
#include <string.h>
#include "common/fnv.h"
#include "mp/mp_fork.h"
#include "spmd/data.h"
#include "spmd/elastic.h"
#include "spmd/group.h"

#define NP 512
#define NS 240
#define B 2
#define EPOCHS 3

typedef struct {
    float params[NP], momentum[NP], buffer[4];
    int32_t seen[NS];
    int64_t pos[2]; /* epoch, samples of the epoch's list consumed */
    spmd_sampler *sampler;
    long deal_steps;
    int resets, last_world;
    /* test_elastic_faults: the signal of kill_at (0: SIGKILL; SIGSTOP: the
     * rank stops there, and its recovery once resumed must say it was
     * excluded, then excluded is set and train returns); and a stopped
     * process that the current group's rank 0 resumes (SIGCONT) once wake_at
     * steps are committed (wake_pid 0: none). */
    int kill_sig, excluded;
    pid_t wake_pid;
    int64_t wake_at;
} replica;

static spmd_status on_reset(void *ctx, spmd_group *g, int before, int after) {
    replica *r = ctx;
    r->resets++;
    r->last_world = after;
    (void)before;
    if ((uint64_t)r->pos[0] != spmd_sampler_epoch(r->sampler))
        spmd_sampler_set_epoch(r->sampler, (uint64_t)r->pos[0]);
    r->deal_steps = 0;
    return spmd_sampler_reshard(r->sampler, spmd_group_rank(g), after, (size_t)r->pos[1], NULL, 0);
}

/* Steps the run has whatever the worlds: deals of the rest, in batches of B. */
/* grow_below: take in a joiner once the world is below it (0: never). */
static int train(int idx, spmd_elastic *e, replica *r, int kill_at, int grow_below) {
    float grad[NP + NS]; /* gradient, then the samples' mask */
    while (r->pos[0] < EPOCHS) {
        size_t n = spmd_sampler_num_samples(r->sampler);
        const size_t *ix = spmd_sampler_indices(r->sampler);
        if ((size_t)r->deal_steps * B >= n) { /* the epoch is done */
            r->pos[0]++;
            r->pos[1] = 0;
            r->deal_steps = 0;
            if (r->pos[0] < EPOCHS) CREQ(spmd_sampler_set_epoch(r->sampler, (uint64_t)r->pos[0]) == SPMD_OK, "epoch");
            continue;
        }
        if (spmd_group_size(spmd_elastic_group(e)) < grow_below) {
            int waiting = 0;
            CREQ(spmd_elastic_joiners_waiting(e, &waiting) == SPMD_OK, "%s", spmd_elastic_errmsg(e));
            if (waiting || spmd_elastic_commits(e) >= 12) {
                CREQ(spmd_elastic_grow(e, 1) == SPMD_OK, "grow: %s", spmd_elastic_errmsg(e));
                grow_below = 0;
                continue; /* re-dealt */
            }
        }
        if (spmd_elastic_commits(e) + 1 == kill_at) {
            raise(r->kill_sig ? r->kill_sig : SIGKILL);
            kill_at = -1; /* resumed (SIGSTOP) */
        }
        if (r->wake_pid && spmd_elastic_commits(e) >= r->wake_at) {
            if (spmd_group_rank(spmd_elastic_group(e)) == 0) kill(r->wake_pid, SIGCONT);
            r->wake_pid = 0;
        }
        spmd_elastic_begin_step(e);
        r->buffer[0] += 1.0f; /* changed before the commit: restored if the step fails */
        memset(grad, 0, sizeof grad);
        for (size_t k = (size_t)r->deal_steps * B; k < (size_t)(r->deal_steps + 1) * B && k < n; k++) {
            size_t s = ix[k];
            for (int j = 0; j < NP; j++) grad[j] += r->params[j] - (float)((s * 7 + (size_t)j) % 13);
            grad[NP + s] += 1.0f;
        }
        spmd_group *g = spmd_elastic_group(e);
        if (spmd_all_reduce(g, grad, grad, NP + NS, SPMD_F32, SPMD_SUM) != SPMD_OK) {
            spmd_status st = spmd_elastic_recover(e);
            if (st != SPMD_OK && r->kill_sig == SIGSTOP && kill_at < 0) {
                CREQ(st == SPMD_ERR_REMOTE && strstr(spmd_elastic_errmsg(e), "was excluded from epoch 1"),
                     "the resumed rank's recovery: %s: %s", spmd_status_str(st), spmd_elastic_errmsg(e));
                fprintf(stderr, "child %d (resumed): %s\n", idx, spmd_elastic_errmsg(e));
                r->excluded = 1;
                return 0;
            }
            CREQ(st == SPMD_OK, "recover: %s", spmd_elastic_errmsg(e));
            continue;
        }
        const float scale = 1.0f / (float)(B * spmd_group_size(g));
        for (int j = 0; j < NP; j++) {
            r->momentum[j] = 0.9f * r->momentum[j] + grad[j] * scale;
            r->params[j] -= 0.05f * r->momentum[j];
        }
        for (int s = 0; s < NS; s++) r->seen[s] += (int32_t)grad[NP + s];
        r->deal_steps++;
        r->pos[1] = (int64_t)spmd_sampler_consumed(r->sampler, (size_t)r->deal_steps, B);
        spmd_elastic_commit(e);
    }
    return 0;
}

/* resets_lo..resets_hi: how many worlds the reset callback may have seen
 * (two deaths noticed apart make two recoveries) */
static int finish_within(int idx, spmd_elastic *e, replica *r, int world, int resets_lo, int resets_hi) {
    spmd_group *g = spmd_elastic_group(e);
    CREQ(spmd_group_size(g) == world, "ended at world %d, want %d", spmd_group_size(g), world);
    CREQ(r->resets >= resets_lo && r->resets <= resets_hi && (!r->resets || r->last_world == world),
         "%d resets (last world %d), want %d..%d", r->resets, r->last_world, resets_lo, resets_hi);
    uint64_t h = spmd__fnv1a64_words(SPMD__FNV64_OFFSET, r, offsetof(replica, pos) + sizeof r->pos);
    int64_t v[4] = {(int64_t)h, (int64_t)~h, spmd_elastic_commits(e), -spmd_elastic_commits(e)};
    CREQ(spmd_all_reduce(g, v, v, 4, SPMD_I64, SPMD_MAX) == SPMD_OK, "%s", spmd_group_errmsg(g));
    CREQ((uint64_t)v[0] == ~(uint64_t)v[1], "the replicas differ (here %016llx)", (unsigned long long)h);
    CREQ(v[2] == -v[3], "committed counts differ: %lld..%lld", (long long)-v[3], (long long)v[2]);
    for (int s = 0; s < NS; s++)
        CREQ(r->seen[s] >= EPOCHS && r->seen[s] <= 2 * EPOCHS, "sample %d trained on %d times in %d epochs", s,
             r->seen[s], EPOCHS);
    CREQ(r->buffer[0] == (float)spmd_elastic_commits(e), "buffer %g after %lld commits (a failed step kept)",
         (double)r->buffer[0], (long long)spmd_elastic_commits(e));
    spmd_sampler_free(r->sampler);
    spmd_elastic_free(e);
    spmd_group_destroy(g);
    return 0;
}

static int finish(int idx, spmd_elastic *e, replica *r, int world, int resets) {
    return finish_within(idx, e, r, world, resets, resets);
}

static int setup(int idx, spmd_group *g, replica *r, spmd_elastic **e) {
    char err[256];
    memset(r, 0, sizeof *r);
    for (int j = 0; j < NP; j++) r->params[j] = (float)(j % 5);
    spmd_sampler_opts so = SPMD_SAMPLER_OPTS_DEFAULT;
    so.dataset_len = NS;
    so.num_replicas = spmd_group_size(g);
    so.rank = spmd_group_rank(g);
    so.seed = 11;
    CREQ(spmd_sampler_init(&so, &r->sampler, err, sizeof err) == SPMD_OK, "%s", err);
    CREQ(spmd_elastic_create(g, e, err, sizeof err) == SPMD_OK, "%s", err);
    CREQ(spmd_elastic_add_state(*e, "params", r->params, sizeof r->params, 0) == SPMD_OK, "add");
    CREQ(spmd_elastic_add_state(*e, "momentum", r->momentum, sizeof r->momentum, 0) == SPMD_OK, "add");
    CREQ(spmd_elastic_add_state(*e, "buffer", r->buffer, sizeof r->buffer, SPMD_ELASTIC_KEEP) == SPMD_OK, "add");
    CREQ(spmd_elastic_add_state(*e, "seen", r->seen, sizeof r->seen, 0) == SPMD_OK, "add");
    CREQ(spmd_elastic_add_state(*e, "position", r->pos, sizeof r->pos, 0) == SPMD_OK, "add");
    spmd_elastic_set_reset(*e, on_reset, r);
    return 0;
}

#endif
