/* src/coll/bcast_tree.c — binomial-tree broadcast, pipelined in segments.
 *
 * Virtual ranks v = (r - root) mod w; the root (v = 0) sends to v = 4, 2, 1
 * (largest subtree first), v = 4 sends to 6 and 5, and so on:
 *
 *       v0 ──> v4 ──> v6 ──> v7
 *        │      └───> v5
 *        ├───> v2 ──> v3
 *        └───> v1
 *
 * Pipelining: the buffer is cut into S segments of SPMD_SEGMENT_BYTES.  In
 * round j a non-root rank receives segment j from its parent while it sends
 * segment j-1 to all its children (one transfer call progresses both), so
 * the segments stream down the tree.
 *
 * Cost: (ceil(log2 w) + S - 1)·(α + s·β·fanout) with s = n/S: for one
 * segment ceil(log2 w)(α + nβ) — latency-optimal for small buffers; for
 * large ones the pipeline hides the depth but the root still sends the
 * whole buffer to each of its log2(w) children (scatter_ring avoids that).
 */
#include "coll/algos.h"

spmd_status spmd__bcast_tree(spmd__coll_ctx *c, const spmd__coll_args *a) {
    const int w = spmd__ctx_world(c), r = spmd__ctx_rank(c);
    const size_t es = spmd_dtype_size(a->dt), n = a->count;
    const size_t S = spmd__npieces(n, spmd__seg_elems(c, es));
    char *buf = a->recvbuf;
    const int parent = spmd__tree_parent(r, a->root, w);
    int children[SPMD__MAX_WORLD_LOG + 1];
    const int nch = spmd__tree_children(r, a->root, w, children, SPMD__MAX_WORLD_LOG + 1);
    spmd__xfer_op sends[SPMD__MAX_WORLD_LOG + 1], recv;

    /* round j: receive segment j (j < S, non-root), send segment j - lag */
    const size_t lag = parent >= 0 ? 1 : 0;
    for (size_t j = 0; j < S + lag; j++) {
        int nr = 0, ns = 0;
        if (parent >= 0 && j < S) {
            recv.peer = parent;
            recv.buf = buf + spmd__chunk_off(n, S, j) * es;
            recv.len = spmd__chunk_len(n, S, j) * es;
            nr = 1;
        }
        if (j >= lag) {
            const size_t k = j - lag;
            for (int i = 0; i < nch; i++) {
                sends[i].peer = children[i];
                sends[i].buf = buf + spmd__chunk_off(n, S, k) * es;
                sends[i].len = spmd__chunk_len(n, S, k) * es;
            }
            ns = nch;
        }
        if (nr + ns == 0) continue;
        spmd_status st = spmd__xfer(c, sends, ns, &recv, nr);
        if (st != SPMD_OK) return st;
    }
    return SPMD_OK;
}
