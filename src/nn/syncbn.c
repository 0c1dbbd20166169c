/* syncbn.c — SyncBatchNorm (spmd/syncbn.h): BatchNorm2d statistics over the
 * global batch.  Forward: every rank sums x and x^2 per channel (in double),
 * one reduce of [sum(C), sumsq(C), count] gives the global mean and biased
 * variance.  Backward: one reduce of [sum(dy)(C), sum(dy*xhat)(C), count]
 * gives the terms of dx = gamma*rstd * (dy - mean(dy) - xhat*mean(dy*xhat))
 * taken over the global batch. */
#include <math.h>
#include "spmd/nn.h"
#include "spmd/syncbn.h"

#define BN_EPS 1e-5
#define BN_MOMENTUM 0.1f

spmd_status spmd_syncbn_group_reduce(void *group, double *buf, size_t n) {
    return spmd_all_reduce((spmd_group *)group, buf, buf, n, SPMD_F64, SPMD_SUM);
}

spmd_status spmd_syncbn_forward(float *out, float *mean, float *rstd, const float *inp, const float *gamma,
                                const float *beta, float *running_mean, float *running_var, int C, int B,
                                int HW, spmd_syncbn_reduce_fn reduce, void *ctx, double *scratch) {
    if (C < 1 || B < 0 || HW < 1 || !reduce || !scratch) return SPMD_ERR_INVALID;
    const size_t M = (size_t)B * HW;
    double *sum = scratch, *sumsq = scratch + C;
    for (int c = 0; c < C; c++) {
        const float *x = inp + (size_t)c * M;
        double s = 0, ss = 0;
        for (size_t i = 0; i < M; i++) {
            s += x[i];
            ss += (double)x[i] * x[i];
        }
        sum[c] = s;
        sumsq[c] = ss;
    }
    scratch[2 * C] = (double)M;
    spmd_status st = reduce(ctx, scratch, 2 * (size_t)C + 1);
    if (st) return st;
    const double N = scratch[2 * C];
    if (N < 1) return SPMD_ERR_INVALID;
    for (int c = 0; c < C; c++) {
        double mu = sum[c] / N, var = sumsq[c] / N - mu * mu;
        if (var < 0) var = 0;
        double unbiased = N > 1 ? var * N / (N - 1) : var;
        mean[c] = (float)mu;
        rstd[c] = (float)(1.0 / sqrt(var + BN_EPS));
        running_mean[c] = (1.0f - BN_MOMENTUM) * running_mean[c] + BN_MOMENTUM * (float)mu;
        running_var[c] = (1.0f - BN_MOMENTUM) * running_var[c] + BN_MOMENTUM * (float)unbiased;
        const float a = gamma[c] * rstd[c], b = beta[c] - mean[c] * a;
        const float *x = inp + (size_t)c * M;
        float *y = out + (size_t)c * M;
        for (size_t i = 0; i < M; i++) y[i] = x[i] * a + b;
    }
    return SPMD_OK;
}

spmd_status spmd_syncbn_backward(float *dinp, float *dgamma, float *dbeta, const float *dout,
                                 const float *inp, const float *mean, const float *rstd, const float *gamma,
                                 int C, int B, int HW, int acc, spmd_syncbn_reduce_fn reduce, void *ctx,
                                 double *scratch) {
    if (C < 1 || B < 0 || HW < 1 || !reduce || !scratch) return SPMD_ERR_INVALID;
    const size_t M = (size_t)B * HW;
    double *sg = scratch, *sgx = scratch + C;
    for (int c = 0; c < C; c++) {
        const float *x = inp + (size_t)c * M, *g = dout + (size_t)c * M;
        const double mu = mean[c], rs = rstd[c];
        double a = 0, b = 0;
        for (size_t i = 0; i < M; i++) {
            a += g[i];
            b += g[i] * ((x[i] - mu) * rs);
        }
        sg[c] = a;
        sgx[c] = b;
        dgamma[c] += (float)b; /* this rank's share; DDP averages parameters */
        dbeta[c] += (float)a;
    }
    scratch[2 * C] = (double)M;
    if (!dinp) return SPMD_OK;
    spmd_status st = reduce(ctx, scratch, 2 * (size_t)C + 1);
    if (st) return st;
    const double N = scratch[2 * C];
    for (int c = 0; c < C; c++) {
        const float *x = inp + (size_t)c * M, *g = dout + (size_t)c * M;
        float *d = dinp + (size_t)c * M;
        const float k = gamma[c] * rstd[c], mu = mean[c], rs = rstd[c];
        const float mg = (float)(sg[c] / N), mgx = (float)(sgx[c] / N);
        for (size_t i = 0; i < M; i++) {
            float v = k * (g[i] * (float)1 - mg - (x[i] - mu) * rs * mgx);
            d[i] = acc ? d[i] + v : v;
        }
    }
    return SPMD_OK;
}
