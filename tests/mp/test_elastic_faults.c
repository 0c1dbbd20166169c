/* Failures during the recovery itself (issue 25, docs/RELIABILITY.md
 * "Failures during the recovery"), each at an exact point set by
 * SPMD_TEST_DIE_AT, around the training loop of elastic_replica.h:
 *   registered: rank 1 dies as step 5 begins; rank 2 dies in the shrink,
 *     once it has registered as alive;
 *   agreed: the same, rank 2 dying once the survivors' set is decided;
 *   form: rank 0 dies while the survivors form the new group's mesh;
 *   agree: old rank 2 dies in the new group, before the agreement on the
 *     committed step;
 *   source: the rank sending the state (new rank 0) dies after its first
 *     state, the others holding a part of it;
 *   joiner: a joiner admitted by 3 ranks dies after its first state;
 *   member: the member sending the state to a joiner dies after the first
 *     state: the other members and the joiner shrink and go on at world 3;
 *   stopped: rank 2 SIGSTOPs itself as step 5 begins, past the heartbeat
 *     timeout; the others go on at world 3, and their new rank 0 resumes it
 *     (SIGCONT) at step 8: its recovery fails saying it was excluded, and
 *     the others finish undisturbed.
 * Every survivor ends with the run's committed count and bit-identical
 * replicas (a hash all-reduced), every sample trained on in every epoch;
 * the victims died of SIGKILL (the stopped one exits 0 having been told).
 * Shared memory and TCP. */
#include <time.h>
#include "harness.h"
#include "mp/elastic_replica.h"

enum { REGISTERED, AGREED, FORM, AGREE, SOURCE, JOINER, MEMBER, STOPPED, NCASES };
static const char *const case_names[] = {"registered", "agreed", "form", "agree", "source", "joiner", "member", "stopped"};
/* SPMD_TEST_DIE_AT of each case (epoch 1: the first shrink's or grow's) */
static const char *const die_at[] = {"shrink-registered:2@1", "shrink-agreed:2@1", "shrink-form:0@1",
                                     "elastic-agree:1@1",     "elastic-transfer:0@1", "elastic-transfer:3@1",
                                     "elastic-transfer:0@1",  ""};

typedef struct {
    int how;
    const char *transport;
} fa_case;

static int has_joiner(int how) { return how == JOINER || how == MEMBER; }

/* The process killed (stopped) as step 5 begins, and the one the hook kills. */
static int step_victim(int how) { return has_joiner(how) ? -1 : how == FORM ? 3 : how == STOPPED ? 2 : 1; }
static int hook_victim(int how) {
    static const int v[] = {2, 2, 0, 2, 0, 3, 0, -1};
    return v[how];
}

static int rank_main(int idx, void *arg) {
    const fa_case *c = arg;
    setenv("SPMD_TRANSPORT", c->transport, 1);
    /* heartbeats where a rank is stopped (2 s: no false alarm under load) */
    setenv("SPMD_HEARTBEAT_TIMEOUT", c->how == STOPPED ? "2" : "0", 1);
    if (die_at[c->how][0]) setenv("SPMD_TEST_DIE_AT", die_at[c->how], 1);
    char err[512];
    static replica r;
    spmd_elastic *e = NULL;
    if (has_joiner(c->how) && idx == 3) { /* the new process */
        spmd_group *s = NULL;
        CREQ(spmd_group_join(NULL, &s, err, sizeof err) == SPMD_OK, "join: %s", err);
        if (setup(idx, s, &r, &e)) return 1;
        CREQ(spmd_elastic_join_sync(e) == SPMD_OK, "join_sync: %s", spmd_elastic_errmsg(e));
        if (train(idx, e, &r, -1, 0)) return 1;
        return finish(idx, e, &r, 3, 1);
    }
    spmd_group *g = NULL;
    CREQ(spmd_group_init(NULL, &g, err, sizeof err) == SPMD_OK, "%s", err);
    int32_t pid = (int32_t)getpid(), pids[4];
    CREQ(spmd_all_gather(g, &pid, pids, 1, SPMD_I32) == SPMD_OK, "%s", spmd_group_errmsg(g));
    if (setup(idx, g, &r, &e)) return 1;
    if (c->how == STOPPED) {
        r.kill_sig = SIGSTOP;
        if (idx != step_victim(c->how)) {
            r.wake_pid = pids[step_victim(c->how)];
            r.wake_at = 8;
        }
    }
    if (train(idx, e, &r, idx == step_victim(c->how) ? 5 : -1, has_joiner(c->how) ? 4 : 0)) return 1;
    if (c->how == STOPPED && idx == step_victim(c->how)) {
        CREQ(r.excluded, "the stopped rank finished the run");
        spmd_group_destroy(spmd_elastic_group(e));
        spmd_sampler_free(r.sampler);
        spmd_elastic_free(e);
        return 0;
    }
    /* with a joiner: the grow (failed, then the shrink back); else the one
     * recovery, whatever number of attempts it took */
    return finish(idx, e, &r, has_joiner(c->how) ? 3 : c->how == STOPPED ? 3 : 2, 1);
}

int main(void) {
    setenv("SPMD_TIMEOUT", "60s", 1); /* a hang guard, never reached when it works */
    const char *transports[] = {"auto", "tcp"};
    for (int t = 0; t < 2; t++)
        for (int how = 0; how < NCASES; how++) {
            fa_case c = {how, transports[t]};
            int members = has_joiner(how) ? 3 : 4;
            int worlds[4] = {members, members, members, 4};
            int status[4];
            struct timespec t0, t1;
            clock_gettime(CLOCK_MONOTONIC, &t0);
            CHECK(mp_fork_run(4, NULL, members, worlds, rank_main, &c, 120, status) == 0);
            clock_gettime(CLOCK_MONOTONIC, &t1);
            printf("%s, %s: %.2f s\n", c.transport, case_names[how],
                   (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9);
            for (int i = 0; i < 4; i++) {
                if ((i == step_victim(how) && how != STOPPED) || i == hook_victim(how)) {
                    CHECK_MSG(WIFSIGNALED(status[i]) && WTERMSIG(status[i]) == SIGKILL, "%s, %s: %d was not killed (%#x)",
                              c.transport, case_names[how], i, status[i]);
                    continue;
                }
                CHECK_MSG(mp_exited_ok(status[i]), "%s, %s: process %d failed (status %#x)", c.transport,
                          case_names[how], i, status[i]);
            }
        }
    TEST_MAIN_END();
}
