/* ckpt_dist.c — the checkpoint pattern of the DDP tutorial (seed 001): rank 0
 * saves, the others wait for it, everyone loads.  Kept in its own file: it is
 * the only part of src/data that talks to a process group. */
#include <stdio.h>
#include "data_internal.h"

/* Every rank learns the worst (most negative) of the ranks' statuses. */
static spmd_status agree(spmd_group *g, spmd_status mine, const char *what, const char *path,
                         char *err, size_t errlen) {
    int32_t v = (int32_t)mine;
    spmd_status st = spmd_all_reduce(g, &v, &v, 1, SPMD_I32, SPMD_MIN);
    if (st)
        return spmd__fail(err, errlen, st, "%s %s: all_reduce of the outcome failed: %s", what,
                          path, spmd_group_errmsg(g));
    if (mine == SPMD_OK && v != SPMD_OK)
        return spmd__fail(err, errlen, (spmd_status)v, "%s %s: another rank failed (%s)", what,
                          path, spmd_status_name((spmd_status)v));
    return mine != SPMD_OK ? mine : (spmd_status)v;
}

spmd_status spmd_ckpt_save_dist(spmd_group *g, const char *path, const spmd_ckpt_tensor *tensors,
                                size_t ntensors, const spmd_ckpt_kv *meta, size_t nmeta,
                                char *err, size_t errlen) {
    if (!g || !path) return spmd__fail(err, errlen, SPMD_ERR_INVALID, "spmd_ckpt_save_dist: bad args");
    int rank = spmd_group_rank(g);
    int32_t saved = SPMD_OK;
    if (rank == 0) saved = (int32_t)spmd_ckpt_save(path, tensors, ntensors, meta, nmeta, err, errlen);
    /* The broadcast is the barrier: nobody reads before rank 0 has renamed
     * and synced the file, and everyone learns whether it worked. */
    spmd_status st = spmd_broadcast(g, &saved, 1, SPMD_I32, 0);
    if (st)
        return spmd__fail(err, errlen, st, "save %s: broadcast from rank 0 failed: %s", path,
                          spmd_group_errmsg(g));
    if (saved != SPMD_OK) {
        if (rank != 0)
            spmd__fail(err, errlen, (spmd_status)saved, "save %s: rank 0 failed to save (%s)", path,
                       spmd_status_name((spmd_status)saved));
        return (spmd_status)saved;
    }
    st = spmd_ckpt_load(path, tensors, ntensors, err, errlen);
    return agree(g, st, "load", path, err, errlen);
}

spmd_status spmd_ckpt_load_dist(spmd_group *g, const char *path, const spmd_ckpt_tensor *tensors,
                                size_t ntensors, char *err, size_t errlen) {
    if (!g || !path) return spmd__fail(err, errlen, SPMD_ERR_INVALID, "spmd_ckpt_load_dist: bad args");
    spmd_status st = spmd_ckpt_load(path, tensors, ntensors, err, errlen);
    return agree(g, st, "load", path, err, errlen);
}
