/* src/coll/bcast_scatter_ring.c — broadcast for large buffers as a
 * binomial scatter followed by a ring all-gather (van de Geijn).
 *
 * Chunks are numbered by virtual rank v = (r - root) mod w: chunk v ends at
 * virtual rank v.
 *
 *   scatter: the root sends each child the chunks of that child's subtree
 *            ([v, v + subtree)), which forwards the rest on:
 *               v0 ─K4..K7─> v4 ─K6K7─> v6 ─K7─> v7
 *   all-gather around the ring of virtual ranks, w-1 steps: v sends chunk
 *            (v - s) to v+1 and receives chunk (v - s - 1) from v-1.  The root
 *            already has everything, so the hop v(w-1) -> v0 is skipped.
 *
 * Cost: log2(w)α + (w-1)/w·nβ (scatter) + (w-1)α + (w-1)/w·nβ (ring):
 * about 2nβ whatever w, against the tree's log2(w)·nβ at the root.  Only
 * worth it for large buffers and w > 2.
 */
#include "coll/algos.h"

spmd_status spmd__bcast_scatter_ring(spmd__coll_ctx *c, const spmd__coll_args *a) {
    const int w = spmd__ctx_world(c), r = spmd__ctx_rank(c), root = a->root;
    const size_t es = spmd_dtype_size(a->dt), n = a->count, W = (size_t)w;
    char *buf = a->recvbuf;
    const int v = spmd__vrank(r, root, w);
    const int parent = spmd__tree_parent(r, root, w);
    const int sub = spmd__tree_subtree(r, root, w);
    int children[SPMD__MAX_WORLD_LOG + 1];
    const int nch = spmd__tree_children(r, root, w, children, SPMD__MAX_WORLD_LOG + 1);
    spmd_status st;

#define CHUNK_AT(i) (buf + spmd__chunk_off(n, W, (size_t)(i)) * es)
    if (parent >= 0) {
        st = spmd__xrecv(c, parent, CHUNK_AT(v), spmd__chunks_len(n, W, (size_t)v, (size_t)sub) * es);
        if (st != SPMD_OK) return st;
    }
    spmd__xfer_op sends[SPMD__MAX_WORLD_LOG + 1];
    for (int i = 0; i < nch; i++) {
        const int cv = spmd__vrank(children[i], root, w);
        const int csub = spmd__tree_subtree(children[i], root, w);
        sends[i].peer = children[i];
        sends[i].buf = CHUNK_AT(cv);
        sends[i].len = spmd__chunks_len(n, W, (size_t)cv, (size_t)csub) * es;
    }
    if (nch && (st = spmd__xfer(c, sends, nch, NULL, 0)) != SPMD_OK) return st;

    const int next = v == w - 1 ? -1 : spmd__unvrank(v + 1, root, w);
    const int prev = v == 0 ? -1 : spmd__unvrank(v - 1, root, w);
    for (int s = 0; s < w - 1; s++) {
        const int sc = spmd__mod(v - s, w), rc = spmd__mod(v - s - 1, w);
        st = spmd__xpair(c, next, CHUNK_AT(sc), spmd__chunk_len(n, W, (size_t)sc) * es, prev,
                         CHUNK_AT(rc), spmd__chunk_len(n, W, (size_t)rc) * es);
        if (st != SPMD_OK) return st;
    }
#undef CHUNK_AT
    return SPMD_OK;
}
