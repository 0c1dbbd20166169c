/* src/coll/alltoall_linear.c — all-to-all in one round: post every send and
 * every receive at once and let the transfer layer progress them together.
 *
 *       r0 ⇄ r1, r0 ⇄ r2, r0 ⇄ r3, r1 ⇄ r2, ... all in flight together
 *
 * Cost: α + Σ bytes·β with w-1 simultaneous streams per rank: the lowest
 * latency for small blocks; for large ones the pairwise schedule avoids
 * w-1 senders competing for one receiver.
 */
#include "coll/algos.h"

spmd_status spmd__alltoall_linear(spmd__coll_ctx *c, const spmd__coll_args *a) {
    const int w = spmd__ctx_world(c), r = spmd__ctx_rank(c);
    const char *in = a->sendbuf;
    char *out = a->recvbuf;
    spmd__xfer_op *ops = spmd__tmp(c, 1, 2 * (size_t)w * sizeof(spmd__xfer_op));
    if (!ops) return SPMD__NOMEM(c, "all_to_all", 2 * (size_t)w * sizeof(spmd__xfer_op));
    spmd__xfer_op *sends = ops, *recvs = ops + w;
    size_t off, len;
    int k = 0;
    for (int s = 1; s < w; s++) {
        const int to = spmd__pair_to(r, w, s), from = spmd__pair_from(r, w, s);
        spmd__a2a_block(a, to, 0, &off, &len);
        sends[k].peer = to;
        sends[k].buf = (void *)(uintptr_t)(in + off);
        sends[k].len = len;
        spmd__a2a_block(a, from, 1, &off, &len);
        recvs[k].peer = from;
        recvs[k].buf = out + off;
        recvs[k].len = len;
        k++;
    }
    spmd_status st = spmd__xfer(c, sends, k, recvs, k);
    if (st != SPMD_OK) return st;
    return spmd__a2a_self(c, a, r);
}
