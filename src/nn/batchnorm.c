/* batchnorm.c — BatchNorm2d over (C, B, H, W): each channel's B*H*W values
 * are contiguous.  torch semantics: eps 1e-5, momentum 0.1, the batch is
 * normalised with its biased variance, running_var tracks the unbiased one. */
#include <math.h>
#include "nn/internal.h"

#define BN_EPS 1e-5f
#define BN_MOMENTUM 0.1f

void spmd_batchnorm_forward(float *out, float *mean, float *rstd, const float *inp,
                            const float *gamma, const float *beta, float *running_mean,
                            float *running_var, int C, int B, int HW, int training) {
    const size_t M = (size_t)B * HW;
    for (int c = 0; c < C; c++) {
        const float *x = inp + (size_t)c * M;
        float *y = out + (size_t)c * M;
        float mu, rs;
        if (training) {
            double s = 0.0;
            for (size_t i = 0; i < M; i++) s += x[i];
            double dm = s / (double)M, v = 0.0;
            for (size_t i = 0; i < M; i++) {
                double t = x[i] - dm;
                v += t * t;
            }
            double var = v / (double)M;
            double unbiased = M > 1 ? v / (double)(M - 1) : var;
            mu = (float)dm;
            rs = (float)(1.0 / sqrt(var + BN_EPS));
            running_mean[c] = (1.0f - BN_MOMENTUM) * running_mean[c] + BN_MOMENTUM * mu;
            running_var[c] = (1.0f - BN_MOMENTUM) * running_var[c] + BN_MOMENTUM * (float)unbiased;
        } else {
            mu = running_mean[c];
            rs = 1.0f / sqrtf(running_var[c] + BN_EPS);
        }
        mean[c] = mu;
        rstd[c] = rs;
        const float a = gamma[c] * rs, b = beta[c] - mu * a;
        for (size_t i = 0; i < M; i++) y[i] = x[i] * a + b;
    }
}

SPMD__VECTOR_CLONES
void spmd_batchnorm_backward(float *dinp, float *dgamma, float *dbeta, const float *dout,
                             const float *inp, const float *mean, const float *rstd,
                             const float *gamma, int C, int B, int HW, int training, int acc) {
    const size_t M = (size_t)B * HW;
    for (int c = 0; c < C; c++) {
        const float *x = inp + (size_t)c * M, *g = dout + (size_t)c * M;
        const float mu = mean[c], rs = rstd[c];
        float sg = 0.0f, sgx = 0.0f;   /* sum(dout), sum(dout * xhat) */
        for (size_t i = 0; i < M; i++) {
            sg += g[i];
            sgx += g[i] * (x[i] - mu) * rs;
        }
        dgamma[c] += sgx;
        dbeta[c] += sg;
        if (!dinp) continue;
        float *d = dinp + (size_t)c * M;
        const float k = gamma[c] * rs;
        if (training) {
            /* dx = gamma*rstd * (dout - mean(dout) - xhat * mean(dout*xhat)) */
            const float mg = sg / (float)M, mgx = sgx / (float)M;
            for (size_t i = 0; i < M; i++) {
                float v = k * (g[i] - mg - (x[i] - mu) * rs * mgx);
                d[i] = acc ? d[i] + v : v;
            }
        } else {
            for (size_t i = 0; i < M; i++) d[i] = acc ? d[i] + k * g[i] : k * g[i];
        }
    }
}
