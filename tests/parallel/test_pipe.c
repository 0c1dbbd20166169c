/* test_pipe.c — pipeline parallelism against one process.
 *
 * At 2 and 4 stages, GPipe (explicit cuts) and 1F1B (balanced cuts): two SGD
 * (momentum) steps of seed 000's CNN (dropout off) over 8 micro-batches give
 * the last stage the loss of the whole model on the whole batch, and every
 * stage its slice of the whole model's parameters, within 1e-5 relative.
 * Memory: 1F1B keeps at most stages - stage micro-batches alive and its
 * activation memory does not grow with the micro-batch count; GPipe's does.
 * SyncBatchNorm (world 4 = dp 2 x pp 2, a BatchNorm in each stage, different
 * data per replica): after a 1F1B step the two replicas of each stage hold
 * the same running statistics with spmd_pipe_set_syncbn over the stage's
 * data-parallel group, and different ones without it.
 * Bad input: a cut leaving a stage empty, more stages than layers, a batch
 * the micro-batches do not divide — errors naming the values. */
#include <math.h>
#include "harness.h"
#include "spmd/parallel.h"
#include "spmd/syncbn.h"

#define RREQ(cond)                                                                            \
    do {                                                                                      \
        if (!(cond)) {                                                                        \
            fprintf(stderr, "rank %d: %s:%d: failed: %s [pipe: %s]\n", rank, __FILE__, __LINE__, \
                    #cond, pp ? spmd_pipe_errmsg(pp) : err);                                  \
            return 1;                                                                         \
        }                                                                                     \
    } while (0)

enum { B = 16, STEPS = 2 };

static double rel_diff(const float *a, const float *b, size_t n) {
    double d = 0, r = 0;
    for (size_t i = 0; i < n; i++) {
        d += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
        r += (double)b[i] * b[i];
    }
    return sqrt(d / (r > 0 ? r : 1));
}

static void make_batch(float *x, int *y, size_t xn, int step) {
    spmd_rng r;
    spmd_rng_seed(&r, 99, (uint64_t)step);
    for (size_t i = 0; i < xn; i++) x[i] = spmd_rng_uniform(&r);
    for (int i = 0; i < B; i++) y[i] = (int)(spmd_rng_next(&r) % 10);
}

static int run(spmd_group *g, int rank, int world, spmd_schedule_kind kind, int balanced, int M) {
    char err[256] = "";
    spmd_pipe *pp = NULL;
    spmd_layers *L = NULL;
    RREQ(spmd_layers_arch("cnn", 10, 0, 0, 0, &L, err, sizeof err) == SPMD_OK);
    int n = spmd_layers_count(L);
    int cuts[5] = {0, 3, 6, 9, n};   /* 4 stages; 2 stages: {0, 7, n} */
    if (world == 2) cuts[1] = 7, cuts[2] = n;
    spmd_pipe_opts po = SPMD_PIPE_OPTS_DEFAULT;
    po.schedule = kind;
    po.microbatches = M;
    po.cuts = balanced ? NULL : cuts;
    po.dropout = 0;
    RREQ(spmd_pipe_create(g, L, &po, &pp, err, sizeof err) == SPMD_OK);
    spmd_model *whole = NULL;
    spmd_model_opts mo = SPMD_MODEL_OPTS_DEFAULT;
    mo.dropout = 0;
    RREQ(spmd_model_create(&mo, &whole, err, sizeof err) == SPMD_OK);
    spmd_model *stage = spmd_pipe_model(pp);
    int first, last;
    spmd_pipe_cut(pp, &first, &last);
    size_t off, cnt, np, nw;
    spmd_layers_param_range(L, first, last, &off, &cnt);
    float *ps = spmd_model_params(stage, &np), *pw = spmd_model_params(whole, &nw);
    RREQ(np == cnt && memcmp(ps, pw + off, sizeof(float) * cnt) == 0);
    spmd_optim_opts oo = SPMD_OPTIM_OPTS_SGD;
    oo.lr = 0.05f, oo.momentum = 0.9f;
    spmd_optim *os = NULL, *ow = NULL;
    RREQ(spmd_optim_create(&oo, np, &os) == SPMD_OK && spmd_optim_create(&oo, nw, &ow) == SPMD_OK);
    size_t xn = (size_t)B * 28 * 28;
    float *x = malloc(sizeof(float) * xn), *dl = malloc(sizeof(float) * B * 10);
    int y[B];
    RREQ(x && dl);
    for (int s = 0; s < STEPS; s++) {
        make_batch(x, y, xn, s);
        const float *logits;
        spmd_model_zero_grad(whole);
        RREQ(spmd_model_forward(whole, x, B, &logits) == SPMD_OK);
        float lw = spmd_cross_entropy(dl, logits, y, B, 10, NULL);
        RREQ(spmd_model_backward(whole, dl, NULL, NULL) == SPMD_OK);
        spmd_optim_step(ow, pw, spmd_model_grads(whole, NULL));
        float lp = -1;
        spmd_model_zero_grad(stage);
        RREQ(spmd_pipe_step(pp, rank == 0 ? x : NULL, rank == world - 1 ? y : NULL, B, &lp, NULL) == SPMD_OK);
        spmd_optim_step(os, ps, spmd_model_grads(stage, NULL));
        if (rank == world - 1) RREQ(fabsf(lp - lw) <= 1e-5f * fabsf(lw));
        double d = rel_diff(ps, pw + off, cnt);
        if (d > 1e-5) fprintf(stderr, "rank %d step %d: relative difference %g\n", rank, s, d);
        RREQ(d <= 1e-5);
    }
    spmd_pipe_stats st;
    spmd_pipe_last_stats(pp, &st);
    int S = world, bound = kind == SPMD_SCHEDULE_1F1B ? (S - rank < M ? S - rank : M) : M;
    RREQ(st.max_live == bound && st.slots == bound);
    RREQ(st.total_s >= st.compute_s && st.compute_s > 0);
    if (getenv("PIPE_VERBOSE"))
        printf("stages %d %s M %d stage %d: live %d, activations %zu bytes\n", world,
               spmd_schedule_name(kind), M, rank, st.max_live, st.act_bytes);
    /* bad input: the micro-batches must divide the batch */
    RREQ(spmd_pipe_step(pp, x, y, M + 1, NULL, NULL) == SPMD_ERR_INVALID);
    char want[64];
    snprintf(want, sizeof want, "batch %d is not divisible by %d micro-batches", M + 1, M);
    RREQ(strstr(spmd_pipe_errmsg(pp), want));
    free(x);
    free(dl);
    spmd_optim_free(os);
    spmd_optim_free(ow);
    spmd_model_free(whole);
    spmd_pipe_free(pp);
    spmd_layers_free(L);
    return 0;
}

/* 1F1B's activation memory does not grow with the micro-batches; GPipe's does. */
static int memory(spmd_group *g, int rank, int world) {
    char err[256] = "";
    spmd_pipe *pp = NULL;
    spmd_layers *L = NULL;
    RREQ(spmd_layers_arch("cnn", 10, 0, 0, 0, &L, err, sizeof err) == SPMD_OK);
    size_t bytes[2][2];
    float x[32 * 784];
    int y[32];
    make_batch(x, y, 0, 0);
    for (int i = 0; i < 32; i++) y[i] = i % 10, x[i] = 0.5f;
    for (int k = 0; k < 2; k++)
        for (int mm = 0; mm < 2; mm++) {
            int M = mm ? 4 * world : world;   /* micro-batch of 2 samples either way */
            spmd_pipe_opts po = SPMD_PIPE_OPTS_DEFAULT;
            po.schedule = k ? SPMD_SCHEDULE_1F1B : SPMD_SCHEDULE_GPIPE;
            po.microbatches = M;
            RREQ(spmd_pipe_create(g, L, &po, &pp, err, sizeof err) == SPMD_OK);
            RREQ(spmd_pipe_step(pp, x, y, 2 * M, NULL, NULL) == SPMD_OK);
            spmd_pipe_stats st;
            spmd_pipe_last_stats(pp, &st);
            bytes[k][mm] = st.act_bytes;
            if (rank == 0 || rank == world - 1)
                printf("stages %d %-5s M %2d stage %d: %d micro-batches alive, %zu activation bytes\n",
                       world, spmd_schedule_name(po.schedule), M, rank, st.max_live, st.act_bytes);
            spmd_pipe_free(pp);
            pp = NULL;
        }
    RREQ(bytes[1][1] == bytes[1][0]);          /* 1F1B: bounded by the stages */
    RREQ(bytes[0][1] == 4 * bytes[0][0]);      /* GPipe: grows with the micro-batches */
    spmd_layers_free(L);
    return 0;
}

static int errors(spmd_group *g, int rank, int world) {
    char err[256] = "";
    spmd_pipe *pp = NULL;
    spmd_layers *L = NULL;
    RREQ(spmd_layers_arch("mlp", 10, 0, 0, 0, &L, err, sizeof err) == SPMD_OK);   /* 3 layers */
    spmd_pipe_opts po = SPMD_PIPE_OPTS_DEFAULT;
    int cuts[5] = {0, 1, 1, 2, 3};
    if (world == 2) cuts[1] = 3, cuts[2] = 3;
    po.cuts = cuts;
    RREQ(spmd_pipe_create(g, L, &po, &pp, err, sizeof err) == SPMD_ERR_INVALID && !pp);
    RREQ(strstr(err, world == 2 ? "stage 1 is empty: layers [3, 3)" : "stage 1 is empty: layers [1, 1)"));
    if (world == 4) {   /* 4 stages of a 3-layer list */
        po.cuts = NULL;
        RREQ(spmd_pipe_create(g, L, &po, &pp, err, sizeof err) == SPMD_ERR_INVALID && !pp);
        RREQ(strstr(err, "3 layers into 4 stages"));
    }
    po.cuts = NULL;
    po.microbatches = 0;
    RREQ(spmd_pipe_create(g, L, &po, &pp, err, sizeof err) == SPMD_ERR_INVALID && !pp);
    RREQ(strstr(err, "0 micro-batches"));
    spmd_layers_free(L);
    return 0;
}

/* One 1F1B step of conv-bn-relu | conv-bn-relu-flatten-linear at dp 2 x pp 2;
 * *same: this rank's BatchNorm buffers equal its replica's. */
static int syncbn_step(spmd_group *g, int rank, int sync, int *same) {
    char err[256] = "";
    spmd_pipe *pp = NULL;
    spmd_layers *L = NULL;
    spmd_mesh mesh;
    RREQ(spmd_mesh_create(g, 2, 2, 1, &mesh, err, sizeof err) == SPMD_OK);
    RREQ(spmd_layers_create(1, 8, 8, 0, &L) == SPMD_OK);
    RREQ(spmd_layers_conv2d(L, 4, 3, 1, 1, 1, "c1") == SPMD_OK && spmd_layers_batchnorm2d(L, "bn1") == SPMD_OK &&
         spmd_layers_relu(L) == SPMD_OK);
    RREQ(spmd_layers_conv2d(L, 4, 3, 1, 1, 1, "c2") == SPMD_OK && spmd_layers_batchnorm2d(L, "bn2") == SPMD_OK &&
         spmd_layers_relu(L) == SPMD_OK && spmd_layers_flatten(L) == SPMD_OK &&
         spmd_layers_linear(L, 10, 1, "fc") == SPMD_OK);
    int cuts[3] = {0, 3, spmd_layers_count(L)};
    spmd_pipe_opts po = SPMD_PIPE_OPTS_DEFAULT;
    po.microbatches = 2;
    po.cuts = cuts;
    po.dropout = 0;
    RREQ(spmd_pipe_create(mesh.pp_group, L, &po, &pp, err, sizeof err) == SPMD_OK);
    if (sync) RREQ(spmd_pipe_set_syncbn(pp, spmd_syncbn_group_reduce, mesh.dp_group) == SPMD_OK);
    float x[4 * 64];
    int y[4];
    spmd_rng r;
    spmd_rng_seed(&r, 7, (uint64_t)mesh.d);   /* each replica its own data */
    for (int i = 0; i < 4 * 64; i++) x[i] = spmd_rng_uniform(&r);
    for (int i = 0; i < 4; i++) y[i] = (int)(spmd_rng_next(&r) % 10);
    RREQ(spmd_pipe_step(pp, x, y, 4, NULL, NULL) == SPMD_OK);
    size_t nb;
    float *buf = spmd_model_buffers(spmd_pipe_model(pp), &nb);
    RREQ(nb == 8);   /* running mean and var of 4 channels */
    float lo[8], hi[8];
    RREQ(spmd_all_reduce(mesh.dp_group, buf, lo, nb, SPMD_F32, SPMD_MIN) == SPMD_OK);
    RREQ(spmd_all_reduce(mesh.dp_group, buf, hi, nb, SPMD_F32, SPMD_MAX) == SPMD_OK);
    *same = memcmp(lo, hi, sizeof lo) == 0;
    spmd_pipe_free(pp);
    spmd_layers_free(L);
    spmd_mesh_destroy(&mesh);
    return 0;
}

static int body(int rank, int world, void *arg) {
    (void)arg;
    spmd_nn_set_threads(1);   /* OpenBLAS's own threads are invisible to TSan */
    spmd_group *g = NULL;
    char err[256];
    if (spmd_group_init(NULL, &g, err, sizeof err)) {
        fprintf(stderr, "rank %d: init: %s\n", rank, err);
        return 1;
    }
    int rc = 0;
    /* GPipe on explicit cuts, 1F1B on the balanced ones */
    rc |= run(g, rank, world, SPMD_SCHEDULE_GPIPE, 0, 8);
    if (!rc) rc |= run(g, rank, world, SPMD_SCHEDULE_1F1B, 1, 8);
    if (!rc) rc = memory(g, rank, world);
    if (!rc) rc = errors(g, rank, world);
    if (!rc && world == 4) {
        int same_sync = 0, same_plain = 1;
        rc = syncbn_step(g, rank, 1, &same_sync) || syncbn_step(g, rank, 0, &same_plain);
        if (!rc && (!same_sync || same_plain)) {
            fprintf(stderr, "rank %d: the replicas' BatchNorm statistics are %s with SyncBatchNorm, %s without\n",
                    rank, same_sync ? "the same" : "different", same_plain ? "the same" : "different");
            rc = 1;
        }
    }
    spmd_group_destroy(g);
    return rc;
}

int main(void) {
    setenv("SPMD_TIMEOUT", "60", 1);
    /* the tables themselves */
    spmd_pipe_action t[8];
    CHECK_OK(spmd_pipe_schedule(SPMD_SCHEDULE_1F1B, 4, 1, 4, t));
    const char *want = "F0F1F2B0F3B1B2B3";
    char got[32] = "";
    for (int i = 0; i < 8; i++) snprintf(got + strlen(got), sizeof got - strlen(got), "%c%d", t[i].op, t[i].mb);
    CHECK_MSG(strcmp(got, want) == 0, "1f1b stage 1 of 4: %s", got);
    spmd_schedule_kind k;
    CHECK(spmd_schedule_parse("zb", &k) == SPMD_ERR_INVALID);
    char report[512];
    for (int w = 2; w <= 4; w += 2) {
        spmd_status st = spmd_spawn_timeout(w, body, NULL, 240000, report, sizeof report);
        CHECK_MSG(st == SPMD_OK, "world %d: %s", w, report);
    }
    TEST_MAIN_END();
}
