/* batch.c — several frames in one message.
 *
 * A thread that answers a burst of calls — the receive role's holder with
 * the next frame already there, a pool thread with more calls queued —
 * puts each inline-only answer to the same caller after the previous one in
 * a frame-sized buffer of its own, and sends that as one message when the
 * burst ends, the buffer is full, or it sends anything else (so its
 * messages to a peer keep their order).  A window of calls then costs the
 * caller one message to receive per several answers.
 *
 * Layout: sub-frame after sub-frame, each a frame head and its inline_len
 * bytes, starting 8-byte aligned; the first head's nsub counts them.  The
 * receiver checks each head against what is left of the message, and a
 * batched frame has no body. */
#include <string.h>
#include "rpc_internal.h"

#define MAX_SUB (RPC_FRAME_BYTES / sizeof(rpc_frame_head))

static _Thread_local struct {
    spmd_rpc *scope;   /* this thread answers r's calls now */
    spmd_rpc *r;       /* whose frames the buffer holds, to whom, how many */
    int dst, n;
    size_t used;
    _Alignas(8) unsigned char buf[RPC_FRAME_BYTES];
} tl;

static size_t sub_size(uint32_t inline_len) { return (sizeof(rpc_frame_head) + inline_len + 7) & ~(size_t)7; }

void spmd__rpc_batch_begin(spmd_rpc *r) { tl.scope = r; }
void spmd__rpc_batch_end(spmd_rpc *r) {
    if (tl.scope == r) tl.scope = NULL;
}

int spmd__rpc_batching(spmd_rpc *r) {
    return tl.scope == r && (atomic_load(&r->rx_done) || atomic_load(&r->q_len) > 0);
}

void spmd__rpc_flush(spmd_rpc *r) {
    if (!tl.n || tl.r != r) return;
    rpc_frame *f = (rpc_frame *)(void *)tl.buf;
    f->h.nsub = (uint32_t)tl.n;
    memset(tl.buf + tl.used, 0, RPC_FRAME_BYTES - tl.used);
    tl.n = 0;
    char err[SPMD__ERRLEN];
    spmd_status st = spmd__rpc_p2p(r, 1, tl.buf, RPC_FRAME_BYTES, tl.dst, RPC_TAG_FRAME, err, sizeof err);
    if (st != SPMD_OK) SPMD_LOGW("rpc: answers to rank %d: %s", tl.dst, err);
}

spmd_status spmd__rpc_batch_add(spmd_rpc *r, int dst, const rpc_frame *f, char *err, size_t errlen) {
    (void)err, (void)errlen;   /* a send failure is logged when the batch goes */
    size_t n = sub_size(f->h.inline_len);
    if (tl.n && (tl.r != r || tl.dst != dst || tl.used + n > RPC_FRAME_BYTES || (size_t)tl.n == MAX_SUB))
        spmd__rpc_flush(tl.r);
    if (!tl.n) {
        tl.r = r;
        tl.dst = dst;
        tl.used = 0;
    }
    memcpy(tl.buf + tl.used, f, sizeof f->h + f->h.inline_len);
    memset(tl.buf + tl.used + sizeof f->h + f->h.inline_len, 0, n - sizeof f->h - f->h.inline_len);
    tl.used += n;
    tl.n++;
    return SPMD_OK;
}

void spmd__rpc_on_message(spmd_rpc *r, int src, const rpc_frame *f) {
    uint32_t nsub = f->h.magic == RPC_MAGIC ? f->h.nsub : 1;
    if (nsub == 0 || nsub > MAX_SUB) {
        SPMD_LOGW("rpc: rank %d: dropped a message from rank %d: it claims %u frames", r->rank, src, nsub);
        return;
    }
    r->on_frame(r, src, f, RPC_INLINE_BYTES);
    size_t off = 0;
    for (uint32_t k = 1; k < nsub; k++) {
        off += sub_size(((const rpc_frame *)(const void *)((const unsigned char *)f + off))->h.inline_len);
        const rpc_frame *g = (const rpc_frame *)(const void *)((const unsigned char *)f + off);
        if (off + sizeof g->h > RPC_FRAME_BYTES || g->h.body_tag) {
            SPMD_LOGW("rpc: rank %d: dropped frames %u-%u of a message from rank %d: %s", r->rank, k, nsub - 1, src,
                      off + sizeof g->h > RPC_FRAME_BYTES ? "beyond its end" : "a batched frame has a body");
            return;
        }
        r->on_frame(r, src, g, RPC_FRAME_BYTES - off - sizeof g->h);
    }
}
