/* test_tp_mesh.c — tensor parallelism and DP x PP x TP meshes against one
 * process.
 *
 *   tp     the CNN (fc1 column-, fc2 row-parallel) at TP 2 and 4 and the MLP
 *          at TP 2: two SGD steps give the whole model's loss, and each
 *          shard its block of the whole model's parameters, within 1e-5
 *   mesh   dp x pp x tp = 2x2x1, 1x2x2, 2x1x2 (world 4) and 2x2x2 (world 8):
 *          the sharded CNN cut into pp stages, each data-parallel replica on
 *          its part of the batch, gradients averaged by ZeRO-1 over the
 *          data-parallel group: again the whole model's parameters
 *   errors a mesh that does not match the world, a hidden size that does not
 *          split over the tensor-parallel ranks */
#include <math.h>
#include "harness.h"
#include "spmd/parallel.h"

#define RREQ(cond)                                                                           \
    do {                                                                                     \
        if (!(cond)) {                                                                       \
            fprintf(stderr, "rank %d: %s:%d: failed: %s [%s]\n", rank, __FILE__, __LINE__, #cond, err); \
            return 1;                                                                        \
        }                                                                                    \
    } while (0)

enum { B = 8, STEPS = 2 };

/* The whole model's tensor `name` cut as the shard's shape says: whole rows
 * or columns block t of tp. */
static double shard_diff(const spmd_tensor_info *s, const float *sp, const spmd_model *w,
                         const float *wp, int t) {
    const spmd_tensor_info *f = NULL;
    for (int i = 0; i < spmd_model_num_params(w); i++)
        if (strcmp(spmd_model_param(w, i)->name, s->name) == 0) f = spmd_model_param(w, i);
    if (!f) return 1e9;
    const float *fw = wp + f->offset;
    int rows = s->shape[0], cols = s->ndim > 1 ? s->shape[1] : 1, fcols = f->ndim > 1 ? f->shape[1] : 1;
    int r0 = rows == f->shape[0] ? 0 : t * rows, c0 = cols == fcols ? 0 : t * cols;
    double d = 0, n = 0;
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++) {
            double a = sp[s->offset + (size_t)r * cols + c], b = fw[(size_t)(r0 + r) * fcols + c0 + c];
            d += (a - b) * (a - b);
            n += b * b;
        }
    return sqrt(d / (n > 0 ? n : 1));
}

static void make_batch(float *x, int *y, size_t xn, int step) {
    spmd_rng r;
    spmd_rng_seed(&r, 7, (uint64_t)step);
    for (size_t i = 0; i < xn; i++) x[i] = spmd_rng_uniform(&r);
    for (int i = 0; i < B; i++) y[i] = (int)(spmd_rng_next(&r) % 10);
}

/* dp x pp x tp over the world; pp == 1 runs the model directly. */
static int run(spmd_group *g, int rank, int dp, int pp, int tp, const char *arch) {
    char err[256] = "";
    spmd_mesh mesh;
    RREQ(spmd_mesh_create(g, dp, pp, tp, &mesh, err, sizeof err) == SPMD_OK);
    spmd_tp *tpo = NULL;
    spmd_layers *L = NULL;
    RREQ(spmd_tp_create(mesh.tp_group, &tpo) == SPMD_OK);
    RREQ(spmd_tp_arch(tpo, arch, 10, 0, 0, 0, &L, err, sizeof err) == SPMD_OK);
    spmd_pipe *pipe = NULL;
    spmd_model *m = NULL;
    if (pp > 1) {
        spmd_pipe_opts po = SPMD_PIPE_OPTS_DEFAULT;
        po.microbatches = 2;
        po.dropout = 0;
        RREQ(spmd_pipe_create(mesh.pp_group, L, &po, &pipe, err, sizeof err) == SPMD_OK);
        m = spmd_pipe_model(pipe);
    } else {
        spmd_build_opts bo = {"tp", 1234, 0, 0, 0};
        RREQ(spmd_model_build(L, &bo, &m, err, sizeof err) == SPMD_OK);
    }
    spmd_model *whole = NULL;
    spmd_model_opts mo = SPMD_MODEL_OPTS_DEFAULT;
    mo.arch = arch;
    mo.dropout = 0;
    RREQ(spmd_model_create(&mo, &whole, err, sizeof err) == SPMD_OK);
    size_t np, nw;
    float *ps = spmd_model_params(m, &np), *pw = spmd_model_params(whole, &nw);
    spmd_optim_opts oo = SPMD_OPTIM_OPTS_SGD;
    oo.lr = 0.05f, oo.momentum = 0.9f;
    spmd_zero *z = NULL;
    spmd_optim *ow = NULL;
    RREQ(spmd_zero_create(mesh.dp_group, &oo, np, 1, &z, err, sizeof err) == SPMD_OK);
    RREQ(spmd_optim_create(&oo, nw, &ow) == SPMD_OK);
    size_t xn = (size_t)B * 784, per = (size_t)B / dp;
    float *x = malloc(sizeof(float) * xn), *dl = malloc(sizeof(float) * B * 10), *logits_tp = NULL;
    int y[B];
    RREQ(x && dl);
    int first_stage = pp == 1 || mesh.p == 0, last_stage = pp == 1 || mesh.p == pp - 1;
    for (int s = 0; s < STEPS; s++) {
        make_batch(x, y, xn, s);
        const float *lg;
        spmd_model_zero_grad(whole);
        RREQ(spmd_model_forward(whole, x, B, &lg) == SPMD_OK);
        float lw = spmd_cross_entropy(dl, lg, y, B, 10, NULL);
        RREQ(spmd_model_backward(whole, dl, NULL, NULL) == SPMD_OK);
        spmd_optim_step(ow, pw, spmd_model_grads(whole, NULL));
        /* this replica's part of the batch */
        const float *xs = x + (size_t)mesh.d * per * 784;
        const int *ys = y + (size_t)mesh.d * per;
        float loss = 0;
        spmd_model_zero_grad(m);
        if (pipe) {
            RREQ(spmd_pipe_step(pipe, first_stage ? xs : NULL, last_stage ? ys : NULL, (int)per, &loss,
                                NULL) == SPMD_OK);
        } else {
            RREQ(spmd_model_forward(m, xs, (int)per, &lg) == SPMD_OK);
            loss = spmd_cross_entropy(dl, lg, ys, (int)per, 10, NULL);
            RREQ(spmd_model_backward(m, dl, NULL, NULL) == SPMD_OK);
        }
        RREQ(spmd_zero_step(z, ps, spmd_model_grads(m, NULL)) == SPMD_OK);
        if (last_stage) {   /* the mean over the replicas is the whole batch's loss */
            if (dp > 1) RREQ(spmd_all_reduce(mesh.dp_group, &loss, &loss, 1, SPMD_F32, SPMD_SUM) == SPMD_OK);
            loss /= (float)dp;
            RREQ(fabsf(loss - lw) <= 1e-5f * fabsf(lw));
        }
        for (int i = 0; i < spmd_model_num_params(m); i++) {
            double d = shard_diff(spmd_model_param(m, i), ps, whole, pw, mesh.t);
            if (d > 1e-5)
                snprintf(err, sizeof err, "step %d %s: relative difference %g", s, spmd_model_param(m, i)->name, d);
            RREQ(d <= 1e-5);
        }
    }
    if (rank == 0) printf("%s dp %d x pp %d x tp %d: loss and parameters as one process\n", arch, dp, pp, tp);
    free(logits_tp);
    free(x);
    free(dl);
    spmd_zero_free(z);
    spmd_optim_free(ow);
    spmd_model_free(whole);
    if (pipe) spmd_pipe_free(pipe);
    else spmd_model_free(m);
    spmd_layers_free(L);
    spmd_tp_free(tpo);
    spmd_mesh_destroy(&mesh);
    return 0;
}

static int errors(spmd_group *g, int rank, int world) {
    char err[256] = "";
    spmd_mesh mesh;
    RREQ(spmd_mesh_create(g, 3, 1, 1, &mesh, err, sizeof err) == SPMD_ERR_INVALID);
    char want[96];
    snprintf(want, sizeof want, "dp 3 x pp 1 x tp 1 = 3 does not match the world of %d", world);
    RREQ(strstr(err, want));
    if (world == 4) {   /* the MLP's 50 hidden units over 4 ranks */
        spmd_tp *tpo = NULL;
        spmd_layers *L = NULL;
        RREQ(spmd_tp_create(g, &tpo) == SPMD_OK);
        RREQ(spmd_tp_arch(tpo, "mlp", 10, 0, 0, 0, &L, err, sizeof err) == SPMD_ERR_INVALID && !L);
        RREQ(strstr(err, "hidden size 50 does not split over 4 ranks"));
        spmd_tp_free(tpo);
    }
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
    if (world == 2) {
        rc |= run(g, rank, 1, 1, 2, "cnn");
        if (!rc) rc |= run(g, rank, 1, 1, 2, "mlp");
    } else if (world == 4) {
        rc |= run(g, rank, 1, 1, 4, "cnn");
        if (!rc) rc |= run(g, rank, 2, 2, 1, "cnn");
        if (!rc) rc |= run(g, rank, 1, 2, 2, "cnn");
        if (!rc) rc |= run(g, rank, 2, 1, 2, "cnn");
    } else {
        rc |= run(g, rank, 2, 2, 2, "cnn");
    }
    if (!rc) rc |= errors(g, rank, world);
    spmd_group_destroy(g);
    return rc;
}

int main(void) {
    setenv("SPMD_TIMEOUT", "120", 1);
    char report[512];
    for (int w = 2; w <= 8; w *= 2) {
        spmd_status st = spmd_spawn_timeout(w, body, NULL, 300000, report, sizeof report);
        CHECK_MSG(st == SPMD_OK, "world %d: %s", w, report);
    }
    TEST_MAIN_END();
}
