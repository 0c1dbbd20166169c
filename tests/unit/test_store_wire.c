/* Unit tests for the store's wire codec (src/store/wire.c): round trips, every
 * prefix of a valid frame asks for more bytes, each limit is enforced from the
 * first bytes of a field (before the rest of the frame exists). */
#include "test_store_util.h"

static unsigned char buf[1 << 16];

static size_t enc(uint8_t op, const char *prefix, const char *const *keys, uint32_t nkeys,
                  const void *const *vals, const size_t *vlens, uint32_t nvals) {
    size_t klens[8];
    for (uint32_t i = 0; i < nkeys; i++) klens[i] = strlen(keys[i]);
    spmd__store_req_spec s = {op, 77, 1234, -5, prefix, prefix ? strlen(prefix) : 0, keys, klens,
                              nkeys, vals, vlens, nvals};
    size_t n = spmd__store_req_size(&s);
    CHECK(n <= sizeof buf);
    CHECK(spmd__store_encode_req(buf, &s) == n);
    return n;
}

/* Every strict prefix is MORE, the whole is OK. */
static int prefixes_ask_more_req(const unsigned char *b, size_t n) {
    spmd__store_req r;
    char err[128];
    for (size_t i = 0; i < n; i++)
        if (spmd__store_decode_req(b, i, &r, err, sizeof err) != SPMD__WIRE_MORE) {
            fprintf(stderr, "prefix %zu of %zu: %s\n", i, n, err);
            return 0;
        }
    return spmd__store_decode_req(b, n, &r, err, sizeof err) == SPMD__WIRE_OK && r.frame_len == n;
}

static void test_requests(void) {
    spmd__store_req r;
    char err[128];
    const char *k1[] = {"key"};
    const void *v1[] = {"value"};
    size_t vl1[] = {5};
    size_t n = enc(SPMD__STORE_OP_SET, "pre/", k1, 1, v1, vl1, 1);
    CHECK(prefixes_ask_more_req(buf, n));
    CHECK(spmd__store_decode_req(buf, n, &r, err, sizeof err) == SPMD__WIRE_OK);
    CHECK(r.op == SPMD__STORE_OP_SET && r.seq == 77 && r.timeout_ms == 1234 && r.num == -5);
    CHECK(r.nkeys == 1 && r.klen == 7 && !memcmp(r.key, "pre/key", 7));
    CHECK(r.nvals == 1 && r.vlen[0] == 5 && !memcmp(r.val[0], "value", 5));
    /* a frame followed by more bytes: only the frame is consumed */
    memcpy(buf + n, buf, n);
    CHECK(spmd__store_decode_req(buf, 2 * n, &r, err, sizeof err) == SPMD__WIRE_OK &&
          r.frame_len == n);

    const char *k3[] = {"a", "", "ccc"};
    n = enc(SPMD__STORE_OP_WAIT, NULL, k3, 3, NULL, NULL, 0);
    CHECK(prefixes_ask_more_req(buf, n));
    CHECK(spmd__store_decode_req(buf, n, &r, err, sizeof err) == SPMD__WIRE_OK && r.nkeys == 3);
    const unsigned char *p = r.keys, *k;
    uint32_t kl;
    p = spmd__store_next_key(p, &k, &kl);
    CHECK(kl == 1 && k[0] == 'a');
    p = spmd__store_next_key(p, &k, &kl);
    CHECK(kl == 0);
    p = spmd__store_next_key(p, &k, &kl);
    CHECK(kl == 3 && !memcmp(k, "ccc", 3));

    const void *v2[] = {"", "new"};
    size_t vl2[] = {0, 3};
    n = enc(SPMD__STORE_OP_CAS, NULL, k1, 1, v2, vl2, 2);
    CHECK(prefixes_ask_more_req(buf, n));
    n = enc(SPMD__STORE_OP_NUM_KEYS, NULL, NULL, 0, NULL, NULL, 0);
    CHECK(prefixes_ask_more_req(buf, n));
    CHECK(spmd__store_decode_req(buf, n, &r, err, sizeof err) == SPMD__WIRE_OK && r.key == NULL);

    /* wrong counts per op */
    n = enc(SPMD__STORE_OP_GET, NULL, k3, 2, NULL, NULL, 0);
    CHECK(spmd__store_decode_req(buf, n, &r, err, sizeof err) == SPMD__WIRE_BAD);
    CHECK(spmd__store_decode_req(buf, SPMD__STORE_REQ_HEAD, &r, err, sizeof err) == SPMD__WIRE_BAD);
    n = enc(SPMD__STORE_OP_SET, NULL, k1, 1, NULL, NULL, 0);
    CHECK(spmd__store_decode_req(buf, n, &r, err, sizeof err) == SPMD__WIRE_BAD);
    CHECK(strstr(err, "values") != NULL);

    /* header checks on the first bytes */
    n = enc(SPMD__STORE_OP_GET, NULL, k1, 1, NULL, NULL, 0);
    unsigned char save = buf[4];
    buf[4] = 0;
    CHECK(spmd__store_decode_req(buf, 5, &r, err, sizeof err) == SPMD__WIRE_BAD);
    buf[4] = SPMD__STORE_OP_END;
    CHECK(spmd__store_decode_req(buf, 5, &r, err, sizeof err) == SPMD__WIRE_BAD);
    buf[4] = save;
    buf[6] = 1;
    CHECK(spmd__store_decode_req(buf, 8, &r, err, sizeof err) == SPMD__WIRE_BAD);
    buf[6] = 0;
    /* body length: too small, too large (judged from 4 bytes alone) */
    unsigned char hdr[4];
    spmd__put_u32(hdr, 3);
    CHECK(spmd__store_decode_req(hdr, 4, &r, err, sizeof err) == SPMD__WIRE_BAD);
    spmd__put_u32(hdr, 0xFFFFFFFFu);
    CHECK(spmd__store_decode_req(hdr, 4, &r, err, sizeof err) == SPMD__WIRE_BAD);
    spmd__put_u32(hdr, (uint32_t)SPMD__STORE_MAX_REQ_BODY + 1);
    CHECK(spmd__store_decode_req(hdr, 4, &r, err, sizeof err) == SPMD__WIRE_BAD);
    spmd__put_u32(hdr, (uint32_t)SPMD__STORE_MAX_REQ_BODY);
    CHECK(spmd__store_decode_req(hdr, 4, &r, err, sizeof err) == SPMD__WIRE_MORE);

    /* A key length over the limit is refused from its 4 length bytes, though
     * the frame claims room for it. */
    n = enc(SPMD__STORE_OP_GET, NULL, k1, 1, NULL, NULL, 0);
    spmd__put_u32(buf, (uint32_t)SPMD__STORE_MAX_CAS_BODY);
    spmd__put_u32(buf + SPMD__STORE_REQ_HEAD, SPMD_STORE_MAX_KEY + 1);
    CHECK(spmd__store_decode_req(buf, SPMD__STORE_REQ_HEAD + 4, &r, err, sizeof err) == SPMD__WIRE_BAD);
    CHECK(strstr(err, "key length") != NULL);
    spmd__put_u32(buf + SPMD__STORE_REQ_HEAD, SPMD_STORE_MAX_KEY);
    CHECK(spmd__store_decode_req(buf, SPMD__STORE_REQ_HEAD + 4, &r, err, sizeof err) == SPMD__WIRE_MORE);
    /* same for a value */
    n = enc(SPMD__STORE_OP_SET, NULL, k1, 1, v1, vl1, 1);
    spmd__put_u32(buf, (uint32_t)SPMD__STORE_MAX_CAS_BODY);
    size_t voff = SPMD__STORE_REQ_HEAD + 4 + 3 + 4;
    spmd__put_u32(buf + voff, SPMD_STORE_MAX_VALUE + 1);
    CHECK(spmd__store_decode_req(buf, voff + 4, &r, err, sizeof err) == SPMD__WIRE_BAD);
    spmd__put_u32(buf + voff, SPMD_STORE_MAX_VALUE);
    spmd__put_u32(buf, (uint32_t)(voff + 4 + SPMD_STORE_MAX_VALUE - 4));
    CHECK_MSG(spmd__store_decode_req(buf, voff + 4, &r, err, sizeof err) == SPMD__WIRE_MORE, "%s", err);
    /* a key that runs past the frame end, stray bytes at the end */
    n = enc(SPMD__STORE_OP_GET, NULL, k1, 1, NULL, NULL, 0);
    spmd__put_u32(buf + SPMD__STORE_REQ_HEAD, 100);
    CHECK(spmd__store_decode_req(buf, n, &r, err, sizeof err) == SPMD__WIRE_BAD);
    n = enc(SPMD__STORE_OP_GET, NULL, k1, 1, NULL, NULL, 0);
    spmd__put_u32(buf, (uint32_t)(n - 4 + 2));
    CHECK(spmd__store_decode_req(buf, n + 2, &r, err, sizeof err) == SPMD__WIRE_BAD);
    CHECK(strstr(err, "stray") != NULL);
    /* too many wait keys, from the count alone */
    n = enc(SPMD__STORE_OP_WAIT, NULL, k1, 1, NULL, NULL, 0);
    spmd__put_u32(buf + 24, SPMD_STORE_MAX_WAIT_KEYS + 1);
    CHECK(spmd__store_decode_req(buf, SPMD__STORE_REQ_HEAD, &r, err, sizeof err) == SPMD__WIRE_BAD);
    /* a WAIT body larger than any legal WAIT */
    spmd__put_u32(buf, (uint32_t)SPMD__STORE_MAX_WAIT_BODY + 1);
    spmd__put_u32(buf + 24, 1);
    CHECK(spmd__store_decode_req(buf, SPMD__STORE_REQ_HEAD, &r, err, sizeof err) == SPMD__WIRE_BAD);
}

static void test_replies(void) {
    spmd__store_rep r;
    char err[128];
    size_t n = spmd__store_encode_rep(buf, 9, SPMD_OK, 123456789012345LL, "abc", 3);
    CHECK(n == SPMD__STORE_REP_HEAD + 3);
    for (size_t i = 0; i < n; i++) CHECK(spmd__store_decode_rep(buf, i, &r, err, sizeof err) == SPMD__WIRE_MORE);
    CHECK(spmd__store_decode_rep(buf, n, &r, err, sizeof err) == SPMD__WIRE_OK);
    CHECK(r.seq == 9 && r.status == 0 && r.num == 123456789012345LL && r.vlen == 3 &&
          !memcmp(r.val, "abc", 3) && r.frame_len == n);
    n = spmd__store_encode_rep(buf, 1, SPMD_ERR_TIMEOUT, 0, "late", 4);
    CHECK(spmd__store_decode_rep(buf, n, &r, err, sizeof err) == SPMD__WIRE_OK &&
          r.status == SPMD_ERR_TIMEOUT);
    /* positive status, vlen disagreeing with the length, oversized */
    spmd__put_u32(buf + 8, 5);
    CHECK(spmd__store_decode_rep(buf, n, &r, err, sizeof err) == SPMD__WIRE_BAD);
    n = spmd__store_encode_rep(buf, 1, SPMD_OK, 0, "abcd", 4);
    spmd__put_u32(buf + 20, 3);
    CHECK(spmd__store_decode_rep(buf, n, &r, err, sizeof err) == SPMD__WIRE_BAD);
    spmd__put_u32(buf, (uint32_t)SPMD__STORE_MAX_REP_BODY + 1);
    CHECK(spmd__store_decode_rep(buf, 4, &r, err, sizeof err) == SPMD__WIRE_BAD);
    spmd__put_u32(buf, 2);
    CHECK(spmd__store_decode_rep(buf, 4, &r, err, sizeof err) == SPMD__WIRE_BAD);
    /* an error message over its bound */
    spmd__put_u32(buf, SPMD__STORE_REP_HEAD - 4 + 5000);
    spmd__put_u32(buf + 8, (uint32_t)SPMD_ERR_INVALID);
    spmd__put_u32(buf + 20, 5000);
    CHECK(spmd__store_decode_rep(buf, SPMD__STORE_REP_HEAD, &r, err, sizeof err) == SPMD__WIRE_BAD);
}

static void test_hello(void) {
    unsigned char h[SPMD__STORE_HELLO_LEN];
    uint32_t v = 0, w = 9;
    char err[128];
    spmd__store_encode_hello(h, SPMD__STORE_VERSION, 0);
    CHECK(!memcmp(h, "SPKV", 4)); /* the magic reads as text on the wire */
    for (size_t i = 0; i < sizeof h; i++)
        CHECK(spmd__store_decode_hello(h, i, &v, &w, err, sizeof err) == SPMD__WIRE_MORE);
    CHECK(spmd__store_decode_hello(h, sizeof h, &v, &w, err, sizeof err) == SPMD__WIRE_OK &&
          v == SPMD__STORE_VERSION && w == 0);
    /* a stranger fails from its first wrong byte */
    CHECK(spmd__store_decode_hello("G", 1, &v, &w, err, sizeof err) == SPMD__WIRE_BAD);
    CHECK(spmd__store_decode_hello("SPX", 3, &v, &w, err, sizeof err) == SPMD__WIRE_BAD);
    CHECK(strstr(err, "magic") != NULL);
    CHECK(strcmp(spmd__store_op_name(SPMD__STORE_OP_CAS), "compare_set") == 0);
    CHECK(strcmp(spmd__store_op_name(200), "?") == 0);
}

int main(void) {
    test_requests();
    test_replies();
    test_hello();
    TEST_MAIN_END();
}
