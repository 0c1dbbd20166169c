/* The seeded normal generator next to the uniform one (spmd/nn.h):
 * reproducible from (seed, stream), independent across streams, and
 * distributed as N(0, 1): moments and tail mass within a few standard errors
 * of the exact values (deterministic: fixed seeds, fixed bounds). */
#include <math.h>
#include "harness.h"
#include "spmd/nn.h"

#define N 400000

static void moments(const float *x, size_t n, double *mean, double *var, double *tail3) {
    double s = 0, s2 = 0;
    size_t t = 0;
    for (size_t i = 0; i < n; i++) {
        s += x[i];
        s2 += (double)x[i] * x[i];
        if (fabs(x[i]) > 3.0) t++;
    }
    *mean = s / n;
    *var = s2 / n - *mean * *mean;
    *tail3 = (double)t / n;
}

int main(void) {
    static float a[N], b[N];
    spmd_rng r1, r2;
    /* one value per call */
    spmd_rng_seed(&r1, 42, 0);
    for (size_t i = 0; i < N; i++) a[i] = spmd_rng_normal(&r1);
    double m, v, t;
    moments(a, N, &m, &v, &t);
    printf("spmd_rng_normal: mean %.5f var %.5f P(|z|>3) %.5f (exact 0, 1, 0.00270)\n", m, v, t);
    /* standard errors at n = 4e5: mean 0.0016, variance 0.0022, tail 0.00008 */
    CHECK_MSG(fabs(m) < 0.008, "mean %g", m);
    CHECK_MSG(fabs(v - 1.0) < 0.012, "variance %g", v);
    CHECK_MSG(fabs(t - 0.0026998) < 0.0005, "tail mass %g", t);
    /* reproducible from the seed, different per stream */
    spmd_rng_seed(&r2, 42, 0);
    for (size_t i = 0; i < N; i++) b[i] = spmd_rng_normal(&r2);
    CHECK(memcmp(a, b, sizeof a) == 0);
    spmd_rng_seed(&r2, 42, 1);
    size_t same = 0;
    for (size_t i = 0; i < 1000; i++) same += spmd_rng_normal(&r2) == a[i];
    CHECK_MSG(same == 0, "stream 1 repeats %zu of stream 0's values", same);

    /* the fill: mean + std * z, odd length (the last value unpaired) */
    spmd_rng_seed(&r1, 7, 3);
    spmd_rng_normal_fill(&r1, a, N - 1, 2.0f, 0.5f);
    moments(a, N - 1, &m, &v, &t);
    printf("spmd_rng_normal_fill(2, 0.5): mean %.5f var %.5f\n", m, v);
    CHECK_MSG(fabs(m - 2.0) < 0.004, "mean %g", m);
    CHECK_MSG(fabs(v - 0.25) < 0.003, "variance %g", v);
    spmd_rng_seed(&r2, 7, 3);
    spmd_rng_normal_fill(&r2, b, N - 1, 2.0f, 0.5f);
    CHECK(memcmp(a, b, (N - 1) * sizeof(float)) == 0);
    /* successive values are uncorrelated (the pairs' sin and cos included) */
    spmd_rng_seed(&r1, 9, 0);
    spmd_rng_normal_fill(&r1, a, N, 0.0f, 1.0f);
    double c = 0;
    for (size_t i = 0; i + 1 < N; i++) c += (double)a[i] * a[i + 1];
    c /= N - 1;
    printf("lag-1 correlation %.5f\n", c);
    CHECK_MSG(fabs(c) < 0.008, "lag-1 correlation %g", c);
    /* every value finite */
    size_t bad = 0;
    for (size_t i = 0; i < N; i++) bad += !isfinite(a[i]);
    CHECK(bad == 0);
    TEST_MAIN_END();
}
