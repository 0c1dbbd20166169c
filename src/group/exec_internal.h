/* src/group/exec_internal.h — the collective context shared by the executor
 * (executor.c) and the transfer layer (xfer.c).  Algorithms see it only
 * through the accessors of coll.h. */
#ifndef SPMD_EXEC_INTERNAL_H
#define SPMD_EXEC_INTERNAL_H

#include "group_internal.h"

#define SPMD__SCRATCH_SLOTS 4

struct spmd__coll_ctx {
    spmd_group *g;
    spmd__coll_kind kind;  /* the collective running now */
    uint32_t seq;          /* collectives run so far on this group (same on every rank) */
    uint32_t desc;         /* hash of the arguments every rank must agree on */
    int64_t deadline;
    size_t segment_bytes;
    uint64_t spin_ns;      /* busy-poll budget before sleeping in poll() */
    int yield_in_spin;     /* oversubscribed: yield the core while spinning */
    int use_cma;           /* large sends may go by cross-memory attach (see executor.c) */
    void *scratch[SPMD__SCRATCH_SLOTS];
    size_t scratch_len[SPMD__SCRATCH_SLOTS];
    char err[SPMD__ERRLEN];
};

#endif
