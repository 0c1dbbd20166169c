/* src/nn/conv_direct.c — the 3x3 stride-1 fast path: which kernel family,
 * which shapes, and the operand preparation around the kernels.
 *
 * Per image, so every prepared operand stays in the L2 cache:
 *   forward      x = the input planes (a padded copy when pad > 0),
 *                wt = w transposed to (c*9 + tap, o)
 *   weight grad  dout transposed to (p, o) a block of positions at a time;
 *                dwt (c*9 + tap, o) summed over the batch, then added to dw
 *   input grad   dout planes padded by 2 - pad, convolved with w flipped and
 *                transposed to (o*9 + tap, c)
 * Scratch comes from the caller's col / dcol buffers, sized by
 * spmd__conv_direct_col_size. */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cblas.h>
#include "common/common.h"
#include "nn/conv_direct.h"
#include "nn/internal.h"

/* Output pixels per weight-gradient block (whole rows, at least one): the
 * (pixel, o) block (16 KiB at 32 channels) stays in L1 while every input
 * channel streams past it. */
#define DW_BLOCK 128

static pthread_once_t once = PTHREAD_ONCE_INIT;
static int best_isa, active_isa, any_shape;

static void init(void) {
    best_isa = SPMD__CONV_ISA_NONE;
#if defined(__x86_64__) && defined(__GNUC__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        best_isa = SPMD__CONV_ISA_AVX2;
    if (__builtin_cpu_supports("avx512f")) best_isa = SPMD__CONV_ISA_AVX512;
#endif
    static const char *const names[] = {"blas", "avx2", "avx512"};
    active_isa = best_isa;
    const char *env = getenv("SPMD_CONV_ISA");
    if (env && *env && strcmp(env, "auto") != 0) {
        int want = -1;
        for (int i = 0; i < 3; i++)
            if (strcmp(env, names[i]) == 0) want = i;
        if (want < 0)
            SPMD_LOGW("SPMD_CONV_ISA=%s is not blas, avx2, avx512 or auto; using %s", env,
                      names[best_isa]);
        else if (want > best_isa)
            SPMD_LOGW("SPMD_CONV_ISA=%s: this CPU cannot run it; using %s", env, names[best_isa]);
        else
            active_isa = want;
    }
    SPMD_LOGD("conv kernels: %s", names[active_isa]);
}

int spmd__conv_isa(void) {
    pthread_once(&once, init);
    return active_isa;
}

int spmd__conv_set_isa(int isa, int every_shape) {
    pthread_once(&once, init);
    if (isa < SPMD__CONV_ISA_NONE) isa = SPMD__CONV_ISA_NONE;
    active_isa = isa < best_isa ? isa : best_isa;
    any_shape = every_shape != 0;
    return active_isa;
}

static size_t round_up(size_t n, size_t m) { return (n + m - 1) / m * m; }

/* Shapes the kernels can take with vectors of vl floats: 3x3, stride 1,
 * the zero padding of the flipped kernel (2 - pad) not negative, and at
 * least one vector of positions per image in both convolutions. */
static int shape_fits(const spmd_conv2d_dims *d, int vl) {
    if (d->kh != 3 || d->kw != 3 || d->stride != 1 || d->pad > 2) return 0;
    long lf = (d->oh - 1) * (d->w + 2L * d->pad) + d->ow;
    long lb = (d->h - 1) * (d->w + 2L) + d->w;
    return lf >= vl && lb >= vl;
}

/* Positions the forward kernel computes for an image whose padded-row
 * length is L: whole vectors (see spmd__dconv3_*). */
static long computed(long L, int vl) { return (L + vl - 1) / vl * vl; }

/* Shapes worth taking: at least 3/4 of the positions computed are real
 * outputs in both convolutions.  Small images (ResNet's 4x4, say) waste too
 * much on the padding columns and the rounding to whole vectors, which
 * im2col does not. */
static int shape_pays(const spmd_conv2d_dims *d, int vl) {
    long lf = (d->oh - 1) * (d->w + 2L * d->pad) + d->ow;
    long lb = (d->h - 1) * (d->w + 2L) + d->w;
    return 4L * d->oh * d->ow >= 3 * computed(lf, vl) && 4L * d->h * d->w >= 3 * computed(lb, vl);
}

/* The family for this call, or NONE. */
static int pick(const spmd_conv2d_dims *d) {
    int isa = spmd__conv_isa();
    if (isa == SPMD__CONV_ISA_NONE) return isa;
    /* with several BLAS threads the im2col path runs in parallel; these
     * kernels do not */
    if (openblas_get_num_threads() > 1) return SPMD__CONV_ISA_NONE;
    int vl = isa == SPMD__CONV_ISA_AVX512 ? SPMD__DCONV_VL_AVX512 : SPMD__DCONV_VL_AVX2;
    if (!shape_fits(d, vl) || (!any_shape && !shape_pays(d, vl))) return SPMD__CONV_ISA_NONE;
    return isa;
}

/* Scratch carving: 64-byte aligned pieces. */
static float *carve(float **p, size_t n) {
    float *q = (float *)(((uintptr_t)*p + 63) & ~(uintptr_t)63);
    *p = q + round_up(n, 16);
    return q;
}

#define ALIGN_SLACK 16

static int dw_rows(const spmd_conv2d_dims *d) {
    int r = DW_BLOCK / d->ow;
    return r < 1 ? 1 : r > d->oh ? d->oh : r;
}

size_t spmd__conv_direct_col_size(const spmd_conv2d_dims *d, int B) {
    (void)B;
    /* the narrowest vectors accept the most shapes */
    pthread_once(&once, init);
    if (!shape_fits(d, SPMD__DCONV_VL_AVX2)) return 0;
    if (!any_shape && !shape_pays(d, SPMD__DCONV_VL_AVX2)) return 0;
    size_t hp = (size_t)d->h + 2 * d->pad, wp = (size_t)d->w + 2 * d->pad;
    size_t opad = round_up((size_t)d->oc, SPMD__DCONV_OBLOCK);
    size_t cpad = round_up((size_t)d->c, SPMD__DCONV_OBLOCK);
    size_t xpad = d->pad ? round_up((size_t)d->c * hp * wp, 16) : 0;
    size_t wt = round_up((size_t)d->c * 9 * opad, 16);
    size_t col = ALIGN_SLACK + xpad + wt + round_up((size_t)dw_rows(d) * d->ow * opad, 16);
    size_t dcol = ALIGN_SLACK + round_up((size_t)d->oc * (d->h + 2) * (d->w + 2), 16) +
                  round_up((size_t)d->oc * 9 * cpad, 16);
    return col > dcol ? col : dcol;
}

/* The interior of image b of inp (C, B, H, W) into xp (C, H + 2*pad,
 * W + 2*pad); the border is zeroed once per call (clear_padded) and no image
 * writes it. */
static void clear_padded(float *xp, int C, int H, int W, int pad) {
    memset(xp, 0, sizeof(float) * (size_t)C * (H + 2 * pad) * (W + 2 * pad));
}

static void pad_image(float *xp, const float *inp, int C, int B, int H, int W, int pad, int b) {
    const int hp = H + 2 * pad, wp = W + 2 * pad;
    for (int c = 0; c < C; c++) {
        float *dst = xp + (size_t)c * hp * wp + (size_t)pad * wp + pad;
        const float *src = inp + ((size_t)c * B + b) * H * W;
        /* rows are short: a plain loop (kept so by
         * -fno-tree-loop-distribute-patterns) beats a memcpy call per row */
        for (int y = 0; y < H; y++, dst += wp, src += W)
            for (int x = 0; x < W; x++) dst[x] = src[x];
    }
}

/* Forward weights in blocks of 8 output channels (SPMD__DCONV_WBLOCK):
 * wt[((o/8)*C*9 + c*9 + t)*8 + o%8] = w[(o*C + c)*9 + t], zero for o >= OC. */
static void transpose_w(float *wt, const float *w, int C, int OC, int opad) {
    const int WB = SPMD__DCONV_WBLOCK;
    for (int o = 0; o < opad; o++)
        for (int c = 0; c < C; c++)
            for (int t = 0; t < 9; t++)
                wt[((size_t)(o / WB) * C * 9 + (size_t)c * 9 + t) * WB + o % WB] =
                    o < OC ? w[((size_t)o * C + c) * 9 + t] : 0.0f;
}

/* The input gradient's weights: the kernel flipped, input and output
 * channels swapped, the same blocked layout:
 * wf[((c/8)*OC*9 + o*9 + t)*8 + c%8] = w[o][c][8 - t], zero for c >= C. */
static void flip_w(float *wf, const float *w, int C, int OC, int cpad) {
    const int WB = SPMD__DCONV_WBLOCK;
    for (int c = 0; c < cpad; c++)
        for (int o = 0; o < OC; o++)
            for (int t = 0; t < 9; t++)
                wf[((size_t)(c / WB) * OC * 9 + (size_t)o * 9 + t) * WB + c % WB] =
                    c < C ? w[((size_t)o * C + c) * 9 + (8 - t)] : 0.0f;
}

static void run_dconv(int isa, const spmd__dconv_args *a) {
#if defined(__x86_64__)
    if (isa == SPMD__CONV_ISA_AVX512) spmd__dconv3_avx512(a);
    else spmd__dconv3_avx2(a);
#else
    (void)isa; (void)a;
#endif
}

static void run_dwconv(int isa, const spmd__dwconv_args *a) {
#if defined(__x86_64__)
    if (isa == SPMD__CONV_ISA_AVX512) spmd__dwconv3_avx512(a);
    else spmd__dwconv3_avx2(a);
#else
    (void)isa; (void)a;
#endif
}

static void run_dout_t(int isa, float *dt, const float *src, size_t plane, int cout, int opad,
                       int n) {
#if defined(__x86_64__)
    if (isa == SPMD__CONV_ISA_AVX512) spmd__dconv_dout_t_avx512(dt, src, plane, cout, opad, n);
    else spmd__dconv_dout_t_avx2(dt, src, plane, cout, opad, n);
#else
    (void)isa; (void)dt; (void)src; (void)plane; (void)cout; (void)opad; (void)n;
#endif
}

int spmd__conv_direct_forward(float *out, const float *inp, const float *w, const float *b,
                              float *col, const spmd_conv2d_dims *d, int B, int relu) {
    const int isa = pick(d);
    if (isa == SPMD__CONV_ISA_NONE) return 0;
    const int C = d->c, H = d->h, W = d->w, P = d->pad;
    const int opad = (int)round_up((size_t)d->oc, SPMD__DCONV_OBLOCK);
    float *p = col;
    float *xp = P ? carve(&p, (size_t)C * (H + 2 * P) * (W + 2 * P)) : NULL;
    float *wt = carve(&p, (size_t)C * 9 * opad);
    transpose_w(wt, w, C, d->oc, opad);
    if (P) clear_padded(xp, C, H, W, P);
    spmd__dconv_args a = {
        .xcs = P ? (size_t)(H + 2 * P) * (W + 2 * P) : (size_t)B * H * W,
        .cin = C, .wp = W + 2 * P, .hout = d->oh, .wout = d->ow,
        .wt = wt, .opad = opad, .cout = d->oc,
        .ycs = (size_t)B * d->oh * d->ow, .bias = b, .acc = 0, .relu = relu,
    };
    for (int i = 0; i < B; i++) {
        if (P) {
            pad_image(xp, inp, C, B, H, W, P, i);
            a.x = xp;
        } else {
            a.x = inp + (size_t)i * H * W;
        }
        a.y = out + (size_t)i * d->oh * d->ow;
        run_dconv(isa, &a);
    }
    return 1;
}

int spmd__conv_direct_backward(float *dinp, float *dw, float *db, const float *dout,
                               const float *inp, const float *w, float *col, float *dcol,
                               const spmd_conv2d_dims *d, int B, int acc) {
    const int isa = pick(d);
    if (isa == SPMD__CONV_ISA_NONE) return 0;
    const int C = d->c, H = d->h, W = d->w, P = d->pad, OC = d->oc, OH = d->oh, OW = d->ow;
    const int wp = W + 2 * P, hp = H + 2 * P;
    const int opad = (int)round_up((size_t)OC, SPMD__DCONV_OBLOCK);
    const size_t N = (size_t)B * OH * OW;
    if (db)
        for (int o = 0; o < OC; o++) db[o] += spmd__sum(dout + (size_t)o * N, N);

    /* weight gradient */
    float *p = col;
    float *xp = P ? carve(&p, (size_t)C * hp * wp) : NULL;
    float *dwt = carve(&p, (size_t)C * 9 * opad);
    const int rows = dw_rows(d);
    float *dt = carve(&p, (size_t)rows * OW * opad);
    memset(dwt, 0, sizeof(float) * (size_t)C * 9 * opad);
    if (P) clear_padded(xp, C, H, W, P);
    spmd__dwconv_args g = {.xcs = P ? (size_t)hp * wp : (size_t)B * H * W, .cin = C, .wp = wp,
                           .dt = dt, .wout = OW, .opad = opad, .dwt = dwt};
    for (int i = 0; i < B; i++) {
        const float *x = inp + (size_t)i * H * W;
        if (P) {
            pad_image(xp, inp, C, B, H, W, P, i);
            x = xp;
        }
        for (int oh0 = 0; oh0 < OH; oh0 += rows) {
            g.rows = OH - oh0 < rows ? OH - oh0 : rows;
            run_dout_t(isa, dt, dout + ((size_t)i * OH + oh0) * OW, N, OC, opad, g.rows * OW);
            g.x = x + (size_t)oh0 * wp;
            run_dwconv(isa, &g);
        }
    }
    for (int o = 0; o < OC; o++)
        for (int c = 0; c < C; c++)
            for (int t = 0; t < 9; t++)
                dw[((size_t)o * C + c) * 9 + t] += dwt[((size_t)c * 9 + t) * opad + o];

    if (!dinp) return 1;
    /* input gradient: dout padded by q = 2 - pad, the flipped kernel */
    const int q = 2 - P, hq = OH + 2 * q, wq = OW + 2 * q;
    const int cpad = (int)round_up((size_t)C, SPMD__DCONV_OBLOCK);
    p = dcol;
    float *dp = carve(&p, (size_t)OC * hq * wq);
    float *wf = carve(&p, (size_t)OC * 9 * cpad);
    flip_w(wf, w, C, OC, cpad);
    if (q) clear_padded(dp, OC, OH, OW, q);
    spmd__dconv_args a = {
        .x = dp, .xcs = (size_t)hq * wq, .cin = OC, .wp = wq, .hout = H, .wout = W,
        .wt = wf, .opad = cpad, .cout = C, .ycs = (size_t)B * H * W, .bias = NULL, .acc = acc,
    };
    for (int i = 0; i < B; i++) {
        if (q) pad_image(dp, dout, OC, B, OH, OW, q, i);
        else a.x = dout + (size_t)i * OH * OW, a.xcs = N;
        a.y = dinp + (size_t)i * H * W;
        run_dconv(isa, &a);
    }
    return 1;
}
