/* wire.c — frames and bodies over the group's point-to-point messages.
 *
 * Meta block: per tensor {u8 dtype, u8 ndim, 6 zero bytes, i64 shape[ndim]},
 * per RRef {i32 owner, u32 0, u64 rref_id, u64 fork_id}, then the payload.
 * Data: each tensor's bytes in order.  Both go inline when they fit in the
 * frame, else on the frame's body tag (meta as one message, then one message
 * per non-empty tensor).  Every length is checked against the frame before
 * anything is allocated: a bad frame costs the callee nothing but a log line. */
#include <stdlib.h>
#include <string.h>
#include "rpc_internal.h"

#define RREF_BYTES 24

void spmd__rpc_frame_init(rpc_frame *f, int kind, uint64_t id, const char *name) {
    memset(f, 0, sizeof *f);
    f->h.magic = RPC_MAGIC;
    f->h.version = RPC_VERSION;
    f->h.kind = (uint8_t)kind;
    f->h.id = id;
    if (name) snprintf(f->h.name, sizeof f->h.name, "%s", name);
}

static size_t meta_size(const spmd_rpc_msg *m) {
    if (!m) return 0;
    size_t n = 0;
    for (int i = 0; i < m->n; i++) n += 8 + 8 * (size_t)m->t[i].ndim;
    return n + (size_t)m->nrrefs * RREF_BYTES + m->plen;
}

static void meta_write(unsigned char *p, const spmd_rpc_msg *m) {
    for (int i = 0; i < m->n; i++) {
        memset(p, 0, 8);
        p[0] = (unsigned char)m->t[i].dtype;
        p[1] = (unsigned char)m->t[i].ndim;
        p += 8;
        for (int d = 0; d < m->t[i].ndim; d++, p += 8) spmd__put_u64(p, (uint64_t)m->t[i].shape[d]);
    }
    for (int i = 0; i < m->nrrefs; i++, p += RREF_BYTES) {
        spmd__put_u32(p, (uint32_t)m->rr[i].owner);
        spmd__put_u32(p + 4, 0);
        spmd__put_u64(p + 8, m->rr[i].rref_id);
        spmd__put_u64(p + 16, m->rr[i].fork_id);
    }
    if (m->plen) memcpy(p, m->payload, m->plen);
}

/* Point-to-point through work handles: a work's message is its own, while
 * the group's errmsg is one buffer every thread writes.  Waits without end
 * (the group's deadline would otherwise fail an idle dispatcher): a dead
 * peer or an abort fails the work instead. */
spmd_status spmd__rpc_p2p(spmd_rpc *r, int send, void *buf, size_t n, int peer, int tag, int *source,
                          char *err, size_t errlen) {
    spmd_work *w = NULL;
    spmd_status st = send ? spmd_isend(r->g, buf, n, SPMD_U8, peer, tag, &w)
                          : spmd_irecv(r->g, buf, n, SPMD_U8, peer, tag, &w);
    if (st != SPMD_OK)
        return spmd__fail(err, errlen, st, "%s", atomic_load(&r->broken) ? r->broken_msg : spmd_status_str(st));
    while ((st = spmd_work_wait(w, 1000)) == SPMD_ERR_TIMEOUT) {
    }
    if (st != SPMD_OK) spmd__fail(err, errlen, st, "%s", spmd_work_errmsg(w));
    else if (source) *source = spmd_work_source(w);
    spmd_work_free(w);
    return st;
}

/* (A refused earlier send never poisons this one: the group fails only
 * the receive that refused it.) */
static spmd_status send_frame(spmd_rpc *r, int dst, const rpc_frame *f, char *err, size_t errlen) {
    return spmd__rpc_p2p(r, 1, (void *)f, RPC_FRAME_BYTES, dst, RPC_TAG_FRAME, NULL, err, errlen);
}

/* meta then every tensor's bytes, contiguous */
static void pack(unsigned char *p, size_t meta, const spmd_rpc_msg *m) {
    meta_write(p, m);
    p += meta;
    for (int i = 0; i < m->n; i++) {
        size_t b = spmd__rpc_tensor_bytes(&m->t[i]);
        if (b) memcpy(p, m->t[i].data, b);
        p += b;
    }
}

spmd_status spmd__rpc_send(spmd_rpc *r, int dst, rpc_frame *f, const spmd_rpc_msg *m, char *err,
                           size_t errlen) {
    size_t meta = meta_size(m), data = 0;
    char gerr[SPMD__ERRLEN] = "";
    if (m)
        for (int i = 0; i < m->n; i++) data += spmd__rpc_tensor_bytes(&m->t[i]);
    f->h.ntensors = m ? (uint32_t)m->n : 0;
    f->h.nrrefs = m ? (uint32_t)m->nrrefs : 0;
    f->h.payload_len = m ? (uint32_t)m->plen : 0;
    f->h.meta_len = (uint32_t)meta;
    f->h.data_len = data;
    f->h.body_tag = 0;
    f->h.inline_len = 0;
    spmd_status st;
    if (meta + data <= RPC_INLINE_BYTES) {
        if (m) pack(f->inl, meta, m);
        f->h.inline_len = (uint32_t)(meta + data);
        st = send_frame(r, dst, f, gerr, sizeof gerr);
        if (st != SPMD_OK) goto fail;
        return SPMD_OK;
    }
    /* The body goes on a tag of its own, so concurrent senders never interleave. */
    uint32_t tag = RPC_TAG_BODY0 + (atomic_fetch_add(&r->body_seq, 1) & 0x0fffffffu);
    f->h.body_tag = tag;
    if (meta + data <= RPC_PACK_MAX) {
        /* A middle-sized body: one message (a copy is cheaper than a message). */
        unsigned char *pk = malloc(meta + data);
        if (!pk) return spmd__fail(err, errlen, SPMD_ERR_NOMEM, "out of memory");
        pack(pk, meta, m);
        f->h.flags |= RPC_F_PACKED;
        st = send_frame(r, dst, f, gerr, sizeof gerr);
        if (st == SPMD_OK) st = spmd__rpc_p2p(r, 1, pk, meta + data, dst, (int)tag, NULL, gerr, sizeof gerr);
        free(pk);
        if (st != SPMD_OK) goto fail;
        return SPMD_OK;
    }
    unsigned char *mb = NULL;
    if (meta) {
        mb = malloc(meta);
        if (!mb) return spmd__fail(err, errlen, SPMD_ERR_NOMEM, "out of memory");
        meta_write(mb, m);
    }
    st = send_frame(r, dst, f, gerr, sizeof gerr);
    if (st == SPMD_OK && meta) st = spmd__rpc_p2p(r, 1, mb, meta, dst, (int)tag, NULL, gerr, sizeof gerr);
    free(mb);
    for (int i = 0; m && i < m->n && st == SPMD_OK; i++) {
        size_t b = spmd__rpc_tensor_bytes(&m->t[i]);
        if (b) st = spmd__rpc_p2p(r, 1, m->t[i].data, b, dst, (int)tag, NULL, gerr, sizeof gerr);
    }
    if (st == SPMD_OK) return SPMD_OK;
fail:
    return spmd__fail(err, errlen, st, "sending to worker %s (rank %d): %s", r->names[dst], dst, gerr);
}

/* Parse the meta block into m (tensors allocated, not filled). */
static spmd_status meta_parse(spmd_rpc *r, const rpc_frame *f, const unsigned char *p,
                              spmd_rpc_msg *m, char *err, size_t errlen) {
    const unsigned char *end = p + f->h.meta_len;
    uint64_t data = 0;
    for (uint32_t i = 0; i < f->h.ntensors; i++) {
        if (end - p < 8) return spmd__fail(err, errlen, SPMD_ERR_FORMAT, "tensor table truncated");
        int dt = p[0], nd = p[1];
        if (dt >= SPMD_DTYPE_COUNT)
            return spmd__fail(err, errlen, SPMD_ERR_FORMAT, "tensor %u: unknown dtype %d", i, dt);
        if (nd > SPMD_RPC_MAX_DIMS)
            return spmd__fail(err, errlen, SPMD_ERR_FORMAT, "tensor %u: %d dims (max %d)", i, nd,
                              SPMD_RPC_MAX_DIMS);
        p += 8;
        if (end - p < 8 * nd) return spmd__fail(err, errlen, SPMD_ERR_FORMAT, "tensor table truncated");
        spmd_rpc_tensor *t = &m->t[m->n];
        t->dtype = (spmd_dtype)dt;
        t->ndim = nd;
        uint64_t numel = 1;
        for (int d = 0; d < nd; d++, p += 8) {
            uint64_t s = spmd__get_u64(p);
            if (s > ((uint64_t)1 << 40) || (s && numel > (((uint64_t)1 << 42) / s)))
                return spmd__fail(err, errlen, SPMD_ERR_FORMAT, "tensor %u: shape too large", i);
            t->shape[d] = (int64_t)s;
            numel *= s;
        }
        size_t bytes = (size_t)numel * spmd_dtype_size(t->dtype);
        data += bytes;
        if (data > f->h.data_len)
            return spmd__fail(err, errlen, SPMD_ERR_FORMAT, "tensor shapes need more than the %llu data bytes sent",
                              (unsigned long long)f->h.data_len);
        t->data = malloc(bytes ? bytes : 1);
        if (!t->data) return spmd__fail(err, errlen, SPMD_ERR_NOMEM, "out of memory for tensor %u", i);
        m->owned[m->n++] = 1;
    }
    if (data != f->h.data_len)
        return spmd__fail(err, errlen, SPMD_ERR_FORMAT, "tensor shapes need %llu data bytes, frame says %llu",
                          (unsigned long long)data, (unsigned long long)f->h.data_len);
    for (uint32_t i = 0; i < f->h.nrrefs; i++, p += RREF_BYTES) {
        if (end - p < RREF_BYTES) return spmd__fail(err, errlen, SPMD_ERR_FORMAT, "RRef table truncated");
        int owner = (int)spmd__get_u32(p);
        if (owner < 0 || owner >= r->world)
            return spmd__fail(err, errlen, SPMD_ERR_FORMAT, "RRef %u: owner %d out of range", i, owner);
        spmd__rpc_msg_add_desc(m, r, owner, spmd__get_u64(p + 8), spmd__get_u64(p + 16));
    }
    if ((size_t)(end - p) != f->h.payload_len)
        return spmd__fail(err, errlen, SPMD_ERR_FORMAT, "meta block of %u bytes does not match its tables",
                          f->h.meta_len);
    if (f->h.payload_len) {
        m->payload = malloc(f->h.payload_len);
        if (!m->payload) return spmd__fail(err, errlen, SPMD_ERR_NOMEM, "out of memory");
        memcpy(m->payload, p, f->h.payload_len);
        m->plen = f->h.payload_len;
    }
    return SPMD_OK;
}

/* Header sanity checks that need no body. */
static spmd_status check_head(const rpc_frame *f, char *err, size_t errlen) {
    const rpc_frame_head *h = &f->h;
    if (h->magic != RPC_MAGIC || h->version != RPC_VERSION)
        return spmd__fail(err, errlen, SPMD_ERR_FORMAT, "bad magic/version");
    if (h->ntensors > SPMD_RPC_MAX_TENSORS)
        return spmd__fail(err, errlen, SPMD_ERR_FORMAT, "%u tensors (max %d)", h->ntensors, SPMD_RPC_MAX_TENSORS);
    if (h->nrrefs > RPC_MAX_RREFS)
        return spmd__fail(err, errlen, SPMD_ERR_FORMAT, "%u RRefs (max %d)", h->nrrefs, RPC_MAX_RREFS);
    if (h->payload_len > SPMD_RPC_MAX_PAYLOAD)
        return spmd__fail(err, errlen, SPMD_ERR_FORMAT, "payload of %u bytes (max %d)", h->payload_len,
                          SPMD_RPC_MAX_PAYLOAD);
    uint64_t meta_max = (uint64_t)h->ntensors * (8 + 8 * SPMD_RPC_MAX_DIMS) + (uint64_t)h->nrrefs * RREF_BYTES +
                        h->payload_len;
    if (h->meta_len > meta_max)
        return spmd__fail(err, errlen, SPMD_ERR_FORMAT, "meta block of %u bytes is too long", h->meta_len);
    if (h->body_tag == 0 && (h->inline_len > RPC_INLINE_BYTES || h->inline_len != h->meta_len + h->data_len))
        return spmd__fail(err, errlen, SPMD_ERR_FORMAT, "inline length %u does not match the frame", h->inline_len);
    if ((h->flags & RPC_F_PACKED) && (uint64_t)h->meta_len + h->data_len > RPC_PACK_MAX)
        return spmd__fail(err, errlen, SPMD_ERR_FORMAT, "packed body of %llu bytes (max %d)",
                          (unsigned long long)h->meta_len + h->data_len, RPC_PACK_MAX);
    if ((h->flags & RPC_F_PACKED) && h->body_tag == 0)
        return spmd__fail(err, errlen, SPMD_ERR_FORMAT, "packed body without a body tag");
    if (h->body_tag != 0 && h->body_tag < RPC_TAG_BODY0)
        return spmd__fail(err, errlen, SPMD_ERR_FORMAT, "body tag %u out of range", h->body_tag);
    if (memchr(h->name, 0, sizeof h->name) == NULL)
        return spmd__fail(err, errlen, SPMD_ERR_FORMAT, "name not terminated");
    return SPMD_OK;
}

spmd_status spmd__rpc_recv_body(spmd_rpc *r, int src, const rpc_frame *f, spmd_rpc_msg **out,
                                char *err, size_t errlen) {
    *out = NULL;
    spmd_status st = check_head(f, err, errlen);
    if (st != SPMD_OK) return st;
    spmd_rpc_msg *m = spmd_rpc_msg_new();
    if (!m) return spmd__fail(err, errlen, SPMD_ERR_NOMEM, "out of memory");
    char gerr[SPMD__ERRLEN] = "";
    if (f->h.body_tag == 0 || (f->h.flags & RPC_F_PACKED)) {
        const unsigned char *flat = f->inl;
        unsigned char *pk = NULL;
        if (f->h.body_tag) {
            /* check_head bounded meta_len + data_len by RPC_PACK_MAX */
            pk = malloc(f->h.meta_len + f->h.data_len + 1);
            if (!pk) st = spmd__fail(err, errlen, SPMD_ERR_NOMEM, "out of memory");
            else if (spmd__rpc_p2p(r, 0, pk, f->h.meta_len + f->h.data_len, src, (int)f->h.body_tag, NULL, gerr,
                                   sizeof gerr) != SPMD_OK)
                st = spmd__fail(err, errlen, SPMD_ERR_FORMAT, "body: %s", gerr);
            flat = pk;
        }
        if (st == SPMD_OK) st = meta_parse(r, f, flat, m, err, errlen);
        const unsigned char *p = flat + f->h.meta_len;
        for (int i = 0; st == SPMD_OK && i < m->n; i++) {
            size_t b = spmd__rpc_tensor_bytes(&m->t[i]);
            memcpy(m->t[i].data, p, b);
            p += b;
        }
        free(pk);
    } else {
        /* The body is on its own tag: receive it even if it turns out bad,
         * so nothing stays queued. */
        unsigned char *mb = NULL;
        if (f->h.meta_len) {
            mb = malloc(f->h.meta_len);
            if (!mb) st = spmd__fail(err, errlen, SPMD_ERR_NOMEM, "out of memory");
            else if (spmd__rpc_p2p(r, 0, mb, f->h.meta_len, src, (int)f->h.body_tag, NULL, gerr, sizeof gerr) != SPMD_OK)
                st = spmd__fail(err, errlen, SPMD_ERR_FORMAT, "body: %s", gerr);
        }
        if (st == SPMD_OK) st = meta_parse(r, f, mb, m, err, errlen);
        free(mb);
        for (int i = 0; st == SPMD_OK && i < m->n; i++) {
            size_t b = spmd__rpc_tensor_bytes(&m->t[i]);
            if (b && spmd__rpc_p2p(r, 0, m->t[i].data, b, src, (int)f->h.body_tag, NULL, gerr, sizeof gerr) != SPMD_OK)
                st = spmd__fail(err, errlen, SPMD_ERR_FORMAT, "tensor %d: %s", i, gerr);
        }
    }
    if (st != SPMD_OK) {
        /* RRefs of a rejected message are not ours to release: the sender's
         * call fails and it releases them. */
        m->nrrefs = 0;
        spmd_rpc_msg_free(m);
        return st;
    }
    *out = m;
    return SPMD_OK;
}

/* A frame without body (shutdown protocol); failures are only logged. */
void spmd__rpc_send_small(spmd_rpc *r, int dst, int kind, const uint64_t aux[4]) {
    rpc_frame f;
    spmd__rpc_frame_init(&f, kind, 0, NULL);
    if (aux) memcpy(f.h.aux, aux, sizeof f.h.aux);
    char err[SPMD__ERRLEN];
    if (spmd__rpc_send(r, dst, &f, NULL, err, sizeof err) != SPMD_OK) SPMD_LOGW("rpc: %s", err);
}
