/* src/coll/allreduce_rd.c — recursive doubling all-reduce, for small
 * messages: every step exchanges the whole buffer with the partner at
 * distance 2^k and both reduce, so after log2(p) steps every core rank holds
 * the full result.
 *
 *       w = 8:   step 0: r <-> r^1    step 1: r <-> r^2    step 2: r <-> r^4
 *
 *       r0 r1 r2 r3 r4 r5 r6 r7
 *        \/    \/    \/    \/      pairs hold the sum of 2
 *        \ \  / /    \ \  / /
 *          ....        ....        quads hold the sum of 4
 *               \    /
 *                 ...              everyone holds the sum of 8
 *
 * Non-power-of-two worlds fold first (pattern.h): extra rank e >= p sends its
 * buffer to e - p, which reduces it in; after the core, e - p sends e the
 * result.  Partners reduce with the same operands in swapped order; every op
 * is commutative per element, so partners stay bit-identical.
 *
 * Large buffers are exchanged in SPMD_SEGMENT_BYTES pieces (bounded scratch).
 *
 * Cost: log2(p)·(α + nβ + nγ), plus 2(α + nβ) + nγ for a fold.  Fewest
 * messages of all, but n bytes per step: best below a few KiB.
 */
#include "coll/algos.h"

spmd_status spmd__allreduce_rd(spmd__coll_ctx *c, const spmd__coll_args *a) {
    const int w = spmd__ctx_world(c), r = spmd__ctx_rank(c);
    const size_t es = spmd_dtype_size(a->dt), n = a->count;
    const size_t pieces = spmd__npieces(n, spmd__seg_elems(c, es));
    const char *src = a->sendbuf;
    char *dst = a->recvbuf;
    const spmd__fold f = spmd__fold_of(r, w);
    spmd_status st;

    if (!f.in_core) {
        for (size_t j = 0; j < pieces; j++) {
            st = spmd__xsend(c, f.partner, src + spmd__chunk_off(n, pieces, j) * es,
                             spmd__chunk_len(n, pieces, j) * es);
            if (st != SPMD_OK) return st;
        }
        return spmd__xrecv(c, f.partner, dst, n * es);
    }

    const size_t tmp_bytes = spmd__chunk_len(n, pieces, 0) * es;
    char *tmp = spmd__tmp(c, 0, tmp_bytes);
    if (!tmp) return SPMD__NOMEM(c, "rd all_reduce", tmp_bytes);

    const char *cur = src;
    if (f.partner >= 0) {
        for (size_t j = 0; j < pieces; j++) {
            const size_t o = spmd__chunk_off(n, pieces, j) * es, l = spmd__chunk_len(n, pieces, j);
            if ((st = spmd__xrecv(c, f.partner, tmp, l * es)) != SPMD_OK) return st;
            spmd__reduce3(dst + o, src + o, tmp, l, a->dt, a->op);
        }
        cur = dst;
    }
    const int steps = spmd__log2_floor(f.p);
    for (int k = 0; k < steps; k++) {
        const int peer = spmd__rd_partner(r, k);
        for (size_t j = 0; j < pieces; j++) {
            const size_t o = spmd__chunk_off(n, pieces, j) * es, l = spmd__chunk_len(n, pieces, j);
            st = spmd__xsendrecv(c, peer, cur + o, l * es, peer, tmp, l * es);
            if (st != SPMD_OK) return st;
            spmd__reduce3(dst + o, cur + o, tmp, l, a->dt, a->op);
        }
        cur = dst;
    }
    if (f.partner >= 0) return spmd__xsend(c, f.partner, dst, n * es);
    return SPMD_OK;
}
