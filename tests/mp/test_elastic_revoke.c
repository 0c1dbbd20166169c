/* Revoke (issue 25, docs/RELIABILITY.md "Recovery in place"): at world 4, a
 * rank SIGKILLs itself while the others go into an all_reduce (small, and
 * 4 MiB: cross-memory copies on shared memory), a receive nobody sends or a
 * barrier, over shared memory and over TCP; or it revokes the group on
 * purpose (spmd_group_abort).  Every survivor's call fails naming it, its
 * spmd_group_failed_ranks lists it, and a later call fails at once with the
 * same cause.  Every rank is the victim in some case. */
#include <signal.h>
#include <string.h>
#include "harness.h"
#include "mp/mp_fork.h"
#include "spmd/group.h"

#define WORLD 4
#define BIG (1u << 20) /* floats: 4 MiB */

enum { OP_ALLREDUCE, OP_ALLREDUCE_BIG, OP_RECV, OP_BARRIER, OP_COUNT };
static const char *const op_names[] = {"all_reduce", "all_reduce 4 MiB", "recv", "barrier"};

typedef struct {
    int op, victim, revoke;
    const char *transport;
} rv_case;

static spmd_status run_op(spmd_group *g, int op, float *buf) {
    switch (op) {
    case OP_ALLREDUCE: return spmd_all_reduce(g, buf, buf, 1, SPMD_F32, SPMD_SUM);
    case OP_ALLREDUCE_BIG: return spmd_all_reduce(g, buf, buf, BIG, SPMD_F32, SPMD_SUM);
    case OP_RECV: return spmd_recv(g, buf, 1, SPMD_F32, SPMD_ANY_SOURCE, 77, NULL);
    default: return spmd_barrier(g);
    }
}

static int rank_main(int idx, void *arg) {
    const rv_case *c = arg;
    setenv("SPMD_TRANSPORT", c->transport, 1);
    spmd_group *g = NULL;
    char err[512];
    CREQ(spmd_group_init(NULL, &g, err, sizeof err) == SPMD_OK, "%s", err);
    float *buf = calloc(BIG, sizeof *buf);
    CREQ(buf != NULL, "out of memory");
    /* nobody dies before this barrier is done everywhere */
    CREQ(spmd_group_failed_ranks(g, NULL, 0) == 0, "failures before any");
    CREQ(spmd_barrier(g) == SPMD_OK, "%s", spmd_group_errmsg(g));
    /* The victim acts once every other rank is past the barrier (it tells
     * so): a death right after the barrier could otherwise fail a barrier
     * whose last bytes were still unread. */
    float past = 1;
    if (idx == c->victim) {
        for (int i = 0; i < WORLD - 1; i++)
            CREQ(spmd_recv(g, &past, 1, SPMD_F32, SPMD_ANY_SOURCE, 76, NULL) == SPMD_OK, "%s", spmd_group_errmsg(g));
        if (!c->revoke) raise(SIGKILL);
        spmd_group_abort(g, "revoked by the test");
        CREQ(spmd_barrier(g) == SPMD_ERR_ABORTED, "a call after revoke did not fail");
        spmd_group_destroy(g);
        free(buf);
        return 0;
    }
    CREQ(spmd_send(g, &past, 1, SPMD_F32, c->victim, 76) == SPMD_OK, "%s", spmd_group_errmsg(g));
    spmd_status st = run_op(g, c->op, buf);
    char msg[1024], want[64];
    snprintf(msg, sizeof msg, "%s", spmd_group_errmsg(g));
    snprintf(want, sizeof want, c->revoke ? "rank %d aborted the group" : "rank %d died", c->victim);
    CREQ(st == (c->revoke ? SPMD_ERR_ABORTED : SPMD_ERR_REMOTE), "%s: status %s: %s", op_names[c->op],
         spmd_status_str(st), msg);
    CREQ(strstr(msg, want) != NULL, "%s: the message does not name rank %d: %s", op_names[c->op], c->victim, msg);
    int failed[WORLD];
    int n = spmd_group_failed_ranks(g, failed, WORLD);
    int named = 0;
    for (int i = 0; i < n && i < WORLD; i++) named |= failed[i] == c->victim;
    /* (a rank that revoked is not failed, but it may have left by now) */
    CREQ(named || c->revoke, "spmd_group_failed_ranks (%d ranks) does not list rank %d", n, c->victim);
    /* A call started after the failure fails at once, with the same cause;
     * the receive also checks the p2p side of a collective failure. */
    st = spmd_all_reduce(g, buf, buf, 1, SPMD_F32, SPMD_SUM);
    CREQ(st != SPMD_OK && strstr(spmd_group_errmsg(g), want), "later all_reduce: %s: %s", spmd_status_str(st),
         spmd_group_errmsg(g));
    st = spmd_recv(g, buf, 1, SPMD_F32, SPMD_ANY_SOURCE, 78, NULL);
    CREQ(st != SPMD_OK && strstr(spmd_group_errmsg(g), want), "later recv: %s: %s", spmd_status_str(st),
         spmd_group_errmsg(g));
    spmd_group_destroy(g);
    free(buf);
    return 0;
}

static void run_case(const rv_case *c) {
    int status[WORLD];
    char what[160];
    snprintf(what, sizeof what, "%s, %s, rank %d %s", c->transport, op_names[c->op], c->victim,
             c->revoke ? "revokes" : "killed");
    CHECK(mp_fork_run(WORLD, NULL, WORLD, NULL, rank_main, (void *)c, 60, status) == 0);
    for (int i = 0; i < WORLD; i++) {
        if (i == c->victim && !c->revoke) {
            CHECK_MSG(WIFSIGNALED(status[i]) && WTERMSIG(status[i]) == SIGKILL, "%s: the victim was not killed",
                      what);
            continue;
        }
        CHECK_MSG(mp_exited_ok(status[i]), "%s: rank %d failed (status %#x)", what, i, status[i]);
    }
}

int main(void) {
    setenv("SPMD_HEARTBEAT_TIMEOUT", "0", 1); /* deaths only: no stopped rank here */
    setenv("SPMD_TIMEOUT", "60s", 1);          /* a hang guard, never reached when it works */
    const char *transports[] = {"auto", "tcp"};
    int k = 0;
    for (int t = 0; t < 2; t++)
        for (int op = 0; op < OP_COUNT; op++, k++) {
            rv_case c = {op, k % WORLD, 0, transports[t]};
            run_case(&c);
        }
    for (int t = 0; t < 2; t++) {
        rv_case c = {OP_RECV, 1 + t, 1, transports[t]};
        run_case(&c);
    }
    TEST_MAIN_END();
}
