/* src/coll/gather_linear.c — direct gather: every rank sends its block
 * straight to the root, which receives all of them at once into their final
 * places (one transfer call progresses the w-1 streams together).
 *
 *       r1 ─┐
 *       r2 ─┼─> root: [b0|b1|b2|b3]
 *       r3 ─┘
 *
 * Cost: α + (w-1)·mβ at the root (m = bytes per block); no forwarding, so it
 * is the best choice once blocks are more than a few KiB.
 */
#include "coll/algos.h"

spmd_status spmd__gather_linear(spmd__coll_ctx *c, const spmd__coll_args *a) {
    const int w = spmd__ctx_world(c), r = spmd__ctx_rank(c);
    const size_t blk = a->count * spmd_dtype_size(a->dt);
    if (r != a->root) return spmd__xsend(c, a->root, a->sendbuf, blk);

    char *out = a->recvbuf;
    spmd__copy(out + (size_t)r * blk, a->sendbuf, blk);
    spmd__xfer_op *recvs = spmd__tmp(c, 1, (size_t)w * sizeof(spmd__xfer_op));
    if (!recvs) return SPMD__NOMEM(c, "gather", (size_t)w * sizeof(spmd__xfer_op));
    int nr = 0;
    for (int i = 0; i < w; i++) {
        if (i == r) continue;
        recvs[nr].peer = i;
        recvs[nr].buf = out + (size_t)i * blk;
        recvs[nr].len = blk;
        nr++;
    }
    return spmd__xfer(c, NULL, 0, recvs, nr);
}
