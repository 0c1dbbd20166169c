/* src/coll/half.c — the exported scalar f16/bf16 conversions (reduce.h);
 * the code is in reduce_half.h so the scalar kernels can inline it. */
#include "coll/reduce.h"
#include "coll/reduce_half.h"

float spmd__f16_to_f32(uint16_t h) { return spmd__h_f16_to_f32(h); }
uint16_t spmd__f32_to_f16(float f) { return spmd__h_f32_to_f16(f); }
float spmd__bf16_to_f32(uint16_t h) { return spmd__h_bf16_to_f32(h); }
uint16_t spmd__f32_to_bf16(float f) { return spmd__h_f32_to_bf16(f); }
