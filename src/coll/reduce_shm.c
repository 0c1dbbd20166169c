/* src/coll/reduce_shm.c — reduce through the shared slots of one host.
 *
 *     every rank copies a slot-sized chunk into its slot ──sync──> the root
 *     reduces the chunk over all slots (rank order) into its output
 *   Cost: one flag exchange per chunk; the root reads w·n bytes.
 */
#include "coll/algos.h"

spmd_status spmd__reduce_shm(spmd__coll_ctx *c, const spmd__coll_args *a) {
    const int w = spmd__ctx_world(c), me = spmd__ctx_rank(c);
    const size_t es = spmd_dtype_size(a->dt), n = a->count, chunk = spmd__shm_coll_slot_bytes(c) / es;
    if (!spmd__shm_coll_usable(c) || !chunk)
        return spmd__coll_fail(c, SPMD_ERR_INVALID, "reduce shm: needs shared memory with every rank");
    char **slot = spmd__tmp(c, 0, sizeof(char *) * (size_t)w);
    if (!slot) return SPMD__NOMEM(c, "shm reduce", sizeof(char *) * (size_t)w);
    const char *src = a->sendbuf;
    char *dst = a->recvbuf;
    size_t o = 0;
    do {
        const size_t len = n - o < chunk ? n - o : chunk;
        for (int r = 0; r < w; r++) slot[r] = spmd__shm_coll_slot(c, r);
        memcpy(slot[me], src + o * es, len * es);
        spmd_status st = spmd__shm_coll_sync(c);
        if (st) return st;
        if (me == a->root) {
            memcpy(dst + o * es, slot[0], len * es);
            for (int r = 1; r < w; r++) spmd__reduce(dst + o * es, slot[r], len, a->dt, a->op);
        }
        o += len;
    } while (o < n);
    return SPMD_OK;
}
