/* RPC failures: a worker killed while calls to it are pending and while
 * others hold RRefs it owns (every pending future and every RRef fails
 * naming it, within seconds; survivors shut down), and malformed frames sent
 * straight to the agent's group (wrong size, garbage, tables that do not
 * match the frame, a truncated body, an oversized payload claim, inline
 * data shorter than its tensors, tensor data announced nowhere, unknown
 * flags, batches of frames that do not add up): each is
 * an error to the caller, and the callee keeps serving; a non-graceful
 * shutdown while calls are in flight both ways (futures outlive the agent). */
#include <signal.h>
#include <string.h>
#include "harness.h"
#include "mp/mp_fork.h"
#include "rpc/rpc_internal.h"

static spmd_status h_noop(spmd_rpc_call *c, void *ctx) {
    (void)c, (void)ctx;
    return SPMD_OK;
}
static spmd_status h_hold(spmd_rpc_call *c, void *ctx) {
    (void)ctx;
    spmd_rpc_call_defer(c);   /* never answered: the worker dies first */
    return SPMD_OK;
}
static spmd_status h_die(spmd_rpc_call *c, void *ctx) {
    (void)c, (void)ctx;
    raise(SIGKILL);
    return SPMD_OK;
}
static spmd_status h_make(spmd_rpc_call *c, void *ctx) {
    (void)ctx;
    int64_t n = 2;
    return spmd_rpc_msg_add_tensor(spmd_rpc_call_result(c), SPMD_F32, 1, &n, NULL);
}

static spmd_rpc *start(int idx, spmd_group **g) {
    char err[512];
    if (spmd_group_init(NULL, g, err, sizeof err) != SPMD_OK) {
        fprintf(stderr, "child %d: %s\n", idx, err);
        return NULL;
    }
    spmd_rpc *r = NULL;
    if (spmd_rpc_init(*g, NULL, &r, err, sizeof err) != SPMD_OK) {
        fprintf(stderr, "child %d: %s\n", idx, err);
        return NULL;
    }
    spmd_rpc_register(r, "noop", h_noop, NULL, NULL);
    spmd_rpc_register(r, "hold", h_hold, NULL, NULL);
    spmd_rpc_register(r, "die", h_die, NULL, NULL);
    spmd_rpc_register(r, "make", h_make, NULL, NULL);
    spmd_barrier(*g);
    return r;
}

/* World 3: rank 2 dies inside a handler. */
static int worker_death(int idx, void *arg) {
    (void)arg;
    spmd_group *g = NULL;
    spmd_rpc *r = start(idx, &g);
    CREQ(r, "start");
    if (idx == 2) {
        spmd_barrier(g);
        spmd_barrier(g);   /* killed during this one by rank 0's call */
        return 1;
    }
    spmd_rpc_future *held = NULL;
    spmd_rref *ref = NULL;
    if (idx == 1) {
        CREQ(spmd_rpc_async(r, 2, "hold", NULL, 0, &held) == SPMD_OK, "%s", spmd_rpc_errmsg(r));
        CREQ(spmd_rpc_remote(r, 2, "make", NULL, 0, &ref) == SPMD_OK, "%s", spmd_rpc_errmsg(r));
        spmd_rpc_msg *v = NULL;
        CREQ(spmd_rref_to_here(ref, -1, &v) == SPMD_OK, "%s", spmd_rpc_errmsg(r));
        spmd_rpc_msg_free(v);
    }
    spmd_barrier(g);
    int64_t t0 = spmd__now_ms();
    if (idx == 0) {
        spmd_status st = spmd_rpc_sync(r, 2, "die", NULL, 0, NULL);
        CREQ(st != SPMD_OK && strstr(spmd_rpc_errmsg(r), "rank 2"), "%d %s", st, spmd_rpc_errmsg(r));
    } else {
        spmd_status st = spmd_rpc_future_wait(held, -1);
        CREQ(st != SPMD_OK && strstr(spmd_rpc_future_errmsg(held), "rank 2"), "%d %s", st, spmd_rpc_future_errmsg(held));
        spmd_rpc_future_free(held);
        spmd_rpc_msg *v = NULL;
        CREQ(spmd_rref_to_here(ref, -1, &v) != SPMD_OK && strstr(spmd_rpc_errmsg(r), "rank 2"), "%s", spmd_rpc_errmsg(r));
        spmd_rref_release(ref);
    }
    CREQ(spmd__now_ms() - t0 < 45000, "took %lld ms", (long long)(spmd__now_ms() - t0));
    /* later calls fail at once, to anyone */
    CREQ(spmd_rpc_sync(r, 1 - idx, "noop", NULL, 0, NULL) != SPMD_OK, "call after the death");
    CREQ(strstr(spmd_rpc_errmsg(r), "rank 2"), "%s", spmd_rpc_errmsg(r));
    /* a graceful shutdown of a broken agent reports it, and returns */
    CREQ(spmd_rpc_shutdown(r, 1) == SPMD_ERR_ABORTED, "graceful shutdown after a death");
    spmd_group_destroy(g);
    return 0;
}

/* After a send of the wrong size was refused, the group reports it on the
 * next send to that rank (once): retry then. */
static int send_raw(spmd_rpc *r, rpc_frame *f) {
    spmd_status st = spmd_send(spmd_rpc_group(r), f, RPC_FRAME_BYTES, SPMD_U8, 0, RPC_TAG_FRAME);
    if (st == SPMD_ERR_MISMATCH) st = spmd_send(spmd_rpc_group(r), f, RPC_FRAME_BYTES, SPMD_U8, 0, RPC_TAG_FRAME);
    return st;
}

/* A pending future whose answer is whatever rank 0 says to frame id f->id. */
static spmd_rpc_future *expect(spmd_rpc *r, rpc_frame *f) {
    spmd_rpc_future *fut = spmd__rpc_future_new(r, 0, 0);
    spmd__rpc_pending_add(r, fut);
    spmd__rpc_frame_init(f, RPC_K_CALL, fut->id, "noop");
    return fut;
}

/* World 2: rank 1 sends bad frames to rank 0. */
static int malformed(int idx, void *arg) {
    (void)arg;
    spmd_group *g = NULL;
    spmd_rpc *r = start(idx, &g);
    CREQ(r, "start");
    if (idx == 1) {
        spmd_group *rg = spmd_rpc_group(r);
        spmd_status st;
        rpc_frame f;
        memset(&f, 0x5a, sizeof f);
        CREQ(send_raw(r, &f) == SPMD_OK, "garbage");
        struct { const char *name, *want; } cases[] = {
            {"tensor table missing", "tensor table truncated"},
            {"truncated body", "body: size mismatch"},
            {"payload too large", "payload of"},
            {"dtype", "unknown dtype"},
            {"name", "not terminated"},
            {"inline data short", "the inline tensors need 32"},
            {"data nowhere", "neither inline nor in a body"},
            {"flags", "unknown flags"},
        };
        for (int c = 0; c < 8; c++) {
            spmd_rpc_future *fut = expect(r, &f);
            if (c == 0) {
                f.h.ntensors = 1;
            } else if (c == 1) {
                /* the meta block announced as a 100-byte body message; 50 come */
                f.h.flags = RPC_F_META_SEP;
                f.h.body_tag = RPC_TAG_BODY0 + 12345;
                f.h.meta_len = f.h.payload_len = 100;
            } else if (c == 2) {
                f.h.payload_len = 1 << 20;
            } else if (c == 3) {
                f.h.ntensors = 1;
                f.h.meta_len = f.h.inline_len = 8;
                f.inl[0] = 99;
            } else if (c == 4) {
                memset(f.h.name, 'x', sizeof f.h.name);
            } else {
                /* one float32[4] tensor: its table entry, then (c == 5) only
                 * 8 of its 16 bytes inline, or (c == 6) its bytes nowhere */
                memset(f.inl, 0, 16);
                f.inl[0] = SPMD_F32;
                f.inl[1] = 1;
                spmd__put_u64(f.inl + 8, 4);
                f.h.ntensors = 1;
                f.h.meta_len = 16;
                f.h.data_len = 16;
                f.h.n_inline = c == 5;
                f.h.inline_len = c == 5 ? 24 : 16;
                if (c == 7) f.h.flags = 0x80;
            }
            CREQ(send_raw(r, &f) == SPMD_OK, "case %s", cases[c].name);
            if (c == 1) {
                char half[50] = {0};
                st = spmd_send(rg, half, sizeof half, SPMD_U8, 0, (int)f.h.body_tag);
                CREQ(st == SPMD_OK || st == SPMD_ERR_MISMATCH, "the truncated body");
            }
            CREQ(spmd_rpc_future_wait(fut, -1) == SPMD_ERR_PROTOCOL, "case %s: %s", cases[c].name,
                 spmd_rpc_future_errmsg(fut));
            CREQ(strstr(spmd_rpc_future_errmsg(fut), cases[c].want), "case %s: %s", cases[c].name,
                 spmd_rpc_future_errmsg(fut));
            CREQ(strstr(spmd_rpc_future_errmsg(fut), "worker0 (rank 0)"), "%s", spmd_rpc_future_errmsg(fut));
            spmd_rpc_future_free(fut);
        }
        /* several frames in one message (batch.c): two calls are both
         * answered; a batched frame that claims a body is dropped with what
         * follows it (the frames before it are served); a message claiming
         * more frames than fit is dropped whole */
        for (int c = 0; c < 3; c++) {
            rpc_frame b;
            memset(&b, 0, sizeof b);
            spmd_rpc_future *f1 = expect(r, &b);
            rpc_frame second;   /* its head goes right after the first (8-aligned) */
            spmd_rpc_future *f2 = spmd__rpc_future_new(r, 0, 0);
            spmd__rpc_pending_add(r, f2);
            spmd__rpc_frame_init(&second, RPC_K_CALL, f2->id, "noop");
            if (c == 1) second.h.body_tag = RPC_TAG_BODY0 + 77;
            memcpy(b.inl, &second.h, sizeof second.h);
            b.h.nsub = c == 2 ? 200 : 2;
            CREQ(send_raw(r, &b) == SPMD_OK, "batch %d", c);
            if (c < 2) CREQ(spmd_rpc_future_wait(f1, -1) == SPMD_OK, "batch %d: %s", c, spmd_rpc_future_errmsg(f1));
            if (c == 0) CREQ(spmd_rpc_future_wait(f2, -1) == SPMD_OK, "batch: %s", spmd_rpc_future_errmsg(f2));
            /* the dropped ones are never answered: withdraw them */
            for (spmd_rpc_future *f = c == 0 ? NULL : c == 1 ? f2 : f1; f; f = f == f1 ? f2 : NULL) {
                spmd_rpc_future *t = spmd__rpc_pending_take(r, f->id);
                CREQ(t == f, "batch %d: a dropped frame was answered", c);
                spmd__rpc_future_complete(t, SPMD_ERR_ABORTED, NULL, "withdrawn");
                spmd_rpc_future_free(t);
            }
            spmd_rpc_future_free(f1);
            spmd_rpc_future_free(f2);
        }
        char small[10] = {0};
        /* a release of a user the owner does not know (double free, forged
         * id): refused, nothing freed */
        {
            spmd_rpc_future *fut = expect(r, &f);
            f.h.kind = RPC_K_DELETE;
            f.h.rref_id = 0x1234;
            f.h.fork_id = 0x99;
            CREQ(send_raw(r, &f) == SPMD_OK, "delete");
            CREQ(spmd_rpc_future_wait(fut, -1) == SPMD_ERR_NOTFOUND, "%s", spmd_rpc_future_errmsg(fut));
            CREQ(strstr(spmd_rpc_future_errmsg(fut), "no such user"), "%s", spmd_rpc_future_errmsg(fut));
            spmd_rpc_future_free(fut);
        }
        /* small sends are eager: the sender may or may not hear of the refusal */
        st = spmd_send(rg, small, sizeof small, SPMD_U8, 0, RPC_TAG_FRAME);
        CREQ(st == SPMD_OK || st == SPMD_ERR_MISMATCH, "short frame: %d", st);
        /* still serving (the refusal of the short frame may surface on
         * this rank's next send with the frame tag, once) */
        st = spmd_rpc_sync(r, 0, "noop", NULL, -1, NULL);
        if (st == SPMD_ERR_MISMATCH) st = spmd_rpc_sync(r, 0, "noop", NULL, -1, NULL);
        CREQ(st == SPMD_OK, "%s", spmd_rpc_errmsg(r));
    }
    CREQ(spmd_rpc_shutdown(r, 1) == SPMD_OK, "shutdown: %s", spmd_rpc_errmsg(r));
    spmd_group_destroy(g);
    return 0;
}

/* World 2: rank 0 stops at once while a call of its own to rank 1 and a
 * call from rank 1 to it are in flight. */
static int shutdown_in_flight(int idx, void *arg) {
    (void)arg;
    spmd_group *g = NULL;
    spmd_rpc *r = start(idx, &g);
    CREQ(r, "start");
    spmd_rpc_future *f = NULL;
    spmd_rref *ref = NULL;
    CREQ(spmd_rpc_async(r, 1 - idx, "hold", NULL, 0, &f) == SPMD_OK, "%s", spmd_rpc_errmsg(r));
    if (idx == 1) CREQ(spmd_rpc_remote(r, 0, "make", NULL, 0, &ref) == SPMD_OK, "%s", spmd_rpc_errmsg(r));
    spmd_barrier(g);   /* both calls are in flight */
    if (idx == 0) {
        CREQ(spmd_rpc_shutdown(r, 0) == SPMD_OK, "non-graceful shutdown");
        /* the future outlives the agent: it failed, with a reason */
        CREQ(spmd_rpc_future_wait(f, -1) == SPMD_ERR_ABORTED, "%s", spmd_rpc_future_errmsg(f));
        CREQ(strstr(spmd_rpc_future_errmsg(f), "shut down"), "%s", spmd_rpc_future_errmsg(f));
        spmd_rpc_msg *res = NULL;
        CREQ(spmd_rpc_future_take(f, &res) == SPMD_ERR_ABORTED, "take after shutdown");
        spmd_rpc_future_free(f);
    } else {
        int64_t t0 = spmd__now_ms();
        CREQ(spmd_rpc_future_wait(f, -1) != SPMD_OK, "call to a worker that stopped");
        CREQ(spmd__now_ms() - t0 < 45000, "took %lld ms", (long long)(spmd__now_ms() - t0));
        spmd_rpc_future_free(f);
        spmd_rpc_msg *v = NULL;
        CREQ(spmd_rref_to_here(ref, -1, &v) != SPMD_OK, "RRef owned by a worker that stopped");
        CREQ(spmd_rpc_sync(r, 0, "noop", NULL, -1, NULL) != SPMD_OK, "call after it stopped");
        CREQ(spmd_rpc_shutdown(r, 1) == SPMD_ERR_ABORTED, "graceful shutdown of a broken agent");
        spmd_rref_release(ref);   /* after shutdown: nothing to tell, no crash, no leak */
    }
    spmd_group_destroy(g);
    return 0;
}

int main(void) {
    int status[3];
    REQUIRE(mp_fork_run(3, NULL, 3, NULL, worker_death, NULL, 60, status) == 0);
    CHECK_MSG(mp_exited_ok(status[0]), "rank 0: %d", status[0]);
    CHECK_MSG(mp_exited_ok(status[1]), "rank 1: %d", status[1]);
    CHECK_MSG(WIFSIGNALED(status[2]) && WTERMSIG(status[2]) == SIGKILL, "rank 2: %d", status[2]);
    REQUIRE(mp_fork_run(2, NULL, 2, NULL, shutdown_in_flight, NULL, 60, status) == 0);
    CHECK_MSG(mp_exited_ok(status[0]), "rank 0: %d", status[0]);
    CHECK_MSG(mp_exited_ok(status[1]), "rank 1: %d", status[1]);
    REQUIRE(mp_fork_run(2, NULL, 2, NULL, malformed, NULL, 60, status) == 0);
    CHECK_MSG(mp_exited_ok(status[0]), "rank 0: %d", status[0]);
    CHECK_MSG(mp_exited_ok(status[1]), "rank 1: %d", status[1]);
    TEST_MAIN_END();
}
