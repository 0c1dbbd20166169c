/* spmd_elastic (spmd/elastic.h) around a real training loop: SGD with
 * momentum on 512 parameters over 240 samples dealt by the
 * DistributedSampler, a KEEP buffer changed before each commit, and a
 * per-sample count of how often each sample was trained on (state too).
 *   shrink: 4 ranks, rank 1 SIGKILLs itself as step 5 begins; the others
 *     recover (world 3) and finish every epoch;
 *   two:    ranks 0 and 2 killed at once as step 5 begins (world 2);
 *   grow:   3 ranks train; a new process joins (spmd_group_join, then
 *     spmd_elastic_join_sync) and the members admit it when
 *     spmd_elastic_joiners_waiting says so (at step 12 at the latest);
 *   replace: 3 ranks, rank 1 killed at step 5, the two survivors recover,
 *     then take in a new process (waiting since the start), back to 3;
 *   store host: 4 ranks over a file:// rendezvous, so rank 0 hosts the
 *     store; rank 0 killed at step 5: the survivors recover on the standby;
 *   joiner dies: a joiner is admitted by 3 ranks and SIGKILLs itself before
 *     the state transfer: the members' grow fails, they shrink back to 3 and
 *     go on.
 * Checked on every survivor and joiner: the committed count is the run's
 * (every epoch's steps, whatever the worlds), the replicas (parameters,
 * momentum, buffer, counts) are bit-identical (a hash all-reduced), the
 * reset callback saw the worlds it should, and every sample was trained on
 * once per epoch (at most once more where padding repeated it) — no sample
 * lost or counted twice by a failed step.  Shared memory and TCP. */
#include <signal.h>
#include <string.h>
#include "common/fnv.h"
#include "harness.h"
#include "mp/mp_fork.h"
#include "spmd/data.h"
#include "spmd/elastic.h"
#include "spmd/group.h"

#define NP 512
#define NS 240
#define B 2
#define EPOCHS 3

enum { SHRINK, TWO, GROW, REPLACE, STORE_HOST, JOINER_DIES };
static const char *const case_names[] = {"shrink", "two", "grow", "replace", "store host", "joiner dies"};

typedef struct {
    int how;
    const char *transport;
    char rdv[128]; /* STORE_HOST: the file:// rendezvous (rank 0 hosts the store) */
} tr_case;

typedef struct {
    float params[NP], momentum[NP], buffer[4];
    int32_t seen[NS];
    int64_t pos[2]; /* epoch, samples of the epoch's list consumed */
    spmd_sampler *sampler;
    long deal_steps;
    int resets, last_world;
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
        if (spmd_elastic_commits(e) + 1 == kill_at) raise(SIGKILL);
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
            CREQ(spmd_elastic_recover(e) == SPMD_OK, "recover: %s", spmd_elastic_errmsg(e));
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

static int finish(int idx, spmd_elastic *e, replica *r, int world, int resets) {
    spmd_group *g = spmd_elastic_group(e);
    CREQ(spmd_group_size(g) == world, "ended at world %d, want %d", spmd_group_size(g), world);
    CREQ(r->resets == resets && (!resets || r->last_world == world), "%d resets (last world %d), want %d", r->resets,
         r->last_world, resets);
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

static int has_joiner(int how) { return how == GROW || how == REPLACE || how == JOINER_DIES; }

static int is_victim(int how, int idx) {
    return how == SHRINK || how == REPLACE ? idx == 1
           : how == TWO                    ? idx == 0 || idx == 2
           : how == STORE_HOST             ? idx == 0
           : how == JOINER_DIES            ? idx == 3
                                           : 0;
}

static int rank_main(int idx, void *arg) {
    const tr_case *c = arg;
    setenv("SPMD_TRANSPORT", c->transport, 1);
    setenv("SPMD_HEARTBEAT_TIMEOUT", "0", 1);
    char err[512];
    static replica r;
    spmd_elastic *e = NULL;
    const int members = has_joiner(c->how) ? 3 : 4;
    const int lost = c->how == TWO ? 2 : c->how == GROW || c->how == JOINER_DIES ? 0 : 1;
    const int joins = c->how == GROW || c->how == REPLACE;
    const int world = members - lost + joins;
    if (idx == members) { /* the new process */
        spmd_group *s = NULL;
        CREQ(spmd_group_join(NULL, &s, err, sizeof err) == SPMD_OK, "join: %s", err);
        if (c->how == JOINER_DIES) raise(SIGKILL);
        if (setup(idx, s, &r, &e)) return 1;
        CREQ(spmd_elastic_join_sync(e) == SPMD_OK, "join_sync: %s", spmd_elastic_errmsg(e));
        CREQ(spmd_elastic_commits(e) >= 0 && spmd_elastic_last(e).world_before == 0, "the joiner got %lld steps",
             (long long)spmd_elastic_commits(e));
        if (train(idx, e, &r, -1, 0)) return 1;
        return finish(idx, e, &r, world, 1);
    }
    spmd_group *g = NULL;
    spmd_group_opts opts = SPMD_GROUP_OPTS_DEFAULT;
    char url[160];
    if (c->how == STORE_HOST) {
        snprintf(url, sizeof url, "file://%s", c->rdv);
        opts.init_method = url;
    }
    CREQ(spmd_group_init(&opts, &g, err, sizeof err) == SPMD_OK, "%s", err);
    if (setup(idx, g, &r, &e)) return 1;
    int victim = is_victim(c->how, idx);
    if (train(idx, e, &r, victim ? 5 : -1, c->how == GROW || c->how == JOINER_DIES ? 4 : c->how == REPLACE ? 3 : 0))
        return 1;
    /* a joiner that died in the transfer: one reset, for the group shrunk back */
    return finish(idx, e, &r, world, (lost > 0) + joins + (c->how == JOINER_DIES));
}

int main(void) {
    setenv("SPMD_TIMEOUT", "60s", 1); /* a hang guard, never reached when it works */
    const char *transports[] = {"auto", "tcp"};
    for (int t = 0; t < 2; t++)
        for (int how = SHRINK; how <= JOINER_DIES; how++) {
            tr_case c = {how, transports[t], ""};
            char dir[] = "/tmp/spmd_elastic_train_XXXXXX";
            if (how == STORE_HOST) {
                REQUIRE(mkdtemp(dir) != NULL);
                snprintf(c.rdv, sizeof c.rdv, "%s/rdv", dir);
            }
            int members = has_joiner(how) ? 3 : 4, n = members + has_joiner(how);
            int worlds[5] = {members, members, members, members, members + 1};
            int status[5];
            CHECK(mp_fork_run(n, NULL, members, worlds, rank_main, &c, 120, status) == 0);
            for (int i = 0; i < n; i++) {
                if (is_victim(how, i)) {
                    CHECK_MSG(WIFSIGNALED(status[i]) && WTERMSIG(status[i]) == SIGKILL, "%s %s: %d was not killed",
                              c.transport, case_names[how], i);
                    continue;
                }
                CHECK_MSG(mp_exited_ok(status[i]), "%s, %s: process %d failed (status %#x)", c.transport,
                          case_names[how], i, status[i]);
            }
            if (how == STORE_HOST) {
                unlink(c.rdv);
                rmdir(dir);
            }
        }
    TEST_MAIN_END();
}
