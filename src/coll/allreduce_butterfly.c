/* src/coll/allreduce_butterfly.c — the first seed's hand-written
 * "butterfly" all-reduce (seed 000, butterfly_allreduce), generalised from
 * "one element per rank" to any count and any world size:
 *
 *   phase 1 (direct reduce-scatter): the buffer is cut into w chunks; rank r
 *   owns chunk r.  Every rank sends chunk j to rank j and receives chunk r
 *   from every rank, all at once, then reduces them into its chunk.
 *
 *       r0: [a0|a1|a2]      r0 gets a0,b0,c0 -> owns C0 = a0+b0+c0
 *       r1: [b0|b1|b2]  ->  r1 gets a1,b1,c1 -> owns C1
 *       r2: [c0|c1|c2]      r2 gets a2,b2,c2 -> owns C2
 *
 *   phase 2 (direct all-gather): every rank sends its chunk to every rank
 *   and receives every other chunk.
 *
 * Any world size works as is: ownership is "chunk r belongs to rank r" with
 * chunk lengths from pattern.h (differing by at most one element, empty when
 * count < w), so nothing needs a power of two — unlike a textbook butterfly,
 * there is no pairing to fold.  The seed computes the mean inside the
 * exchange; here AVG is a SUM finished by select.c like every algorithm.
 * Large buffers run phase 1 in SPMD_SEGMENT_BYTES-bounded pieces.
 *
 * Cost: 2·(α·(w-1) overlapped) + 2·(w-1)/w·nβ + (w-1)/w·nγ: two rounds of
 * w-1 simultaneous messages, bandwidth-optimal, but every rank talks to
 * every other at once (w-1 streams), which loads small machines.
 */
#include "coll/algos.h"

spmd_status spmd__allreduce_butterfly(spmd__coll_ctx *c, const spmd__coll_args *a) {
    const int w = spmd__ctx_world(c), r = spmd__ctx_rank(c);
    const size_t es = spmd_dtype_size(a->dt), n = a->count, W = (size_t)w;
    const char *src = a->sendbuf;
    char *dst = a->recvbuf;
    const size_t cmax = spmd__chunk_len(n, W, 0);
    const size_t pieces = spmd__npieces(cmax, spmd__seg_elems(c, es));
    const size_t pmax = spmd__chunk_len(cmax, pieces, 0);
    const size_t myoff = spmd__chunk_off(n, W, (size_t)r), mylen = spmd__chunk_len(n, W, (size_t)r);

    spmd__xfer_op *ops = spmd__tmp(c, 1, 2 * W * sizeof(spmd__xfer_op));
    char *tmp = spmd__tmp(c, 0, (W - 1) * pmax * es);
    if (!ops || !tmp) return SPMD__NOMEM(c, "butterfly all_reduce", (W - 1) * pmax * es);
    spmd__xfer_op *sends = ops, *recvs = ops + W;

    for (size_t j = 0; j < pieces; j++) {
        int ns = 0;
        for (int i = 0; i < w; i++) {
            if (i == r) continue;
            const size_t co = spmd__chunk_off(n, W, (size_t)i), cl = spmd__chunk_len(n, W, (size_t)i);
            sends[ns].peer = i;
            sends[ns].buf = (void *)(uintptr_t)(src + (co + spmd__chunk_off(cl, pieces, j)) * es);
            sends[ns].len = spmd__chunk_len(cl, pieces, j) * es;
            recvs[ns].peer = i;
            recvs[ns].buf = tmp + (size_t)ns * pmax * es;
            recvs[ns].len = spmd__chunk_len(mylen, pieces, j) * es;
            ns++;
        }
        spmd_status st = spmd__xfer(c, sends, ns, recvs, ns);
        if (st != SPMD_OK) return st;
        const size_t o = (myoff + spmd__chunk_off(mylen, pieces, j)) * es;
        const size_t l = spmd__chunk_len(mylen, pieces, j);
        spmd__reduce3(dst + o, src + o, tmp, l, a->dt, a->op);
        for (int i = 1; i < ns; i++) spmd__reduce(dst + o, tmp + (size_t)i * pmax * es, l, a->dt, a->op);
    }

    int ns = 0;
    for (int i = 0; i < w; i++) {
        if (i == r) continue;
        sends[ns].peer = i;
        sends[ns].buf = dst + myoff * es;
        sends[ns].len = mylen * es;
        recvs[ns].peer = i;
        recvs[ns].buf = dst + spmd__chunk_off(n, W, (size_t)i) * es;
        recvs[ns].len = spmd__chunk_len(n, W, (size_t)i) * es;
        ns++;
    }
    return spmd__xfer(c, sends, ns, recvs, ns);
}
