/* test_nn_fusion.c — the model graph's fusions give the bits of the plain
 * layer sequence.
 *
 * In conv -> ReLU -> max-pool -> flatten -> linear the graph fuses three
 * things: the convolution applies the ReLU as it stores, the ReLU shares the
 * convolution's output and gradient memory (its backward masks in place),
 * and the max-pool does the ReLU's backward.  Here the same layers are run
 * one public kernel at a time into separate buffers, and the logits, every
 * parameter gradient and the first layer's input gradient (through a second
 * convolution in front) must match bit for bit.  Shapes include odd sizes,
 * whose last row and column no pooling window reads. */
#include "harness.h"
#include "nn/internal.h"

static spmd_rng trng;
static float urand(void) { return 2.0f * spmd_rng_uniform(&trng) - 1.0f; }

static float *falloc(size_t n) { return calloc(n ? n : 1, sizeof(float)); }

/* c0 (1 -> C0, pad 1) -> c1 (C0 -> C1, pad 0) -> ReLU -> pool k -> flatten -> fc. */
static void check_chain(int B, int H, int W, int C0, int C1, int k, int nout) {
    spmd_model *m = spmd__model_new("t", 1, H, W, 0);
    int x = spmd__add_conv(m, 0, C0, 3, 1, 1, 1, "c0");
    x = spmd__add_conv(m, x, C1, 3, 1, 0, 1, "c1");
    x = spmd__add_relu(m, x);
    x = spmd__add_maxpool(m, x, k);
    x = spmd__add_flatten(m, x);
    spmd__add_linear(m, x, nout, 1, "fc");
    char err[160] = "";
    CHECK_OK(spmd__model_finish(m, 11, err, sizeof err));
    if (m->err != SPMD_OK) {
        spmd_model_free(m);
        return;
    }
    /* the graph did fuse: conv c1 applies the ReLU, the pool does its backward */
    CHECK(m->nodes[1].relu_fused && m->nodes[2].relu_fused && m->nodes[3].relu_in_pool == 2);

    size_t np;
    float *p = spmd_model_params(m, &np);
    const float *w0 = p + spmd_model_param(m, 0)->offset, *b0 = p + spmd_model_param(m, 1)->offset;
    const float *w1 = p + spmd_model_param(m, 2)->offset, *b1 = p + spmd_model_param(m, 3)->offset;
    const float *wf = p + spmd_model_param(m, 4)->offset, *bf = p + spmd_model_param(m, 5)->offset;

    spmd_conv2d_dims d0, d1;
    CHECK_OK(spmd_conv2d_dims_init(&d0, 1, H, W, C0, 3, 1, 1));
    CHECK_OK(spmd_conv2d_dims_init(&d1, C0, H, W, C1, 3, 1, 0));
    const int ph = d1.oh / k, pw = d1.ow / k, feat = C1 * ph * pw;
    size_t n0 = (size_t)C0 * B * H * W, n1 = (size_t)C1 * B * d1.oh * d1.ow;
    size_t npool = (size_t)C1 * B * ph * pw;
    size_t cs = spmd_conv2d_col_size(&d0, B);
    if (spmd_conv2d_col_size(&d1, B) > cs) cs = spmd_conv2d_col_size(&d1, B);

    float *in = falloc((size_t)B * H * W), *R = falloc((size_t)B * nout);
    for (size_t i = 0; i < (size_t)B * H * W; i++) in[i] = urand();
    for (int i = 0; i < B * nout; i++) R[i] = urand();

    /* the layers one by one */
    float *a0 = falloc(n0), *z1 = falloc(n1), *r1 = falloc(n1), *pool = falloc(npool);
    float *flat = falloc(npool), *logits = falloc((size_t)B * nout), *col = falloc(cs);
    float *dcol = falloc(cs);
    int32_t *idx = calloc(npool, sizeof(int32_t));
    spmd_conv2d_forward(a0, in, w0, b0, col, &d0, B);
    spmd_conv2d_forward(z1, a0, w1, b1, col, &d1, B);
    spmd_relu_forward(r1, z1, n1);
    spmd_maxpool_forward(pool, idx, r1, C1 * B, d1.oh, d1.ow, k);
    spmd_flatten_forward(flat, pool, C1, B, ph * pw);
    spmd_linear_forward(logits, flat, wf, bf, B, feat, nout);

    float *g = falloc(np), *dflat = falloc(npool), *dpool = falloc(npool), *dr1 = falloc(n1);
    float *dz1 = falloc(n1), *da0 = falloc(n0);
    float *gw0 = g + spmd_model_param(m, 0)->offset, *gb0 = g + spmd_model_param(m, 1)->offset;
    float *gw1 = g + spmd_model_param(m, 2)->offset, *gb1 = g + spmd_model_param(m, 3)->offset;
    float *gwf = g + spmd_model_param(m, 4)->offset, *gbf = g + spmd_model_param(m, 5)->offset;
    spmd_linear_backward(dflat, gwf, gbf, R, flat, wf, B, feat, nout, 0);
    spmd_flatten_backward(dpool, dflat, C1, B, ph * pw, 0);
    spmd_maxpool_backward(dr1, dpool, idx, C1 * B, d1.oh, d1.ow, k, 0);
    spmd_relu_backward(dz1, dr1, r1, n1, 0);
    spmd_conv2d_backward(da0, gw1, gb1, dz1, a0, w1, col, dcol, &d1, B, 0);
    spmd_conv2d_backward(NULL, gw0, gb0, da0, in, w0, col, dcol, &d0, B, 0);

    /* the model */
    const float *mlogits;
    spmd_model_zero_grad(m);
    CHECK_OK(spmd_model_forward(m, in, B, &mlogits));
    CHECK_OK(spmd_model_backward(m, R, NULL, NULL));
    size_t ng;
    const float *mg = spmd_model_grads(m, &ng);
    CHECK(ng == np);
    CHECK_MSG(memcmp(mlogits, logits, sizeof(float) * (size_t)B * nout) == 0,
              "B%d %dx%d: logits differ", B, H, W);
    for (int t = 0; t < spmd_model_num_params(m); t++) {
        const spmd_tensor_info *ti = spmd_model_param(m, t);
        CHECK_MSG(memcmp(mg + ti->offset, g + ti->offset, sizeof(float) * ti->count) == 0,
                  "B%d %dx%d k%d: %s gradient differs", B, H, W, k, ti->name);
    }
    /* the ReLU's output gradient is the convolution's: masked in place */
    CHECK(m->acts[m->nodes[2].out].grad == m->acts[m->nodes[1].out].grad);
    CHECK(memcmp(m->acts[m->nodes[1].out].grad, dz1, sizeof(float) * n1) == 0);

    free(in); free(R); free(a0); free(z1); free(r1); free(pool); free(flat); free(logits);
    free(col); free(dcol); free(idx); free(g); free(dflat); free(dpool); free(dr1); free(dz1);
    free(da0);
    spmd_model_free(m);
}

/* A ReLU that two pools read still shares its convolution's memory (the
 * convolution has one reader), but neither pool does its backward: both add
 * into its gradient first.  test_nn_grad checks that graph's gradients. */
static void check_two_readers(void) {
    spmd_model *m = spmd__model_new("t", 1, 6, 6, 0);
    int c = spmd__add_conv(m, 0, 2, 3, 1, 1, 1, "c0");
    int r = spmd__add_relu(m, c);
    int a = spmd__add_maxpool(m, r, 2);
    int b = spmd__add_maxpool(m, r, 2);
    int x = spmd__add_add(m, a, b);
    x = spmd__add_flatten(m, x);
    spmd__add_linear(m, x, 3, 1, "fc");
    char err[160] = "";
    CHECK_OK(spmd__model_finish(m, 3, err, sizeof err));
    if (m->err != SPMD_OK) {
        spmd_model_free(m);
        return;
    }
    CHECK(m->nodes[0].relu_fused && m->nodes[1].relu_fused && m->nodes[1].relu_in_pool != 1);
    CHECK(m->nodes[2].relu_in_pool < 0 && m->nodes[3].relu_in_pool < 0);
    float in[2 * 36];
    for (int i = 0; i < 72; i++) in[i] = urand();
    CHECK_OK(spmd_model_forward(m, in, 2, NULL));
    CHECK(m->acts[r].grad == m->acts[c].grad && m->acts[r].data == m->acts[c].data);
    spmd_model_free(m);
}

int main(void) {
    spmd_nn_set_threads(1);
    spmd_rng_seed(&trng, 77, 0);
    check_chain(2, 28, 28, 4, 8, 2, 10);   /* the seed CNN's shapes, fewer channels */
    check_chain(3, 9, 11, 3, 5, 2, 4);     /* 7x9 after c1: pooling skips a row and a column */
    check_chain(1, 8, 8, 2, 3, 3, 2);      /* k 3 over 6x6 */
    check_two_readers();
    TEST_MAIN_END();
}
