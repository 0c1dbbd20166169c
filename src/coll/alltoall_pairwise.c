/* src/coll/alltoall_pairwise.c — pairwise-exchange all-to-all, equal or
 * uneven splits.  Step s = 1..w-1: send our block for rank r+s, receive the
 * block rank r-s has for us.  Each step is a permutation (every rank sends
 * one message and receives one), so no rank is ever hit by w-1 senders at
 * once:
 *
 *       w = 4      s=1          s=2          s=3
 *       r0       ->r1 <-r3    ->r2 <-r2    ->r3 <-r1
 *       r1       ->r2 <-r0    ->r3 <-r3    ->r0 <-r2
 *
 * Uneven splits (all_to_all_v) take the lengths and offsets from the
 * count/displacement arrays; a receive whose length disagrees with what the
 * peer sends fails with SPMD_ERR_MISMATCH in the transfer layer.
 *
 * Cost: (w-1)α + Σ bytes·β — for large blocks; small ones use linear.
 */
#include "coll/algos.h"

/* Where block `i` lies in the send or receive buffer, in bytes. */
void spmd__a2a_block(const spmd__coll_args *a, int i, int recv, size_t *off, size_t *len) {
    const size_t es = spmd_dtype_size(a->dt);
    if (a->sendcounts) {
        *off = (recv ? a->rdispls[i] : a->sdispls[i]) * es;
        *len = (recv ? a->recvcounts[i] : a->sendcounts[i]) * es;
    } else {
        *off = (size_t)i * a->count * es;
        *len = a->count * es;
    }
}

/* Rank r's own block: a copy, after checking it sends itself what it expects. */
spmd_status spmd__a2a_self(spmd__coll_ctx *c, const spmd__coll_args *a, int r) {
    size_t so, sl, ro, rl;
    spmd__a2a_block(a, r, 0, &so, &sl);
    spmd__a2a_block(a, r, 1, &ro, &rl);
    if (sl != rl)
        return spmd__coll_fail(c, SPMD_ERR_MISMATCH,
                               "all_to_all: rank %d sends itself %zu bytes but expects %zu", r, sl, rl);
    spmd__copy((char *)a->recvbuf + ro, (const char *)a->sendbuf + so, sl);
    return SPMD_OK;
}

spmd_status spmd__alltoall_pairwise(spmd__coll_ctx *c, const spmd__coll_args *a) {
    const int w = spmd__ctx_world(c), r = spmd__ctx_rank(c);
    const char *in = a->sendbuf;
    char *out = a->recvbuf;
    size_t so, sl, ro, rl;
    for (int s = 1; s < w; s++) {
        const int to = spmd__pair_to(r, w, s), from = spmd__pair_from(r, w, s);
        spmd__a2a_block(a, to, 0, &so, &sl);
        spmd__a2a_block(a, from, 1, &ro, &rl);
        spmd_status st = spmd__xsendrecv(c, to, in + so, sl, from, out + ro, rl);
        if (st != SPMD_OK) return st;
    }
    return spmd__a2a_self(c, a, r);
}
