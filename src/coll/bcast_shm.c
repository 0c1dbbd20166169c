/* src/coll/bcast_shm.c — broadcast through the shared slots of one host.
 *
 *     root copies a slot-sized chunk into its slot ──sync──> every other rank
 *     copies it out of the root's slot; next chunk
 *   Cost: one flag exchange per chunk; the root writes n bytes once, each
 *   other rank reads n.
 */
#include "coll/algos.h"

spmd_status spmd__bcast_shm(spmd__coll_ctx *c, const spmd__coll_args *a) {
    const int me = spmd__ctx_rank(c);
    const size_t bytes = a->count * spmd_dtype_size(a->dt), chunk = spmd__shm_coll_slot_bytes(c);
    if (!spmd__shm_coll_usable(c) || !chunk)
        return spmd__coll_fail(c, SPMD_ERR_INVALID, "broadcast shm: needs shared memory with every rank");
    char *buf = a->recvbuf;
    size_t o = 0;
    do {
        const size_t len = bytes - o < chunk ? bytes - o : chunk;
        char *root_slot = spmd__shm_coll_slot(c, a->root);
        if (me == a->root) memcpy(root_slot, buf + o, len);
        spmd_status st = spmd__shm_coll_sync(c);
        if (st) return st;
        if (me != a->root) memcpy(buf + o, root_slot, len);
        o += len;
    } while (o < bytes);
    return SPMD_OK;
}
