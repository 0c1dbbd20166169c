/* src/coll/gather_tree.c — binomial-tree gather.  Virtual rank v collects
 * the blocks of its subtree [v, v + subtree) contiguously (in virtual-rank
 * order) and sends them to its parent in one message:
 *
 *       v7 ─b7─> v6 ─b6b7─> v4 ─b4..b7─> v0
 *                v5 ─b5───┘              │
 *       v3 ─b3─> v2 ─b2b3────────────────┤
 *                v1 ─b1──────────────────┘
 *
 * The root rotates virtual order back to rank order at the end.
 *
 * Cost: ceil(log2 w)α + (w-1)·mβ: fewer messages at the root than linear,
 * at the price of forwarding (each block crosses up to log2 w links), so it
 * wins only for small blocks on larger worlds.
 */
#include "coll/algos.h"

spmd_status spmd__gather_tree(spmd__coll_ctx *c, const spmd__coll_args *a) {
    const int w = spmd__ctx_world(c), r = spmd__ctx_rank(c), root = a->root;
    const size_t blk = a->count * spmd_dtype_size(a->dt);
    const int parent = spmd__tree_parent(r, root, w);
    const int sub = spmd__tree_subtree(r, root, w);
    int children[SPMD__MAX_WORLD_LOG + 1];
    const int nch = spmd__tree_children(r, root, w, children, SPMD__MAX_WORLD_LOG + 1);
    spmd_status st;

    if (nch == 0) return spmd__xsend(c, parent, a->sendbuf, blk);

    /* At root 0 virtual order is rank order: collect straight into recvbuf. */
    char *t = (parent < 0 && root == 0) ? (char *)a->recvbuf : spmd__tmp(c, 0, (size_t)sub * blk);
    if (!t) return SPMD__NOMEM(c, "tree gather", (size_t)sub * blk);
    const int v = spmd__vrank(r, root, w);
    spmd__copy(t, a->sendbuf, blk);

    spmd__xfer_op recvs[SPMD__MAX_WORLD_LOG + 1];
    for (int i = 0; i < nch; i++) {
        const int cv = spmd__vrank(children[i], root, w);
        recvs[i].peer = children[i];
        recvs[i].buf = t + (size_t)(cv - v) * blk;
        recvs[i].len = (size_t)spmd__tree_subtree(children[i], root, w) * blk;
    }
    if ((st = spmd__xfer(c, NULL, 0, recvs, nch)) != SPMD_OK) return st;

    if (parent >= 0) return spmd__xsend(c, parent, t, (size_t)sub * blk);
    if (t != a->recvbuf) { /* virtual block i belongs to rank (i + root) mod w */
        char *out = a->recvbuf;
        const size_t head = (size_t)(w - root);
        memcpy(out + (size_t)root * blk, t, head * blk);
        memcpy(out, t + head * blk, (size_t)root * blk);
    }
    return SPMD_OK;
}
