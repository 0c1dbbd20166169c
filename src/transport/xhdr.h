/* src/transport/xhdr.h — the 24-byte header of every message on the
 * collective wire (xfer.c writes and checks them, desync.c reads the ones
 * waiting unread), little-endian:
 *
 *     u32  magic (8 bits) | spare (8) | algorithm id (8) | collective kind (8)
 *     u32  sequence number of the collective on this group
 *     u32  descriptor: hash of everything the ranks must agree on
 *     u32  mode (4 bits) | segment size / 64 (28 bits)
 *     u64  payload length
 *
 * The descriptor alone decides whether two ranks agree; the algorithm and
 * the segment size travel in the clear only so that a mismatch can say what
 * differs. */
#ifndef SPMD_TRANSPORT_XHDR_H
#define SPMD_TRANSPORT_XHDR_H

#include "xfer.h"

#define SPMD__XHDR 24
#define SPMD__XMAGIC 0xC0u

/* Modes: INLINE payload follows; CMA an address follows (xfer.c); ACK a CMA
 * message was read; AGREE a message of the agreement step (coll/agree.c),
 * whose payload, not its descriptor, says what the sender runs. */
enum { SPMD__XM_INLINE = 0, SPMD__XM_CMA = 1, SPMD__XM_ACK = 2, SPMD__XM_AGREE = 3 };

typedef struct {
    uint32_t kind, algo, seq, desc, mode;
    size_t seg;
    uint64_t len;
} spmd__xhdr;

static inline void spmd__xhdr_put(const spmd__coll_ctx *c, unsigned char *h, uint32_t mode, size_t len) {
    spmd__put_u32(h, (SPMD__XMAGIC << 24) | ((uint32_t)c->algo & 0xffu) << 8 | ((uint32_t)c->kind & 0xffu));
    spmd__put_u32(h + 4, c->seq);
    spmd__put_u32(h + 8, c->desc);
    spmd__put_u32(h + 12, mode | (uint32_t)(c->segment_bytes / 64) << 4);
    spmd__put_u64(h + 16, (uint64_t)len);
}

/* 0 when the bytes are not a header at all. */
static inline int spmd__xhdr_get(const unsigned char *h, spmd__xhdr *x) {
    uint32_t w0 = spmd__get_u32(h), w3 = spmd__get_u32(h + 12);
    x->kind = w0 & 0xffu;
    x->algo = (w0 >> 8) & 0xffu;
    x->seq = spmd__get_u32(h + 4);
    x->desc = spmd__get_u32(h + 8);
    x->mode = w3 & 15u;
    x->seg = (size_t)(w3 >> 4) * 64;
    x->len = spmd__get_u64(h + 16);
    return (w0 >> 24) == SPMD__XMAGIC && x->mode <= SPMD__XM_AGREE;
}

/* Judge a header from `peer` that is not what this rank runs (desync.c).
 * expected: a receive of this call waits for it; else it was found waiting
 * unread, and may belong to a later message of this collective or to the
 * peer's next collective.  SPMD_OK when it is fine after all; else the
 * failure, naming both ranks and what differs. */
spmd_status spmd__desync_header(spmd__coll_ctx *c, int peer, const spmd__xhdr *h, int expected);

#endif
