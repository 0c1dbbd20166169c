/* conv.c — 2-D convolution by im2col + one GEMM over the whole batch.
 *
 * Activations are (C, B, H, W), so the im2col matrix of a batch is
 * (C*KH*KW, B*OH*OW) and the GEMM  w (OC, C*KH*KW) @ col  gives the output
 * directly in (OC, B, OH, OW), the layout the next layer reads.  One large
 * GEMM per layer instead of one per sample keeps OpenBLAS efficient. */
#include <string.h>
#include <cblas.h>
#include "nn/internal.h"

spmd_status spmd_conv2d_dims_init(spmd_conv2d_dims *d, int c, int h, int w, int oc, int k,
                                  int stride, int pad) {
    if (c < 1 || h < 1 || w < 1 || oc < 1 || k < 1 || stride < 1 || pad < 0)
        return SPMD_ERR_INVALID;
    int oh = (h + 2 * pad - k) / stride + 1;
    int ow = (w + 2 * pad - k) / stride + 1;
    if (h + 2 * pad < k || w + 2 * pad < k || oh < 1 || ow < 1) return SPMD_ERR_INVALID;
    d->c = c; d->h = h; d->w = w;
    d->oc = oc; d->kh = k; d->kw = k;
    d->stride = stride; d->pad = pad;
    d->oh = oh; d->ow = ow;
    return SPMD_OK;
}

size_t spmd_conv2d_col_size(const spmd_conv2d_dims *d, int B) {
    return (size_t)d->c * d->kh * d->kw * (size_t)B * d->oh * d->ow;
}

/* For output column ow, the input column is ow*stride - pad + kw; the valid
 * ow range is where that lands in [0, W). */
static void valid_range(const spmd_conv2d_dims *d, int kw, int *lo, int *hi) {
    int s = d->stride, off = kw - d->pad;
    int a = off >= 0 ? 0 : (-off + s - 1) / s;
    int b = (d->w - 1 - off) >= 0 ? (d->w - 1 - off) / s + 1 : 0;
    if (b > d->ow) b = d->ow;
    if (a > b) a = b;
    *lo = a;
    *hi = b;
}

void spmd_im2col(float *col, const float *inp, const spmd_conv2d_dims *d, int B) {
    const int H = d->h, W = d->w, OH = d->oh, OW = d->ow, S = d->stride, P = d->pad;
    const size_t N = (size_t)B * OH * OW;
    for (int c = 0; c < d->c; c++) {
        for (int kh = 0; kh < d->kh; kh++) {
            for (int kw = 0; kw < d->kw; kw++) {
                float *dst = col + ((size_t)(c * d->kh + kh) * d->kw + kw) * N;
                int lo, hi;
                valid_range(d, kw, &lo, &hi);
                for (int b = 0; b < B; b++) {
                    const float *plane = inp + ((size_t)c * B + b) * H * W;
                    for (int oh = 0; oh < OH; oh++) {
                        float *row = dst + ((size_t)b * OH + oh) * OW;
                        int ih = oh * S - P + kh;
                        if (ih < 0 || ih >= H) {
                            memset(row, 0, sizeof(float) * OW);
                            continue;
                        }
                        const float *src = plane + (size_t)ih * W + (kw - P);
                        for (int ow = 0; ow < lo; ow++) row[ow] = 0.0f;
                        if (S == 1) {
                            memcpy(row + lo, src + lo, sizeof(float) * (size_t)(hi - lo));
                        } else {
                            for (int ow = lo; ow < hi; ow++) row[ow] = src[ow * S];
                        }
                        for (int ow = hi; ow < OW; ow++) row[ow] = 0.0f;
                    }
                }
            }
        }
    }
}

void spmd_col2im(float *dinp, const float *dcol, const spmd_conv2d_dims *d, int B) {
    const int H = d->h, W = d->w, OH = d->oh, OW = d->ow, S = d->stride, P = d->pad;
    const size_t N = (size_t)B * OH * OW;
    for (int c = 0; c < d->c; c++) {
        for (int kh = 0; kh < d->kh; kh++) {
            for (int kw = 0; kw < d->kw; kw++) {
                const float *src = dcol + ((size_t)(c * d->kh + kh) * d->kw + kw) * N;
                int lo, hi;
                valid_range(d, kw, &lo, &hi);
                for (int b = 0; b < B; b++) {
                    float *plane = dinp + ((size_t)c * B + b) * H * W;
                    for (int oh = 0; oh < OH; oh++) {
                        int ih = oh * S - P + kh;
                        if (ih < 0 || ih >= H) continue;
                        const float *row = src + ((size_t)b * OH + oh) * OW;
                        float *dst = plane + (size_t)ih * W + (kw - P);
                        if (S == 1) {
                            for (int ow = lo; ow < hi; ow++) dst[ow] += row[ow];
                        } else {
                            for (int ow = lo; ow < hi; ow++) dst[ow * S] += row[ow];
                        }
                    }
                }
            }
        }
    }
}

void spmd_conv2d_forward(float *out, const float *inp, const float *w, const float *b,
                         float *col, const spmd_conv2d_dims *d, int B) {
    const int K = d->c * d->kh * d->kw;
    const int N = B * d->oh * d->ow;
    spmd_im2col(col, inp, d, B);
    /* out (OC, N) = w (OC, K) @ col (K, N) */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, d->oc, N, K, 1.0f, w, K, col, N,
                0.0f, out, N);
    if (b) {
        for (int o = 0; o < d->oc; o++) {
            float *row = out + (size_t)o * N, bo = b[o];
            for (int i = 0; i < N; i++) row[i] += bo;
        }
    }
}

void spmd_conv2d_backward(float *dinp, float *dw, float *db, const float *dout,
                          const float *inp, const float *w, float *col, int col_valid,
                          float *dcol, const spmd_conv2d_dims *d, int B, int acc) {
    const int K = d->c * d->kh * d->kw;
    const int N = B * d->oh * d->ow;
    if (!col_valid) spmd_im2col(col, inp, d, B);
    /* dw (OC, K) += dout (OC, N) @ col^T (N, K) */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, d->oc, K, N, 1.0f, dout, N, col, N,
                1.0f, dw, K);
    if (db)
        for (int o = 0; o < d->oc; o++) db[o] += spmd__sum(dout + (size_t)o * N, (size_t)N);
    if (dinp) {
        /* dcol (K, N) = w^T (K, OC) @ dout (OC, N), then scatter back */
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, K, N, d->oc, 1.0f, w, K, dout, N,
                    0.0f, dcol, N);
        if (!acc) memset(dinp, 0, sizeof(float) * (size_t)d->c * B * d->h * d->w);
        spmd_col2im(dinp, dcol, d, B);
    }
}
