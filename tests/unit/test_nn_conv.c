/* test_nn_conv.c — convolution kernels against a plain reference.
 *
 * For every kernel family this CPU runs (im2col + OpenBLAS, the direct AVX2
 * and AVX-512 kernels, these also on the small shapes they can do but are
 * not given by default) and a list of shapes (the seed CNN's two layers,
 * ResNet-like padded ones, odd sizes and channel counts, batch 1, shapes
 * only the im2col path takes), the forward output, input gradient (written
 * and accumulated),
 * weight gradient and bias gradient are compared with a direct double-
 * precision evaluation of the definition on random data.  An element's
 * error is measured against the sum of the magnitudes of its terms, the
 * scale float rounding works on.  The forward with its ReLU fused
 * (spmd_conv2d_relu_forward) must equal the forward then spmd_relu_forward
 * bit for bit on every path.  Every buffer is allocated to its exact
 * size, so the sanitizer builds catch a kernel touching anything past it;
 * outputs start as NaN so a position nobody writes shows. */
#include <math.h>
#include <cblas.h>
#include "harness.h"
#include "nn/conv_direct.h"
#include "nn/internal.h"

#if defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define SPMD_TEST_TSAN_CLANG 1
#endif
#endif
#ifndef SPMD_TEST_TSAN_CLANG
#define SPMD_TEST_TSAN_CLANG 0
#endif

static spmd_rng trng;

static float *rand_buf(size_t n) {
    float *p = malloc(sizeof(float) * (n ? n : 1));
    for (size_t i = 0; i < n; i++) p[i] = 2.0f * spmd_rng_uniform(&trng) - 1.0f;
    return p;
}

static float *nan_buf(size_t n) {
    float *p = malloc(sizeof(float) * (n ? n : 1));
    for (size_t i = 0; i < n; i++) p[i] = NAN;
    return p;
}

/* Reference: out, dinp, dw, db from the definition, with |term| sums. */
typedef struct {
    double *out, *out_abs, *din, *din_abs, *dw, *dw_abs, *db, *db_abs;
} ref;

static void reference(ref *r, const spmd_conv2d_dims *d, int B, const float *x, const float *w,
                      const float *b, const float *dout) {
    const int C = d->c, H = d->h, W = d->w, O = d->oc, K = d->kh, S = d->stride, P = d->pad;
    const int OH = d->oh, OW = d->ow;
    size_t no = (size_t)O * B * OH * OW, ni = (size_t)C * B * H * W, nw = (size_t)O * C * K * K;
    r->out = calloc(no, sizeof(double)); r->out_abs = calloc(no, sizeof(double));
    r->din = calloc(ni, sizeof(double)); r->din_abs = calloc(ni, sizeof(double));
    r->dw = calloc(nw, sizeof(double)); r->dw_abs = calloc(nw, sizeof(double));
    r->db = calloc((size_t)O, sizeof(double)); r->db_abs = calloc((size_t)O, sizeof(double));
    for (int o = 0; o < O; o++)
        for (int n = 0; n < B; n++)
            for (int oh = 0; oh < OH; oh++)
                for (int ow = 0; ow < OW; ow++) {
                    size_t oi = (((size_t)o * B + n) * OH + oh) * OW + ow;
                    double g = dout[oi];
                    r->out[oi] = b ? b[o] : 0.0;
                    r->out_abs[oi] = b ? fabs(b[o]) : 0.0;
                    r->db[o] += g;
                    r->db_abs[o] += fabs(g);
                    for (int c = 0; c < C; c++)
                        for (int kh = 0; kh < K; kh++)
                            for (int kw = 0; kw < K; kw++) {
                                int ih = oh * S - P + kh, iw = ow * S - P + kw;
                                if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                                size_t xi = (((size_t)c * B + n) * H + ih) * W + iw;
                                size_t wi = (((size_t)o * C + c) * K + kh) * K + kw;
                                r->out[oi] += (double)x[xi] * w[wi];
                                r->out_abs[oi] += fabs((double)x[xi] * w[wi]);
                                r->din[xi] += g * w[wi];
                                r->din_abs[xi] += fabs(g * w[wi]);
                                r->dw[wi] += g * x[xi];
                                r->dw_abs[wi] += fabs(g * x[xi]);
                            }
                }
}

static void ref_free(ref *r) {
    free(r->out); free(r->out_abs); free(r->din); free(r->din_abs);
    free(r->dw); free(r->dw_abs); free(r->db); free(r->db_abs);
}

/* Largest |got - (base + want)| / (|base| + abs + tiny) over n elements. */
static double rel_err(const float *got, const float *base, const double *want, const double *abs,
                      size_t n) {
    double worst = 0.0;
    for (size_t i = 0; i < n; i++) {
        double b0 = base ? base[i] : 0.0;
        double e = fabs((double)got[i] - (b0 + want[i])) / (fabs(b0) + abs[i] + 1e-30);
        if (!(e <= worst)) worst = e;   /* NaN wins */
    }
    return worst;
}

#define TOL 1e-5

static const char *isa_name(int isa) {
    return isa == SPMD__CONV_ISA_AVX512 ? "avx512" : isa == SPMD__CONV_ISA_AVX2 ? "avx2" : "blas";
}

typedef struct {
    int C, H, W, O, K, S, P, B, bias;
    /* whether the direct kernels take it with 16- / 8-float vectors: by
     * default (take), and with every_shape (fits) */
    int take16, take8, fits16, fits8;
    const char *what;
} shape;

/* Run one path on one shape and compare with the reference.  direct:
 * whether spmd__conv_direct_* must report having done the work. */
static void check_path(const char *path, const shape *t, const spmd_conv2d_dims *d, const ref *r,
                       const float *x, const float *w, const float *b, const float *dout,
                       int direct) {
    const int B = t->B, O = t->O;
    size_t ni = (size_t)t->C * B * t->H * t->W, no = (size_t)O * B * d->oh * d->ow;
    size_t nw = (size_t)O * t->C * t->K * t->K, ncol = spmd_conv2d_col_size(d, B);
    float *col = malloc(sizeof(float) * ncol), *dcol = malloc(sizeof(float) * ncol);
    float *out = nan_buf(no), *din = nan_buf(ni), *dw = rand_buf(nw), *db = rand_buf((size_t)O);
    float *dw0 = malloc(sizeof(float) * nw), *db0 = malloc(sizeof(float) * (size_t)O);
    float *din0 = rand_buf(ni), *din2 = malloc(sizeof(float) * ni), *dw2 = calloc(nw, sizeof(float));
    memcpy(dw0, dw, sizeof(float) * nw);
    memcpy(db0, db, sizeof(float) * (size_t)O);
    memcpy(din2, din0, sizeof(float) * ni);

    int took = spmd__conv_direct_forward(out, x, w, b, col, d, B, 0);
    CHECK_MSG(took == direct, "%s, %s: direct forward %s", path, t->what,
              took ? "taken" : "not taken");
    if (!took) spmd_conv2d_forward(out, x, w, b, col, d, B);
    /* fused ReLU (dispatched like the forward above): bit-identical to a separate ReLU */
    float *fused = nan_buf(no), *relu = malloc(sizeof(float) * no);
    spmd_relu_forward(relu, out, no);
    spmd_conv2d_relu_forward(fused, x, w, b, col, d, B);
    CHECK_MSG(memcmp(fused, relu, sizeof(float) * no) == 0, "%s, %s: fused ReLU differs", path, t->what);
    free(fused);
    free(relu);
    /* acc = 0 writes dinp; acc = 1 adds into it (din2 starts as din0) */
    spmd_conv2d_backward(din, dw, b ? db : NULL, dout, x, w, col, dcol, d, B, 0);
    spmd_conv2d_backward(din2, dw2, NULL, dout, x, w, col, dcol, d, B, 1);
    double e_out = rel_err(out, NULL, r->out, r->out_abs, no);
    double e_din = rel_err(din, NULL, r->din, r->din_abs, ni);
    double e_acc = rel_err(din2, din0, r->din, r->din_abs, ni);
    if (e_acc > e_din) e_din = e_acc;
    double e_dw = rel_err(dw, dw0, r->dw, r->dw_abs, nw);
    double e_db = b ? rel_err(db, db0, r->db, r->db_abs, (size_t)O) : 0.0;
    if (getenv("TEST_VERBOSE"))
        printf("%-12s %-28s out %.2g din %.2g dw %.2g db %.2g\n", path, t->what, e_out, e_din,
               e_dw, e_db);
    CHECK_MSG(e_out < TOL && e_din < TOL && e_dw < TOL && e_db < TOL,
              "%s, %s: relative errors out %.2g din %.2g dw %.2g db %.2g", path, t->what, e_out,
              e_din, e_dw, e_db);
    free(out); free(din); free(dw); free(db); free(dw0); free(db0); free(din0); free(din2);
    free(dw2); free(col); free(dcol);
}

/* One shape on random data under every path this CPU runs: im2col +
 * OpenBLAS, then each direct family with its default shape choice and
 * with every shape it can do. */
static void check_shape(const shape *t, int best) {
    spmd_conv2d_dims d;
    if (spmd_conv2d_dims_init(&d, t->C, t->H, t->W, t->O, t->K, t->S, t->P) != SPMD_OK) {
        CHECK_MSG(0, "bad test shape %s", t->what);
        return;
    }
    size_t ni = (size_t)t->C * t->B * t->H * t->W, no = (size_t)t->O * t->B * d.oh * d.ow;
    float *x = rand_buf(ni), *w = rand_buf((size_t)t->O * t->C * t->K * t->K);
    float *b = t->bias ? rand_buf((size_t)t->O) : NULL, *dout = rand_buf(no);
    ref r;
    reference(&r, &d, t->B, x, w, b, dout);
    spmd__conv_set_isa(SPMD__CONV_ISA_NONE, 0);
    check_path("blas", t, &d, &r, x, w, b, dout, 0);
    if (best >= SPMD__CONV_ISA_AVX2) {
        spmd__conv_set_isa(SPMD__CONV_ISA_AVX2, 0);
        check_path("avx2", t, &d, &r, x, w, b, dout, t->take8);
        spmd__conv_set_isa(SPMD__CONV_ISA_AVX2, 1);
        check_path("avx2/every", t, &d, &r, x, w, b, dout, t->fits8);
    }
    if (best >= SPMD__CONV_ISA_AVX512) {
        spmd__conv_set_isa(SPMD__CONV_ISA_AVX512, 0);
        check_path("avx512", t, &d, &r, x, w, b, dout, t->take16);
        spmd__conv_set_isa(SPMD__CONV_ISA_AVX512, 1);
        check_path("avx512/every", t, &d, &r, x, w, b, dout, t->fits16);
    }
    spmd__conv_set_isa(best, 0);
    free(x); free(w); free(b); free(dout);
    ref_free(&r);
}

static const shape shapes[] = {
    /* C  H   W   O  K  S  P  B bias  take16/8 fits16/8 */
    {1, 28, 28, 32, 3, 1, 0, 3, 1, 1, 1, 1, 1, "seed conv1 (batch 3)"},
    {32, 26, 26, 32, 3, 1, 0, 2, 1, 1, 1, 1, 1, "seed conv2 (batch 2)"},
    {32, 26, 26, 32, 3, 1, 0, 1, 1, 1, 1, 1, 1, "seed conv2, batch 1"},
    {16, 8, 8, 16, 3, 1, 1, 4, 0, 1, 1, 1, 1, "16ch 8x8 pad 1"},
    {64, 10, 10, 64, 3, 1, 1, 2, 0, 1, 1, 1, 1, "64ch 10x10 (weights by block)"},
    {40, 9, 9, 45, 3, 1, 1, 1, 1, 0, 1, 1, 1, "40->45ch 9x9 (weights by block)"},
    {5, 9, 13, 17, 3, 1, 2, 1, 1, 1, 1, 1, 1, "5->17ch 9x13 pad 2"},
    {2, 19, 37, 3, 3, 1, 1, 2, 1, 1, 1, 1, 1, "2->3ch 19x37 pad 1"},
    {7, 3, 30, 9, 3, 1, 0, 1, 1, 1, 1, 1, 1, "one output row"},
    /* the kernels can, but the default sends them to im2col */
    {64, 4, 4, 64, 3, 1, 1, 2, 0, 0, 0, 1, 1, "64ch 4x4 pad 1"},
    {3, 7, 5, 5, 3, 1, 1, 2, 1, 0, 0, 1, 1, "3->5ch 7x5 pad 1"},
    {33, 11, 6, 40, 3, 1, 0, 3, 1, 0, 0, 1, 1, "33->40ch 11x6"},
    {4, 3, 3, 6, 3, 1, 1, 2, 1, 0, 0, 0, 1, "3x3 pad 1 (L = 13)"},
    /* shapes only the im2col path takes */
    {3, 2, 2, 2, 3, 1, 1, 2, 1, 0, 0, 0, 0, "2x2 pad 1 (L = 6)"},
    {2, 1, 1, 2, 3, 1, 1, 3, 1, 0, 0, 0, 0, "1x1 image"},
    {4, 9, 9, 8, 3, 2, 1, 2, 0, 0, 0, 0, 0, "stride 2"},
    {4, 9, 9, 8, 1, 1, 0, 2, 1, 0, 0, 0, 0, "1x1 kernel"},
    {3, 8, 8, 4, 5, 1, 2, 2, 1, 0, 0, 0, 0, "5x5"},
    {3, 8, 8, 4, 3, 1, 3, 1, 1, 0, 0, 0, 0, "pad 3"},
};

int main(void) {
    spmd_rng_seed(&trng, 42, 0);
    spmd_nn_set_threads(1);   /* the direct kernels stand aside for a multi-threaded BLAS */
    int best = spmd__conv_set_isa(SPMD__CONV_ISA_AVX512, 0);
    printf("direct conv kernels on this CPU: up to %s\n", isa_name(best));
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) check_shape(&shapes[i], best);
    /* with several BLAS threads the im2col path (threaded) is taken; not
     * under TSan, which cannot see OpenBLAS's own synchronisation */
#if !defined(__SANITIZE_THREAD__) && !SPMD_TEST_TSAN_CLANG
    spmd_nn_set_threads(2);
    if (best != SPMD__CONV_ISA_NONE && openblas_get_num_threads() > 1) {
        const shape t = {32, 26, 26, 32, 3, 1, 0, 1, 1, 0, 0, 0, 0, "seed conv2, 2 BLAS threads"};
        spmd_conv2d_dims d;
        spmd_conv2d_dims_init(&d, t.C, t.H, t.W, t.O, 3, 1, 0);
        size_t no = (size_t)t.O * d.oh * d.ow;
        float *x = rand_buf((size_t)t.C * t.H * t.W), *w = rand_buf((size_t)t.O * t.C * 9);
        float *out = malloc(sizeof(float) * no), *col = malloc(sizeof(float) * spmd_conv2d_col_size(&d, 1));
        CHECK(spmd__conv_direct_forward(out, x, w, NULL, col, &d, 1, 0) == 0);
        free(x); free(w); free(out); free(col);
    }
    spmd_nn_set_threads(1);
#endif
    TEST_MAIN_END();
}
