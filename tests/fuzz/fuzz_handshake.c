/* fuzz_handshake.c — libFuzzer harness for the authenticated handshakes: the
 * store server's state machine (src/store/handshake.c) and the mesh's hello
 * and proofs (src/transport/hello.c), the code that reads bytes from peers
 * that have not proved anything yet.
 *
 * Input byte 0 picks the target; the rest is what a stranger sends, fed to
 * the store's state machine in chunks whose sizes come from the input too.
 * Properties (abort() on violation): the state machine never consumes more
 * than it was given nor more than the handshake's fixed size; with a secret,
 * no input ever completes the handshake or passes a proof check (the nonces
 * are fresh random bytes, so only the secret's holder can answer them);
 * without one, replies are the fixed sizes. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "store/handshake.h"
#include "transport/transport.h"

#include "fuzz/fuzz_prop.h"

static spmd__auth key(int on) {
    spmd__auth a;
    memset(&a, 0, sizeof a);
    a.on = on;
    a.keylen = 64;
    memset(a.key, 'k', a.keylen);
    a.source = "fuzz";
    return a;
}

static void store_server(const uint8_t *d, size_t n, int on) {
    spmd__auth a = key(on);
    spmd__store_hs hs;
    memset(&hs, 0, sizeof hs);
    unsigned char buf[256], out[SPMD__STORE_SHELLO_LEN];
    size_t have = 0, used_total = 0, i = 0;
    char err[256];
    while (i < n) {
        size_t chunk = 1 + d[i++] % 48;
        if (chunk > n - i) chunk = n - i;
        if (have + chunk > sizeof buf) break;
        memcpy(buf + have, d + i, chunk);
        have += chunk;
        i += chunk;
        for (;;) {
            size_t outlen = 0;
            int refuse = 0;
            size_t used = spmd__store_hs_server(&hs, &a, 0, buf, have, out, &outlen, &refuse, err,
                                                sizeof err);
            REQUIRE_PROP(used <= have);
            REQUIRE_PROP(outlen == 0 || outlen == 4 || outlen == SPMD__STORE_HELLO_LEN ||
                         outlen == SPMD__STORE_SHELLO_LEN);
            used_total += used;
            REQUIRE_PROP(used_total <= SPMD__STORE_CHELLO_LEN + SPMD__AUTH_MAC);
            if (on) REQUIRE_PROP(hs.stage != 2);
            memmove(buf, buf + used, have - used);
            have -= used;
            if (refuse || hs.stage == 2) return;
            if (used == 0) break;
        }
    }
}

static void mesh(const uint8_t *d, size_t n) {
    if (n < SPMD__MESH_FIRST_LEN + SPMD__MESH_PROOF_LEN + SPMD__MESH_REPLY_LEN) return;
    spmd__auth a = key(1), off = key(0);
    const unsigned char *first = d, *proof = d + SPMD__MESH_FIRST_LEN;
    const unsigned char *reply = proof + SPMD__MESH_PROOF_LEN;
    char err[256];
    spmd__hello h;
    if (spmd__hello_decode(first, &h, err, sizeof err) == SPMD_OK)
        REQUIRE_PROP((h.flags & ~(SPMD__MESH_FLAG_AUTH | SPMD__MESH_FLAG_ENCRYPT)) == 0);
    unsigned char nonce_s[32], r[SPMD__MESH_REPLY_LEN], p[32];
    REQUIRE_PROP(spmd__mesh_hs_reply(&a, first, nonce_s, r) == SPMD_OK);
    REQUIRE_PROP(spmd__mesh_hs_check(&a, first, nonce_s, proof) != SPMD__HELLO_OK);
    REQUIRE_PROP(spmd__mesh_hs_check(&off, first, nonce_s, proof) == SPMD__HELLO_OK);
    /* A connector with a secret never accepts a reply it did not see proved. */
    REQUIRE_PROP(spmd__mesh_hs_prove(&a, first, reply, p, err, sizeof err) != SPMD_OK);
    /* The store client the same way, on an arbitrary server hello. */
    unsigned char ch[SPMD__STORE_CHELLO_LEN];
    REQUIRE_PROP(spmd__store_hs_client_hello(&a, ch) == SPMD_OK);
    if (n >= SPMD__MESH_FIRST_LEN + SPMD__MESH_PROOF_LEN + SPMD__STORE_SHELLO_LEN)
        REQUIRE_PROP(spmd__store_hs_client_check(&a, ch, reply, p, err, sizeof err) != SPMD_OK);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    switch (data[0] % 3) {
    case 0: store_server(data + 1, size - 1, 1); break;
    case 1: store_server(data + 1, size - 1, 0); break;
    default: mesh(data + 1, size - 1); break;
    }
    return 0;
}

/* Seeds for the replay main: well-formed openings of each kind. */
size_t fuzz_seed_input(unsigned i, uint8_t *buf, size_t cap);
size_t fuzz_seed_input(unsigned i, uint8_t *buf, size_t cap) {
    if (cap < 256) return 0;
    spmd__auth a = key(1);
    buf[0] = (uint8_t)(i % 3);
    if (i % 3 < 2) {
        unsigned char ch[SPMD__STORE_CHELLO_LEN];
        spmd__auth k = key(i % 3 == 0);
        spmd__store_hs_client_hello(&k, ch);
        buf[1] = 47;
        memcpy(buf + 2, ch, sizeof ch);
        buf[2 + sizeof ch] = 31;
        memset(buf + 3 + sizeof ch, 0xab, 32);
        return 3 + sizeof ch + 32;
    }
    spmd__hello h = {42, 1, 2, 0, SPMD__MESH_FLAG_AUTH};
    spmd__hello_encode(&h, buf + 1);
    spmd__auth_random(buf + 1 + SPMD__HELLO_LEN, 32);
    memset(buf + 1 + SPMD__MESH_FIRST_LEN, 0x11, 32 + SPMD__STORE_SHELLO_LEN);
    spmd__put_u32(buf + 1 + SPMD__MESH_FIRST_LEN + 32, SPMD__MESH_FLAG_AUTH);
    (void)a;
    return 1 + SPMD__MESH_FIRST_LEN + 32 + SPMD__STORE_SHELLO_LEN;
}
