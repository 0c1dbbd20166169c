/* test_nn_conv.c — convolution kernels against a plain reference.
 *
 * For every kernel family this CPU runs (im2col + OpenBLAS, the direct AVX2
 * and AVX-512 kernels) and a list of shapes (the seed CNN's two layers,
 * ResNet-like padded ones, odd sizes, batch 1, shapes only the im2col path
 * takes), the forward output, input gradient (written and accumulated),
 * weight gradient and bias gradient are compared with a direct double-
 * precision evaluation of the definition on random data.  An element's
 * error is measured against the sum of the magnitudes of its terms, the
 * scale float rounding works on.  Every buffer is allocated to its exact
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

/* One shape under one kernel family. direct: whether the fast path must take
 * it (checked through the spmd__conv_direct_* return values). */
static void check_shape(int isa, int C, int H, int W, int O, int K, int S, int P, int B,
                        int bias, int direct) {
    spmd_conv2d_dims d;
    if (spmd_conv2d_dims_init(&d, C, H, W, O, K, S, P) != SPMD_OK) {
        CHECK_MSG(0, "bad test shape");
        return;
    }
    size_t ni = (size_t)C * B * H * W, no = (size_t)O * B * d.oh * d.ow;
    size_t nw = (size_t)O * C * K * K, ncol = spmd_conv2d_col_size(&d, B);
    float *x = rand_buf(ni), *w = rand_buf(nw), *b = bias ? rand_buf((size_t)O) : NULL;
    float *dout = rand_buf(no);
    ref r;
    reference(&r, &d, B, x, w, b, dout);

    float *col = malloc(sizeof(float) * ncol), *dcol = malloc(sizeof(float) * ncol);
    float *out = nan_buf(no), *din = nan_buf(ni), *dw = rand_buf(nw);
    float *dw0 = malloc(sizeof(float) * nw), *db = rand_buf((size_t)O);
    float *db0 = malloc(sizeof(float) * (size_t)O), *din0 = rand_buf(ni), *din2 = malloc(sizeof(float) * ni);
    memcpy(dw0, dw, sizeof(float) * nw);
    memcpy(db0, db, sizeof(float) * (size_t)O);
    memcpy(din2, din0, sizeof(float) * ni);

    int took = spmd__conv_direct_forward(out, x, w, b, col, &d, B);
    CHECK_MSG(took == direct, "%s C%d %dx%d O%d k%d s%d p%d B%d: direct forward %s", isa_name(isa),
              C, H, W, O, K, S, P, B, took ? "taken" : "not taken");
    if (!took) spmd_conv2d_forward(out, x, w, b, col, &d, B);
    /* acc = 0 writes dinp; acc = 1 adds into it (din2 starts as din0) */
    spmd_conv2d_backward(din, dw, bias ? db : NULL, dout, x, w, col, dcol, &d, B, 0);
    float *dw2 = malloc(sizeof(float) * nw);
    memset(dw2, 0, sizeof(float) * nw);
    spmd_conv2d_backward(din2, dw2, NULL, dout, x, w, col, dcol, &d, B, 1);
    free(dw2);
    double e_out = rel_err(out, NULL, r.out, r.out_abs, no);
    double e_din = rel_err(din, NULL, r.din, r.din_abs, ni);
    double e_acc = rel_err(din2, din0, r.din, r.din_abs, ni);
    if (e_acc > e_din) e_din = e_acc;
    double e_dw = rel_err(dw, dw0, r.dw, r.dw_abs, nw);
    double e_db = bias ? rel_err(db, db0, r.db, r.db_abs, (size_t)O) : 0.0;
    if (getenv("TEST_VERBOSE"))
        printf("%-6s C%d %dx%d O%d k%d s%d p%d B%d: out %.2g din %.2g dw %.2g db %.2g\n",
               isa_name(isa), C, H, W, O, K, S, P, B, e_out, e_din, e_dw, e_db);
    CHECK_MSG(e_out < TOL && e_din < TOL && e_dw < TOL && e_db < TOL,
              "%s C%d %dx%d O%d k%d s%d p%d B%d: relative errors out %.2g din %.2g dw %.2g db %.2g",
              isa_name(isa), C, H, W, O, K, S, P, B, e_out, e_din, e_dw, e_db);
    free(out); free(din); free(dw); free(db); free(dw0); free(db0); free(din0); free(din2);
    free(col); free(dcol); free(x); free(w); free(b); free(dout);
    ref_free(&r);
}

int main(void) {
    spmd_rng_seed(&trng, 42, 0);
    spmd_nn_set_threads(1);   /* the direct kernels stand aside for a multi-threaded BLAS */
    int best = spmd__conv_set_isa(SPMD__CONV_ISA_AVX512);
    printf("direct conv kernels on this CPU: up to %s\n", isa_name(best));
    for (int isa = SPMD__CONV_ISA_NONE; isa <= best; isa++) {
        int got = spmd__conv_set_isa(isa);
        REQUIRE(got == isa);
        const int on = isa != SPMD__CONV_ISA_NONE;
        const int vl = isa == SPMD__CONV_ISA_AVX512 ? 16 : 8;
        /* the seed CNN's layers (smaller batch) */
        check_shape(isa, 1, 28, 28, 32, 3, 1, 0, 3, 1, on);
        check_shape(isa, 32, 26, 26, 32, 3, 1, 0, 2, 1, on);
        /* batch 1, ResNet-like padded layers, odd channel counts and sizes */
        check_shape(isa, 32, 26, 26, 32, 3, 1, 0, 1, 1, on);
        check_shape(isa, 16, 8, 8, 16, 3, 1, 1, 4, 0, on);
        check_shape(isa, 64, 4, 4, 64, 3, 1, 1, 2, 0, on);   /* L = 22: one 16-wide tile */
        check_shape(isa, 3, 7, 5, 5, 3, 1, 1, 2, 1, on);
        check_shape(isa, 5, 9, 13, 17, 3, 1, 2, 1, 1, on);
        check_shape(isa, 33, 11, 6, 40, 3, 1, 0, 3, 1, on);
        check_shape(isa, 2, 19, 37, 3, 3, 1, 1, 2, 1, on);
        check_shape(isa, 7, 3, 30, 9, 3, 1, 0, 1, 1, on);    /* one output row */
        check_shape(isa, 4, 3, 3, 6, 3, 1, 1, 2, 1, on && vl <= 13);   /* L = 13: AVX2 only */
        /* shapes only the im2col path takes */
        check_shape(isa, 3, 2, 2, 2, 3, 1, 1, 2, 1, 0);      /* L = 6 */
        check_shape(isa, 2, 1, 1, 2, 3, 1, 1, 3, 1, 0);      /* 1x1 image */
        check_shape(isa, 4, 9, 9, 8, 3, 2, 1, 2, 0, 0);      /* stride 2 */
        check_shape(isa, 4, 9, 9, 8, 1, 1, 0, 2, 1, 0);      /* 1x1 kernel */
        check_shape(isa, 3, 8, 8, 4, 5, 1, 2, 2, 1, 0);      /* 5x5 */
        check_shape(isa, 3, 8, 8, 4, 3, 1, 3, 1, 1, 0);      /* pad 3 */
    }
    spmd__conv_set_isa(best);
    /* with several BLAS threads the im2col path (threaded) is taken; not
     * under TSan, which cannot see OpenBLAS's own synchronisation */
#if !defined(__SANITIZE_THREAD__) && !SPMD_TEST_TSAN_CLANG
    spmd_nn_set_threads(2);
    if (best != SPMD__CONV_ISA_NONE && openblas_get_num_threads() > 1)
        check_shape(best, 32, 26, 26, 32, 3, 1, 0, 1, 1, 0);
    spmd_nn_set_threads(1);
#endif
    TEST_MAIN_END();
}
