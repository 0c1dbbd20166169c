/* src/ddp/ddp_internal.h — helpers of the reducer. */
#ifndef SPMD_DDP_INTERNAL_H
#define SPMD_DDP_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

/* dst[i] = half(src[i] / div); and back.  Round-to-nearest-even. */
void spmd__ddp_to_f16(uint16_t *dst, const float *src, size_t n, float div);
void spmd__ddp_from_f16(float *dst, const uint16_t *src, size_t n);
void spmd__ddp_to_bf16(uint16_t *dst, const float *src, size_t n, float div);
void spmd__ddp_from_bf16(float *dst, const uint16_t *src, size_t n);

#endif
