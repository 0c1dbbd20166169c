/* src/coll/reduce_scatter_ring.c — ring reduce-scatter.  The input holds w
 * blocks; rank r must end with block r reduced over all ranks.  A partial
 * sum of each block travels once around the ring, picking up every rank's
 * contribution, and arrives complete at the block's owner:
 *
 *   step s = 0..w-2 on rank r:
 *       send partial of block (r - s - 1)  -> r+1   (step 0: our own input)
 *       recv partial of block (r - s - 2)  <- r-1, add our input's block
 *   at the last step the block received is r itself: add our input, done.
 *
 *       w = 3:  r0 sends b2 -> r1; r1 sends b0 -> r2; r2 sends b1 -> r0
 *               r0 adds b1, sends (b1) -> r1 which adds b1 = complete
 *
 * Partials live in two scratch blocks used alternately (the one sent this
 * step is the one received last step).  Each step is cut into the same
 * number of pieces (of at most min(SPMD_SEGMENT_BYTES, 256 KiB)) on every
 * rank so large blocks stream through cache.
 * The output is written only at the very last step, after the input's other
 * blocks have been consumed, so recvbuf may be a block of sendbuf (in place).
 *
 * Cost: (w-1)α + (w-1)·mβ + (w-1)·mγ, m = bytes per block.
 */
#include "coll/algos.h"

spmd_status spmd__reduce_scatter_ring(spmd__coll_ctx *c, const spmd__coll_args *a) {
    const int w = spmd__ctx_world(c), r = spmd__ctx_rank(c);
    const int next = spmd__ring_next(r, w), prev = spmd__ring_prev(r, w);
    const size_t es = spmd_dtype_size(a->dt), n = a->count, blk = n * es;
    const size_t S = spmd__npieces(n, spmd__pipe_elems(c, es));
    const char *in = a->sendbuf;
    char *acc = spmd__tmp(c, 0, 2 * blk);
    if (!acc) return SPMD__NOMEM(c, "ring reduce_scatter", 2 * blk);

    for (int s = 0; s < w - 1; s++) {
        const int sb = spmd__mod(r - s - 1, w), rb = spmd__mod(r - s - 2, w);
        const char *sbuf = s == 0 ? in + (size_t)sb * blk : acc + (size_t)((s - 1) % 2) * blk;
        char *rbuf = acc + (size_t)(s % 2) * blk;
        char *out = s == w - 2 ? (char *)a->recvbuf : rbuf;
        for (size_t j = 0; j < S; j++) {
            const size_t o = spmd__chunk_off(n, S, j) * es, l = spmd__chunk_len(n, S, j);
            spmd_status st = spmd__xsendrecv(c, next, sbuf + o, l * es, prev, rbuf + o, l * es);
            if (st != SPMD_OK) return st;
            spmd__reduce3(out + o, rbuf + o, in + (size_t)rb * blk + o, l, a->dt, a->op);
        }
    }
    return SPMD_OK;
}
