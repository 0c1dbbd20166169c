/* DDP equivalence: W ranks with batch B each produce the same parameters as
 * one process with batch W*B, for the seed MLP and CNN without dropout, after
 * several SGD-with-momentum steps; the same with no_sync gradient
 * accumulation; fp16/bf16 compression within their precision; and with the
 * model's gradients in the reducer's shared memory (spmd_ddp_alloc_grads).
 * Every rank also computes the single-process reference itself and compares. */
#include <math.h>
#include "harness.h"
#include "mpi_job.h"
#include "spmd/ddp.h"
#include "spmd/nn.h"

enum { B = 4, STEPS = 3, MICRO = 2 };

typedef struct {
    const char *arch;
    int accumulate;                 /* no_sync over MICRO micro-batches */
    spmd_ddp_compression compress;
    double tol;                     /* relative, against the reference */
    int shared;                     /* gradients in spmd_ddp_alloc_grads' memory */
} case_t;

/* Sample i of the synthetic data set: inputs in [-1, 1), label i % 10. */
static void sample(spmd_rng *r, float *x, int n, int *y, int i) {
    (void)i;
    for (int k = 0; k < n; k++) x[k] = 2.0f * spmd_rng_uniform(r) - 1.0f;
    *y = i % 10;
}

/* Global batch g of step s / micro-batch m: W*B samples, rank r owns [r*B, (r+1)*B). */
static void global_batch(int world, int s, int m, int in, float *x, int *y) {
    spmd_rng r;
    spmd_rng_seed(&r, 1000 + (uint64_t)s * 17 + (uint64_t)m, 7);
    for (int i = 0; i < world * B; i++) sample(&r, x + (size_t)i * in, in, &y[i], i + s);
}

static spmd_status make_model(const char *arch, spmd_model **m) {
    spmd_model_opts o = SPMD_MODEL_OPTS_DEFAULT;
    o.arch = arch;
    o.seed = 99;
    o.dropout = 0;
    char err[256];
    return spmd_model_create(&o, m, err, sizeof err);
}

static int input_size(spmd_model *m) {
    int c, h, w;
    spmd_model_input_shape(m, &c, &h, &w);
    return c * h * w;
}

/* One forward/backward on n samples, gradients accumulated into the model. */
static spmd_status fwd_bwd(spmd_model *m, const float *x, const int *y, int n, spmd_grad_ready_fn hook, void *ctx,
                           float *dlogits) {
    const float *logits;
    spmd_status st = spmd_model_forward(m, x, n, &logits);
    if (st) return st;
    int V = spmd_model_num_outputs(m);
    spmd_cross_entropy(dlogits, logits, y, n, V, NULL);
    return spmd_model_backward(m, dlogits, hook, ctx);
}

static int run_case(spmd_group *g, int rank, int world, const case_t *c) {
    spmd_model *m = NULL, *ref = NULL;
    REQUIRE(make_model(c->arch, &m) == SPMD_OK && make_model(c->arch, &ref) == SPMD_OK);
    size_t np = 0, rp = 0;
    float *p = spmd_model_params(m, &np), *gr = spmd_model_grads(m, &np);
    float *refp = spmd_model_params(ref, &rp), *refg = spmd_model_grads(ref, &rp);
    /* Start the distributed copy from a rank-dependent state: DDP's
     * construction must broadcast rank 0's parameters. */
    for (size_t i = 0; i < np && rank > 0; i++) p[i] += 0.01f * (float)rank;

    spmd_ddp *d = NULL;
    spmd_ddp_opts o = SPMD_DDP_OPTS_DEFAULT;
    o.first_bucket_bytes = 16 << 10; /* several buckets for these small models */
    o.bucket_cap_bytes = 256 << 10;
    o.compression = c->compress;
    REQUIRE(spmd_ddp_create(g, &o, &d) == SPMD_OK);
    if (c->shared) {
        float *mem = NULL;
        REQUIRE(spmd_ddp_alloc_grads(d, np, &mem) == SPMD_OK);
        spmd_model_use_grad_memory(m, mem);
        gr = spmd_model_grads(m, NULL);
        REQUIRE(gr == mem);
    }
    for (int i = 0; i < spmd_model_num_params(m); i++) {
        const spmd_tensor_info *ti = spmd_model_param(m, i);
        REQUIRE(spmd_ddp_add_param(d, ti->name, p + ti->offset, gr + ti->offset, ti->count) == SPMD_OK);
    }
    REQUIRE(spmd_ddp_finalize(d) == SPMD_OK);
    REQUIRE(spmd_ddp_num_buckets(d) >= 2);

    spmd_optim_opts so = SPMD_OPTIM_OPTS_SGD;
    so.lr = 0.05f;
    so.momentum = 0.9f;
    spmd_optim *opt = NULL, *ropt = NULL;
    REQUIRE(spmd_optim_create(&so, np, &opt) == SPMD_OK && spmd_optim_create(&so, rp, &ropt) == SPMD_OK);

    int in = input_size(m), V = spmd_model_num_outputs(m);
    float *x = malloc(sizeof(float) * (size_t)(world * B * in));
    int *y = malloc(sizeof(int) * (size_t)(world * B));
    float *dl = malloc(sizeof(float) * (size_t)(world * B * V));
    int micro = c->accumulate ? MICRO : 1;
    for (int s = 0; s < STEPS; s++) {
        spmd_model_zero_grad(m);
        spmd_model_zero_grad(ref);
        for (int mb = 0; mb < micro; mb++) {
            global_batch(world, s, mb, in, x, y);
            /* distributed: my shard; communication only on the last micro-batch */
            spmd_ddp_set_no_sync(d, mb + 1 < micro);
            REQUIRE(spmd_ddp_prepare(d) == SPMD_OK);
            REQUIRE(fwd_bwd(m, x + (size_t)rank * B * in, y + rank * B, B, spmd_ddp_grad_ready_hook, d, dl) == SPMD_OK);
            if (spmd_ddp_finish(d)) {
                fprintf(stderr, "rank %d: finish: %s\n", rank, spmd_ddp_errmsg(d));
                return 1;
            }
            /* reference: the whole global batch in one process */
            REQUIRE(fwd_bwd(ref, x, y, world * B, NULL, NULL, dl) == SPMD_OK);
        }
        spmd_optim_step(opt, p, gr);
        spmd_optim_step(ropt, refp, refg);
    }
    double worst = 0;
    size_t at = 0;
    for (size_t i = 0; i < np; i++) {
        double diff = fabs((double)p[i] - refp[i]) / (fabs((double)refp[i]) + 1e-3);
        if (diff > worst) { worst = diff; at = i; }
    }
    int rc = 0;
    if (worst > c->tol) {
        fprintf(stderr, "rank %d: %s%s%s%s: parameter %zu differs by %.3g relative (%g vs %g)\n", rank, c->arch,
                c->accumulate ? " no_sync" : "", c->compress ? " compressed" : "", c->shared ? " shared" : "", at,
                worst, p[at], refp[at]);
        rc = 1;
    }
    free(x);
    free(y);
    free(dl);
    spmd_optim_free(opt);
    spmd_optim_free(ropt);
    spmd_ddp_free(d);
    spmd_model_free(m);
    spmd_model_free(ref);
    return rc;
}

static const case_t CASES[] = {
    {"mlp", 0, SPMD_DDP_COMPRESS_NONE, 1e-5, 0},
    {"cnn", 0, SPMD_DDP_COMPRESS_NONE, 1e-5, 0},
    {"mlp", 1, SPMD_DDP_COMPRESS_NONE, 1e-5, 0},
    {"cnn", 1, SPMD_DDP_COMPRESS_NONE, 1e-5, 0},
    {"mlp", 0, SPMD_DDP_COMPRESS_FP16, 5e-3, 0},
    {"mlp", 0, SPMD_DDP_COMPRESS_BF16, 2e-2, 0},
    {"mlp", 0, SPMD_DDP_COMPRESS_NONE, 1e-5, 1},
    {"cnn", 0, SPMD_DDP_COMPRESS_NONE, 1e-5, 1},
    {"cnn", 1, SPMD_DDP_COMPRESS_NONE, 1e-5, 1},
};

static int body(int rank, int world, void *arg) {
    (void)arg;
    spmd_nn_set_threads(1);
    spmd_group *g = NULL;
    char err[512];
    if (spmd_group_init(NULL, &g, err, sizeof err)) {
        fprintf(stderr, "init: %s\n", err);
        return 1;
    }
    int rc = 0;
    for (size_t k = 0; k < sizeof CASES / sizeof CASES[0]; k++) rc |= run_case(g, rank, world, &CASES[k]);
    spmd_group_destroy(g);
    return rc;
}

int main(void) {
    setenv("SPMD_TIMEOUT", "300", 1); /* a hang guard; a peer may be descheduled for long */
    static const int worlds[] = {2, 3};
    for (size_t i = 0; i < sizeof worlds / sizeof worlds[0]; i++) {
        char report[512];
        /* a hang guard: world 2 ran past 300 s under TSan beside other suites */
        spmd_status st = test_spawn(worlds[i], body, NULL, 420000, report, sizeof report);
        CHECK_MSG(st == SPMD_OK, "world %d: %s", worlds[i], report);
    }
    TEST_MAIN_END();
}
