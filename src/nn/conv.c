/* conv.c — 2-D convolution by im2col + GEMM, a few samples at a time.
 *
 * Activations are (C, B, H, W).  For a chunk of nb samples the im2col matrix
 * is (C*KH*KW, nb*OH*OW), and  w (OC, C*KH*KW) @ col  lands directly in the
 * chunk's columns of the output (OC, B, OH, OW), the layout the next layer
 * reads.  Chunks are sized so the im2col matrix stays in the L2 cache:
 * building it, multiplying it and (in backward) scattering it back never goes
 * to DRAM, and no matrix is kept between forward and backward (backward
 * rebuilds its chunks, which costs less than streaming a batch-sized matrix
 * out and in again). */
#include <string.h>
#include <cblas.h>
#include "nn/internal.h"

/* Target im2col chunk: 128 Ki floats (512 KiB) but at least 512 columns, so
 * the GEMM stays efficient for small images. */
#define CHUNK_FLOATS ((size_t)1 << 17)
#define CHUNK_MIN_COLS 512

spmd_status spmd_conv2d_dims_init(spmd_conv2d_dims *d, int c, int h, int w, int oc, int k,
                                  int stride, int pad) {
    if (c < 1 || h < 1 || w < 1 || oc < 1 || k < 1 || stride < 1 || pad < 0)
        return SPMD_ERR_INVALID;
    if (h + 2 * pad < k || w + 2 * pad < k) return SPMD_ERR_INVALID;
    d->c = c; d->h = h; d->w = w;
    d->oc = oc; d->kh = k; d->kw = k;
    d->stride = stride; d->pad = pad;
    d->oh = (h + 2 * pad - k) / stride + 1;
    d->ow = (w + 2 * pad - k) / stride + 1;
    return SPMD_OK;
}

/* Samples per chunk for a batch of B. */
static int chunk_samples(const spmd_conv2d_dims *d, int B) {
    size_t K = (size_t)d->c * d->kh * d->kw, ohw = (size_t)d->oh * d->ow;
    size_t nb = CHUNK_FLOATS / (K * ohw);
    size_t min_nb = (CHUNK_MIN_COLS + ohw - 1) / ohw;
    if (nb < min_nb) nb = min_nb;
    if (nb < 1) nb = 1;
    return nb > (size_t)B ? B : (int)nb;
}

size_t spmd_conv2d_col_size(const spmd_conv2d_dims *d, int B) {
    return (size_t)d->c * d->kh * d->kw * (size_t)chunk_samples(d, B) * d->oh * d->ow;
}

/* For output column ow, the input column is ow*stride - pad + kw; [lo, hi)
 * is where that lands inside [0, W). */
static void valid_range(const spmd_conv2d_dims *d, int kw, int *lo, int *hi) {
    int s = d->stride, off = kw - d->pad;
    int a = off >= 0 ? 0 : (-off + s - 1) / s;
    int b = (d->w - 1 - off) >= 0 ? (d->w - 1 - off) / s + 1 : 0;
    if (b > d->ow) b = d->ow;
    if (a > b) a = b;
    *lo = a;
    *hi = b;
}

/* im2col of samples [b0, b0+nb) of inp (C, B, H, W) into col (K, nb*OH*OW). */
static void im2col_range(float *col, const float *inp, const spmd_conv2d_dims *d, int B, int b0,
                         int nb) {
    const int H = d->h, W = d->w, OH = d->oh, OW = d->ow, S = d->stride, P = d->pad;
    const size_t N = (size_t)nb * OH * OW;
    for (int c = 0; c < d->c; c++) {
        for (int kh = 0; kh < d->kh; kh++) {
            for (int kw = 0; kw < d->kw; kw++) {
                float *dst = col + ((size_t)(c * d->kh + kh) * d->kw + kw) * N;
                int lo, hi;
                valid_range(d, kw, &lo, &hi);
                for (int b = 0; b < nb; b++) {
                    const float *plane = inp + ((size_t)c * B + b0 + b) * H * W;
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
                            /* rows are short (OW floats): a plain loop beats a memcpy call */
                            for (int ow = lo; ow < hi; ow++) row[ow] = src[ow];
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

/* Adjoint: dinp samples [b0, b0+nb) += scatter of dcol (K, nb*OH*OW). */
static void col2im_range(float *dinp, const float *dcol, const spmd_conv2d_dims *d, int B, int b0,
                         int nb) {
    const int H = d->h, W = d->w, OH = d->oh, OW = d->ow, S = d->stride, P = d->pad;
    const size_t N = (size_t)nb * OH * OW;
    for (int c = 0; c < d->c; c++) {
        for (int kh = 0; kh < d->kh; kh++) {
            for (int kw = 0; kw < d->kw; kw++) {
                const float *src = dcol + ((size_t)(c * d->kh + kh) * d->kw + kw) * N;
                int lo, hi;
                valid_range(d, kw, &lo, &hi);
                for (int b = 0; b < nb; b++) {
                    float *plane = dinp + ((size_t)c * B + b0 + b) * H * W;
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

void spmd_im2col(float *col, const float *inp, const spmd_conv2d_dims *d, int B) {
    im2col_range(col, inp, d, B, 0, B);
}

void spmd_col2im(float *dinp, const float *dcol, const spmd_conv2d_dims *d, int B) {
    col2im_range(dinp, dcol, d, B, 0, B);
}

void spmd_conv2d_forward(float *out, const float *inp, const float *w, const float *b,
                         float *col, const spmd_conv2d_dims *d, int B) {
    const int K = d->c * d->kh * d->kw, ohw = d->oh * d->ow, N = B * ohw;
    const int cs = chunk_samples(d, B);
    for (int b0 = 0; b0 < B; b0 += cs) {
        int nb = B - b0 < cs ? B - b0 : cs, n = nb * ohw;
        im2col_range(col, inp, d, B, b0, nb);
        /* out[:, chunk] (OC, n) = w (OC, K) @ col (K, n) */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, d->oc, n, K, 1.0f, w, K, col, n,
                    0.0f, out + (size_t)b0 * ohw, N);
    }
    if (b) {
        for (int o = 0; o < d->oc; o++) {
            float *row = out + (size_t)o * N, bo = b[o];
            for (int i = 0; i < N; i++) row[i] += bo;
        }
    }
}

void spmd_conv2d_backward(float *dinp, float *dw, float *db, const float *dout,
                          const float *inp, const float *w, float *col, float *dcol,
                          const spmd_conv2d_dims *d, int B, int acc) {
    const int K = d->c * d->kh * d->kw, ohw = d->oh * d->ow, N = B * ohw;
    const int cs = chunk_samples(d, B);
    if (db)
        for (int o = 0; o < d->oc; o++) db[o] += spmd__sum(dout + (size_t)o * N, (size_t)N);
    for (int b0 = 0; b0 < B; b0 += cs) {
        int nb = B - b0 < cs ? B - b0 : cs, n = nb * ohw;
        const float *dchunk = dout + (size_t)b0 * ohw;
        im2col_range(col, inp, d, B, b0, nb);
        /* dw (OC, K) += dout[:, chunk] (OC, n) @ col^T (n, K) */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, d->oc, K, n, 1.0f, dchunk, N, col, n,
                    1.0f, dw, K);
        if (!dinp) continue;
        /* dcol (K, n) = w^T (K, OC) @ dout[:, chunk] (OC, n), scattered back */
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, K, n, d->oc, 1.0f, w, K, dchunk, N,
                    0.0f, dcol, n);
        if (!acc)
            for (int c = 0; c < d->c; c++)
                memset(dinp + ((size_t)c * B + b0) * d->h * d->w, 0,
                       sizeof(float) * (size_t)nb * d->h * d->w);
        col2im_range(dinp, dcol, d, B, b0, nb);
    }
}
