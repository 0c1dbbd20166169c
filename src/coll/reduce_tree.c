/* src/coll/reduce_tree.c — binomial-tree reduce to any root, pipelined in
 * segments.  The broadcast tree (bcast_tree.c) run upwards:
 *
 *       v7 ──> v6 ──> v4 ──> v0 (root)
 *              v5 ──┘      │
 *       v3 ──> v2 ─────────┤
 *              v1 ─────────┘
 *
 * Round j: receive segment j from every child (into per-child scratch),
 * reduce them with our own contribution, and at the same time send segment
 * j-1 of our partial result to the parent.  Leaves just send their input.
 *
 * Non-root ranks accumulate in scratch, never in their own buffers: with
 * reduce in place (sendbuf == recvbuf) a non-root rank's buffer comes back
 * unchanged, as torch users expect (seed 001's reduce assertion).
 *
 * Cost: ceil(log2 w)·(α + s(β + γ)) per segment, (log2 w + S - 1) rounds.
 */
#include "coll/algos.h"

spmd_status spmd__reduce_tree(spmd__coll_ctx *c, const spmd__coll_args *a) {
    const int w = spmd__ctx_world(c), r = spmd__ctx_rank(c);
    const size_t es = spmd_dtype_size(a->dt), n = a->count;
    const size_t S = spmd__npieces(n, spmd__seg_elems(c, es));
    const size_t pmax = spmd__chunk_len(n, S, 0);
    const char *src = a->sendbuf;
    const int parent = spmd__tree_parent(r, a->root, w);
    int children[SPMD__MAX_WORLD_LOG + 1];
    const int nch = spmd__tree_children(r, a->root, w, children, SPMD__MAX_WORLD_LOG + 1);
    spmd_status st;

    if (nch == 0) { /* leaf: our input is the partial result */
        for (size_t j = 0; j < S; j++) {
            st = spmd__xsend(c, parent, src + spmd__chunk_off(n, S, j) * es, spmd__chunk_len(n, S, j) * es);
            if (st != SPMD_OK) return st;
        }
        return SPMD_OK;
    }

    char *tmp = spmd__tmp(c, 1, (size_t)nch * pmax * es);
    /* the root accumulates in recvbuf; others double-buffer in scratch */
    char *acc = parent < 0 ? a->recvbuf : spmd__tmp(c, 0, 2 * pmax * es);
    if (!tmp || !acc) return SPMD__NOMEM(c, "tree reduce", (size_t)(nch + 2) * pmax * es);

    spmd__xfer_op recvs[SPMD__MAX_WORLD_LOG + 1], send;
    const size_t lag = parent >= 0 ? 1 : 0;
    for (size_t j = 0; j < S + lag; j++) {
        int nr = 0, ns = 0;
        if (j < S) {
            for (int i = 0; i < nch; i++) {
                recvs[i].peer = children[i];
                recvs[i].buf = tmp + (size_t)i * pmax * es;
                recvs[i].len = spmd__chunk_len(n, S, j) * es;
            }
            nr = nch;
        }
        if (lag && j >= 1) {
            send.peer = parent;
            send.buf = acc + ((j - 1) % 2) * pmax * es;
            send.len = spmd__chunk_len(n, S, j - 1) * es;
            ns = 1;
        }
        if ((st = spmd__xfer(c, &send, ns, recvs, nr)) != SPMD_OK) return st;
        if (j < S) {
            const size_t o = spmd__chunk_off(n, S, j) * es, l = spmd__chunk_len(n, S, j);
            char *out = parent < 0 ? acc + o : acc + (j % 2) * pmax * es;
            spmd__reduce3(out, src + o, tmp, l, a->dt, a->op);
            for (int i = 1; i < nch; i++) spmd__reduce(out, tmp + (size_t)i * pmax * es, l, a->dt, a->op);
        }
    }
    return SPMD_OK;
}
