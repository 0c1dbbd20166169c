/* ctx.c — what an algorithm reads of the running collective, and its
 * scratch memory (kept in the context and reused by later collectives). */
#include <stdlib.h>
#include "coll/coll.h"

int spmd__ctx_rank(const spmd__coll_ctx *c) { return c->m->rank; }
int spmd__ctx_world(const spmd__coll_ctx *c) { return c->m->world; }
size_t spmd__ctx_segment_bytes(const spmd__coll_ctx *c) { return c->segment_bytes; }

void *spmd__scratch(spmd__coll_ctx *c, int slot, size_t bytes) {
    if (slot < 0 || slot >= SPMD__SCRATCH_SLOTS) return NULL;
    if (bytes == 0) bytes = 1;
    if (c->scratch_len[slot] < bytes) {
        void *p = NULL;
        if (posix_memalign(&p, 64, bytes) != 0) return NULL;
        free(c->scratch[slot]);
        c->scratch[slot] = p;
        c->scratch_len[slot] = bytes;
    }
    return c->scratch[slot];
}
