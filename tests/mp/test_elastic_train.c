/* spmd_elastic (spmd/elastic.h) around a real training loop: SGD with
 * momentum on 512 parameters over 240 samples dealt by the
 * DistributedSampler, a KEEP buffer changed before each commit, and a
 * per-sample count of how often each sample was trained on (state too).
 *   shrink: 4 ranks, rank 1 SIGKILLs itself as step 5 begins; the others
 *     recover (world 3) and finish every epoch;
 *   two:    ranks 0 and 2 killed as step 5 begins (world 2): one recovery,
 *     or two when the second death comes after the first shrink has
 *     formed (a busy host can hold a victim back that long);
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
#include "harness.h"
#include "mp/elastic_replica.h"

enum { SHRINK, TWO, GROW, REPLACE, STORE_HOST, JOINER_DIES };
static const char *const case_names[] = {"shrink", "two", "grow", "replace", "store host", "joiner dies"};

typedef struct {
    int how;
    const char *transport;
    char rdv[128]; /* STORE_HOST: the file:// rendezvous (rank 0 hosts the store) */
} tr_case;

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
    const int resets = (lost > 0) + joins + (c->how == JOINER_DIES);
    return finish_within(idx, e, &r, world, resets, resets + (c->how == TWO));
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
