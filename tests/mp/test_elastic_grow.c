/* Grow (issue 25, docs/RELIABILITY.md "Recovery in place"): a new process
 * joins a running group of 3 when its ranks call spmd_group_grow and gets
 * rank 3 of 4; rank 0 hands it the "model" (1 MiB) and the step counter over
 * the wire, and the sums of the grown group are exact.  Then the replacement:
 * rank 1 of 3 is SIGKILLed, the survivors shrink to 2 and grow back to 3 with
 * the new process as rank 2.  Shared memory and TCP. */
#include <signal.h>
#include <string.h>
#include "harness.h"
#include "mp/mp_fork.h"
#include "spmd/group.h"

#define MEMBERS 3
#define MODEL (1u << 18) /* floats */

enum { GROW, REPLACE };

typedef struct {
    int how;
    const char *transport;
} gr_case;

/* The grown group: shape, the state from rank 0, exact sums. */
static int check_grown(int idx, spmd_group *s, int world, int epoch, int joiner_rank) {
    CREQ(spmd_group_size(s) == world, "size %d, want %d", spmd_group_size(s), world);
    CREQ(spmd_group_epoch(s) == epoch, "epoch %d, want %d", spmd_group_epoch(s), epoch);
    CREQ(spmd_group_parent_rank(s, joiner_rank) == -1, "the joiner has a parent rank %d",
         spmd_group_parent_rank(s, joiner_rank));
    int me = spmd_group_rank(s);
    float *model = malloc(sizeof(float) * MODEL);
    CREQ(model != NULL, "out of memory");
    int64_t step = me == 0 ? 1234 : 0;
    for (size_t i = 0; i < MODEL; i++) model[i] = me == 0 ? (float)(i % 1000) * 0.5f : -1.0f;
    CREQ(spmd_broadcast(s, &step, 1, SPMD_I64, 0) == SPMD_OK, "%s", spmd_group_errmsg(s));
    CREQ(spmd_broadcast(s, model, MODEL, SPMD_F32, 0) == SPMD_OK, "%s", spmd_group_errmsg(s));
    CREQ(step == 1234, "step %lld", (long long)step);
    for (size_t i = 0; i < MODEL; i++)
        if (model[i] != (float)(i % 1000) * 0.5f) {
            free(model);
            CREQ(0, "model element %zu is wrong", i);
        }
    free(model);
    int64_t v = me + 1;
    CREQ(spmd_all_reduce(s, &v, &v, 1, SPMD_I64, SPMD_SUM) == SPMD_OK, "%s", spmd_group_errmsg(s));
    CREQ(v == (int64_t)world * (world + 1) / 2, "sum %lld", (long long)v);
    return 0;
}

static int rank_main(int idx, void *arg) {
    const gr_case *c = arg;
    setenv("SPMD_TRANSPORT", c->transport, 1);
    setenv("SPMD_HEARTBEAT_TIMEOUT", "0", 1);
    char err[512];
    const int final_world = MEMBERS + (c->how == GROW);
    const int epoch = c->how == GROW ? 1 : 2;
    if (idx == MEMBERS) { /* the new process */
        spmd_group *s = NULL;
        CREQ(spmd_group_join(NULL, &s, err, sizeof err) == SPMD_OK, "join: %s", err);
        CREQ(spmd_group_rank(s) == final_world - 1, "joined as rank %d", spmd_group_rank(s));
        if (check_grown(idx, s, final_world, epoch, final_world - 1)) return 1;
        spmd_group_destroy(s);
        return 0;
    }
    spmd_group *g = NULL;
    CREQ(spmd_group_init(NULL, &g, err, sizeof err) == SPMD_OK, "%s", err);
    CREQ(spmd_barrier(g) == SPMD_OK, "%s", spmd_group_errmsg(g));
    spmd_group *cur = g, *shrunk = NULL;
    if (c->how == REPLACE) {
        float past = 1;
        if (idx == 1) {
            for (int i = 0; i < MEMBERS - 1; i++)
                CREQ(spmd_recv(g, &past, 1, SPMD_F32, SPMD_ANY_SOURCE, 76, NULL) == SPMD_OK, "%s", spmd_group_errmsg(g));
            raise(SIGKILL);
        }
        CREQ(spmd_send(g, &past, 1, SPMD_F32, 1, 76) == SPMD_OK, "%s", spmd_group_errmsg(g));
        CREQ(spmd_barrier(g) == SPMD_ERR_REMOTE, "the barrier did not fail: %s", spmd_group_errmsg(g));
        CREQ(spmd_group_shrink(g, &shrunk, err, sizeof err) == SPMD_OK, "shrink: %s", err);
        CREQ(spmd_group_size(shrunk) == MEMBERS - 1, "shrunk to %d", spmd_group_size(shrunk));
        cur = shrunk;
    }
    spmd_group *s = NULL;
    CREQ(spmd_group_grow(cur, 1, &s, err, sizeof err) == SPMD_OK, "grow: %s", err);
    CREQ(spmd_group_rank(s) == spmd_group_rank(cur), "rank %d became %d", spmd_group_rank(cur), spmd_group_rank(s));
    if (check_grown(idx, s, final_world, epoch, final_world - 1)) return 1;
    spmd_group_destroy(g);
    spmd_group_destroy(shrunk);
    spmd_group_destroy(s);
    return 0;
}

int main(void) {
    setenv("SPMD_TIMEOUT", "60s", 1); /* a hang guard, never reached when it works */
    const char *transports[] = {"auto", "tcp"};
    const int worlds[MEMBERS + 1] = {MEMBERS, MEMBERS, MEMBERS, MEMBERS + 1};
    for (int t = 0; t < 2; t++)
        for (int how = GROW; how <= REPLACE; how++) {
            gr_case c = {how, transports[t]};
            int status[MEMBERS + 1];
            CHECK(mp_fork_run(MEMBERS + 1, NULL, MEMBERS, worlds, rank_main, &c, 90, status) == 0);
            for (int i = 0; i <= MEMBERS; i++) {
                if (how == REPLACE && i == 1) {
                    CHECK_MSG(WIFSIGNALED(status[i]) && WTERMSIG(status[i]) == SIGKILL, "%s: rank 1 was not killed",
                              c.transport);
                    continue;
                }
                CHECK_MSG(mp_exited_ok(status[i]), "%s, %s: process %d failed (status %#x)", c.transport,
                          how == GROW ? "grow" : "replace", i, status[i]);
            }
        }
    TEST_MAIN_END();
}
