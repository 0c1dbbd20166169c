/* spmd-bench-rpc.c — `spmd-bench -o rpc`: the RPC agent between rank 0 (the
 * caller) and rank 1 (the callee), in the shape of the other ops' tables:
 *   size 0 = rpc_sync of a no-op; other sizes echo a float tensor of that
 *   many bytes (time of the round trip; GB/s = bytes / time);
 * then async throughput (calls in flight), remote + to_here, and the time to
 * start the agent (group formation from the environment included) and to
 * shut it down.  bench/rpc_torch.py measures torch's RPC the same way.
 * Options: --np N (default 2), -b/-e (echo sizes, x4 steps), -n iterations. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "common/seconds.h"
#include "spmd/rpc.h"
#include "size_arg.h"

typedef struct {
    size_t minb, maxb;
    int iters, np;
} rpc_opts;

static spmd_status h_noop(spmd_rpc_call *c, void *ctx) {
    (void)c, (void)ctx;
    return SPMD_OK;
}

static spmd_status h_echo(spmd_rpc_call *c, void *ctx) {
    (void)ctx;
    const spmd_rpc_tensor *t = spmd_rpc_msg_tensor(spmd_rpc_call_args(c), 0);
    if (!t) return spmd_rpc_call_fail(c, "echo needs a tensor");
    /* by reference: the reply is sent before the arguments are freed */
    return spmd_rpc_msg_add_tensor_ref(spmd_rpc_call_result(c), t->dtype, t->ndim, t->shape, t->data);
}

static spmd_status h_make(spmd_rpc_call *c, void *ctx) {
    (void)ctx;
    int64_t n = 4;
    return spmd_rpc_msg_add_tensor(spmd_rpc_call_result(c), SPMD_F32, 1, &n, NULL);
}

static double sync_time(spmd_rpc *r, const char *fn, const spmd_rpc_msg *a, int iters) {
    for (int i = 0; i < iters / 10 + 2; i++) {
        spmd_rpc_msg *res = NULL;
        if (spmd_rpc_sync(r, 1, fn, a, -1, &res) != SPMD_OK) return -1;
        spmd_rpc_msg_free(res);
    }
    double t0 = spmd__seconds();
    for (int i = 0; i < iters; i++) {
        spmd_rpc_msg *res = NULL;
        if (spmd_rpc_sync(r, 1, fn, a, -1, &res) != SPMD_OK) return -1;
        spmd_rpc_msg_free(res);
    }
    return (spmd__seconds() - t0) / iters;
}

static int caller(spmd_rpc *r, const rpc_opts *o) {
    printf("# spmd-bench -o rpc: rank 0 calls rank 1 (world %d)\n", spmd_rpc_world_size(r));
    printf("# handler on a pool thread (spmd_rpc_register) | on the receiving thread (spmd_rpc_register_inline)\n");
    printf("# %10s %12s %12s %12s %12s\n", "size (B)", "rpc_sync (us)", "GB/s", "inline (us)", "GB/s");
    double t = sync_time(r, "noop", NULL, o->iters * 2), ti = sync_time(r, "noop_inline", NULL, o->iters * 2);
    if (t < 0 || ti < 0) goto fail;
    printf("  %10d %12.1f %12s %12.1f %12s\n", 0, t * 1e6, "-", ti * 1e6, "-");
    for (size_t b = o->minb; b <= o->maxb; b *= 4) {
        size_t n = b / 4 ? b / 4 : 1;
        float *x = calloc(n, sizeof(float));
        spmd_rpc_msg *a = spmd_rpc_msg_new();
        int64_t shape = (int64_t)n;
        spmd_rpc_msg_add_tensor_ref(a, SPMD_F32, 1, &shape, x);
        int it = b >= (1 << 20) ? (o->iters / 10 > 20 ? o->iters / 10 : 20) : o->iters;
        t = sync_time(r, "echo", a, it);
        ti = sync_time(r, "echo_inline", a, it);
        spmd_rpc_msg_free(a);
        free(x);
        if (t < 0 || ti < 0) goto fail;
        printf("  %10zu %12.1f %12.3f %12.1f %12.3f\n", n * 4, t * 1e6, (double)(n * 4) / t * 1e-9, ti * 1e6,
               (double)(n * 4) / ti * 1e-9);
    }
    /* async throughput: a window of calls in flight */
    for (int inl = 0; inl < 2; inl++) {
        enum { WINDOW = 64 };
        const char *fn = inl ? "noop_inline" : "noop";
        int total = o->iters * 20;
        spmd_rpc_future *fs[WINDOW] = {0};
        double t0 = spmd__seconds();
        for (int i = 0; i < total; i++) {
            spmd_rpc_future **slot = &fs[i % WINDOW];
            if (*slot) {
                if (spmd_rpc_future_wait(*slot, -1) != SPMD_OK) goto fail;
                spmd_rpc_future_free(*slot);
            }
            if (spmd_rpc_async(r, 1, fn, NULL, -1, slot) != SPMD_OK) goto fail;
        }
        for (int i = 0; i < WINDOW; i++)
            if (fs[i]) {
                if (spmd_rpc_future_wait(fs[i], -1) != SPMD_OK) goto fail;
                spmd_rpc_future_free(fs[i]);
            }
        printf("# rpc_async no-op (%s), %d in flight: %.0f calls/s\n", inl ? "inline" : "pool", WINDOW,
               total / (spmd__seconds() - t0));
    }
    /* remote + to_here */
    int it = o->iters;
    double t0 = spmd__seconds();
    for (int i = 0; i < it; i++) {
        spmd_rref *ref = NULL;
        spmd_rpc_msg *v = NULL;
        if (spmd_rpc_remote(r, 1, "make", NULL, -1, &ref) != SPMD_OK) goto fail;
        if (spmd_rref_to_here(ref, -1, &v) != SPMD_OK) goto fail;
        spmd_rpc_msg_free(v);
        spmd_rref_release(ref);
    }
    printf("# remote + to_here: %.1f us\n", (spmd__seconds() - t0) / it * 1e6);
    return 0;
fail:
    fprintf(stderr, "spmd-bench -o rpc: %s\n", spmd_rpc_errmsg(r));
    return 1;
}

static int rank_fn(int rank, int world, void *arg) {
    (void)world;
    const rpc_opts *o = arg;
    char err[512];
    spmd_rpc *r = NULL;
    double t0 = spmd__seconds();
    if (spmd_rpc_init_env(NULL, NULL, &r, err, sizeof err) != SPMD_OK) {
        fprintf(stderr, "spmd-bench -o rpc: %s\n", err);
        return 1;
    }
    double t_start = spmd__seconds() - t0;
    spmd_rpc_register(r, "noop", h_noop, NULL, NULL);
    spmd_rpc_register(r, "echo", h_echo, NULL, NULL);
    spmd_rpc_register_inline(r, "noop_inline", h_noop, NULL, NULL);
    spmd_rpc_register_inline(r, "echo_inline", h_echo, NULL, NULL);
    spmd_rpc_register(r, "make", h_make, NULL, NULL);
    /* every handler is registered before rank 0 calls */
    spmd_status st = spmd_barrier(spmd_rpc_group(r));
    int rc = st != SPMD_OK;
    if (!rc && rank == 0 && spmd_rpc_world_size(r) > 1) rc = caller(r, o);
    t0 = spmd__seconds();
    if (spmd_rpc_shutdown(r, 1) != SPMD_OK) rc = 1;
    double t_stop = spmd__seconds() - t0;
    if (rank == 0)
        printf("# start %.1f ms + shutdown %.1f ms = %.1f ms\n", t_start * 1e3, t_stop * 1e3,
               (t_start + t_stop) * 1e3);
    fflush(stdout);
    return rc;
}

int spmd__bench_rpc(int argc, char **argv) {
    rpc_opts o = {4, 4 << 20, 1000, 2};
    for (int i = 1; i < argc; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if ((!strcmp(argv[i], "-b") || !strcmp(argv[i], "-e")) && v) {
            if (spmd_size_arg(argv[i + 1], argv[i][1] == 'b' ? &o.minb : &o.maxb)) {
                fprintf(stderr, "spmd-bench -o rpc: %s takes a size (4, 64K, 1M), not '%s'\n", argv[i], argv[i + 1]);
                return 2;
            }
            i++;
        } else if (!strcmp(argv[i], "-n") && v) o.iters = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--np") && v) o.np = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-o") || !strcmp(argv[i], "--op")) i++;
        else {
            fprintf(stderr, "spmd-bench -o rpc: unknown option '%s' (takes --np N, -b SIZE, -e SIZE, -n ITERS)\n", argv[i]);
            return 2;
        }
    }
    if (o.minb < 4 || o.maxb < o.minb || o.iters < 1 || o.np < 2) {
        fprintf(stderr, "spmd-bench -o rpc: needs -b >= 4, -e >= -b, -n >= 1, --np >= 2\n");
        return 2;
    }
    if (getenv("WORLD_SIZE")) return rank_fn(atoi(getenv("RANK") ? getenv("RANK") : "0"), 0, &o);
    char report[512];
    spmd_status st = spmd_spawn(o.np, rank_fn, &o, report, sizeof report);
    if (st) fprintf(stderr, "spmd-bench -o rpc: %s\n", report);
    return st ? 1 : 0;
}
