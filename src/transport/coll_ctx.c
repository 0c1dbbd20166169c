/* src/transport/coll_ctx.c — what a collective's context (xfer.h) offers the
 * wire and the desync watch below it alike: the collectives' names, the
 * time left before its deadline, and its first error message. */
#include <stdarg.h>
#include <stdio.h>
#include "xfer.h"

static const char *const KIND_NAMES[SPMD__C_KIND_COUNT] = {
    [SPMD__C_BARRIER] = "barrier",       [SPMD__C_BROADCAST] = "broadcast",
    [SPMD__C_REDUCE] = "reduce",         [SPMD__C_ALL_REDUCE] = "all_reduce",
    [SPMD__C_GATHER] = "gather",         [SPMD__C_ALL_GATHER] = "all_gather",
    [SPMD__C_SCATTER] = "scatter",       [SPMD__C_REDUCE_SCATTER] = "reduce_scatter",
    [SPMD__C_ALL_TO_ALL] = "all_to_all",
};

const char *spmd__coll_kind_name(spmd__coll_kind k) {
    if ((int)k <= 0 || k >= SPMD__C_KIND_COUNT || !KIND_NAMES[k]) return "?";
    return KIND_NAMES[k];
}

int spmd__ctx_left_ms(spmd__coll_ctx *c) {
    if (!c->deadline) c->deadline = spmd__deadline(c->m->timeout_ms);
    return spmd__remaining_ms(c->deadline);
}

spmd_status spmd__coll_fail(spmd__coll_ctx *c, spmd_status st, const char *fmt, ...) {
    if (!c->err[0] || st) {
        va_list ap;
        va_start(ap, fmt);
        spmd__vfail(c->err, sizeof c->err, st, fmt, ap);
        va_end(ap);
    }
    return st;
}
