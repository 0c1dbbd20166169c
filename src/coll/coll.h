/* src/coll/coll.h — what a collective algorithm sees.
 *
 * An algorithm is one function `spmd_status algo(spmd__coll_ctx *c, const spmd__coll_args *a)`
 * running on the group's collective executor (one collective at a time per
 * group, in issue order).  It moves bytes only through spmd__xfer() and its
 * wrappers, which frame every message with a header (collective kind, sequence
 * number, descriptor hash, length) and check it on arrival, so ranks that
 * disagree get SPMD_ERR_MISMATCH instead of a hang or an overrun.  Every call
 * honours the group's deadline and abort signal (a dead peer anywhere in the
 * group, or an error reported by another rank).
 *
 * Layering: patterns (pure peer/chunk math, pattern.h) → the transport's
 * transfer API (transport/xfer.h) → algorithm files (one per algorithm) →
 * select.c (the table).  The public functions (validation, then submission
 * to the executor) live above, in group/coll_api.c.
 */
#ifndef SPMD_COLL_H
#define SPMD_COLL_H

#include <stddef.h>
#include <stdint.h>
#include "spmd/group.h"
#include "common/common.h"
#include "transport/xfer.h"

/* One collective call, as validated by api.c.  Arrays (recvbufs, counts,
 * displacements) are owned by the args (copied at submission). */
typedef struct {
    spmd__coll_kind kind;
    const void *sendbuf;     /* == recvbuf for in-place */
    void *recvbuf;
    void **recvbufs;         /* all_gather into a list: world pointers, else NULL */
    size_t count;            /* elements (per rank block where the API says so) */
    spmd_dtype dt;
    spmd_op op;
    int root;
    size_t *sendcounts, *sdispls, *recvcounts, *rdispls; /* all_to_all_v, else NULL */
    char algo[32];           /* requested algorithm name, "" = select.c decides */
    uint32_t seq;            /* its number among the group's collectives (set at issue) */
} spmd__coll_args;

/* What every algorithm may read of the running collective. */
int spmd__ctx_rank(const spmd__coll_ctx *c);
int spmd__ctx_world(const spmd__coll_ctx *c);
/* Pipelining unit in bytes (SPMD_SEGMENT_BYTES, default 1 MiB; tests set it
 * small to reach multi-segment paths).  Always >= 64 and a multiple of 64. */
size_t spmd__ctx_segment_bytes(const spmd__coll_ctx *c);

/* Scratch memory owned by the context and reused by later collectives (slots
 * 0..3 are independent buffers).  Contents are undefined on return.  NULL on
 * allocation failure (then return spmd__coll_fail(c, SPMD_ERR_NOMEM, ...)). */
void *spmd__scratch(spmd__coll_ctx *c, int slot, size_t bytes);

/* ---- algorithms and selection (select.c) --------------------------------- */
typedef spmd_status (*spmd__algo_fn)(spmd__coll_ctx *c, const spmd__coll_args *a);

/* Run a collective: choose the algorithm (a->algo, else SPMD_ALGO_<KIND>, else
 * the table), then run it.  Called by the executor. */
spmd_status spmd__coll_run(spmd__coll_ctx *c, const spmd__coll_args *a);

#endif
