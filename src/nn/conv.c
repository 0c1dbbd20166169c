/* conv.c — 2-D convolution by im2col + GEMM, a few output rows at a time.
 *
 * 3x3 stride-1 convolutions first try the direct kernels of conv_direct.c
 * (no im2col, no BLAS); everything they do not take comes here.
 *
 * Activations are (C, B, H, W), so the output (OC, B, OH, OW) is a matrix
 * whose columns are the B*OH*OW output pixels in order.  For a chunk of
 * output rows (r = b*OH + oh in [r0, r1)) the im2col matrix is
 * (C*KH*KW, (r1-r0)*OW), and  w (OC, C*KH*KW) @ col  lands directly in the
 * chunk's columns of the output, the layout the next layer reads.  Chunks are
 * sized so the im2col matrix stays in the L2 cache next to OpenBLAS's
 * packing buffers:
 * building it, multiplying it and (in backward) scattering it back never goes
 * to DRAM, and no matrix is kept between forward and backward (backward
 * rebuilds its chunks, which costs less than streaming a batch-sized matrix
 * out and in again). */
#include <string.h>
#include <cblas.h>
#include "nn/conv_direct.h"
#include "nn/internal.h"

/* Target im2col chunk: 64 Ki floats (256 KiB; the L2 is 1 MiB per core on
 * the machines we measure), at least 128 columns.  OpenBLAS is as fast on
 * 32 x 144 x 288 pieces as on one 32 x 9216 x 288 product. */
#define CHUNK_FLOATS ((size_t)1 << 16)
#define CHUNK_MIN_COLS 128

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

/* Output rows per chunk for a batch of B. */
static int chunk_rows(const spmd_conv2d_dims *d, int B) {
    size_t K = (size_t)d->c * d->kh * d->kw, ow = (size_t)d->ow;
    size_t rows = CHUNK_FLOATS / (K * ow);
    size_t min_rows = (CHUNK_MIN_COLS + ow - 1) / ow;
    if (rows < min_rows) rows = min_rows;
    if (rows < 1) rows = 1;
    size_t total = (size_t)B * d->oh;
    return rows > total ? (int)total : (int)rows;
}

/* Enough for either path: which one runs is decided per call (the CPU, the
 * BLAS thread count), the scratch once per batch size. */
size_t spmd_conv2d_col_size(const spmd_conv2d_dims *d, int B) {
    size_t im2col = (size_t)d->c * d->kh * d->kw * (size_t)chunk_rows(d, B) * d->ow;
    size_t direct = spmd__conv_direct_col_size(d, B);
    return direct > im2col ? direct : im2col;
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

/* Stride 1 with three kernel columns (every 3x3 convolution of the seed
 * models): the three im2col rows of one (channel, kernel row, output row)
 * are the same input row shifted by 0, 1 and 2, so one loop writes all three
 * (and col2im reads all three into one pass over the input row) instead of
 * three short loops. */
SPMD__VECTOR_CLONES
static void im2col_s1k3(float *col, const float *inp, const spmd_conv2d_dims *d, int B, int r0,
                        int r1) {
    const int H = d->h, W = d->w, OH = d->oh, OW = d->ow, P = d->pad;
    const size_t N = (size_t)(r1 - r0) * OW;
    int lo[3], hi[3];
    for (int kw = 0; kw < 3; kw++) valid_range(d, kw, &lo[kw], &hi[kw]);
    const int a = lo[0] > lo[2] ? lo[0] : lo[2], z = hi[0] < hi[2] ? hi[0] : hi[2];
    for (int c = 0; c < d->c; c++) {
        for (int kh = 0; kh < d->kh; kh++) {
            float *d0 = col + (size_t)(c * d->kh + kh) * 3 * N;
            float *d1 = d0 + N, *d2 = d1 + N;
            for (int r = r0; r < r1; r++) {
                int b = r / OH, oh = r - b * OH, ih = oh - P + kh;
                size_t o = (size_t)(r - r0) * OW;
                if (ih < 0 || ih >= H) {
                    for (int ow = 0; ow < OW; ow++) d0[o + ow] = d1[o + ow] = d2[o + ow] = 0.0f;
                    continue;
                }
                /* s[ow + kw] is input column ow + kw - P */
                const float *s = inp + ((size_t)c * B + b) * H * W + (size_t)ih * W - P;
                float *e0 = d0 + o, *e1 = d1 + o, *e2 = d2 + o;
                for (int ow = 0; ow < a; ow++) {
                    e0[ow] = ow >= lo[0] && ow < hi[0] ? s[ow] : 0.0f;
                    e1[ow] = ow >= lo[1] && ow < hi[1] ? s[ow + 1] : 0.0f;
                    e2[ow] = ow >= lo[2] && ow < hi[2] ? s[ow + 2] : 0.0f;
                }
                for (int ow = a; ow < z; ow++) {
                    e0[ow] = s[ow];
                    e1[ow] = s[ow + 1];
                    e2[ow] = s[ow + 2];
                }
                for (int ow = z > a ? z : a; ow < OW; ow++) {
                    e0[ow] = ow >= lo[0] && ow < hi[0] ? s[ow] : 0.0f;
                    e1[ow] = ow >= lo[1] && ow < hi[1] ? s[ow + 1] : 0.0f;
                    e2[ow] = ow >= lo[2] && ow < hi[2] ? s[ow + 2] : 0.0f;
                }
            }
        }
    }
}

SPMD__VECTOR_CLONES
static void col2im_s1k3(float *dinp, const float *dcol, const spmd_conv2d_dims *d, int B, int r0,
                        int r1) {
    const int H = d->h, W = d->w, OH = d->oh, OW = d->ow, P = d->pad;
    const size_t N = (size_t)(r1 - r0) * OW;
    int lo[3], hi[3], xa = 0, xz = W;
    for (int kw = 0; kw < 3; kw++) {
        valid_range(d, kw, &lo[kw], &hi[kw]);
        if (lo[kw] - P + kw > xa) xa = lo[kw] - P + kw;
        if (hi[kw] - P + kw < xz) xz = hi[kw] - P + kw;
    }
    for (int c = 0; c < d->c; c++) {
        for (int kh = 0; kh < d->kh; kh++) {
            const float *s0 = dcol + (size_t)(c * d->kh + kh) * 3 * N;
            const float *s1 = s0 + N, *s2 = s1 + N;
            for (int r = r0; r < r1; r++) {
                int b = r / OH, oh = r - b * OH, ih = oh - P + kh;
                if (ih < 0 || ih >= H) continue;
                size_t o = (size_t)(r - r0) * OW;
                const float *t0 = s0 + o, *t1 = s1 + o, *t2 = s2 + o;
                float *row = dinp + ((size_t)c * B + b) * H * W + (size_t)ih * W;
                /* input column x receives t_kw[x + P - kw] for each kw whose
                 * output column ow = x + P - kw lies in [lo_kw, hi_kw); in
                 * [xa, xz) all three do (a plain loop), the edges are checked */
                for (int x = 0; x < W; x++) {
                    if (x == xa && xa < xz) x = xz;
                    if (x >= W) break;
                    float v = 0.0f;
                    int o0 = x + P, o1 = x + P - 1, o2 = x + P - 2;
                    if (o0 >= lo[0] && o0 < hi[0]) v += t0[o0];
                    if (o1 >= lo[1] && o1 < hi[1]) v += t1[o1];
                    if (o2 >= lo[2] && o2 < hi[2]) v += t2[o2];
                    row[x] += v;
                }
                for (int x = xa; x < xz; x++) row[x] += t0[x + P] + t1[x + P - 1] + t2[x + P - 2];
            }
        }
    }
}

/* im2col of output rows [r0, r1) (r = b*OH + oh) of inp (C, B, H, W) into
 * col (K, (r1-r0)*OW). */
SPMD__VECTOR_CLONES
static void im2col_range(float *col, const float *inp, const spmd_conv2d_dims *d, int B, int r0,
                         int r1) {
    const int H = d->h, W = d->w, OH = d->oh, OW = d->ow, S = d->stride, P = d->pad;
    const size_t N = (size_t)(r1 - r0) * OW;
    if (S == 1 && d->kw == 3) {
        im2col_s1k3(col, inp, d, B, r0, r1);
        return;
    }
    for (int c = 0; c < d->c; c++) {
        for (int kh = 0; kh < d->kh; kh++) {
            for (int kw = 0; kw < d->kw; kw++) {
                float *dst = col + ((size_t)(c * d->kh + kh) * d->kw + kw) * N;
                int lo, hi;
                valid_range(d, kw, &lo, &hi);
                for (int r = r0; r < r1; r++) {
                    int b = r / OH, oh = r - b * OH;
                    float *row = dst + (size_t)(r - r0) * OW;
                    int ih = oh * S - P + kh;
                    if (ih < 0 || ih >= H) {
                        memset(row, 0, sizeof(float) * OW);
                        continue;
                    }
                    const float *src = inp + ((size_t)c * B + b) * H * W + (size_t)ih * W + (kw - P);
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

/* Adjoint: dinp += scatter of dcol (K, (r1-r0)*OW) for output rows [r0, r1). */
SPMD__VECTOR_CLONES
static void col2im_range(float *dinp, const float *dcol, const spmd_conv2d_dims *d, int B, int r0,
                         int r1) {
    const int H = d->h, W = d->w, OH = d->oh, OW = d->ow, S = d->stride, P = d->pad;
    const size_t N = (size_t)(r1 - r0) * OW;
    if (S == 1 && d->kw == 3) {
        col2im_s1k3(dinp, dcol, d, B, r0, r1);
        return;
    }
    for (int c = 0; c < d->c; c++) {
        for (int kh = 0; kh < d->kh; kh++) {
            for (int kw = 0; kw < d->kw; kw++) {
                const float *src = dcol + ((size_t)(c * d->kh + kh) * d->kw + kw) * N;
                int lo, hi;
                valid_range(d, kw, &lo, &hi);
                for (int r = r0; r < r1; r++) {
                    int b = r / OH, oh = r - b * OH;
                    int ih = oh * S - P + kh;
                    if (ih < 0 || ih >= H) continue;
                    const float *row = src + (size_t)(r - r0) * OW;
                    float *dst = dinp + ((size_t)c * B + b) * H * W + (size_t)ih * W + (kw - P);
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

void spmd_im2col(float *col, const float *inp, const spmd_conv2d_dims *d, int B) {
    im2col_range(col, inp, d, B, 0, B * d->oh);
}

void spmd_col2im(float *dinp, const float *dcol, const spmd_conv2d_dims *d, int B) {
    col2im_range(dinp, dcol, d, B, 0, B * d->oh);
}

static void conv_forward(float *out, const float *inp, const float *w, const float *b, float *col,
                         const spmd_conv2d_dims *d, int B, int relu) {
    if (spmd__conv_direct_forward(out, inp, w, b, col, d, B, relu)) return;
    const int K = d->c * d->kh * d->kw, OW = d->ow, R = B * d->oh, N = R * OW;
    const int cr = chunk_rows(d, B);
    for (int r0 = 0; r0 < R; r0 += cr) {
        int r1 = R - r0 < cr ? R : r0 + cr, n = (r1 - r0) * OW;
        im2col_range(col, inp, d, B, r0, r1);
        /* out[:, chunk] (OC, n) = w (OC, K) @ col (K, n) */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, d->oc, n, K, 1.0f, w, K, col, n,
                    0.0f, out + (size_t)r0 * OW, N);
    }
    if (b) {
        for (int o = 0; o < d->oc; o++) {
            float *row = out + (size_t)o * N, bo = b[o];
            for (int i = 0; i < N; i++) row[i] += bo;
        }
    }
    if (relu) spmd_relu_forward(out, out, (size_t)d->oc * N);
}

void spmd_conv2d_forward(float *out, const float *inp, const float *w, const float *b,
                         float *col, const spmd_conv2d_dims *d, int B) {
    conv_forward(out, inp, w, b, col, d, B, 0);
}

void spmd_conv2d_relu_forward(float *out, const float *inp, const float *w, const float *b,
                              float *col, const spmd_conv2d_dims *d, int B) {
    conv_forward(out, inp, w, b, col, d, B, 1);
}

void spmd_conv2d_backward(float *dinp, float *dw, float *db, const float *dout,
                          const float *inp, const float *w, float *col, float *dcol,
                          const spmd_conv2d_dims *d, int B, int acc) {
    if (spmd__conv_direct_backward(dinp, dw, db, dout, inp, w, col, dcol, d, B, acc)) return;
    const int K = d->c * d->kh * d->kw, OW = d->ow, R = B * d->oh, N = R * OW;
    const int cr = chunk_rows(d, B);
    if (db)
        for (int o = 0; o < d->oc; o++) db[o] += spmd__sum(dout + (size_t)o * N, (size_t)N);
    if (dinp && !acc) memset(dinp, 0, sizeof(float) * (size_t)d->c * B * d->h * d->w);
    for (int r0 = 0; r0 < R; r0 += cr) {
        int r1 = R - r0 < cr ? R : r0 + cr, n = (r1 - r0) * OW;
        const float *dchunk = dout + (size_t)r0 * OW;
        im2col_range(col, inp, d, B, r0, r1);
        /* dw (OC, K) += dout[:, chunk] (OC, n) @ col^T (n, K) */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, d->oc, K, n, 1.0f, dchunk, N, col, n,
                    1.0f, dw, K);
        if (!dinp) continue;
        /* dcol (K, n) = w^T (K, OC) @ dout[:, chunk] (OC, n), scattered back */
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, K, n, d->oc, 1.0f, w, K, dchunk, N,
                    0.0f, dcol, n);
        col2im_range(dinp, dcol, d, B, r0, r1);
    }
}
