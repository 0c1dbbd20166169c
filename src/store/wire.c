/* wire.c — encode and decode the store's messages (format in store_internal.h).
 * Pure functions over byte buffers: no I/O, no allocation, so the decoders can
 * be fuzzed and every length is checked against a limit before the caller
 * allocates anything for it. */
#include <string.h>
#include "store/store_internal.h"

const char *spmd__store_op_name(unsigned op) {
    static const char *const names[] = {"?",   "set", "get",    "try_get",
                                        "wait", "add", "compare_set", "delete", "num_keys"};
    return op < SPMD__STORE_OP_END ? names[op] : "?";
}

void spmd__store_encode_hello(unsigned char out[SPMD__STORE_HELLO_LEN], uint32_t version,
                              uint32_t word) {
    spmd__put_u32(out, SPMD__STORE_MAGIC);
    spmd__put_u32(out + 4, version);
    spmd__put_u32(out + 8, word);
}

spmd__wire_result spmd__store_decode_hello(const void *buf, size_t len, uint32_t *version,
                                           uint32_t *word, char *err, size_t errlen) {
    const unsigned char *p = buf;
    /* Check the magic on as many bytes as we have: a stranger fails at once. */
    unsigned char magic[4];
    spmd__put_u32(magic, SPMD__STORE_MAGIC);
    size_t m = len < 4 ? len : 4;
    if (memcmp(p, magic, m) != 0) {
        unsigned char got[4] = {0, 0, 0, 0};
        memcpy(got, p, m);
        spmd__fail(err, errlen, SPMD_ERR_PROTOCOL,
                   "bad handshake magic %02x %02x %02x %02x (not an spmd store peer)", got[0],
                   got[1], got[2], got[3]);
        return SPMD__WIRE_BAD;
    }
    if (len < SPMD__STORE_HELLO_LEN) return SPMD__WIRE_MORE;
    *version = spmd__get_u32(p + 4);
    *word = spmd__get_u32(p + 8);
    return SPMD__WIRE_OK;
}

static int op_valid(unsigned op) { return op >= SPMD__STORE_OP_SET && op < SPMD__STORE_OP_END; }

/* Allowed key and value counts per op. */
static void op_counts(unsigned op, uint32_t *kmin, uint32_t *kmax, uint32_t *nv) {
    *kmin = *kmax = 1;
    *nv = 0;
    if (op == SPMD__STORE_OP_WAIT) *kmax = SPMD_STORE_MAX_WAIT_KEYS;
    if (op == SPMD__STORE_OP_NUM_KEYS) *kmin = *kmax = 0;
    if (op == SPMD__STORE_OP_SET) *nv = 1;
    if (op == SPMD__STORE_OP_CAS) *nv = 2;
}

spmd__wire_result spmd__store_decode_req(const void *buf, size_t len, spmd__store_req *out,
                                         char *err, size_t errlen) {
    const unsigned char *p = buf;
    if (len < 4) return SPMD__WIRE_MORE;
    uint32_t body = spmd__get_u32(p);
    if (body < SPMD__STORE_REQ_HEAD - 4u + 4u || body > SPMD__STORE_MAX_REQ_BODY) {
        spmd__fail(err, errlen, SPMD_ERR_PROTOCOL, "request length %u outside %u..%zu", body,
                   SPMD__STORE_REQ_HEAD, (size_t)SPMD__STORE_MAX_REQ_BODY);
        return SPMD__WIRE_BAD;
    }
    const size_t end = 4u + (size_t)body; /* frame end, <= len once complete */
    if (len >= 5 && !op_valid(p[4])) {
        spmd__fail(err, errlen, SPMD_ERR_PROTOCOL, "unknown request op %u", p[4]);
        return SPMD__WIRE_BAD;
    }
    if (len >= 8 && (p[5] | p[6] | p[7]) != 0) {
        spmd__fail(err, errlen, SPMD_ERR_PROTOCOL, "non-zero reserved bytes in request header");
        return SPMD__WIRE_BAD;
    }
    if (len < SPMD__STORE_REQ_HEAD) return SPMD__WIRE_MORE;
    spmd__store_req r;
    memset(&r, 0, sizeof r);
    r.op = p[4];
    r.seq = spmd__get_u32(p + 8);
    r.timeout_ms = spmd__get_u32(p + 12);
    r.num = (int64_t)spmd__get_u64(p + 16);
    r.nkeys = spmd__get_u32(p + 24);
    uint32_t kmin, kmax, nv;
    op_counts(r.op, &kmin, &kmax, &nv);
    if (r.nkeys < kmin || r.nkeys > kmax) {
        spmd__fail(err, errlen, SPMD_ERR_PROTOCOL, "%s request with %u keys (allowed %u..%u)",
                   spmd__store_op_name(r.op), r.nkeys, kmin, kmax);
        return SPMD__WIRE_BAD;
    }
    if (body > (r.op == SPMD__STORE_OP_WAIT ? SPMD__STORE_MAX_WAIT_BODY : SPMD__STORE_MAX_CAS_BODY)) {
        spmd__fail(err, errlen, SPMD_ERR_PROTOCOL, "%s request length %u over its limit",
                   spmd__store_op_name(r.op), body);
        return SPMD__WIRE_BAD;
    }
    size_t off = SPMD__STORE_REQ_HEAD;
    r.keys = p + off;
    /* Keys, then the value count, then values: each length checked as it arrives. */
    for (uint32_t i = 0; i < r.nkeys; i++) {
        if (end - off < 4u) {
            spmd__fail(err, errlen, SPMD_ERR_PROTOCOL, "request ends before key %u", i);
            return SPMD__WIRE_BAD;
        }
        if (len < off + 4) return SPMD__WIRE_MORE;
        uint32_t kl = spmd__get_u32(p + off);
        if (kl > SPMD_STORE_MAX_KEY) {
            spmd__fail(err, errlen, SPMD_ERR_PROTOCOL, "key length %u over the limit %u", kl,
                       SPMD_STORE_MAX_KEY);
            return SPMD__WIRE_BAD;
        }
        if ((size_t)kl + 4u > end - off) {
            spmd__fail(err, errlen, SPMD_ERR_PROTOCOL, "key %u runs past the request end", i);
            return SPMD__WIRE_BAD;
        }
        if (i == 0) {
            r.key = p + off + 4;
            r.klen = kl;
        }
        off += 4u + kl;
    }
    if (end - off < 4u) {
        spmd__fail(err, errlen, SPMD_ERR_PROTOCOL, "request ends before its value count");
        return SPMD__WIRE_BAD;
    }
    if (len < off + 4) return SPMD__WIRE_MORE;
    r.nvals = spmd__get_u32(p + off);
    if (r.nvals != nv) {
        spmd__fail(err, errlen, SPMD_ERR_PROTOCOL, "%s request with %u values (expected %u)",
                   spmd__store_op_name(r.op), r.nvals, nv);
        return SPMD__WIRE_BAD;
    }
    off += 4;
    for (uint32_t i = 0; i < r.nvals; i++) {
        if (end - off < 4u) {
            spmd__fail(err, errlen, SPMD_ERR_PROTOCOL, "request ends before value %u", i);
            return SPMD__WIRE_BAD;
        }
        if (len < off + 4) return SPMD__WIRE_MORE;
        uint32_t vl = spmd__get_u32(p + off);
        if (vl > SPMD_STORE_MAX_VALUE) {
            spmd__fail(err, errlen, SPMD_ERR_PROTOCOL, "value length %u over the limit %u", vl,
                       SPMD_STORE_MAX_VALUE);
            return SPMD__WIRE_BAD;
        }
        if ((size_t)vl + 4u > end - off) {
            spmd__fail(err, errlen, SPMD_ERR_PROTOCOL, "value %u runs past the request end", i);
            return SPMD__WIRE_BAD;
        }
        r.val[i] = p + off + 4;
        r.vlen[i] = vl;
        off += 4u + vl;
    }
    if (off != end) {
        spmd__fail(err, errlen, SPMD_ERR_PROTOCOL, "%zu stray bytes after the %s request",
                   end - off, spmd__store_op_name(r.op));
        return SPMD__WIRE_BAD;
    }
    if (len < end) return SPMD__WIRE_MORE;
    r.frame_len = end;
    *out = r;
    return SPMD__WIRE_OK;
}

spmd__wire_result spmd__store_decode_rep(const void *buf, size_t len, spmd__store_rep *out,
                                         char *err, size_t errlen) {
    const unsigned char *p = buf;
    if (len < 4) return SPMD__WIRE_MORE;
    uint32_t body = spmd__get_u32(p);
    if (body < SPMD__STORE_REP_HEAD - 4u || body > SPMD__STORE_MAX_REP_BODY) {
        spmd__fail(err, errlen, SPMD_ERR_PROTOCOL, "reply length %u outside %u..%zu", body,
                   SPMD__STORE_REP_HEAD - 4u, (size_t)SPMD__STORE_MAX_REP_BODY);
        return SPMD__WIRE_BAD;
    }
    if (len < SPMD__STORE_REP_HEAD) return SPMD__WIRE_MORE;
    spmd__store_rep r;
    r.seq = spmd__get_u32(p + 4);
    r.status = (int32_t)spmd__get_u32(p + 8);
    r.num = (int64_t)spmd__get_u64(p + 12);
    r.vlen = spmd__get_u32(p + 20);
    if (r.status > 0 || r.status < -1000) {
        spmd__fail(err, errlen, SPMD_ERR_PROTOCOL, "reply status %d is not a status code",
                   (int)r.status);
        return SPMD__WIRE_BAD;
    }
    if ((size_t)r.vlen != (size_t)body - (SPMD__STORE_REP_HEAD - 4u)) {
        spmd__fail(err, errlen, SPMD_ERR_PROTOCOL, "reply value length %u disagrees with length %u",
                   r.vlen, body);
        return SPMD__WIRE_BAD;
    }
    if (r.status != 0 && r.vlen > SPMD__STORE_MAX_ERRMSG) {
        spmd__fail(err, errlen, SPMD_ERR_PROTOCOL, "error message of %u bytes is too long", r.vlen);
        return SPMD__WIRE_BAD;
    }
    size_t end = 4u + (size_t)body;
    if (len < end) return SPMD__WIRE_MORE;
    r.val = p + SPMD__STORE_REP_HEAD;
    r.frame_len = end;
    *out = r;
    return SPMD__WIRE_OK;
}

const unsigned char *spmd__store_next_key(const unsigned char *p, const unsigned char **key,
                                          uint32_t *klen) {
    *klen = spmd__get_u32(p);
    *key = p + 4;
    return p + 4 + *klen;
}

size_t spmd__store_req_size(const spmd__store_req_spec *s) {
    size_t n = SPMD__STORE_REQ_HEAD + 4u;
    for (uint32_t i = 0; i < s->nkeys; i++) n += 4u + s->plen + s->klens[i];
    for (uint32_t i = 0; i < s->nvals; i++) n += 4u + s->vlens[i];
    return n;
}

size_t spmd__store_encode_req(unsigned char *buf, const spmd__store_req_spec *s) {
    size_t n = spmd__store_req_size(s);
    spmd__put_u32(buf, (uint32_t)(n - 4u));
    buf[4] = s->op;
    buf[5] = buf[6] = buf[7] = 0;
    spmd__put_u32(buf + 8, s->seq);
    spmd__put_u32(buf + 12, s->timeout_ms);
    spmd__put_u64(buf + 16, (uint64_t)s->num);
    spmd__put_u32(buf + 24, s->nkeys);
    unsigned char *p = buf + SPMD__STORE_REQ_HEAD;
    for (uint32_t i = 0; i < s->nkeys; i++) {
        spmd__put_u32(p, (uint32_t)(s->plen + s->klens[i]));
        if (s->plen) memcpy(p + 4, s->prefix, s->plen);
        if (s->klens[i]) memcpy(p + 4 + s->plen, s->keys[i], s->klens[i]);
        p += 4u + s->plen + s->klens[i];
    }
    spmd__put_u32(p, s->nvals);
    p += 4;
    for (uint32_t i = 0; i < s->nvals; i++) {
        spmd__put_u32(p, (uint32_t)s->vlens[i]);
        if (s->vlens[i]) memcpy(p + 4, s->vals[i], s->vlens[i]);
        p += 4u + s->vlens[i];
    }
    return n;
}

size_t spmd__store_encode_rep(unsigned char *buf, uint32_t seq, int32_t status, int64_t num,
                              const void *val, uint32_t vlen) {
    spmd__put_u32(buf, SPMD__STORE_REP_HEAD - 4u + vlen);
    spmd__put_u32(buf + 4, seq);
    spmd__put_u32(buf + 8, (uint32_t)status);
    spmd__put_u64(buf + 12, (uint64_t)num);
    spmd__put_u32(buf + 20, vlen);
    if (vlen) memcpy(buf + SPMD__STORE_REP_HEAD, val, vlen);
    return SPMD__STORE_REP_HEAD + vlen;
}
