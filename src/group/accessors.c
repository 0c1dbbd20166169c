/* src/group/accessors.c — what a group is: rank, size, the local ranks, the
 * paths its peers are reached by, its store, its deadline and timeout. */
#include <stdlib.h>
#include "group_internal.h"
#include "transport/path.h"

int spmd_group_rank(const spmd_group *g) { return g ? g->rank : -1; }
int spmd_group_size(const spmd_group *g) { return g ? g->world : -1; }
int spmd_group_local_rank(const spmd_group *g) { return g ? g->local_rank : -1; }
int spmd_group_local_size(const spmd_group *g) { return g ? g->local_world : -1; }
/* The paths this rank's peers are reached by: shared memory, TCP, or both;
 * "+aes-gcm" when the TCP ones are encrypted (SPMD_ENCRYPT=1). */
const char *spmd_group_backend(const spmd_group *g) {
    if (!g) return "?";
    if (g->t.ext) return g->t.ext->name;
    int shm = spmd__shm_link_peers(g->t.shm), others = g->world - 1 - shm, sealed = 0;
    for (int p = 0; p < g->world && !sealed; p++)
        sealed = g->t.path[SPMD__CH_P2P] && g->t.path[SPMD__CH_P2P][p] &&
                 g->t.path[SPMD__CH_P2P][p]->ops == &spmd__path_sealed_ops;
    if (sealed) return shm ? "shm+tcp+aes-gcm" : "tcp+aes-gcm";
    return shm && others ? "shm+tcp" : shm ? "shm" : "tcp";
}
spmd_store *spmd_group_store(spmd_group *g) { return g ? g->store : NULL; }

int64_t spmd__group_deadline(const spmd_group *g) { return spmd__deadline(g->timeout_ms); }

/* SPMD_TIMEOUT (a duration), else SPMD_DEFAULT_TIMEOUT_MS. */
int spmd__group_default_timeout_ms(void) {
    const char *s = getenv("SPMD_TIMEOUT");
    long ms;
    if (s && *s && spmd__parse_duration_ms(s, &ms) == SPMD_OK && ms > 0) return (int)ms;
    return SPMD_DEFAULT_TIMEOUT_MS;
}

void spmd_group_set_timeout(spmd_group *g, int timeout_ms) {
    if (g) g->t.timeout_ms = g->timeout_ms = timeout_ms > 0 ? timeout_ms : spmd__group_default_timeout_ms();
}
