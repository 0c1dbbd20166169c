/* src/coll/scatter_linear.c — direct scatter: the root sends block i to
 * rank i, all streams progressed together by one transfer call.
 *
 *       root: [b0|b1|b2|b3] ─┬─b1─> r1
 *                            ├─b2─> r2
 *                            └─b3─> r3
 *
 * Cost: α + (w-1)·mβ at the root (m = bytes per block); no forwarding.
 */
#include "coll/algos.h"

spmd_status spmd__scatter_linear(spmd__coll_ctx *c, const spmd__coll_args *a) {
    const int w = spmd__ctx_world(c), r = spmd__ctx_rank(c);
    const size_t blk = a->count * spmd_dtype_size(a->dt);
    if (r != a->root) return spmd__xrecv(c, a->root, a->recvbuf, blk);

    const char *in = a->sendbuf;
    spmd__xfer_op *sends = spmd__tmp(c, 1, (size_t)w * sizeof(spmd__xfer_op));
    if (!sends) return SPMD__NOMEM(c, "scatter", (size_t)w * sizeof(spmd__xfer_op));
    int ns = 0;
    for (int i = 0; i < w; i++) {
        if (i == r) continue;
        sends[ns].peer = i;
        sends[ns].buf = (void *)(uintptr_t)(in + (size_t)i * blk);
        sends[ns].len = blk;
        ns++;
    }
    spmd_status st = spmd__xfer(c, sends, ns, NULL, 0);
    if (st != SPMD_OK) return st;
    /* own block last: recvbuf may overlap sendbuf on the root (in place) */
    spmd__copy(a->recvbuf, in + (size_t)r * blk, blk);
    return SPMD_OK;
}
