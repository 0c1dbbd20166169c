/* loss.c — cross-entropy (log-softmax + NLL, mean over the batch) and MSE. */
#include <math.h>
#include "spmd/nn.h"

float spmd_cross_entropy(float *dlogits, const float *logits, const int *targets, int B,
                         int V, int *correct) {
    double total = 0.0;
    int hits = 0;
    for (int b = 0; b < B; b++) {
        const float *z = logits + (size_t)b * V;
        int arg = 0;
        for (int i = 1; i < V; i++)
            if (z[i] > z[arg]) arg = i;
        float mx = z[arg];
        double s = 0.0;
        for (int i = 0; i < V; i++) s += exp((double)(z[i] - mx));
        double lse = (double)mx + log(s);
        int t = targets[b];
        total += lse - (double)z[t];
        hits += arg == t;
        if (dlogits) {
            float *d = dlogits + (size_t)b * V;
            for (int i = 0; i < V; i++) {
                double p = exp((double)z[i] - lse);
                d[i] = (float)((p - (i == t ? 1.0 : 0.0)) / B);
            }
        }
    }
    if (correct) *correct = hits;
    return (float)(total / B);
}

float spmd_mse(float *dpred, const float *pred, const float *target, size_t n) {
    double s = 0.0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)pred[i] - target[i];
        s += d * d;
        if (dpred) dpred[i] = (float)(2.0 * d / (double)n);
    }
    return (float)(s / (double)n);
}
