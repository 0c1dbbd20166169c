/* shared_mem.c — the transport's shared arenas (transport/arena.h) for a
 * group: connecting them needs two collectives, which only the group can
 * run in its issue order. */
#include <stdio.h>
#include "group_internal.h"

spmd__arena *spmd__group_shm_alloc(spmd_group *g, size_t bytes) { return g ? spmd__arena_alloc(&g->t, bytes) : NULL; }

static spmd_status gather(void *ctx, const int64_t *mine, int64_t *all, size_t n, char *err, size_t errlen) {
    spmd_group *g = ctx;
    spmd_status st = spmd_all_gather(g, mine, all, n, SPMD_I64);
    if (st) snprintf(err, errlen, "sharing memory: %s", spmd_group_errmsg(g));
    return st;
}

static spmd_status all_min(void *ctx, int32_t mine, int32_t *min, char *err, size_t errlen) {
    spmd_group *g = ctx;
    spmd_status st = spmd_all_reduce(g, &mine, min, 1, SPMD_I32, SPMD_MIN);
    if (st) snprintf(err, errlen, "sharing memory: %s", spmd_group_errmsg(g));
    return st;
}

spmd_status spmd__group_shm_connect(spmd_group *g, spmd__arena *s, uint64_t layout, int *shared, char *err,
                                    size_t errlen) {
    const spmd__arena_colls cl = {g, gather, all_min};
    return spmd__arena_connect(s, &cl, layout, shared, err, errlen);
}
