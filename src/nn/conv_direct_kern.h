/* src/nn/conv_direct_kern.h — the direct 3x3 kernels, written once for both
 * vector widths.  Included by conv_direct_avx512.c and conv_direct_avx2.c,
 * which define first:
 *   KT            the target attribute of every function here
 *   VL, VEC       floats per vector, the vector type
 *   VZERO() VLOAD(p) VSTORE(p, v) VBCAST(p) VFMA(a, b, c) VADD(a, b)
 *   MASK, MASK_LANES(lo, hi)          lanes [lo, hi) set
 *   VLOADM(p, m) VSTOREM(p, m, v)     masked load (zero elsewhere) / store;
 *                                     masked-off lanes are not accessed
 *   TRANSPOSE(r)  transpose the VL x VL block in VEC r[VL] in place
 *   FWD_TO        output channels per forward tile (accumulators: FWD_TO x 3)
 *   DW_KH, DW_OV  kernel rows and vectors of 32/VL channels per weight-
 *                 gradient tile (accumulators: DW_KH*3 x DW_OV)
 *   NAME(f)       f with the family's suffix
 * See conv_direct.h for the layouts. */

#include <stdint.h>

#define FWD_VMAX 3         /* vectors of positions per forward tile */
#define SEG_V (VL / 3 + 2) /* rows one vector can touch (wp >= 3) */

/* Where a tile's vectors go: lanes m of vector v land at y + dst + lane
 * (full: all lanes, a plain store). */
typedef struct {
    int n[FWD_VMAX];
    struct {
        MASK m;
        ptrdiff_t dst;
        int full;
    } s[FWD_VMAX][SEG_V];
} NAME(segs);

/* The output segments of the tile [p0, p0 + V*VL), skipping p < from (the
 * last tile of an image is moved back to end at L, over part of the one
 * before it: those outputs are already written, and with acc must not be
 * added twice). */
KT static void NAME(tile_segs)(NAME(segs) *s, int p0, int from, int V, int wp, int wout) {
    for (int v = 0; v < V; v++) {
        int a = p0 + v * VL, e = a + VL, lo = a > from ? a : from, n = 0;
        for (int row = lo / wp; row * wp < e; row++) {
            int r0 = row * wp, r1 = r0 + wout;
            int x0 = lo > r0 ? lo : r0, x1 = e < r1 ? e : r1;
            if (x0 >= x1) continue;
            s->s[v][n].m = MASK_LANES(x0 - a, x1 - a);
            s->s[v][n].full = x0 == a && x1 == e;
            s->s[v][n].dst = (ptrdiff_t)a - (ptrdiff_t)row * (wp - wout);
            n++;
        }
        s->n[v] = n;
    }
}

/* One tile: FWD_TO output channels from o0 x V vectors of positions from
 * p0, summed over cin*9 taps in registers, then stored (or added) where the
 * segments say. */
KT static inline __attribute__((always_inline)) void NAME(fwd_tile)(const spmd__dconv_args *a,
                                                                   const NAME(segs) *sg, int p0,
                                                                   int o0, const int V) {
    const int wp = a->wp, cin = a->cin;
    const size_t xcs = a->xcs;
    const float *xp = a->x + p0;
    const float *wt = a->wt + (size_t)(o0 / SPMD__DCONV_WBLOCK) * cin * 9 * SPMD__DCONV_WBLOCK +
                      o0 % SPMD__DCONV_WBLOCK;
    VEC acc[FWD_TO][FWD_VMAX];
#pragma GCC unroll 16
    for (int j = 0; j < FWD_TO; j++)
#pragma GCC unroll 3
        for (int v = 0; v < V; v++) acc[j][v] = VZERO();
    for (int c = 0; c < cin; c++, xp += xcs, wt += 9 * SPMD__DCONV_WBLOCK) {
#pragma GCC unroll 3
        for (int kh = 0; kh < 3; kh++) {
#pragma GCC unroll 3
            for (int kw = 0; kw < 3; kw++) {
                const float *xs = xp + kh * wp + kw;
                const float *ws = wt + (kh * 3 + kw) * SPMD__DCONV_WBLOCK;
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
    for (int j = 0; j < FWD_TO; j++) {
        const int o = o0 + j;
        if (o >= a->cout) break;
        /* integer address arithmetic: a segment's base may lie before y
         * (only its unmasked lanes are touched) */
        const uintptr_t yo = (uintptr_t)(a->y + (size_t)o * a->ycs);
        const VEC bias = a->bias ? VBCAST(a->bias + o) : VZERO();
#pragma GCC unroll 3
        for (int v = 0; v < V; v++) {
            VEC val = a->bias ? VADD(acc[j][v], bias) : acc[j][v];
            if (a->relu) val = VRELU(val);
            for (int i = 0; i < sg->n[v]; i++) {
                float *dp = (float *)(yo + (uintptr_t)(sg->s[v][i].dst * (ptrdiff_t)sizeof(float)));
                if (sg->s[v][i].full) {
                    VSTORE(dp, a->acc ? VADD(val, VLOAD(dp)) : val);
                } else {
                    const MASK m = sg->s[v][i].m;
                    VSTOREM(dp, m, a->acc ? VADD(val, VLOADM(dp, m)) : val);
                }
            }
        }
    }
}

/* Tiles of V vectors from p0 on while they fit below L, output channels
 * [o0, o1); returns the end. */
KT static inline __attribute__((always_inline)) int NAME(fwd_run)(const spmd__dconv_args *a,
                                                                 int p0, int L, int o0, int o1,
                                                                 const int V) {
    NAME(segs) sg;
    for (; p0 + V * VL <= L; p0 += V * VL) {
        NAME(tile_segs)(&sg, p0, p0, V, a->wp, a->wout);
        for (int o = o0; o < o1; o += FWD_TO) NAME(fwd_tile)(a, &sg, p0, o, V);
    }
    return p0;
}

/* The last positions [from, L): one tile of V vectors ending at L. */
KT static inline __attribute__((always_inline)) void NAME(fwd_last)(const spmd__dconv_args *a,
                                                                   int from, int L, int o0, int o1,
                                                                   const int V) {
    NAME(segs) sg;
    const int p0 = L - V * VL;
    NAME(tile_segs)(&sg, p0, from, V, a->wp, a->wout);
    for (int o = o0; o < o1; o += FWD_TO) NAME(fwd_tile)(a, &sg, p0, o, V);
}

/* Output channels [o0, o1) of the image: positions in tiles of three
 * vectors (or fewer when L is short); the rest, under three vectors, in one
 * tile of as many vectors as it needs. */
KT static void NAME(fwd_channels)(const spmd__dconv_args *a, int o0, int o1) {
    const int L = (a->hout - 1) * a->wp + a->wout;
    int p = L >= 3 * VL   ? NAME(fwd_run)(a, 0, L, o0, o1, 3)
            : L >= 2 * VL ? NAME(fwd_run)(a, 0, L, o0, o1, 2)
                          : NAME(fwd_run)(a, 0, L, o0, o1, 1);
    int rest = L - p;
    if (rest > 2 * VL) NAME(fwd_last)(a, p, L, o0, o1, 3);
    else if (rest > VL) NAME(fwd_last)(a, p, L, o0, o1, 2);
    else if (rest > 0) NAME(fwd_last)(a, p, L, o0, o1, 1);
}

/* With few weights (the seed CNN's 36 KiB), every tile runs all output
 * channels while its input rows are in L1.  With many (ResNet's deeper
 * layers: MiBs), one block of 8 channels at a time runs over the whole
 * image, so its weights are read from L2 once per image, not once per tile. */
KT void NAME(spmd__dconv3)(const spmd__dconv_args *a) {
    if ((size_t)a->cin * 9 * a->opad <= SPMD__DCONV_SMALL_W) {
        NAME(fwd_channels)(a, 0, a->cout);
        return;
    }
    for (int o = 0; o < a->cout; o += SPMD__DCONV_WBLOCK)
        NAME(fwd_channels)(a, o, o + SPMD__DCONV_WBLOCK < a->cout ? o + SPMD__DCONV_WBLOCK : a->cout);
}

/* Weight gradient of one block of output rows: for each input channel and
 * 32-channel output block, tiles of DW_KH kernel rows; the accumulators live
 * in registers for the whole block. */
KT void NAME(spmd__dwconv3)(const spmd__dwconv_args *a) {
    const int wp = a->wp, wout = a->wout, opad = a->opad;
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
                for (int row = 0; row < a->rows; row++) {
                    const float *r[DW_KH];
#pragma GCC unroll 3
                    for (int i = 0; i < DW_KH; i++) r[i] = xc + (size_t)(row + kh0 + i) * wp;
                    for (int p = 0; p < wout; p++, dt += opad) {
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
                }
#pragma GCC unroll 9
                for (int k = 0; k < DW_KH * 3; k++)
#pragma GCC unroll 4
                    for (int v = 0; v < DW_OV; v++) VSTORE(dw + k * opad + v * VL, acc[k][v]);
            }
        }
    }
}

/* dt[q*opad + o] = src[o*plane + q] for q < n, 0 for o >= cout: VL x VL
 * blocks (channels x positions) transposed in registers. */
KT void NAME(spmd__dconv_dout_t)(float *dt, const float *src, size_t plane, int cout, int opad,
                                 int n) {
    for (int q = 0; q < n; q += VL) {
        const int k = n - q < VL ? n - q : VL;
        const MASK m = MASK_LANES(0, k);
        for (int o0 = 0; o0 < opad; o0 += VL) {
            VEC r[VL];
#pragma GCC unroll 16
            for (int i = 0; i < VL; i++)
                r[i] = o0 + i < cout ? VLOADM(src + (size_t)(o0 + i) * plane + q, m) : VZERO();
            TRANSPOSE(r);
            float *d = dt + (size_t)q * opad + o0;
            for (int i = 0; i < k; i++) VSTORE(d + (size_t)i * opad, r[i]);
        }
    }
}

#undef FWD_VMAX
#undef SEG_V
