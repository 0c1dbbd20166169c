/* src/coll/barrier_dissemination.c — dissemination barrier (Hensgen,
 * Finkel, Manber).  Round k: signal rank r + 2^k, wait for rank r - 2^k.
 * After ceil(log2 w) rounds every rank has heard, directly or through a
 * chain of rounds, from every other rank — so none can leave before all
 * have arrived.  Works for any w (no pairing, no fold).
 *
 *       w = 5   round 0 (d=1): 0->1 1->2 2->3 3->4 4->0
 *               round 1 (d=2): 0->2 1->3 2->4 3->0 4->1
 *               round 2 (d=4): 0->4 1->0 2->1 3->2 4->3
 *
 * Cost: ceil(log2 w)·α, messages are empty (the transfer header is the
 * signal).
 */
#include "coll/algos.h"

spmd_status spmd__barrier_dissemination(spmd__coll_ctx *c, const spmd__coll_args *a) {
    (void)a;
    const int w = spmd__ctx_world(c), r = spmd__ctx_rank(c);
    const int rounds = spmd__dissem_rounds(w);
    for (int k = 0; k < rounds; k++) {
        spmd_status st = spmd__xsendrecv(c, spmd__dissem_to(r, w, k), NULL, 0, spmd__dissem_from(r, w, k), NULL, 0);
        if (st != SPMD_OK) return st;
    }
    return SPMD_OK;
}
