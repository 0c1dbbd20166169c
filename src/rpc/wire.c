/* wire.c — frames and bodies over the group's point-to-point messages.
 *
 * Meta block: per tensor {u8 dtype, u8 ndim, 6 zero bytes, i64 shape[ndim]},
 * per RRef {i32 owner, u32 0, u64 rref_id, u64 fork_id}, then the payload.
 * The frame carries the meta block inline, then the bytes of the first
 * tensors that fit (n_inline of them, in order).  What does not fit follows
 * on the frame's body tag, in order: the meta block if it was too long for
 * the frame (RPC_F_META_SEP), then the other non-empty tensors, either
 * packed in one message when they are several and small (RPC_F_PACKED) or
 * one message each, sent from and received into the tensor's own memory (a
 * large one by the transport's single copy).  Every length is checked
 * against the frame before anything is allocated: a bad frame costs the
 * callee nothing but a log line. */
#include <stdlib.h>
#include <string.h>
#include "rpc_internal.h"

#define RREF_BYTES 24

/* The head only: spmd__rpc_send fills the inline part. */
void spmd__rpc_frame_init(rpc_frame *f, int kind, uint64_t id, const char *name) {
    memset(&f->h, 0, sizeof f->h);
    f->h.magic = RPC_MAGIC;
    f->h.version = RPC_VERSION;
    f->h.kind = (uint8_t)kind;
    f->h.nsub = 1;
    f->h.id = id;
    if (name) spmd__rpc_name_copy(f->h.name, name);
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

static spmd_status send_frame(spmd_rpc *r, int dst, const rpc_frame *f, char *err, size_t errlen) {
    return spmd__rpc_p2p(r, 1, (void *)f, RPC_FRAME_BYTES, dst, RPC_TAG_FRAME, err, errlen);
}

/* How a message's parts travel (the sender decides, the frame says). */
typedef struct {
    size_t meta, data;
    int meta_sep;     /* the meta block does not fit the frame */
    int n_inline;     /* tensors [0, n_inline) are in the frame */
    size_t inl;       /* bytes of inl used */
    int nrest;        /* non-empty tensors after the inline ones */
    size_t rest;      /* their bytes */
    int packed;       /* they travel as one message */
} layout;

static void plan(const spmd_rpc_msg *m, layout *L) {
    memset(L, 0, sizeof *L);
    L->meta = meta_size(m);
    int n = m ? m->n : 0;
    L->meta_sep = L->meta > RPC_INLINE_BYTES;
    size_t room = L->meta_sep ? 0 : RPC_INLINE_BYTES - L->meta;
    L->inl = L->meta_sep ? 0 : L->meta;
    for (int i = 0; i < n; i++) {
        size_t b = spmd__rpc_tensor_bytes(&m->t[i]);
        L->data += b;
        if (i == L->n_inline && !L->meta_sep && b <= room) {
            room -= b;
            L->inl += b;
            L->n_inline++;
        } else if (b) {
            L->nrest++;
            L->rest += b;
        }
    }
    L->packed = L->nrest > 1 && L->rest <= RPC_PACK_MAX && L->rest / (size_t)L->nrest < RPC_PACK_EACH;
}

spmd_status spmd__rpc_send(spmd_rpc *r, int dst, rpc_frame *f, const spmd_rpc_msg *m, int batch, char *err,
                           size_t errlen) {
    layout L;
    plan(m, &L);
    batch = batch && !L.meta_sep && !L.nrest;
    if (!batch) spmd__rpc_flush(r);   /* what this thread batched goes first */
    f->h.ntensors = m ? (uint32_t)m->n : 0;
    f->h.nrrefs = m ? (uint32_t)m->nrrefs : 0;
    f->h.payload_len = m ? (uint32_t)m->plen : 0;
    f->h.meta_len = (uint32_t)L.meta;
    f->h.data_len = L.data;
    f->h.n_inline = (uint32_t)L.n_inline;
    f->h.inline_len = (uint32_t)L.inl;
    f->h.flags = (uint16_t)((L.meta_sep ? RPC_F_META_SEP : 0) | (L.packed ? RPC_F_PACKED : 0));
    f->h.body_tag = 0;
    unsigned char *p = f->inl;
    if (m && !L.meta_sep) {
        meta_write(p, m);
        p += L.meta;
        for (int i = 0; i < L.n_inline; i++) {
            size_t b = spmd__rpc_tensor_bytes(&m->t[i]);
            if (b) memcpy(p, m->t[i].data, b);
            p += b;
        }
    }
    if (batch) return spmd__rpc_batch_add(r, dst, f, err, errlen);
    memset(p, 0, RPC_INLINE_BYTES - L.inl);   /* nothing of this process's memory leaks out */
    char gerr[SPMD__ERRLEN];
    gerr[0] = '\0';
    spmd_status st;
    if (!L.meta_sep && !L.nrest) {
        st = send_frame(r, dst, f, gerr, sizeof gerr);
        if (st != SPMD_OK) goto fail;
        return SPMD_OK;
    }
    /* The body goes on a tag of its own, so concurrent senders never interleave. */
    int tag = RPC_TAG_BODY0 + (int)(atomic_fetch_add(&r->body_seq, 1) & 0x0fffffffu);
    f->h.body_tag = (uint32_t)tag;
    unsigned char *buf = NULL;
    size_t blen = L.meta_sep ? L.meta : L.packed ? L.rest : 0;
    if (blen) {
        buf = malloc(blen);
        if (!buf) return spmd__fail(err, errlen, SPMD_ERR_NOMEM, "out of memory");
    }
    st = send_frame(r, dst, f, gerr, sizeof gerr);
    if (st == SPMD_OK && L.meta_sep) {
        meta_write(buf, m);
        st = spmd__rpc_p2p(r, 1, buf, L.meta, dst, tag, gerr, sizeof gerr);
    }
    if (st == SPMD_OK && L.packed) {
        /* several small tensors: one copy is cheaper than a message each */
        unsigned char *q = buf;
        for (int i = L.n_inline; i < m->n; i++) {
            size_t b = spmd__rpc_tensor_bytes(&m->t[i]);
            if (b) memcpy(q, m->t[i].data, b);
            q += b;
        }
        st = spmd__rpc_p2p(r, 1, buf, L.rest, dst, tag, gerr, sizeof gerr);
    }
    for (int i = L.n_inline; st == SPMD_OK && !L.packed && m && i < m->n; i++) {
        size_t b = spmd__rpc_tensor_bytes(&m->t[i]);
        if (b) st = spmd__rpc_p2p(r, 1, m->t[i].data, b, dst, tag, gerr, sizeof gerr);
    }
    free(buf);
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
        t->data = spmd__rpc_data_alloc(bytes);
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

/* Header sanity checks that need no body; room: the bytes after the head
 * that belong to this frame (less than RPC_INLINE_BYTES in a batch). */
static spmd_status check_head(const rpc_frame *f, size_t room, char *err, size_t errlen) {
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
    if (h->flags & ~(RPC_F_PACKED | RPC_F_META_SEP))
        return spmd__fail(err, errlen, SPMD_ERR_FORMAT, "unknown flags 0x%x", h->flags);
    if (h->inline_len > room || h->n_inline > h->ntensors)
        return spmd__fail(err, errlen, SPMD_ERR_FORMAT, "inline part (%u bytes, %u tensors) does not fit the frame",
                          h->inline_len, h->n_inline);
    int sep = (h->flags & RPC_F_META_SEP) != 0;
    if (sep ? h->inline_len || h->n_inline || !h->body_tag : h->inline_len < h->meta_len)
        return spmd__fail(err, errlen, SPMD_ERR_FORMAT, "inline length %u does not match the frame", h->inline_len);
    if (h->body_tag != 0 && h->body_tag < RPC_TAG_BODY0)
        return spmd__fail(err, errlen, SPMD_ERR_FORMAT, "body tag %u out of range", h->body_tag);
    if (memchr(h->name, 0, sizeof h->name) == NULL)
        return spmd__fail(err, errlen, SPMD_ERR_FORMAT, "name not terminated");
    return SPMD_OK;
}

/* The tensors after the inline ones, from the body tag: one packed
 * message, or each straight into its own memory. */
static spmd_status recv_rest(spmd_rpc *r, int src, const rpc_frame *f, spmd_rpc_msg *m, char *err,
                             size_t errlen) {
    char gerr[SPMD__ERRLEN];
    gerr[0] = '\0';
    int nrest = 0;
    size_t rest = 0;
    for (int i = (int)f->h.n_inline; i < m->n; i++) {
        size_t b = spmd__rpc_tensor_bytes(&m->t[i]);
        nrest += b != 0;
        rest += b;
    }
    int packed = (f->h.flags & RPC_F_PACKED) != 0;
    if (!nrest) {
        if (packed) return spmd__fail(err, errlen, SPMD_ERR_FORMAT, "packed body without tensors");
        return SPMD_OK;
    }
    if (!f->h.body_tag)
        return spmd__fail(err, errlen, SPMD_ERR_FORMAT, "%llu tensor bytes neither inline nor in a body",
                          (unsigned long long)rest);
    if (packed) {
        if (rest > RPC_PACK_MAX)
            return spmd__fail(err, errlen, SPMD_ERR_FORMAT, "packed body of %zu bytes (max %d)", rest, RPC_PACK_MAX);
        unsigned char *pk = malloc(rest);
        if (!pk) return spmd__fail(err, errlen, SPMD_ERR_NOMEM, "out of memory");
        spmd_status st = spmd__rpc_p2p(r, 0, pk, rest, src, (int)f->h.body_tag, gerr, sizeof gerr);
        const unsigned char *q = pk;
        for (int i = (int)f->h.n_inline; st == SPMD_OK && i < m->n; i++) {
            size_t b = spmd__rpc_tensor_bytes(&m->t[i]);
            if (b) memcpy(m->t[i].data, q, b);
            q += b;
        }
        free(pk);
        return st == SPMD_OK ? SPMD_OK : spmd__fail(err, errlen, SPMD_ERR_FORMAT, "body: %s", gerr);
    }
    for (int i = (int)f->h.n_inline; i < m->n; i++) {
        size_t b = spmd__rpc_tensor_bytes(&m->t[i]);
        if (b && spmd__rpc_p2p(r, 0, m->t[i].data, b, src, (int)f->h.body_tag, gerr, sizeof gerr) != SPMD_OK)
            return spmd__fail(err, errlen, SPMD_ERR_FORMAT, "tensor %d: %s", i, gerr);
    }
    return SPMD_OK;
}

spmd_status spmd__rpc_recv_body(spmd_rpc *r, int src, const rpc_frame *f, size_t room, spmd_rpc_msg **out,
                                char *err, size_t errlen) {
    *out = NULL;
    spmd_status st = check_head(f, room, err, errlen);
    if (st != SPMD_OK) return st;
    spmd_rpc_msg *m = spmd_rpc_msg_new();
    if (!m) return spmd__fail(err, errlen, SPMD_ERR_NOMEM, "out of memory");
    char gerr[SPMD__ERRLEN];
    gerr[0] = '\0';
    const unsigned char *meta = f->inl;
    unsigned char *mb = NULL;
    if (f->h.flags & RPC_F_META_SEP) {
        /* check_head bounded meta_len by the tables' maximum */
        mb = malloc(f->h.meta_len ? f->h.meta_len : 1);
        if (!mb) st = spmd__fail(err, errlen, SPMD_ERR_NOMEM, "out of memory");
        else if (spmd__rpc_p2p(r, 0, mb, f->h.meta_len, src, (int)f->h.body_tag, gerr, sizeof gerr) != SPMD_OK)
            st = spmd__fail(err, errlen, SPMD_ERR_FORMAT, "body: %s", gerr);
        meta = mb;
    }
    if (st == SPMD_OK) st = meta_parse(r, f, meta, m, err, errlen);
    free(mb);
    if (st == SPMD_OK) {
        /* the inline prefix of tensors, right after the meta block */
        const unsigned char *p = f->inl + ((f->h.flags & RPC_F_META_SEP) ? 0 : f->h.meta_len);
        size_t want = (size_t)(p - f->inl);
        for (uint32_t i = 0; i < f->h.n_inline; i++) want += spmd__rpc_tensor_bytes(&m->t[i]);
        if (want != f->h.inline_len) {
            st = spmd__fail(err, errlen, SPMD_ERR_FORMAT, "inline length %u, the inline tensors need %zu",
                            f->h.inline_len, want);
        } else {
            for (uint32_t i = 0; i < f->h.n_inline; i++) {
                size_t b = spmd__rpc_tensor_bytes(&m->t[i]);
                if (b) memcpy(m->t[i].data, p, b);
                p += b;
            }
            st = recv_rest(r, src, f, m, err, errlen);
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
    if (spmd__rpc_send(r, dst, &f, NULL, 0, err, sizeof err) != SPMD_OK) SPMD_LOGW("rpc: %s", err);
}
