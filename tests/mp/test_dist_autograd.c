/* Distributed autograd and the distributed optimizer: seed 000's CNN split
 * in two modules (examples/rpc/split_cnn.h) owned by ranks 1 and 2, driven
 * by rank 0, against the whole CNN (spmd_model "cnn") in one process — the
 * gradients kept per context on each owner, and the parameters after the
 * distributed optimizer's step, equal the whole model's within 1e-5; the
 * same with the batch cut into two micro-batches sharing a context (their
 * gradients add up); at worlds 1, 2 and 3 (modules on the driver itself,
 * both on one worker, one per worker).  Bad uses: a backward twice, a record
 * that does not exist, a module that does not exist. */
#include <math.h>
#include "harness.h"
#include "../../examples/rpc/split_cnn.h"

#define RREQ(cond, ...)                                                                \
    do {                                                                               \
        if (!(cond)) {                                                                 \
            fprintf(stderr, "rank %d: %s:%d: %s: ", rank, __FILE__, __LINE__, #cond);  \
            fprintf(stderr, __VA_ARGS__);                                              \
            fputc('\n', stderr);                                                       \
            return 1;                                                                  \
        }                                                                              \
    } while (0)

enum { B = 8 };

static float max_diff(const float *a, const float *b, size_t n) {
    float m = 0;
    for (size_t i = 0; i < n; i++) {
        float d = fabsf(a[i] - b[i]) / (1.0f + fabsf(b[i]));
        if (d > m) m = d;
    }
    return m;
}

/* The same batch on every rank. */
static void batch(float *x, int *y) {
    spmd_rng rng;
    spmd_rng_seed(&rng, 7, 0);
    for (int i = 0; i < B * 784; i++) x[i] = spmd_rng_uniform(&rng) * 2 - 1;
    for (int i = 0; i < B; i++) y[i] = (int)(spmd_rng_next(&rng) % 10);
}

/* Owner-side check of one stage against the whole model: its gradients in
 * ctx, or its parameters after the step (copied under the module's lock:
 * the step ran on this rank's RPC pool). */
static int check_stage(int rank, spmd_dag *d, int64_t ctx, const char *name, const float *whole_grads,
                       const float *whole_params, size_t n, int after_step) {
    float *mine = malloc(n * sizeof(float));
    RREQ(mine, "out of memory");
    spmd_status st = after_step ? spmd_dag_module_snapshot(d, name, ctx, mine, NULL)
                                : spmd_dag_module_snapshot(d, name, ctx, NULL, mine);
    if (st != SPMD_OK) free(mine);
    RREQ(st == SPMD_OK, "%s: %s", name, spmd_dag_errmsg(d));
    if (!after_step) RREQ(spmd_dag_grads(d, ctx, name) != NULL, "no gradients for %s", name);
    float diff = max_diff(mine, after_step ? whole_params : whole_grads, n);
    free(mine);
    RREQ(diff <= 1e-5f, "%s %s differ by %g", name, after_step ? "parameters after the step" : "gradients", diff);
    return 0;
}

static int body(int rank, int world, void *arg) {
    (void)arg;
    spmd_nn_set_threads(1);   /* the GEMMs on the calling thread (BLAS threads are invisible to TSan) */
    spmd_group *g = NULL;
    char err[512];
    RREQ(spmd_group_init(NULL, &g, err, sizeof err) == SPMD_OK, "%s", err);
    spmd_rpc *r = NULL;
    RREQ(spmd_rpc_init(g, NULL, &r, err, sizeof err) == SPMD_OK, "%s", err);
    spmd_dag *d = NULL;
    RREQ(spmd_dag_create(r, &d) == SPMD_OK, "dag");
    int own1 = world > 1 ? 1 : 0, own2 = world > 2 ? 2 : world - 1;

    spmd_model_opts mo = SPMD_MODEL_OPTS_DEFAULT;
    mo.dropout = 0;
    spmd_model *whole = NULL;
    RREQ(spmd_model_create(&mo, &whole, err, sizeof err) == SPMD_OK, "%s", err);
    static split_cnn sc;
    RREQ(split_cnn_init(&sc, whole) == SPMD_OK, "split");
    if (rank == own1) {
        spmd_dag_module m1 = split_cnn_stage(&sc, 1);
        RREQ(spmd_dag_add_module(d, &m1) == SPMD_OK, "add stage1");
        RREQ(spmd_dag_add_module(d, &m1) == SPMD_ERR_INVALID, "stage1 twice");
    }
    if (rank == own2) {
        spmd_dag_module m2 = split_cnn_stage(&sc, 2);
        RREQ(spmd_dag_add_module(d, &m2) == SPMD_OK, "add stage2");
    }
    spmd_barrier(g);

    static float x[B * 784], dlogits[B * 10];
    int y[B];
    batch(x, y);
    spmd_optim_opts oo = SPMD_OPTIM_OPTS_SGD;
    oo.lr = 0.1f;
    oo.momentum = 0.9f;
    spmd_optim *wopt = NULL;
    size_t np = 0;
    float *wparams = spmd_model_params(whole, &np);
    RREQ(spmd_optim_create(&oo, np, &wopt) == SPMD_OK, "optim");

    spmd_rref *s1 = NULL, *s2 = NULL;
    spmd_dist_optim *dopt = NULL;
    if (rank == 0) {
        RREQ(spmd_dag_module_rref(d, own1, "stage1", &s1) == SPMD_OK, "%s", spmd_dag_errmsg(d));
        RREQ(spmd_dag_module_rref(d, own2, "stage2", &s2) == SPMD_OK, "%s", spmd_dag_errmsg(d));
        spmd_rref *none = NULL;
        RREQ(spmd_dag_module_rref(d, own2, "stage9", &none) != SPMD_OK, "unknown module");
        RREQ(strstr(spmd_dag_errmsg(d), "no module named 'stage9'"), "%s", spmd_dag_errmsg(d));
        spmd_rref *mods[2] = {s1, s2};
        RREQ(spmd_dist_optim_create(d, &oo, mods, 2, &dopt) == SPMD_OK, "dist optim");
    }
    /* two steps: one whole batch, then two micro-batches of B/2 */
    for (int step = 0; step < 2; step++) {
        int64_t ctx = 0;
        /* the whole model, on every rank */
        const float *logits = NULL;
        spmd_model_zero_grad(whole);
        RREQ(spmd_model_forward(whole, x, B, &logits) == SPMD_OK, "whole forward");
        spmd_cross_entropy(dlogits, logits, y, B, 10, NULL);
        RREQ(spmd_model_backward(whole, dlogits, NULL, NULL) == SPMD_OK, "whole backward");
        if (rank == 0) {
            RREQ(spmd_dag_context_new(d, &ctx) == SPMD_OK, "ctx");
            int parts = step == 0 ? 1 : 2, mb = B / parts;
            for (int p = 0; p < parts; p++) {
                spmd_rpc_msg *in = spmd_rpc_msg_new(), *h = NULL, *out = NULL;
                int64_t shape[4] = {mb, 1, 28, 28};
                spmd_rpc_msg_add_tensor_ref(in, SPMD_F32, 4, shape, x + (size_t)p * mb * 784);
                int r1 = -1, r2 = -1;
                RREQ(spmd_dag_forward(d, ctx, s1, in, -1, &r1, &h) == SPMD_OK, "%s", spmd_dag_errmsg(d));
                RREQ(spmd_dag_forward(d, ctx, s2, h, r1, &r2, &out) == SPMD_OK, "%s", spmd_dag_errmsg(d));
                float dl[B * 10];
                const float *lg = spmd_rpc_msg_tensor(out, 0)->data;
                RREQ(max_diff(lg, logits + (size_t)p * mb * 10, (size_t)mb * 10) <= 1e-5f, "logits differ");
                spmd_cross_entropy(dl, lg, y + p * mb, mb, 10, NULL);
                for (int i = 0; i < mb * 10; i++) dl[i] /= (float)parts;   /* mean over the whole batch */
                spmd_rpc_msg *dm = spmd_rpc_msg_new();
                int64_t ds[2] = {mb, 10};
                spmd_rpc_msg_add_tensor_ref(dm, SPMD_F32, 2, ds, dl);
                RREQ(spmd_dag_backward(d, ctx, r2, dm, NULL) == SPMD_OK, "%s", spmd_dag_errmsg(d));
                /* a record's graph is used once */
                RREQ(spmd_dag_backward(d, ctx, r2, dm, NULL) != SPMD_OK, "backward twice");
                RREQ(strstr(spmd_dag_errmsg(d), "backward twice"), "%s", spmd_dag_errmsg(d));
                RREQ(spmd_dag_backward(d, ctx, 12345, dm, NULL) == SPMD_ERR_INVALID, "unknown record");
                spmd_rpc_msg_free(dm);
                spmd_rpc_msg_free(in);
                spmd_rpc_msg_free(h);
                spmd_rpc_msg_free(out);
            }
        }
        RREQ(spmd_broadcast(g, &ctx, 1, SPMD_I64, 0) == SPMD_OK, "ctx broadcast");
        const float *wg = spmd_model_grads(whole, &np);
        if (rank == own1 && check_stage(rank, d, ctx, "stage1", wg, NULL, SC_S1, 0)) return 1;
        if (rank == own2 && check_stage(rank, d, ctx, "stage2", wg + SC_S1, NULL, SC_S2, 0)) return 1;
        spmd_barrier(g);
        if (rank == 0) RREQ(spmd_dist_optim_step(dopt, ctx) == SPMD_OK, "%s", spmd_dag_errmsg(d));
        spmd_barrier(g);
        spmd_optim_step(wopt, wparams, wg);
        if (rank == own1 && check_stage(rank, d, ctx, "stage1", NULL, wparams, SC_S1, 1)) return 1;
        if (rank == own2 && check_stage(rank, d, ctx, "stage2", NULL, wparams + SC_S1, SC_S2, 1)) return 1;
        if (rank == own1) {   /* bad uses of the snapshot: no such module, no such context */
            float one;
            RREQ(spmd_dag_module_snapshot(d, "stage9", ctx, &one, NULL) == SPMD_ERR_INVALID, "unknown module");
            RREQ(strstr(spmd_dag_errmsg(d), "stage9") != NULL, "%s", spmd_dag_errmsg(d));
            RREQ(spmd_dag_module_snapshot(d, "stage1", ctx + 1000, NULL, &one) == SPMD_ERR_INVALID, "unknown ctx");
        }
        spmd_barrier(g);
        if (rank == 0) RREQ(spmd_dag_context_release(d, ctx) == SPMD_OK, "%s", spmd_dag_errmsg(d));
        spmd_barrier(g);
        RREQ(spmd_dag_grads(d, ctx, "stage1") == NULL && spmd_dag_grads(d, ctx, "stage2") == NULL, "released");
    }
    if (rank == 0) {
        spmd_dist_optim_free(dopt);
        spmd_rref_release(s1);
        spmd_rref_release(s2);
    }
    RREQ(spmd_rpc_shutdown(r, 1) == SPMD_OK, "shutdown");
    spmd_dag_free(d);
    spmd_optim_free(wopt);
    spmd_model_free(whole);
    free(sc.p2);
    spmd_group_destroy(g);
    return 0;
}

int main(void) {
    char report[512];
    for (int world = 1; world <= 3; world++)
        CHECK_MSG(spmd_spawn_timeout(world, body, NULL, 120000, report, sizeof report) == SPMD_OK, "world %d: %s",
                  world, report);
    TEST_MAIN_END();
}
