/* src/coll/allgather_bruck.c — Bruck all-gather for small blocks on any
 * world size.  Work in a rotated buffer T where T[i] is the block of rank
 * (r + i) mod w; start with T[0] = own block.  Step k (distance d = 2^k,
 * while d < w): send T[0 .. min(d, w-d)) to rank r - d, receive as many
 * blocks from rank r + d into T[d ..].  After ceil(log2 w) steps T holds
 * every block; rotate back into place.
 *
 *       w = 5, rank 0:  T = [b0]
 *         d=1: recv b1 from r1       T = [b0 b1]
 *         d=2: recv b2 b3 from r2    T = [b0 b1 b2 b3]
 *         d=4: recv b4 from r4       T = [b0 b1 b2 b3 b4]
 *
 * Cost: ceil(log2 w)α + (w-1)·mβ + one local copy of the output: the fewest
 * messages for any w (recursive doubling needs a power of two), so it is the
 * choice for small blocks; the ring wins once bandwidth dominates.
 */
#include "coll/algos.h"

spmd_status spmd__allgather_bruck(spmd__coll_ctx *c, const spmd__coll_args *a) {
    const int w = spmd__ctx_world(c), r = spmd__ctx_rank(c);
    const size_t es = spmd_dtype_size(a->dt), blk = a->count * es;
    char *t = spmd__tmp(c, 0, (size_t)w * blk);
    if (!t) return SPMD__NOMEM(c, "bruck all_gather", (size_t)w * blk);
    memcpy(t, spmd__block(a, a->recvbuf, r, es), blk);
    for (int d = 1; d < w; d *= 2) {
        const size_t cnt = (size_t)spmd__bruck_count(w, d);
        spmd_status st = spmd__xsendrecv(c, spmd__mod(r - d, w), t, cnt * blk, spmd__mod(r + d, w),
                                         t + (size_t)d * blk, cnt * blk);
        if (st != SPMD_OK) return st;
    }
    for (int i = 1; i < w; i++) memcpy(spmd__block(a, a->recvbuf, (r + i) % w, es), t + (size_t)i * blk, blk);
    return SPMD_OK;
}
