/* src/coll/agree.h — what the ranks of a collective must agree on, and the
 * agreement step of rooted collectives (agree.c). */
#ifndef SPMD_COLL_AGREE_H
#define SPMD_COLL_AGREE_H

#include "coll/coll.h"

/* broadcast, reduce, gather, scatter: a rank may finish without hearing
 * from every other, so these agree before they run. */
int spmd__coll_is_rooted(spmd__coll_kind k);
/* The descriptor of a call: its arguments, the algorithm id and the segment size. */
uint32_t spmd__coll_describe(const spmd__coll_args *a, int algo, size_t segment_bytes);
/* Every rank learns whether every rank runs the same descriptor (c->desc,
 * c->algo set).  SPMD_OK when they do; else SPMD_ERR_MISMATCH with the same
 * message on every rank and c->unanimous set (the group stays usable). */
spmd_status spmd__coll_agree(spmd__coll_ctx *c, const spmd__coll_args *a);

#endif
