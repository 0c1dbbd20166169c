/* src/coll/alltoall_shm.c — all_to_all (equal splits) through the shared
 * slots of one host.
 *
 *     every rank copies the same range of each of its w send blocks into its
 *     slot ──sync──> rank r copies piece r of every rank's slot into its
 *     receive blocks; next range
 * Cost: one flag exchange per range; each rank writes and reads w·m bytes.
 * Uneven splits (all_to_all_v) go pairwise: their sizes differ per rank.
 */
#include "coll/algos.h"

spmd_status spmd__alltoall_shm(spmd__coll_ctx *c, const spmd__coll_args *a) {
    if (a->sendcounts) return spmd__alltoall_pairwise(c, a);
    const int w = spmd__ctx_world(c), me = spmd__ctx_rank(c);
    const size_t blk = a->count * spmd_dtype_size(a->dt), range = spmd__shm_coll_slot_bytes(c) / (size_t)w;
    if (!spmd__shm_coll_usable(c) || !range)
        return spmd__coll_fail(c, SPMD_ERR_INVALID, "all_to_all shm: needs shared memory with every rank");
    char **slot = spmd__tmp(c, 0, sizeof(char *) * (size_t)w);
    if (!slot) return SPMD__NOMEM(c, "shm all_to_all", sizeof(char *) * (size_t)w);
    const char *in = a->sendbuf; /* select.c copied it aside when it overlaps the output */
    char *out = a->recvbuf;
    size_t o = 0;
    do {
        const size_t len = blk - o < range ? blk - o : range;
        for (int r = 0; r < w; r++) slot[r] = spmd__shm_coll_slot(c, r);
        for (int q = 0; q < w; q++) memcpy(slot[me] + (size_t)q * len, in + (size_t)q * blk + o, len);
        spmd_status st = spmd__shm_coll_sync(c);
        if (st) return st;
        for (int q = 0; q < w; q++) memcpy(out + (size_t)q * blk + o, slot[q] + (size_t)me * len, len);
        o += len;
    } while (o < blk);
    return SPMD_OK;
}
