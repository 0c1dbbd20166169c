/* src/coll/reduce_scatter_shm.c — reduce_scatter through the shared slots of
 * one host.
 *
 *     every rank copies the same element range of each of its w input blocks
 *     into its slot ──sync──> rank r reduces piece r over all slots (rank
 *     order) into its output; next range
 *   Cost: one flag exchange per range; each rank writes its whole input and
 *   reads w·count elements.
 */
#include "coll/algos.h"

spmd_status spmd__reduce_scatter_shm(spmd__coll_ctx *c, const spmd__coll_args *a) {
    const int w = spmd__ctx_world(c), me = spmd__ctx_rank(c);
    const size_t es = spmd_dtype_size(a->dt), n = a->count;
    const size_t range = spmd__shm_coll_slot_bytes(c) / es / (size_t)w;
    if (!spmd__shm_coll_usable(c) || !range)
        return spmd__coll_fail(c, SPMD_ERR_INVALID, "reduce_scatter shm: needs shared memory with every rank");
    char **slot = spmd__tmp(c, 0, sizeof(char *) * (size_t)w);
    if (!slot) return SPMD__NOMEM(c, "shm reduce_scatter", sizeof(char *) * (size_t)w);
    const char *src = a->sendbuf;
    char *dst = a->recvbuf;
    size_t o = 0;
    do {
        const size_t len = n - o < range ? n - o : range;
        for (int r = 0; r < w; r++) slot[r] = spmd__shm_coll_slot(c, r);
        for (int q = 0; q < w; q++) memcpy(slot[me] + (size_t)q * len * es, src + ((size_t)q * n + o) * es, len * es);
        spmd_status st = spmd__shm_coll_sync(c);
        if (st) return st;
        const size_t mine = (size_t)me * len * es;
        memcpy(dst + o * es, slot[0] + mine, len * es);
        for (int r = 1; r < w; r++) spmd__reduce(dst + o * es, slot[r] + mine, len, a->dt, a->op);
        o += len;
    } while (o < n);
    return SPMD_OK;
}
