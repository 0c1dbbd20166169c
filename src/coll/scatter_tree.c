/* src/coll/scatter_tree.c — binomial-tree scatter (gather_tree.c reversed).
 * The root lays the blocks out in virtual-rank order (v = (r - root) mod w)
 * and sends each child the contiguous blocks of its subtree, which keeps its
 * own and forwards the rest:
 *
 *       v0 ─b4..b7─> v4 ─b6b7─> v6 ─b7─> v7
 *        │            └─b5───> v5
 *        ├─b2b3────> v2 ─b3──> v3
 *        └─b1──────> v1
 *
 * Cost: ceil(log2 w)α + (w-1)·mβ (with forwarding); for small blocks.
 */
#include "coll/algos.h"

spmd_status spmd__scatter_tree(spmd__coll_ctx *c, const spmd__coll_args *a) {
    const int w = spmd__ctx_world(c), r = spmd__ctx_rank(c), root = a->root;
    const size_t blk = a->count * spmd_dtype_size(a->dt);
    const int parent = spmd__tree_parent(r, root, w);
    const int sub = spmd__tree_subtree(r, root, w);
    int children[SPMD__MAX_WORLD_LOG + 1];
    const int nch = spmd__tree_children(r, root, w, children, SPMD__MAX_WORLD_LOG + 1);
    spmd_status st;

    if (nch == 0) return spmd__xrecv(c, parent, a->recvbuf, blk);

    const char *t;
    if (parent < 0) {
        if (root == 0) {
            t = a->sendbuf; /* virtual order is rank order */
        } else {
            char *rot = spmd__tmp(c, 0, (size_t)w * blk);
            if (!rot) return SPMD__NOMEM(c, "tree scatter", (size_t)w * blk);
            const char *in = a->sendbuf;
            const size_t head = (size_t)(w - root);
            memcpy(rot, in + (size_t)root * blk, head * blk);
            memcpy(rot + head * blk, in, (size_t)root * blk);
            t = rot;
        }
    } else {
        char *mine = spmd__tmp(c, 0, (size_t)sub * blk);
        if (!mine) return SPMD__NOMEM(c, "tree scatter", (size_t)sub * blk);
        if ((st = spmd__xrecv(c, parent, mine, (size_t)sub * blk)) != SPMD_OK) return st;
        t = mine;
    }
    const int v = spmd__vrank(r, root, w);
    spmd__xfer_op sends[SPMD__MAX_WORLD_LOG + 1];
    for (int i = 0; i < nch; i++) {
        const int cv = spmd__vrank(children[i], root, w);
        sends[i].peer = children[i];
        sends[i].buf = (void *)(uintptr_t)(t + (size_t)(cv - v) * blk);
        sends[i].len = (size_t)spmd__tree_subtree(children[i], root, w) * blk;
    }
    if ((st = spmd__xfer(c, sends, nch, NULL, 0)) != SPMD_OK) return st;
    spmd__copy(a->recvbuf, t, blk); /* after the sends: recvbuf may overlap sendbuf */
    return SPMD_OK;
}
