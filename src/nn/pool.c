/* pool.c — max pooling (k×k, stride k) and global average pooling. */
#include <string.h>
#include "nn/internal.h"

/* k == 2 (the seed CNN) has its own branch-free path. */
static void maxpool2(float *out, int32_t *idx, const float *inp, int planes, int h, int w) {
    const int oh = h / 2, ow = w / 2;
    for (int p = 0; p < planes; p++) {
        const float *in = inp + (size_t)p * h * w;
        float *o = out + (size_t)p * oh * ow;
        int32_t *ix = idx + (size_t)p * oh * ow;
        for (int y = 0; y < oh; y++) {
            const float *r0 = in + (size_t)(2 * y) * w, *r1 = r0 + w;
            for (int x = 0; x < ow; x++) {
                float m = r0[2 * x];
                int32_t at = 2 * y * w + 2 * x;
                float c[3] = {r0[2 * x + 1], r1[2 * x], r1[2 * x + 1]};
                int32_t ci[3] = {at + 1, at + w, at + w + 1};
                for (int j = 0; j < 3; j++) {
                    /* strict '>' keeps the first maximum as torch does; NaN wins */
                    int take = (c[j] > m) | (c[j] != c[j]);
                    m = take ? c[j] : m;
                    at = take ? ci[j] : at;
                }
                o[y * ow + x] = m;
                ix[y * ow + x] = at;
            }
        }
    }
}

void spmd_maxpool_forward(float *out, int32_t *idx, const float *inp, int planes, int h, int w,
                          int k) {
    if (k == 2) {
        maxpool2(out, idx, inp, planes, h, w);
        return;
    }
    const int oh = h / k, ow = w / k;
    for (int p = 0; p < planes; p++) {
        const float *in = inp + (size_t)p * h * w;
        float *o = out + (size_t)p * oh * ow;
        int32_t *ix = idx + (size_t)p * oh * ow;
        for (int y = 0; y < oh; y++) {
            for (int x = 0; x < ow; x++) {
                int best = (y * k) * w + x * k;
                float bv = in[best];
                for (int dy = 0; dy < k; dy++) {
                    const float *r = in + (size_t)(y * k + dy) * w + x * k;
                    for (int dx = 0; dx < k; dx++) {
                        if (r[dx] > bv || r[dx] != r[dx]) {
                            bv = r[dx];
                            best = (y * k + dy) * w + x * k + dx;
                        }
                    }
                }
                o[y * ow + x] = bv;
                ix[y * ow + x] = best;
            }
        }
    }
}

/* Scatter dout to the argmax positions; with out, only where the pooled
 * value is positive (the ReLU before the pool). */
void spmd__maxpool_relu_backward(float *dinp, const float *dout, const float *out,
                                 const int32_t *idx, int planes, int h, int w, int k, int acc) {
    const int oh = h / k, ow = w / k;
    if (!acc) memset(dinp, 0, sizeof(float) * (size_t)planes * h * w);
    for (int p = 0; p < planes; p++) {
        float *d = dinp + (size_t)p * h * w;
        const size_t o0 = (size_t)p * oh * ow;
        const float *g = dout + o0;
        const int32_t *ix = idx + o0;
        if (out)
            for (int i = 0; i < oh * ow; i++) d[ix[i]] += out[o0 + i] > 0.0f ? g[i] : 0.0f;
        else
            for (int i = 0; i < oh * ow; i++) d[ix[i]] += g[i];
    }
}

void spmd_maxpool_backward(float *dinp, const float *dout, const int32_t *idx, int planes, int h,
                           int w, int k, int acc) {
    spmd__maxpool_relu_backward(dinp, dout, NULL, idx, planes, h, w, k, acc);
}

void spmd_gap_forward(float *out, const float *inp, int C, int B, int HW) {
    const float inv = 1.0f / (float)HW;
    for (int c = 0; c < C; c++) {
        for (int b = 0; b < B; b++) {
            const float *x = inp + ((size_t)c * B + b) * HW;
            float s = 0.0f;
            for (int i = 0; i < HW; i++) s += x[i];
            out[(size_t)b * C + c] = s * inv;
        }
    }
}

SPMD__VECTOR_CLONES
void spmd_gap_backward(float *dinp, const float *dout, int C, int B, int HW, int acc) {
    const float inv = 1.0f / (float)HW;
    for (int c = 0; c < C; c++) {
        for (int b = 0; b < B; b++) {
            float *d = dinp + ((size_t)c * B + b) * HW;
            float g = dout[(size_t)b * C + c] * inv;
            if (acc) {
                for (int i = 0; i < HW; i++) d[i] += g;
            } else {
                for (int i = 0; i < HW; i++) d[i] = g;
            }
        }
    }
}
