/* src/coll/allreduce_ring.c — ring all-reduce: reduce-scatter around the
 * ring, then all-gather around the ring.
 *
 * The buffer is cut into w chunks C0..C(w-1) (lengths differ by at most one
 * element, so any count works, including count < w: some chunks are empty).
 *
 *   reduce-scatter, step s = 0..w-2, on rank r:
 *       send C(r-s)   -> r+1
 *       recv C(r-s-1) <- r-1, reduce it into our copy of that chunk
 *   after w-1 steps rank r holds the complete reduction of C(r+1):
 *
 *       w = 4:   step 0        step 1        step 2        owns
 *       r0     C0 -> r1      C3 -> r1      C2 -> r1       C1
 *       r1     C1 -> r2      C0 -> r2      C3 -> r2       C2
 *       r2     C2 -> r3      C1 -> r3      C0 -> r3       C3
 *       r3     C3 -> r0      C2 -> r0      C1 -> r0       C0
 *
 *   all-gather, step s = 0..w-2: send C(r+1-s) -> r+1, recv C(r-s) <- r-1.
 *
 * Pipelining: each reduce-scatter step is cut into the same number of pieces
 * on every rank (from the largest chunk and SPMD_SEGMENT_BYTES), so a piece
 * is reduced while it is still in cache and the receive scratch stays small.
 * Out of place, the first touch of every chunk reads sendbuf and writes
 * recvbuf (reduce3), so no initial copy is needed.
 *
 * Cost: 2(w-1)α + 2·(w-1)/w·nβ + (w-1)/w·nγ — bandwidth optimal; the latency
 * term grows linearly in w, which is why small messages use rd.
 */
#include "coll/algos.h"

spmd_status spmd__allreduce_ring(spmd__coll_ctx *c, const spmd__coll_args *a) {
    const int w = spmd__ctx_world(c), r = spmd__ctx_rank(c);
    const int next = spmd__ring_next(r, w), prev = spmd__ring_prev(r, w);
    const size_t es = spmd_dtype_size(a->dt), n = a->count;
    const char *src = a->sendbuf;
    char *dst = a->recvbuf;

    const size_t npieces = spmd__npieces(spmd__chunk_len(n, (size_t)w, 0), spmd__seg_elems(c, es));
    const size_t piece_max = spmd__chunk_len(spmd__chunk_len(n, (size_t)w, 0), npieces, 0);
    char *tmp = spmd__tmp(c, 0, piece_max * es);
    if (!tmp) return SPMD__NOMEM(c, "ring all_reduce", piece_max * es);

    for (int s = 0; s < w - 1; s++) {
        const size_t sc = (size_t)spmd__mod(r - s, w), rc = (size_t)spmd__mod(r - s - 1, w);
        const size_t soff = spmd__chunk_off(n, (size_t)w, sc), slen = spmd__chunk_len(n, (size_t)w, sc);
        const size_t roff = spmd__chunk_off(n, (size_t)w, rc), rlen = spmd__chunk_len(n, (size_t)w, rc);
        /* Step 0 sends our own contribution; later steps forward what we reduced. */
        const char *sbase = (s == 0 ? src : dst) + soff * es;
        for (size_t j = 0; j < npieces; j++) {
            const size_t so = spmd__chunk_off(slen, npieces, j), sl = spmd__chunk_len(slen, npieces, j);
            const size_t ro = spmd__chunk_off(rlen, npieces, j), rl = spmd__chunk_len(rlen, npieces, j);
            spmd_status st = spmd__xsendrecv(c, next, sbase + so * es, sl * es, prev, tmp, rl * es);
            if (st != SPMD_OK) return st;
            const size_t at = (roff + ro) * es;
            spmd__reduce3(dst + at, src + at, tmp, rl, a->dt, a->op);
        }
    }
    for (int s = 0; s < w - 1; s++) {
        const size_t sc = (size_t)spmd__mod(r + 1 - s, w), rc = (size_t)spmd__mod(r - s, w);
        spmd_status st = spmd__xsendrecv(
            c, next, dst + spmd__chunk_off(n, (size_t)w, sc) * es, spmd__chunk_len(n, (size_t)w, sc) * es,
            prev, dst + spmd__chunk_off(n, (size_t)w, rc) * es, spmd__chunk_len(n, (size_t)w, rc) * es);
        if (st != SPMD_OK) return st;
    }
    return SPMD_OK;
}
