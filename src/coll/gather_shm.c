/* src/coll/gather_shm.c — gather and scatter through the shared slots of one
 * host.
 *
 * gather:  every rank copies a slot-sized piece of its block into its slot
 *          ──sync──> the root copies every rank's piece into place
 * scatter: the root copies the same range of every block into its slot
 *          ──sync──> rank i copies piece i out of the root's slot
 * Cost: one flag exchange per piece; the root moves w·m bytes, the others m.
 */
#include "coll/algos.h"

spmd_status spmd__gather_shm(spmd__coll_ctx *c, const spmd__coll_args *a) {
    const int w = spmd__ctx_world(c), me = spmd__ctx_rank(c);
    const size_t blk = a->count * spmd_dtype_size(a->dt), chunk = spmd__shm_coll_slot_bytes(c);
    if (!spmd__shm_coll_usable(c) || !chunk)
        return spmd__coll_fail(c, SPMD_ERR_INVALID, "gather shm: needs shared memory with every rank");
    char **slot = spmd__tmp(c, 0, sizeof(char *) * (size_t)w);
    if (!slot) return SPMD__NOMEM(c, "shm gather", sizeof(char *) * (size_t)w);
    const char *in = a->sendbuf;
    char *out = a->recvbuf;
    if (me == a->root) spmd__copy(out + (size_t)me * blk, in, blk);
    size_t o = 0;
    do {
        const size_t len = blk - o < chunk ? blk - o : chunk;
        for (int r = 0; r < w; r++) slot[r] = spmd__shm_coll_slot(c, r);
        if (me != a->root) memcpy(slot[me], in + o, len);
        spmd_status st = spmd__shm_coll_sync(c);
        if (st) return st;
        if (me == a->root)
            for (int r = 0; r < w; r++)
                if (r != me) memcpy(out + (size_t)r * blk + o, slot[r], len);
        o += len;
    } while (o < blk);
    return SPMD_OK;
}

spmd_status spmd__scatter_shm(spmd__coll_ctx *c, const spmd__coll_args *a) {
    const int w = spmd__ctx_world(c), me = spmd__ctx_rank(c);
    const size_t blk = a->count * spmd_dtype_size(a->dt), range = spmd__shm_coll_slot_bytes(c) / (size_t)w;
    if (!spmd__shm_coll_usable(c) || !range)
        return spmd__coll_fail(c, SPMD_ERR_INVALID, "scatter shm: needs shared memory with every rank");
    const char *in = a->sendbuf;
    char *out = a->recvbuf;
    size_t o = 0;
    do {
        const size_t len = blk - o < range ? blk - o : range;
        char *root = spmd__shm_coll_slot(c, a->root);
        if (me == a->root)
            for (int r = 0; r < w; r++)
                if (r != me) memcpy(root + (size_t)r * len, in + (size_t)r * blk + o, len);
        spmd_status st = spmd__shm_coll_sync(c);
        if (st) return st;
        if (me != a->root) memcpy(out + o, root + (size_t)me * len, len);
        o += len;
    } while (o < blk);
    if (me == a->root) spmd__copy(out, in + (size_t)me * blk, blk);
    return SPMD_OK;
}
