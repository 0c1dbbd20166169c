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
 * on every rank (from the largest chunk and min(SPMD_SEGMENT_BYTES, 256 KiB),
 * see algos.h), so a piece is reduced while it is still in cache and the
 * receive scratch stays small.
 * The last reduce-scatter step and the first all-gather step run together,
 * piece by piece: a piece leaves for the all-gather one round after it was
 * reduced, still in cache (for w = 2 that is the whole algorithm).
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
    const size_t es = spmd_dtype_size(a->dt), n = a->count, W = (size_t)w;
    const char *src = a->sendbuf;
    char *dst = a->recvbuf;
    spmd_status st;

    const size_t P = spmd__npieces(spmd__chunk_len(n, W, 0), spmd__pipe_elems(c, es));
    const size_t piece_max = spmd__chunk_len(spmd__chunk_len(n, W, 0), P, 0);
    char *tmp = spmd__tmp(c, 0, piece_max * es);
    if (!tmp) return SPMD__NOMEM(c, "ring all_reduce", piece_max * es);
#define OFF(ch) spmd__chunk_off(n, W, (size_t)(ch))
#define LEN(ch) spmd__chunk_len(n, W, (size_t)(ch))

    /* reduce-scatter; the last step (s = w-2) is fused with all-gather step 0
     * below, so a finished piece leaves again while it is still in cache */
    for (int s = 0; s < w - 2; s++) {
        const int sc = spmd__mod(r - s, w), rc = spmd__mod(r - s - 1, w);
        const char *sbase = (s == 0 ? src : dst) + OFF(sc) * es;
        for (size_t j = 0; j < P; j++) {
            const size_t so = spmd__chunk_off(LEN(sc), P, j), sl = spmd__chunk_len(LEN(sc), P, j);
            const size_t ro = OFF(rc) + spmd__chunk_off(LEN(rc), P, j), rl = spmd__chunk_len(LEN(rc), P, j);
            if ((st = spmd__xsendrecv(c, next, sbase + so * es, sl * es, prev, tmp, rl * es)) != SPMD_OK) return st;
            spmd__reduce3(dst + ro * es, src + ro * es, tmp, rl, a->dt, a->op);
        }
    }
    {
        /* round j: reduce-scatter piece j (send chunk r+2, receive chunk r+1)
         * and all-gather piece j-1 (send the finished chunk r+1, receive chunk r) */
        const int sc = spmd__mod(r + 2, w), fc = spmd__mod(r + 1, w), gc = r;
        const char *sbase = (w == 2 ? src : dst) + OFF(sc) * es;
        for (size_t j = 0; j <= P; j++) {
            spmd__xfer_op sends[2], recvs[2];
            int k = 0;
            if (j < P) {
                sends[k].peer = next;
                sends[k].buf = (void *)(uintptr_t)(sbase + spmd__chunk_off(LEN(sc), P, j) * es);
                sends[k].len = spmd__chunk_len(LEN(sc), P, j) * es;
                recvs[k].peer = prev;
                recvs[k].buf = tmp;
                recvs[k].len = spmd__chunk_len(LEN(fc), P, j) * es;
                k++;
            }
            if (j >= 1) {
                sends[k].peer = next;
                sends[k].buf = dst + (OFF(fc) + spmd__chunk_off(LEN(fc), P, j - 1)) * es;
                sends[k].len = spmd__chunk_len(LEN(fc), P, j - 1) * es;
                recvs[k].peer = prev;
                recvs[k].buf = dst + (OFF(gc) + spmd__chunk_off(LEN(gc), P, j - 1)) * es;
                recvs[k].len = spmd__chunk_len(LEN(gc), P, j - 1) * es;
                k++;
            }
            if ((st = spmd__xfer(c, sends, k, recvs, k)) != SPMD_OK) return st;
            if (j < P) {
                const size_t o = (OFF(fc) + spmd__chunk_off(LEN(fc), P, j)) * es;
                spmd__reduce3(dst + o, src + o, tmp, spmd__chunk_len(LEN(fc), P, j), a->dt, a->op);
            }
        }
    }
    /* the rest of the all-gather, whole chunks */
    for (int s = 1; s < w - 1; s++) {
        const int sc = spmd__mod(r + 1 - s, w), rc = spmd__mod(r - s, w);
        st = spmd__xsendrecv(c, next, dst + OFF(sc) * es, LEN(sc) * es, prev, dst + OFF(rc) * es, LEN(rc) * es);
        if (st != SPMD_OK) return st;
    }
#undef OFF
#undef LEN
    return SPMD_OK;
}
