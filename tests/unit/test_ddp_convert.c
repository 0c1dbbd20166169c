/* The reducer's bulk float16/bfloat16 conversions agree bit for bit with the
 * scalar converters (round-to-nearest-even, NaN quiet, inf, subnormals, odd
 * lengths so the vector tails run). */
#include <math.h>
#include "coll/reduce.h"
#include "ddp/ddp_internal.h"
#include "harness.h"

int main(void) {
    enum { N = 4099 };
    static float src[N], back[N];
    static uint16_t h[N];
    uint32_t x = 12345;
    for (int i = 0; i < N; i++) {
        x = x * 1664525u + 1013904223u;
        uint32_t bits = x;
        float f;
        memcpy(&f, &bits, 4);
        src[i] = (i % 3 == 0) ? f : (float)((int)(x % 20001) - 10000) / 37.0f;
    }
    src[0] = INFINITY;
    src[1] = -INFINITY;
    src[2] = NAN;
    src[3] = -0.0f;
    src[4] = 1e-30f;
    src[5] = 65520.0f; /* rounds to inf in f16 */
    const float divs[] = {1.0f, 2.0f, 3.0f};
    for (int k = 0; k < 3; k++) {
        float d = divs[k];
        spmd__ddp_to_f16(h, src, N, d);
        for (int i = 0; i < N; i++) CHECK_MSG(h[i] == spmd__f32_to_f16(src[i] / d), "f16 %d: %04x vs %04x", i, h[i], spmd__f32_to_f16(src[i] / d));
        spmd__ddp_from_f16(back, h, N);
        for (int i = 0; i < N; i++) {
            float want = spmd__f16_to_f32(h[i]);
            CHECK(memcmp(&back[i], &want, 4) == 0 || (isnan(back[i]) && isnan(want)));
        }
        spmd__ddp_to_bf16(h, src, N, d);
        for (int i = 0; i < N; i++) CHECK_MSG(h[i] == spmd__f32_to_bf16(src[i] / d), "bf16 %d: %04x vs %04x", i, h[i], spmd__f32_to_bf16(src[i] / d));
        spmd__ddp_from_bf16(back, h, N);
        for (int i = 0; i < N; i++) {
            float want = spmd__bf16_to_f32(h[i]);
            CHECK(memcmp(&back[i], &want, 4) == 0);
        }
        if (test_failures) break;
    }
    TEST_MAIN_END();
}
