/* src/coll/reduce_scatter_direct.c — direct reduce-scatter for small
 * blocks: in one round every rank sends block j of its input to rank j and
 * receives block r from every other rank, then reduces the w contributions.
 *
 *       r0: [a0|a1|a2]  a1 -> r1, a2 -> r2      r0: a0 + b0 + c0
 *       r1: [b0|b1|b2]  b0 -> r0, b2 -> r2  =>  r1: a1 + b1 + c1
 *       r2: [c0|c1|c2]  c0 -> r0, c1 -> r1      r2: a2 + b2 + c2
 *
 * The output is written after the exchange, so recvbuf may be a block of
 * sendbuf (in place).
 *
 * Cost: α + (w-1)·mβ + (w-1)·mγ with all w-1 messages in flight at once:
 * one round instead of the ring's w-1, for blocks up to a few KiB.
 */
#include "coll/algos.h"

spmd_status spmd__reduce_scatter_direct(spmd__coll_ctx *c, const spmd__coll_args *a) {
    const int w = spmd__ctx_world(c), r = spmd__ctx_rank(c);
    const size_t es = spmd_dtype_size(a->dt), n = a->count, blk = n * es, W = (size_t)w;
    const char *in = a->sendbuf;
    char *tmp = spmd__tmp(c, 0, (W - 1) * blk);
    spmd__xfer_op *ops = spmd__tmp(c, 1, 2 * W * sizeof(spmd__xfer_op));
    if (!tmp || !ops) return SPMD__NOMEM(c, "direct reduce_scatter", (W - 1) * blk);
    spmd__xfer_op *sends = ops, *recvs = ops + W;
    int k = 0;
    for (int i = 0; i < w; i++) {
        if (i == r) continue;
        sends[k].peer = i;
        sends[k].buf = (void *)(uintptr_t)(in + (size_t)i * blk);
        sends[k].len = blk;
        recvs[k].peer = i;
        recvs[k].buf = tmp + (size_t)k * blk;
        recvs[k].len = blk;
        k++;
    }
    spmd_status st = spmd__xfer(c, sends, k, recvs, k);
    if (st != SPMD_OK) return st;
    spmd__reduce3(a->recvbuf, in + (size_t)r * blk, tmp, n, a->dt, a->op);
    for (int i = 1; i < k; i++) spmd__reduce(a->recvbuf, tmp + (size_t)i * blk, n, a->dt, a->op);
    return SPMD_OK;
}
