/* src/nn/conv_direct.h — direct 3x3 stride-1 convolution kernels.
 *
 * The fast path for every 3x3 stride-1 convolution (the seed CNN's two, most
 * of ResNet's).  No im2col matrix and no BLAS: the kernels read the input
 * planes themselves, so OpenBLAS's core type (OPENBLAS_CORETYPE) does not
 * decide the speed of a training step.
 *
 * "Padded-row" trick: in an input plane of row length wp (padding included),
 * output pixel (oh, ow) reads input offsets p + kh*wp + kw with
 * p = oh*wp + ow.  Over p in [0, L), L = (hout-1)*wp + wout, that is a plain
 * 1-D convolution of contiguous runs: a vector of consecutive p is one
 * unaligned load per (channel, kh, kw).  The p with ow >= wout (wp - wout of
 * every row) are computed and thrown away.
 *
 * Forward and the input gradient are both such a convolution (the input
 * gradient is the dout planes, padded by 2 - pad, convolved with the
 * flipped, transposed kernel): spmd__dconv3_*.  The weight gradient sums
 * x[c][p + kh*wp + kw] * dout[p][o] over the output pixels only, with a
 * block of dout rows transposed to (pixel, o), o in vector lanes:
 * spmd__dwconv3_*.  Both work on one image;
 * conv_direct.c loops over the batch and prepares the operands.
 *
 * The ISA files (conv_direct_avx512.c, conv_direct_avx2.c) mark their
 * functions with target attributes; conv_direct.c picks one at run time. */
#ifndef SPMD_NN_CONV_DIRECT_H
#define SPMD_NN_CONV_DIRECT_H

#include <stddef.h>
#include "spmd/nn.h"

/* Channels are padded to a multiple of this in the transposed weight and
 * gradient layouts (the kernels work on blocks of 32 channels). */
#define SPMD__DCONV_OBLOCK 32
/* The forward weights are in blocks of 8 output channels, each block's taps
 * contiguous: wt[((o / 8)*cin*9 + c*9 + kh*3 + kw)*8 + o % 8]. */
#define SPMD__DCONV_WBLOCK 8
/* Up to this many weight floats (cin*9*opad) a forward tile runs every
 * output channel; above, the image is swept once per block of 8 channels. */
#define SPMD__DCONV_SMALL_W ((size_t)16384)

/* One image: y (cout planes) [+]= conv3x3(x, w) [+ bias]. */
typedef struct {
    const float *x;      /* cin planes of row length wp: x + c*xcs */
    size_t xcs;
    int cin, wp;
    int hout, wout;      /* the valid output; (hout-1)*wp + wout >= the vector width */
    const float *wt;     /* cin*9*opad floats in SPMD__DCONV_WBLOCK blocks; zero for o >= cout */
    int opad, cout;
    float *y;            /* y + o*ycs + oh*wout + ow */
    size_t ycs;
    const float *bias;   /* cout, or NULL */
    int acc;             /* 1: y += conv, 0: y = conv */
    int relu;            /* with acc 0: y = max(conv, 0) */
} spmd__dconv_args;

/* One block of rows output rows of one image:
 * dwt (cin*9, opad) += sum over (oh, ow) in the block of
 *                      x[c][(oh + kh)*wp + ow + kw] * dt[oh*wout + ow][o]. */
typedef struct {
    const float *x;      /* cin planes, offset to the block's first row */
    size_t xcs;
    int cin, wp;
    const float *dt;     /* (rows*wout, opad), zero for o >= cout */
    int rows, wout, opad;
    float *dwt;
} spmd__dwconv_args;

/* Vector width in floats of each kernel family (the least L it accepts). */
#define SPMD__DCONV_VL_AVX512 16
#define SPMD__DCONV_VL_AVX2 8

/* The weight gradient's dout block transposed: dt[q*opad + o] = src[o*plane + q]
 * for q < n, 0 for o >= cout. */
void spmd__dconv_dout_t_avx512(float *dt, const float *src, size_t plane, int cout, int opad,
                               int n);
void spmd__dconv_dout_t_avx2(float *dt, const float *src, size_t plane, int cout, int opad, int n);
void spmd__dconv3_avx512(const spmd__dconv_args *a);
void spmd__dwconv3_avx512(const spmd__dwconv_args *a);
void spmd__dconv3_avx2(const spmd__dconv_args *a);
void spmd__dwconv3_avx2(const spmd__dwconv_args *a);

/* Kernel families of the fast path; NONE means im2col + OpenBLAS. */
enum { SPMD__CONV_ISA_NONE, SPMD__CONV_ISA_AVX2, SPMD__CONV_ISA_AVX512 };

/* The family the conv layers use (chosen once from the CPU and
 * SPMD_CONV_ISA=blas|avx2|avx512|auto). */
int spmd__conv_isa(void);
/* Tests: force a family (lowered to what the CPU runs); every_shape 1 also
 * sends the shapes the kernels can do but that do not pay (small images)
 * to the fast path (scratch sizes follow: set it before sizing col/dcol).
 * Returns the family in effect.  Not to be called while convolutions run
 * on other threads. */
int spmd__conv_set_isa(int isa, int every_shape);

/* Scratch floats the fast path needs in col and in dcol (0 when it never
 * takes this shape). */
size_t spmd__conv_direct_col_size(const spmd_conv2d_dims *d, int B);
/* Each returns 1 when it did the work, 0 when the shape, the CPU or the BLAS
 * thread count is not for the fast path (the caller takes the im2col path). */
int spmd__conv_direct_forward(float *out, const float *inp, const float *w, const float *b,
                              float *col, const spmd_conv2d_dims *d, int B, int relu);
int spmd__conv_direct_backward(float *dinp, float *dw, float *db, const float *dout,
                               const float *inp, const float *w, float *col, float *dcol,
                               const spmd_conv2d_dims *d, int B, int acc);

#endif
