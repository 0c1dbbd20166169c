/* elementwise.c — ReLU, dropout, residual add, flatten (a layout change). */
#include <string.h>
#include "nn/internal.h"

/* The loops load every operand unconditionally so the compiler can turn the
 * select into a vector mask (a conditional load would stay a branch, and a
 * branch on random signs mispredicts half the time). */
SPMD__VECTOR_CLONES
void spmd_relu_forward(float *out, const float *inp, size_t n) {
    for (size_t i = 0; i < n; i++) {
        float v = inp[i];
        out[i] = v > 0.0f ? v : 0.0f;
    }
}

SPMD__VECTOR_CLONES
void spmd_relu_backward(float *dinp, const float *dout, const float *out, size_t n, int acc) {
    if (acc) {
        for (size_t i = 0; i < n; i++) {
            float g = dout[i];
            dinp[i] += out[i] > 0.0f ? g : 0.0f;
        }
    } else {
        for (size_t i = 0; i < n; i++) {
            float g = dout[i];
            dinp[i] = out[i] > 0.0f ? g : 0.0f;
        }
    }
}

void spmd_dropout_forward(float *out, float *mask, const float *inp, size_t n, float p,
                          spmd_rng *rng) {
    const float scale = p < 1.0f ? 1.0f / (1.0f - p) : 0.0f;
    /* keep with probability 1-p; the threshold compares 24-bit integers so the
     * decision does not depend on float rounding */
    const uint64_t keep_below = (uint64_t)((double)(1.0f - p) * 16777216.0);
    uint64_t s[4] = {rng->s[0], rng->s[1], rng->s[2], rng->s[3]};
    /* two decisions per 64-bit draw (bits 40..63 and 8..31); a mask multiply,
     * not a branch: the decision is random by design */
    size_t i = 0;
    for (; i + 2 <= n; i += 2) {
        uint64_t r = spmd__xoshiro_next(s);
        float m0 = scale * (float)((r >> 40) < keep_below);
        float m1 = scale * (float)(((r >> 8) & 0xffffff) < keep_below);
        mask[i] = m0;
        mask[i + 1] = m1;
        out[i] = inp[i] * m0;
        out[i + 1] = inp[i + 1] * m1;
    }
    if (i < n) {
        float m = scale * (float)((spmd__xoshiro_next(s) >> 40) < keep_below);
        mask[i] = m;
        out[i] = inp[i] * m;
    }
    for (int j = 0; j < 4; j++) rng->s[j] = s[j];
}

SPMD__VECTOR_CLONES
void spmd_dropout_backward(float *dinp, const float *dout, const float *mask, size_t n, int acc) {
    if (acc) {
        for (size_t i = 0; i < n; i++) dinp[i] += dout[i] * mask[i];
    } else {
        for (size_t i = 0; i < n; i++) dinp[i] = dout[i] * mask[i];
    }
}

SPMD__VECTOR_CLONES
void spmd_add_forward(float *out, const float *a, const float *b, size_t n) {
    for (size_t i = 0; i < n; i++) out[i] = a[i] + b[i];
}

void spmd_flatten_forward(float *out, const float *inp, int C, int B, int HW) {
    /* out[b][c][hw] = inp[c][b][hw] */
    for (int c = 0; c < C; c++)
        for (int b = 0; b < B; b++)
            memcpy(out + ((size_t)b * C + c) * HW, inp + ((size_t)c * B + b) * HW,
                   sizeof(float) * (size_t)HW);
}

void spmd_flatten_backward(float *dinp, const float *dout, int C, int B, int HW, int acc) {
    for (int c = 0; c < C; c++) {
        for (int b = 0; b < B; b++) {
            float *d = dinp + ((size_t)c * B + b) * HW;
            const float *s = dout + ((size_t)b * C + c) * HW;
            if (acc) {
                for (int i = 0; i < HW; i++) d[i] += s[i];
            } else {
                memcpy(d, s, sizeof(float) * (size_t)HW);
            }
        }
    }
}

SPMD__VECTOR_CLONES
float spmd__sum(const float *x, size_t n) {
    float acc[16] = {0};
    size_t i = 0;
    for (; i + 16 <= n; i += 16)
        for (int j = 0; j < 16; j++) acc[j] += x[i + j];
    float s = 0.0f;
    for (; i < n; i++) s += x[i];
    for (int j = 0; j < 16; j++) s += acc[j];
    return s;
}
