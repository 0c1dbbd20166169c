/* linear.c — fully connected layer, y = x W^T + b, as two or three GEMMs. */
#include <cblas.h>
#include <string.h>
#include "nn/internal.h"

void spmd_linear_forward(float *out, const float *inp, const float *w, const float *b, int B,
                         int C, int OC) {
    /* out (B, OC) = inp (B, C) @ w^T (C, OC) */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, B, OC, C, 1.0f, inp, C, w, C, 0.0f,
                out, OC);
    if (b) {
        for (int i = 0; i < B; i++) {
            float *o = out + (size_t)i * OC;
            for (int j = 0; j < OC; j++) o[j] += b[j];
        }
    }
}

void spmd_linear_backward(float *dinp, float *dw, float *db, const float *dout,
                          const float *inp, const float *w, int B, int C, int OC, int acc) {
    spmd__linear_backward(dinp, dw, db, dout, inp, w, B, C, OC, acc, 1);
}

void spmd__linear_backward(float *dinp, float *dw, float *db, const float *dout,
                           const float *inp, const float *w, int B, int C, int OC, int acc,
                           int acc_w) {
    /* dw (OC, C) (+)= dout^T (OC, B) @ inp (B, C) */
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, OC, C, B, 1.0f, dout, OC, inp, C,
                acc_w ? 1.0f : 0.0f, dw, C);
    if (db) {
        if (!acc_w) memset(db, 0, sizeof(float) * (size_t)OC);
        for (int i = 0; i < B; i++) {
            const float *d = dout + (size_t)i * OC;
            for (int j = 0; j < OC; j++) db[j] += d[j];
        }
    }
    /* dinp (B, C) = dout (B, OC) @ w (OC, C) */
    if (dinp)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, B, C, OC, 1.0f, dout, OC, w, C,
                    acc ? 1.0f : 0.0f, dinp, C);
}
