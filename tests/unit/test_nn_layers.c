/* test_nn_layers.c — models described as layer lists (spmd_layers).
 *
 *   seed001    seed 001's nn.Linear(10, 10) as a one-layer list: torch's
 *              table, a forward equal to x @ W^T + b
 *   builtin    each built-in architecture is its layer list: the same bits
 *              as spmd_model_create, whole or with CIFAR's 3x32x32 input
 *   stages     a list cut at every point (the CNN, the MLP, a small ResNet): the stages hold the whole model's
 *              parameter slices, chained forward gives the whole logits and
 *              chained backward the whole gradients, bit for bit
 *   custom     a user layer (a per-feature scale) against finite differences
 *   errors     a layer that does not fit, an empty range: errors naming the
 *              values, and the list unchanged */
#include <math.h>
#include "harness.h"
#include "spmd/nn.h"

static float *falloc(size_t n) { return calloc(n ? n : 1, sizeof(float)); }

static void fill(float *x, size_t n, uint64_t seed) {
    spmd_rng r;
    spmd_rng_seed(&r, seed, 3);
    for (size_t i = 0; i < n; i++) x[i] = 2.0f * spmd_rng_uniform(&r) - 1.0f;
}

static void test_seed001(void) {
    spmd_layers *L;
    CHECK_OK(spmd_layers_create(10, 1, 1, 1, &L));
    CHECK_OK(spmd_layers_linear(L, 10, 1, "net"));
    spmd_build_opts b = SPMD_BUILD_OPTS_DEFAULT;
    spmd_model *m = NULL;
    char err[200] = "";
    CHECK_OK(spmd_model_build(L, &b, &m, err, sizeof err));
    spmd_layers_free(L);
    if (!m) return;
    CHECK(spmd_model_num_params(m) == 2);
    CHECK(strcmp(spmd_model_param(m, 0)->name, "net.weight") == 0);
    CHECK(strcmp(spmd_model_param(m, 1)->name, "net.bias") == 0);
    CHECK(strcmp(spmd_model_arch(m), "custom") == 0);
    float x[30], want[30];
    fill(x, 30, 5);
    const float *p = spmd_model_params(m, NULL), *y;
    CHECK_OK(spmd_model_forward(m, x, 3, &y));
    for (int s = 0; s < 3; s++)
        for (int o = 0; o < 10; o++) {
            float acc = p[100 + o];
            for (int i = 0; i < 10; i++) acc += x[s * 10 + i] * p[o * 10 + i];
            want[s * 10 + o] = acc;
        }
    for (int i = 0; i < 30; i++) CHECK(fabsf(y[i] - want[i]) <= 1e-5f * (1 + fabsf(want[i])));
    spmd_model_free(m);
}

static int same_bits(const float *a, const float *b, size_t n) {
    return memcmp(a, b, sizeof(float) * n) == 0;
}

static void test_builtin(const char *arch, int c, int h, int w) {
    spmd_model_opts mo = SPMD_MODEL_OPTS_DEFAULT;
    mo.arch = arch;
    mo.in_c = c, mo.in_h = h, mo.in_w = w;
    spmd_model *a = NULL, *bm = NULL;
    spmd_layers *L = NULL;
    char err[200] = "";
    CHECK_OK(spmd_model_create(&mo, &a, err, sizeof err));
    CHECK_OK(spmd_layers_arch(arch, 10, c, h, w, &L, err, sizeof err));
    spmd_build_opts b = {arch, mo.seed, 1, 0, 0};
    if (L) CHECK_OK(spmd_model_build(L, &b, &bm, err, sizeof err));
    if (a && bm) {
        size_t na, nb;
        const float *pa = spmd_model_params(a, &na), *pb = spmd_model_params(bm, &nb);
        CHECK(na == nb && same_bits(pa, pb, na));
        int ic, ih, iw;
        spmd_model_input_shape(a, &ic, &ih, &iw);
        if (c) CHECK(ic == c && ih == h && iw == w);
    }
    spmd_model_free(a);
    spmd_model_free(bm);
    spmd_layers_free(L);
}

/* Run stages [cuts[i], cuts[i+1]) in a chain against the whole model. */
static void check_cut(spmd_layers *L, const int *cuts, int nst, int B, int dropout) {
    int n = spmd_layers_count(L);
    spmd_build_opts b = {"t", 77, dropout, 0, 0};
    spmd_model *whole = NULL, *st[8] = {0};
    char err[200] = "";
    CHECK_OK(spmd_model_build(L, &b, &whole, err, sizeof err));
    for (int s = 0; s < nst; s++) {
        b.first = cuts[s];
        b.last = cuts[s + 1];
        CHECK_OK(spmd_model_build(L, &b, &st[s], err, sizeof err));
        if (!st[s]) goto out;
    }
    if (!whole) goto out;
    int c, h, w, flat;
    spmd_layers_shape(L, -1, &c, &h, &w, &flat);
    size_t in = (size_t)c * h * w * B;
    float *x = falloc(in);
    fill(x, in, 9);
    const float *yw, *ys = x;
    CHECK_OK(spmd_model_forward(whole, x, B, &yw));
    size_t total = 0;
    const float *pw = spmd_model_params(whole, &total);
    for (int s = 0; s < nst; s++) {
        size_t off, cnt, ns;
        spmd_layers_param_range(L, cuts[s], cuts[s + 1], &off, &cnt);
        const float *ps = spmd_model_params(st[s], &ns);
        CHECK(ns == cnt && same_bits(ps, pw + off, cnt));
        CHECK_OK(spmd_model_forward(st[s], ys, B, &ys));
    }
    int nout = spmd_model_num_outputs(whole);
    CHECK(same_bits(ys, yw, (size_t)nout * B));
    float *dy = falloc((size_t)nout * B);
    fill(dy, (size_t)nout * B, 13);
    spmd_model_zero_grad(whole);
    CHECK_OK(spmd_model_backward(whole, dy, NULL, NULL));
    const float *gw = spmd_model_grads(whole, NULL), *d = dy;
    for (int s = nst - 1; s >= 0; s--) {
        spmd_model_zero_grad(st[s]);
        CHECK_OK(spmd_model_backward(st[s], d, NULL, NULL));
        size_t off, cnt;
        spmd_layers_param_range(L, cuts[s], cuts[s + 1], &off, &cnt);
        CHECK_MSG(same_bits(spmd_model_grads(st[s], NULL), gw + off, cnt), "stage %d [%d,%d)", s,
                  cuts[s], cuts[s + 1]);
        d = spmd_model_input_grad(st[s]);
        CHECK((s == 0) == (d == NULL));
    }
    free(dy);
    free(x);
out:
    (void)n;
    spmd_model_free(whole);
    for (int s = 0; s < nst; s++) spmd_model_free(st[s]);
}

/* A small ResNet: BatchNorm, blocks with and without a shortcut conv. */
static spmd_layers *small_resnet(void) {
    spmd_layers *L = NULL;
    CHECK_OK(spmd_layers_create(3, 8, 8, 0, &L));
    if (!L) return NULL;
    CHECK_OK(spmd_layers_conv2d(L, 8, 3, 1, 1, 0, "conv1"));
    CHECK_OK(spmd_layers_batchnorm2d(L, "bn1"));
    CHECK_OK(spmd_layers_relu(L));
    CHECK_OK(spmd_layers_basic_block(L, 8, 1, "layer1.0"));
    CHECK_OK(spmd_layers_basic_block(L, 16, 2, "layer2.0"));
    CHECK_OK(spmd_layers_global_avgpool(L));
    CHECK_OK(spmd_layers_linear(L, 10, 1, "fc"));
    return L;
}

static void test_stages(void) {
    const char *archs[] = {"cnn", "mlp", "small resnet"};
    for (int a = 0; a < 3; a++) {
        spmd_layers *L = NULL;
        char err[200];
        if (a < 2) CHECK_OK(spmd_layers_arch(archs[a], 10, 0, 0, 0, &L, err, sizeof err));
        else L = small_resnet();
        if (!L) continue;
        int n = spmd_layers_count(L);
        for (int k = 1; k < n; k++) {   /* every two-way cut */
            int cuts[3] = {0, k, n};
            check_cut(L, cuts, 2, 3, 0);
        }
        int four[5] = {0, n / 4, n / 2, 3 * n / 4, n};
        if (n / 4 > 0) check_cut(L, four, 4, 2, 0);
        spmd_layers_free(L);
    }
}

/* y = x * s (per feature), s initialised to 1 + small. */
static spmd_status scale_fwd(void *ctx, float *out, const float *in, float *const *p, int B) {
    int n = *(int *)ctx;
    for (int b = 0; b < B; b++)
        for (int i = 0; i < n; i++) out[b * n + i] = in[b * n + i] * p[0][i];
    return SPMD_OK;
}
static spmd_status scale_bwd(void *ctx, float *din, float *const *dp, const float *dout,
                             const float *in, const float *out, float *const *p, int B, int acc) {
    (void)out;
    int n = *(int *)ctx;
    for (int b = 0; b < B; b++)
        for (int i = 0; i < n; i++) {
            dp[0][i] += dout[b * n + i] * in[b * n + i];
            if (din) din[b * n + i] = (acc ? din[b * n + i] : 0.0f) + dout[b * n + i] * p[0][i];
        }
    return SPMD_OK;
}

static void test_custom(void) {
    static int n = 6;
    spmd_layers *L;
    CHECK_OK(spmd_layers_create(4, 1, 1, 1, &L));
    CHECK_OK(spmd_layers_linear(L, n, 1, "fc1"));
    spmd_layer_def d = {.name = "scale", .out_c = n, .out_h = 1, .out_w = 1, .out_flat = 1,
                        .nparams = 1, .param_names = {"weight"}, .param_ndim = {1},
                        .param_shape = {{n}}, .forward = scale_fwd, .backward = scale_bwd,
                        .ctx = &n};
    CHECK_OK(spmd_layers_custom(L, &d));
    CHECK_OK(spmd_layers_linear(L, 3, 1, "fc2"));
    spmd_build_opts b = SPMD_BUILD_OPTS_DEFAULT;
    spmd_model *m = NULL;
    char err[200];
    CHECK_OK(spmd_model_build(L, &b, &m, err, sizeof err));
    spmd_layers_free(L);
    if (!m) return;
    CHECK(strcmp(spmd_model_param(m, 2)->name, "scale.weight") == 0);
    float x[8], dy[6];
    fill(x, 8, 1);
    fill(dy, 6, 2);
    const float *y;
    spmd_model_zero_grad(m);
    CHECK_OK(spmd_model_forward(m, x, 2, &y));
    CHECK_OK(spmd_model_backward(m, dy, NULL, NULL));
    size_t np;
    float *p = spmd_model_params(m, &np);
    const float *g = spmd_model_grads(m, NULL);
    for (size_t i = 0; i < np; i += 3) {   /* loss = sum(y * dy): central differences */
        float keep = p[i], lp = 0, lm = 0;
        p[i] = keep + 1e-2f;
        CHECK_OK(spmd_model_forward(m, x, 2, &y));
        for (int j = 0; j < 6; j++) lp += y[j] * dy[j];
        p[i] = keep - 1e-2f;
        CHECK_OK(spmd_model_forward(m, x, 2, &y));
        for (int j = 0; j < 6; j++) lm += y[j] * dy[j];
        p[i] = keep;
        float num = (lp - lm) / 2e-2f;
        CHECK_MSG(fabsf(num - g[i]) <= 2e-3f * (1 + fabsf(num)), "param %zu: %g vs %g", i,
                  (double)num, (double)g[i]);
    }
    spmd_model_free(m);
}

static void test_errors(void) {
    spmd_layers *L;
    CHECK_OK(spmd_layers_create(1, 28, 28, 0, &L));
    CHECK_OK(spmd_layers_conv2d(L, 4, 3, 1, 0, 1, "conv1"));
    CHECK(spmd_layers_linear(L, 10, 1, "fc") == SPMD_ERR_INVALID);   /* spatial input */
    CHECK(strstr(spmd_layers_errmsg(L), "fc") && strstr(spmd_layers_errmsg(L), "layer 1"));
    CHECK(spmd_layers_conv2d(L, 4, 40, 1, 0, 1, "big") == SPMD_ERR_INVALID);
    CHECK(strstr(spmd_layers_errmsg(L), "kernel 40"));
    CHECK(spmd_layers_count(L) == 1);
    CHECK_OK(spmd_layers_flatten(L));     /* the list still works */
    CHECK_OK(spmd_layers_linear(L, 10, 1, "fc"));
    CHECK(spmd_layers_count(L) == 3);
    spmd_build_opts b = SPMD_BUILD_OPTS_DEFAULT;
    spmd_model *m = NULL;
    char err[200] = "";
    b.first = 2, b.last = 2;
    CHECK(spmd_model_build(L, &b, &m, err, sizeof err) == SPMD_ERR_INVALID && !m);
    CHECK(strstr(err, "[2, 2)"));
    b.first = 1, b.last = 5;
    CHECK(spmd_model_build(L, &b, &m, err, sizeof err) == SPMD_ERR_INVALID && !m);
    CHECK(strstr(err, "[1, 5)") && strstr(err, "3-layer"));
    spmd_layers_free(L);
    CHECK(spmd_layers_arch("resnet50", 10, 0, 0, 0, &L, err, sizeof err) == SPMD_ERR_INVALID);
    CHECK(strstr(err, "resnet50"));
    CHECK(spmd_layers_arch("cnn", 10, 1, 4, 4, &L, err, sizeof err) == SPMD_ERR_INVALID);
    CHECK(strstr(err, "1x4x4"));
}

int main(void) {
    spmd_nn_set_threads(1);   /* OpenBLAS's own threads are invisible to TSan */
    test_seed001();
    const char *archs[] = {"mlp", "cnn", "toy"};
    for (int i = 0; i < 3; i++) test_builtin(archs[i], 0, 0, 0);
    test_builtin("resnet18", 3, 32, 32);   /* (1x28x28: test_nn_torch) */
    test_builtin("cnn", 3, 32, 32);
    test_stages();
    test_custom();
    test_errors();
    TEST_MAIN_END();
}
