/* RPC traffic leaves no spin behind: a thread that polls a peer's ring
 * itself counts itself in (spmd__p2p_spin_begin) so the peer need not ring
 * the doorbell; a count left over after it stops means the progress thread
 * never again arms that ring, and the next message that arrives while no
 * thread polls waits forever.  (RPC bodies past the frame's inline bytes are
 * received by blocking posts: once each of those began a second spin and
 * ended one, and spmd-bench -o rpc hung after a few thousand calls.)
 * World 2: rank 0 calls rank 1 with bodies of 4 KiB to 256 KiB; afterwards
 * both sides' counts must drain to zero, and a call made after the callee
 * has gone quiet still gets its answer.
 *
 * And a spin ends by its budget even when its thread is off the core between
 * every few looks.  The budget counts time on the core, forgiving the gaps in
 * which the thread was preempted; forgiving all of them made it endless for a
 * spinner that yields to a CPU-bound process in every stretch of looks: under
 * ThreadSanitizer with two busy processes beside it, four ranks waiting 20 ms
 * for a call their callee held spun for minutes and test_rpc hit its 120 s
 * guard (issue 28).  Pinned without timing: the spin's stop condition sleeps
 * 100 us at every look, so every stretch between two looks at the clock is a
 * gap, however fast or slow the machine; the spin must give up by itself
 * (before the fix only the condition's own guard of 20000 looks ended it). */
#include <string.h>
#include <time.h>
#include "harness.h"
#include "mp/mp_fork.h"
#include "group/group_internal.h"
#include "rpc/rpc_internal.h"

static spmd_status h_echo(spmd_rpc_call *c, void *ctx) {
    (void)ctx;
    const spmd_rpc_tensor *t = spmd_rpc_msg_tensor(spmd_rpc_call_args(c), 0);
    if (!t) return SPMD_ERR_INVALID;
    return spmd_rpc_msg_add_tensor(spmd_rpc_call_result(c), t->dtype, t->ndim, t->shape, t->data);
}

#define GUARD_LOOKS 20000

static int off_core(void *arg) {
    int *looks = arg;
    struct timespec ts = {0, 100000L};
    nanosleep(&ts, NULL);
    return ++*looks >= GUARD_LOOKS;
}

/* Wait (up to 10 s) until no spin on peer's rings is counted. */
static int drained(spmd_rpc *r, int peer) {
    int64_t end = spmd__now_ms() + 10000;
    int n;
    while ((n = spmd__p2p_spinners(&r->g->t, peer)) != 0 && spmd__now_ms() < end) {
        struct timespec ts = {0, 1000000L};
        nanosleep(&ts, NULL);
    }
    return n;
}

static int calls(int idx, void *arg) {
    (void)arg;
    char err[512];
    spmd_group *g = NULL;
    CREQ(spmd_group_init(NULL, &g, err, sizeof err) == SPMD_OK, "%s", err);
    spmd_rpc *r = NULL;
    CREQ(spmd_rpc_init(g, NULL, &r, err, sizeof err) == SPMD_OK, "%s", err);
    CREQ(spmd_rpc_register(r, "echo", h_echo, NULL, NULL) == SPMD_OK, "register");
    spmd_barrier(g);
    if (idx == 0) {
        static float buf[65536];
        for (int i = 0; i < 400; i++) {
            int64_t n = (int64_t)1024 << (i % 7); /* 4 KiB .. 256 KiB */
            buf[0] = (float)i;
            spmd_rpc_msg *a = spmd_rpc_msg_new(), *res = NULL;
            CREQ(a && spmd_rpc_msg_add_tensor(a, SPMD_F32, 1, &n, buf) == SPMD_OK, "args");
            CREQ(spmd_rpc_sync(r, 1, "echo", a, -1, &res) == SPMD_OK, "call %d: %s", i, spmd_rpc_errmsg(r));
            const spmd_rpc_tensor *t = spmd_rpc_msg_tensor(res, 0);
            CREQ(t && t->shape[0] == n && ((const float *)t->data)[0] == (float)i, "call %d: wrong echo", i);
            spmd_rpc_msg_free(a);
            spmd_rpc_msg_free(res);
        }
    }
    /* a waiter's budget, and a large body's (copy time added) */
    const size_t sizes[2] = {0, (size_t)4 << 20};
    for (int k = 0; k < 2; k++) {
        int looks = 0;
        int hit = spmd__rpc_spin(r, 1 - idx, off_core, &looks, spmd__rpc_spin_budget(r, sizes[k]), 0, 0);
        CREQ(!hit && looks < GUARD_LOOKS, "a spin off the core between looks never ran out of budget (%d looks)",
             looks);
    }
    spmd_barrier(g);
    int left = drained(r, 1 - idx);
    CREQ(left == 0, "%d spin(s) on rank %d's rings still counted after the calls", left, 1 - idx);
    spmd_barrier(g);
    if (idx == 0) { /* the callee polls nothing now: the doorbell must bring this one */
        int64_t n = 1024;
        static float one[1024];
        spmd_rpc_msg *a = spmd_rpc_msg_new(), *res = NULL;
        CREQ(a && spmd_rpc_msg_add_tensor(a, SPMD_F32, 1, &n, one) == SPMD_OK, "args");
        CREQ(spmd_rpc_sync(r, 1, "echo", a, 10000, &res) == SPMD_OK, "quiet call: %s", spmd_rpc_errmsg(r));
        spmd_rpc_msg_free(a);
        spmd_rpc_msg_free(res);
    }
    CREQ(spmd_rpc_shutdown(r, 1) == SPMD_OK, "shutdown: %s", spmd_rpc_errmsg(r));
    spmd_group_destroy(g);
    return 0;
}

int main(void) {
    int status[2];
    REQUIRE(mp_fork_run(2, NULL, 2, NULL, calls, NULL, 120, status) == 0);
    CHECK_MSG(mp_exited_ok(status[0]), "rank 0: %d", status[0]);
    CHECK_MSG(mp_exited_ok(status[1]), "rank 1: %d", status[1]);
    TEST_MAIN_END();
}
