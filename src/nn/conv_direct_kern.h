/* src/nn/conv_direct_kern.h — the direct 3x3 kernels, written once for both
 * vector widths.  Included by conv_direct_avx512.c and conv_direct_avx2.c,
 * which define first:
 *   KT            the target attribute of every function here
 *   VL, VEC       floats per vector, the vector type
 *   VZERO() VLOAD(p) VSTORE(p, v) VBCAST(p) VFMA(a, b, c) VADD(a, b)
 *   MASK, MASK_LANES(lo, hi)          lanes [lo, hi) set
 *   VLOADM(p, m) VSTOREM(p, m, v)     masked load (zero elsewhere) / store;
 *                                     masked-off lanes are not accessed
 *   FWD_TO        output channels per forward tile (accumulators: FWD_TO x 3)
 *   DW_KH, DW_OV  kernel rows and vectors of 32/VL channels per weight-
 *                 gradient tile (accumulators: DW_KH*3 x DW_OV)
 *   NAME(f)       f with the family's suffix
 * See conv_direct.h for the layouts. */

#include <stdint.h>

#define FWD_VMAX 3                    /* vectors of positions per forward tile */
#define SEG_MAX (FWD_VMAX * (VL + 2)) /* rows one tile can touch, bounded */

/* Where a tile's lanes go: lanes m of vector v land at y + dst + lane. */
typedef struct {
    int v;
    MASK m;
    ptrdiff_t dst;
} NAME(seg);

/* The output segments of the tile [p0, p0 + V*VL), skipping p < from (the
 * last tile of an image is moved back to end at L, over part of the one
 * before it: those outputs are already written, and with acc must not be
 * added twice). */
KT static int NAME(tile_segs)(NAME(seg) *s, int p0, int from, int V, int wp, int wout) {
    int n = 0;
    for (int v = 0; v < V; v++) {
        int a = p0 + v * VL, e = a + VL, lo = a > from ? a : from;
        for (int row = lo / wp; row * wp < e; row++) {
            int r0 = row * wp, r1 = r0 + wout;
            int x0 = lo > r0 ? lo : r0, x1 = e < r1 ? e : r1;
            if (x0 >= x1) continue;
            s[n].v = v;
            s[n].m = MASK_LANES(x0 - a, x1 - a);
            s[n].dst = (ptrdiff_t)a - (ptrdiff_t)row * (wp - wout);
            n++;
        }
    }
    return n;
}

/* FWD_TO output channels x V vectors of positions, summed over cin*9 taps,
 * into tmp[j][v*VL + lane]. */
KT static inline __attribute__((always_inline)) void NAME(fwd_tile)(float *tmp, const float *xp,
                                                                   size_t xcs, int wp, int cin,
                                                                   const float *wt, int opad,
                                                                   const int V) {
    VEC acc[FWD_TO][FWD_VMAX];
#pragma GCC unroll 16
    for (int j = 0; j < FWD_TO; j++)
#pragma GCC unroll 3
        for (int v = 0; v < V; v++) acc[j][v] = VZERO();
    for (int c = 0; c < cin; c++, xp += xcs, wt += 9 * (size_t)opad) {
#pragma GCC unroll 3
        for (int kh = 0; kh < 3; kh++) {
#pragma GCC unroll 3
            for (int kw = 0; kw < 3; kw++) {
                const float *xs = xp + kh * wp + kw;
                const float *ws = wt + (kh * 3 + kw) * opad;
                VEC xv[FWD_VMAX];
#pragma GCC unroll 3
                for (int v = 0; v < V; v++) xv[v] = VLOAD(xs + v * VL);
#pragma GCC unroll 16
                for (int j = 0; j < FWD_TO; j++) {
                    VEC w = VBCAST(ws + j);
#pragma GCC unroll 3
                    for (int v = 0; v < V; v++) acc[j][v] = VFMA(w, xv[v], acc[j][v]);
                }
            }
        }
    }
#pragma GCC unroll 16
    for (int j = 0; j < FWD_TO; j++)
#pragma GCC unroll 3
        for (int v = 0; v < V; v++) VSTORE(tmp + j * FWD_VMAX * VL + v * VL, acc[j][v]);
}

/* Write (or add) the tile's valid outputs for channels o0 .. o0+FWD_TO-1. */
KT static void NAME(fwd_emit)(const spmd__dconv_args *a, const float *tmp, int o0,
                              const NAME(seg) *s, int ns) {
    for (int j = 0; j < FWD_TO && o0 + j < a->cout; j++) {
        const int o = o0 + j;
        /* integer address arithmetic: a segment's base may lie before y
         * (only its unmasked lanes are touched) */
        uintptr_t yo = (uintptr_t)(a->y + (size_t)o * a->ycs);
        VEC bias = a->bias ? VBCAST(a->bias + o) : VZERO();
        for (int i = 0; i < ns; i++) {
            VEC v = VLOAD(tmp + j * FWD_VMAX * VL + s[i].v * VL);
            float *dp = (float *)(yo + (uintptr_t)(s[i].dst * (ptrdiff_t)sizeof(float)));
            if (a->bias) v = VADD(v, bias);
            if (a->acc) v = VADD(v, VLOADM(dp, s[i].m));
            VSTOREM(dp, s[i].m, v);
        }
    }
}

KT static inline __attribute__((always_inline)) void NAME(fwd_image)(const spmd__dconv_args *a,
                                                                    const int V) {
    const int L = (a->hout - 1) * a->wp + a->wout, W = V * VL;
    float tmp[FWD_TO * FWD_VMAX * VL] __attribute__((aligned(64)));
    NAME(seg) s[SEG_MAX];
    for (int p0 = 0, from = 0;; p0 += W) {
        if (p0 + W > L) {
            from = p0;
            p0 = L - W;
        }
        int ns = NAME(tile_segs)(s, p0, from, V, a->wp, a->wout);
        for (int o0 = 0; o0 < a->cout; o0 += FWD_TO) {
            NAME(fwd_tile)(tmp, a->x + p0, a->xcs, a->wp, a->cin, a->wt + o0, a->opad, V);
            NAME(fwd_emit)(a, tmp, o0, s, ns);
        }
        if (p0 + W >= L) break;
        from = p0 + W;
    }
}

KT void NAME(spmd__dconv3)(const spmd__dconv_args *a) {
    const int L = (a->hout - 1) * a->wp + a->wout;
    if (L >= 3 * VL) NAME(fwd_image)(a, 3);
    else if (L >= 2 * VL) NAME(fwd_image)(a, 2);
    else NAME(fwd_image)(a, 1);
}

/* Weight gradient of one block: for each input channel and 32-channel output
 * block, tiles of DW_KH kernel rows; the accumulators live in registers for
 * the whole block. */
KT void NAME(spmd__dwconv3)(const spmd__dwconv_args *a) {
    const int wp = a->wp, np = a->np, opad = a->opad;
    for (int c = 0; c < a->cin; c++) {
        const float *xc = a->x + (size_t)c * a->xcs;
        for (int ob = 0; ob < opad; ob += DW_OV * VL) {
            for (int kh0 = 0; kh0 < 3; kh0 += DW_KH) {
                float *dw = a->dwt + ((size_t)c * 9 + (size_t)kh0 * 3) * opad + ob;
                const float *dt = a->dt + ob;
                VEC acc[DW_KH * 3][DW_OV];
#pragma GCC unroll 9
                for (int k = 0; k < DW_KH * 3; k++)
#pragma GCC unroll 4
                    for (int v = 0; v < DW_OV; v++) acc[k][v] = VLOAD(dw + k * opad + v * VL);
                const float *r[DW_KH];
#pragma GCC unroll 3
                for (int i = 0; i < DW_KH; i++) r[i] = xc + (kh0 + i) * wp;
                for (int p = 0; p < np; p++, dt += opad) {
                    VEC d[DW_OV];
#pragma GCC unroll 4
                    for (int v = 0; v < DW_OV; v++) d[v] = VLOAD(dt + v * VL);
#pragma GCC unroll 3
                    for (int i = 0; i < DW_KH; i++)
#pragma GCC unroll 3
                        for (int kw = 0; kw < 3; kw++) {
                            VEC xv = VBCAST(r[i] + p + kw);
#pragma GCC unroll 4
                            for (int v = 0; v < DW_OV; v++)
                                acc[i * 3 + kw][v] = VFMA(xv, d[v], acc[i * 3 + kw][v]);
                        }
                }
#pragma GCC unroll 9
                for (int k = 0; k < DW_KH * 3; k++)
#pragma GCC unroll 4
                    for (int v = 0; v < DW_OV; v++) VSTORE(dw + k * opad + v * VL, acc[k][v]);
            }
        }
    }
}

#undef FWD_VMAX
#undef SEG_MAX
