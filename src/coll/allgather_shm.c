/* src/coll/allgather_shm.c — all_gather through the shared slots of one host.
 *
 *     every rank copies a chunk of its block into its slot ──sync──> every
 *     rank copies every rank's chunk into place; next chunk
 *   Cost: one flag exchange per chunk; each rank writes its block once and
 *   reads the (w-1) others.
 */
#include "coll/algos.h"

spmd_status spmd__allgather_shm(spmd__coll_ctx *c, const spmd__coll_args *a) {
    const int w = spmd__ctx_world(c), me = spmd__ctx_rank(c);
    const size_t es = spmd_dtype_size(a->dt), bytes = a->count * es, chunk = spmd__shm_coll_slot_bytes(c);
    if (!spmd__shm_coll_usable(c) || !chunk)
        return spmd__coll_fail(c, SPMD_ERR_INVALID, "all_gather shm: needs shared memory with every rank");
    char **slot = spmd__tmp(c, 0, sizeof(char *) * (size_t)w);
    if (!slot) return SPMD__NOMEM(c, "shm all_gather", sizeof(char *) * (size_t)w);
    const char *mine = spmd__block(a, a->recvbuf, me, es); /* select.c put our block in place */
    size_t o = 0;
    do {
        const size_t len = bytes - o < chunk ? bytes - o : chunk;
        for (int r = 0; r < w; r++) slot[r] = spmd__shm_coll_slot(c, r);
        memcpy(slot[me], mine + o, len);
        spmd_status st = spmd__shm_coll_sync(c);
        if (st) return st;
        for (int r = 0; r < w; r++)
            if (r != me) memcpy(spmd__block(a, a->recvbuf, r, es) + o, slot[r], len);
        o += len;
    } while (o < bytes);
    return SPMD_OK;
}
