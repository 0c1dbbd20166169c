/* fuzz_store_wire.c — libFuzzer harness for the store's wire codec
 * (src/store/wire.c), the parser of untrusted bytes a store server reads.
 *
 * The input is fed to each decoder as a stream of messages.  Besides "no
 * crash, no out-of-bounds read" it checks properties and abort()s on a
 * violation: a decoded message lies inside the input; re-encoding it gives
 * back exactly its bytes; every prefix of it asks for more bytes rather than
 * being rejected; no length above the store.h limits is ever accepted.
 *
 * Built two ways (tests/fuzz.cmake): with -DSPMD_FUZZ=ON and clang as a real
 * libFuzzer binary; in every build, with SPMD_FUZZ_REPLAY_MAIN, as a test whose
 * main() runs the harness over deterministic pseudo-random and mutated valid
 * inputs (and over any files named on the command line, e.g. a corpus;
 * `--write-seeds DIR` writes a seed corpus of valid streams instead). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "store/store_internal.h"

#include "fuzz/fuzz_prop.h"

static const char *key_ptrs[SPMD_STORE_MAX_WAIT_KEYS];
static long decoded_req, decoded_rep; /* reported by the replay main */
static size_t key_lens[SPMD_STORE_MAX_WAIT_KEYS];

static void check_request(const unsigned char *p, size_t avail, const spmd__store_req *r) {
    char err[256];
    REQUIRE_PROP(r->frame_len >= SPMD__STORE_REQ_HEAD + 4 && r->frame_len <= avail);
    REQUIRE_PROP(r->frame_len - 4 <= SPMD__STORE_MAX_REQ_BODY);
    REQUIRE_PROP(r->op >= SPMD__STORE_OP_SET && r->op < SPMD__STORE_OP_END);
    REQUIRE_PROP(r->nkeys <= SPMD_STORE_MAX_WAIT_KEYS && r->nvals <= 2);
    const unsigned char *k = r->keys, *kp;
    uint32_t kl;
    for (uint32_t i = 0; i < r->nkeys; i++) {
        k = spmd__store_next_key(k, &kp, &kl);
        REQUIRE_PROP(kl <= SPMD_STORE_MAX_KEY);
        REQUIRE_PROP(kp >= p && kp + kl <= p + r->frame_len);
        key_ptrs[i] = (const char *)kp;
        key_lens[i] = kl;
    }
    const void *vals[2] = {r->val[0], r->val[1]};
    size_t vlens[2] = {r->vlen[0], r->vlen[1]};
    for (uint32_t i = 0; i < r->nvals; i++) {
        REQUIRE_PROP(r->vlen[i] <= SPMD_STORE_MAX_VALUE);
        REQUIRE_PROP(r->val[i] >= p && r->val[i] + r->vlen[i] <= p + r->frame_len);
    }
    /* Re-encoding gives back the very same bytes. */
    spmd__store_req_spec s = {r->op,   r->seq,  r->timeout_ms, r->num, NULL,    0,
                              key_ptrs, key_lens, r->nkeys,    vals,   vlens, r->nvals};
    REQUIRE_PROP(spmd__store_req_size(&s) == r->frame_len);
    unsigned char *again = malloc(r->frame_len);
    REQUIRE_PROP(again != NULL);
    REQUIRE_PROP(spmd__store_encode_req(again, &s) == r->frame_len);
    REQUIRE_PROP(memcmp(again, p, r->frame_len) == 0);
    free(again);
    /* A valid frame cut short is "need more", never an error. */
    spmd__store_req t;
    REQUIRE_PROP(spmd__store_decode_req(p, r->frame_len - 1, &t, err, sizeof err) == SPMD__WIRE_MORE);
    REQUIRE_PROP(spmd__store_decode_req(p, r->frame_len / 2, &t, err, sizeof err) == SPMD__WIRE_MORE);
}

static void check_reply(const unsigned char *p, size_t avail, const spmd__store_rep *r) {
    char err[256];
    REQUIRE_PROP(r->frame_len == SPMD__STORE_REP_HEAD + (size_t)r->vlen && r->frame_len <= avail);
    REQUIRE_PROP(r->vlen <= SPMD_STORE_MAX_VALUE && r->status <= 0);
    REQUIRE_PROP(r->status == 0 || r->vlen <= SPMD__STORE_MAX_ERRMSG);
    unsigned char *again = malloc(r->frame_len);
    REQUIRE_PROP(again != NULL);
    REQUIRE_PROP(spmd__store_encode_rep(again, r->seq, r->status, r->num, r->val, r->vlen) ==
                 r->frame_len);
    REQUIRE_PROP(memcmp(again, p, r->frame_len) == 0);
    free(again);
    spmd__store_rep t;
    REQUIRE_PROP(spmd__store_decode_rep(p, r->frame_len - 1, &t, err, sizeof err) == SPMD__WIRE_MORE);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char err[256];
    /* As a server reads a connection: hello, then requests until MORE or BAD. */
    uint32_t version, word;
    size_t off = 0;
    spmd__wire_result w = spmd__store_decode_hello(data, size, &version, &word, err, sizeof err);
    if (w == SPMD__WIRE_OK) off = SPMD__STORE_HELLO_LEN;
    if (w == SPMD__WIRE_BAD) off = 0; /* fall through: requests without a hello */
    for (;;) {
        spmd__store_req r;
        w = spmd__store_decode_req(data + off, size - off, &r, err, sizeof err);
        if (w != SPMD__WIRE_OK) {
            REQUIRE_PROP(w == SPMD__WIRE_MORE || err[0] != 0);
            break;
        }
        check_request(data + off, size - off, &r);
        decoded_req++;
        off += r.frame_len;
    }
    /* As a client reads replies. */
    off = 0;
    for (;;) {
        spmd__store_rep r;
        err[0] = 0;
        w = spmd__store_decode_rep(data + off, size - off, &r, err, sizeof err);
        if (w != SPMD__WIRE_OK) {
            REQUIRE_PROP(w == SPMD__WIRE_MORE || err[0] != 0);
            break;
        }
        check_reply(data + off, size - off, &r);
        decoded_rep++;
        off += r.frame_len;
    }
    return 0;
}

#ifdef SPMD_FUZZ_REPLAY_MAIN
/* ---- replay main: deterministic inputs for the normal test suite ------------ */
static uint64_t rng = 0x243F6A8885A308D3ull;
static uint32_t rnd(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 11);
}

/* A stream of valid messages: hello + a few requests, or a few replies. */
static size_t valid_stream(unsigned char *buf, size_t cap, int replies) {
    size_t n = 0;
    if (!replies) {
        spmd__store_encode_hello(buf, SPMD__STORE_VERSION, 0);
        n = SPMD__STORE_HELLO_LEN;
    }
    int count = 1 + (int)(rnd() % 4);
    static char keys[8][40];
    static const char *kp[8];
    size_t kl[8];
    static unsigned char vbuf[2][300];
    for (int m = 0; m < count; m++) {
        if (replies) {
            uint32_t vl = rnd() % 200;
            for (uint32_t i = 0; i < vl; i++) vbuf[0][i] = (unsigned char)rnd();
            int32_t st = (rnd() % 3) ? 0 : -(int32_t)(rnd() % 14);
            if (n + SPMD__STORE_REP_HEAD + vl > cap) break;
            n += spmd__store_encode_rep(buf + n, rnd(), st, (int64_t)rnd() << 20, vbuf[0], vl);
            continue;
        }
        uint8_t op = (uint8_t)(SPMD__STORE_OP_SET + rnd() % (SPMD__STORE_OP_END - 1));
        uint32_t nk = op == SPMD__STORE_OP_NUM_KEYS ? 0 : op == SPMD__STORE_OP_WAIT ? 1 + rnd() % 8 : 1;
        uint32_t nv = op == SPMD__STORE_OP_SET ? 1 : op == SPMD__STORE_OP_CAS ? 2 : 0;
        for (uint32_t i = 0; i < nk; i++) {
            kl[i] = rnd() % sizeof keys[i];
            for (size_t j = 0; j < kl[i]; j++) keys[i][j] = (char)('a' + rnd() % 26);
            kp[i] = keys[i];
        }
        const void *vp[2] = {vbuf[0], vbuf[1]};
        size_t vl[2] = {rnd() % 300, rnd() % 300};
        for (int i = 0; i < 2; i++)
            for (size_t j = 0; j < vl[i]; j++) vbuf[i][j] = (unsigned char)rnd();
        const char *pfx = (rnd() & 1) ? "group7/" : NULL;
        spmd__store_req_spec s = {op, rnd(), rnd() % 5000, (int64_t)rnd() - (1 << 30), pfx,
                                  pfx ? strlen(pfx) : 0, kp, kl, nk, vp, vl, nv};
        size_t need = spmd__store_req_size(&s);
        if (n + need > cap) break;
        n += spmd__store_encode_req(buf + n, &s);
    }
    return n;
}

static void mutate(unsigned char *buf, size_t *n, size_t cap) {
    int kind = (int)(rnd() % 6);
    if (*n == 0) return;
    size_t at = rnd() % *n;
    switch (kind) {
    case 0: buf[at] ^= (unsigned char)(1u << (rnd() % 8)); break;       /* flip a bit */
    case 1: buf[at] = (unsigned char)rnd(); break;                       /* random byte */
    case 2: *n = at; break;                                              /* truncate */
    case 3: spmd__put_u32(buf + (at > *n - 4 ? 0 : at), rnd() % 3 ? rnd() : 0xFFFFFFFFu); break;
    case 4:                                                              /* insert */
        if (*n < cap) {
            memmove(buf + at + 1, buf + at, *n - at);
            buf[at] = (unsigned char)rnd();
            (*n)++;
        }
        break;
    default:                                                             /* delete */
        memmove(buf + at, buf + at + 1, *n - at - 1);
        (*n)--;
        break;
    }
}

int main(int argc, char **argv) {
    static unsigned char buf[16384];
    int runs = 0;
    if (argc == 3 && !strcmp(argv[1], "--write-seeds")) { /* a seed corpus for libFuzzer */
        for (int i = 0; i < 32; i++) {
            size_t n = valid_stream(buf, sizeof buf, i % 4 == 3);
            char path[4096];
            snprintf(path, sizeof path, "%s/seed-%02d", argv[2], i);
            FILE *f = fopen(path, "wb");
            if (!f || fwrite(buf, 1, n, f) != n) { perror(path); return 1; }
            fclose(f);
        }
        return 0;
    }
    for (int a = 1; a < argc; a++) { /* corpus files, as libFuzzer would */
        FILE *f = fopen(argv[a], "rb");
        if (!f) { perror(argv[a]); return 1; }
        size_t n = fread(buf, 1, sizeof buf, f);
        fclose(f);
        LLVMFuzzerTestOneInput(buf, n);
        runs++;
    }
    for (int i = 0; i < 200; i++) { /* pure noise, some with a valid magic */
        size_t n = rnd() % 600;
        for (size_t j = 0; j < n; j++) buf[j] = (unsigned char)rnd();
        if (i % 2 && n >= 12) spmd__store_encode_hello(buf, rnd() % 3, 0);
        LLVMFuzzerTestOneInput(buf, n);
        runs++;
    }
    for (int i = 0; i < 400; i++) { /* valid streams, as is and mutated 1-3 times */
        size_t n = valid_stream(buf, sizeof buf - 16, i % 3 == 0);
        LLVMFuzzerTestOneInput(buf, n);
        int muts = 1 + (int)(rnd() % 3);
        for (int m = 0; m < muts; m++) mutate(buf, &n, sizeof buf);
        LLVMFuzzerTestOneInput(buf, n);
        runs += 2;
    }
    printf("fuzz_store_wire replay: %d inputs, %ld requests and %ld replies decoded, "
           "no property violated\n", runs, decoded_req, decoded_rep);
    return decoded_req > 100 && decoded_rep > 100 ? 0 : 1; /* the valid paths were reached */
}
#endif
