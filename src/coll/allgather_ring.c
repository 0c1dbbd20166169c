/* src/coll/allgather_ring.c — ring all-gather.  Every rank starts with its
 * own block in place (select.c puts it there) and, for w-1 steps, forwards
 * to its right neighbour the block it received in the previous step:
 *
 *       step s: send block (r - s) -> r+1, recv block (r - s - 1) <- r-1
 *
 *       w = 4     step 0     step 1     step 2
 *       r0        b0 -> r1   b3 -> r1   b2 -> r1
 *       r1        b1 -> r2   b0 -> r2   b3 -> r2
 *       ...
 *
 * Blocks go straight into their final places — in the flat output or in the
 * caller's list of buffers (all_gather_list) — so nothing is copied.
 *
 * Cost: (w-1)α + (w-1)·mβ (m = bytes per block): bandwidth-optimal.
 */
#include "coll/algos.h"

spmd_status spmd__allgather_ring(spmd__coll_ctx *c, const spmd__coll_args *a) {
    const int w = spmd__ctx_world(c), r = spmd__ctx_rank(c);
    const int next = spmd__ring_next(r, w), prev = spmd__ring_prev(r, w);
    const size_t es = spmd_dtype_size(a->dt), blk = a->count * es;
    for (int s = 0; s < w - 1; s++) {
        const int sb = spmd__mod(r - s, w), rb = spmd__mod(r - s - 1, w);
        spmd_status st = spmd__xsendrecv(c, next, spmd__block(a, a->recvbuf, sb, es), blk, prev,
                                         spmd__block(a, a->recvbuf, rb, es), blk);
        if (st != SPMD_OK) return st;
    }
    return SPMD_OK;
}
