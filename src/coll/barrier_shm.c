/* src/coll/barrier_shm.c — barrier through the shared flags of one host: one
 * step with nothing in the slots.  Every rank posts its flag and waits for
 * everyone's (the flags carry the collective's hash, so a rank in another
 * collective is a mismatch, not a pass).  Cost: one flag exchange. */
#include "coll/algos.h"

spmd_status spmd__barrier_shm(spmd__coll_ctx *c, const spmd__coll_args *a) {
    (void)a;
    if (!spmd__shm_coll_usable(c))
        return spmd__coll_fail(c, SPMD_ERR_INVALID, "barrier shm: needs shared memory with every rank");
    return spmd__shm_coll_sync(c);
}
