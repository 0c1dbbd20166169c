/* src/coll/allreduce_rhd.c — recursive halving-doubling all-reduce
 * (Rabenseifner): a reduce-scatter by recursive halving, then an all-gather
 * by recursive doubling, on the largest power-of-two core of the world.
 *
 * Non-power-of-two worlds: p = pow2_floor(w), and each extra rank e >= p
 * folds into rank e - p first (sends its whole buffer, which that partner
 * reduces into its own), waits out the core, and gets the result back:
 *
 *       w = 6, p = 4:   r4 -> r0, r5 -> r1   (fold)
 *                       core r0..r3 below
 *                       r0 -> r4, r1 -> r5   (unfold)
 *
 * Core (p = 4, chunks K0..K3 of the buffer):
 *
 *   halving step 0 (distance 2): r0<->r2, r1<->r3; lower ranks keep K0K1,
 *                                upper ranks keep K2K3, each sends the other half
 *   halving step 1 (distance 1): r0<->r1 ... ; r keeps Kr
 *   -> rank r holds the full reduction of Kr
 *   doubling: replay the steps in reverse, sending what we hold and receiving
 *             the partner's half, until everyone holds K0..K3.
 *
 * Each halving exchange is cut into pieces of min(SPMD_SEGMENT_BYTES, 256 KiB) so the
 * received piece is reduced while in cache.  Out of place, the first halving
 * step reads sendbuf and writes recvbuf.
 *
 * Cost (w = p): 2·log2(p)α + 2·(p-1)/p·nβ + (p-1)/p·nγ; a fold adds 2α + 2nβ
 * + nγ for the paired ranks.  Fewer messages than the ring (log p instead of
 * w-1 per phase) with the same bandwidth term.
 */
#include "coll/algos.h"

/* Exchange chunk ranges with `peer`, reducing what we receive into dst:
 * dst[recv range] = cur[recv range] (op) received. */
static spmd_status halve(spmd__coll_ctx *c, const spmd__coll_args *a, int peer, const char *cur,
                         char *dst, size_t soff, size_t slen, size_t roff, size_t rlen, char *tmp,
                         size_t npieces) {
    const size_t es = spmd_dtype_size(a->dt);
    for (size_t j = 0; j < npieces; j++) {
        const size_t so = soff + spmd__chunk_off(slen, npieces, j), sl = spmd__chunk_len(slen, npieces, j);
        const size_t ro = roff + spmd__chunk_off(rlen, npieces, j), rl = spmd__chunk_len(rlen, npieces, j);
        spmd_status st = spmd__xsendrecv(c, peer, cur + so * es, sl * es, peer, tmp, rl * es);
        if (st != SPMD_OK) return st;
        spmd__reduce3(dst + ro * es, cur + ro * es, tmp, rl, a->dt, a->op);
    }
    return SPMD_OK;
}

spmd_status spmd__allreduce_rhd(spmd__coll_ctx *c, const spmd__coll_args *a) {
    const int w = spmd__ctx_world(c), r = spmd__ctx_rank(c);
    const size_t es = spmd_dtype_size(a->dt), n = a->count, bytes = n * es;
    const size_t seg = spmd__pipe_elems(c, es);
    const char *src = a->sendbuf;
    char *dst = a->recvbuf;
    const spmd__fold f = spmd__fold_of(r, w);
    spmd_status st;

    const size_t fold_pieces = spmd__npieces(n, seg);
    if (!f.in_core) { /* extra rank: hand our data over (in the partner's pieces), get the result back */
        for (size_t j = 0; j < fold_pieces; j++) {
            st = spmd__xsend(c, f.partner, src + spmd__chunk_off(n, fold_pieces, j) * es,
                             spmd__chunk_len(n, fold_pieces, j) * es);
            if (st != SPMD_OK) return st;
        }
        return spmd__xrecv(c, f.partner, dst, bytes);
    }

    const size_t p = (size_t)f.p;
    /* the largest halving exchange is half the buffer (step 0) */
    const size_t half_max = spmd__chunks_len(n, p, 0, p / 2);
    const size_t core_pieces = spmd__npieces(half_max, seg);
    size_t tmp_elems = spmd__chunk_len(half_max, core_pieces, 0);
    if (f.partner >= 0) {
        size_t fe = spmd__chunk_len(n, fold_pieces, 0);
        if (fe > tmp_elems) tmp_elems = fe;
    }
    char *tmp = spmd__tmp(c, 0, tmp_elems * es);
    if (!tmp) return SPMD__NOMEM(c, "rhd all_reduce", tmp_elems * es);

    const char *cur = src; /* where our current partial result lives */
    if (f.partner >= 0) {  /* absorb the extra rank's contribution */
        for (size_t j = 0; j < fold_pieces; j++) {
            const size_t o = spmd__chunk_off(n, fold_pieces, j), l = spmd__chunk_len(n, fold_pieces, j);
            if ((st = spmd__xrecv(c, f.partner, tmp, l * es)) != SPMD_OK) return st;
            spmd__reduce3(dst + o * es, src + o * es, tmp, l, a->dt, a->op);
        }
        cur = dst;
    }

    const int steps = spmd__log2_floor(f.p);
    for (int k = 0; k < steps; k++) {
        const spmd__rh_step hs = spmd__rh_step_of(r, f.p, k);
        const size_t h = (size_t)hs.half;
        st = halve(c, a, hs.peer, cur, dst,
                   spmd__chunk_off(n, p, (size_t)hs.send_first), spmd__chunks_len(n, p, (size_t)hs.send_first, h),
                   spmd__chunk_off(n, p, (size_t)hs.keep_first), spmd__chunks_len(n, p, (size_t)hs.keep_first, h),
                   tmp, core_pieces);
        if (st != SPMD_OK) return st;
        cur = dst;
    }
    for (int k = steps - 1; k >= 0; k--) {
        const spmd__rh_step hs = spmd__rh_step_of(r, f.p, k);
        const size_t h = (size_t)hs.half;
        const size_t koff = spmd__chunk_off(n, p, (size_t)hs.keep_first);
        const size_t soff = spmd__chunk_off(n, p, (size_t)hs.send_first);
        st = spmd__xsendrecv(c, hs.peer, dst + koff * es, spmd__chunks_len(n, p, (size_t)hs.keep_first, h) * es,
                             hs.peer, dst + soff * es, spmd__chunks_len(n, p, (size_t)hs.send_first, h) * es);
        if (st != SPMD_OK) return st;
    }
    if (f.partner >= 0) return spmd__xsend(c, f.partner, dst, bytes);
    return SPMD_OK;
}
