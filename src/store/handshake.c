/* handshake.c — the store's authenticated handshake (format in handshake.h). */
#include <string.h>
#include "store/handshake.h"

static const char LABEL_SERVER[] = "spmd-store-server";
static const char LABEL_CLIENT[] = "spmd-store-client";

const char *spmd__store_hs_text(uint32_t code) {
    switch (code) {
    case 0: return "ok";
    case (uint32_t)SPMD_ERR_MISMATCH: return "protocol version mismatch";
    case SPMD__STORE_HS_AUTH_REQUIRED:
        return "the store requires the job secret and this process has none (SPMD_AUTH=off "
               "here: remove it, or set it for every process of the job)";
    case SPMD__STORE_HS_AUTH_FAILED: return "authentication failed (wrong job secret)";
    case SPMD__STORE_HS_BUSY: return "the store has too many connections (SPMD_STORE_MAX_CONNS)";
    case SPMD__STORE_HS_UNAUTHENTICATED: return "the store does not authenticate";
    }
    return "unknown handshake status";
}

size_t spmd__store_hs_want(const spmd__store_hs *hs) {
    return hs->stage == 0 ? SPMD__STORE_CHELLO_LEN : hs->stage == 1 ? SPMD__AUTH_MAC : 0;
}

static size_t put_verdict(unsigned char *out, uint32_t code) {
    spmd__put_u32(out, code);
    return 4;
}

size_t spmd__store_hs_server(spmd__store_hs *hs, const spmd__auth *a, int busy,
                             const unsigned char *in, size_t avail, unsigned char *out,
                             size_t *outlen, int *refuse, char *err, size_t errlen) {
    *outlen = 0;
    *refuse = 0;
    if (hs->stage == 0) {
        uint32_t version = 0, flags = 0;
        size_t have = avail < SPMD__STORE_HELLO_LEN ? avail : SPMD__STORE_HELLO_LEN;
        spmd__wire_result r = spmd__store_decode_hello(in, have, &version, &flags, err, errlen);
        if (r == SPMD__WIRE_BAD) {
            *refuse = 2; /* drop without a reply */
            return 0;
        }
        if (r == SPMD__WIRE_MORE) return 0;
        if (version != SPMD__STORE_VERSION) {
            spmd__store_encode_hello(out, SPMD__STORE_VERSION, (uint32_t)SPMD_ERR_MISMATCH);
            *outlen = SPMD__STORE_HELLO_LEN;
            *refuse = 1;
            spmd__fail(err, errlen, SPMD_ERR_MISMATCH, "protocol version %u (server speaks %u)",
                       version, SPMD__STORE_VERSION);
            return SPMD__STORE_HELLO_LEN;
        }
        if (avail < SPMD__STORE_CHELLO_LEN) return 0;
        memcpy(hs->chello, in, SPMD__STORE_CHELLO_LEN);
        uint32_t status = 0;
        if (flags & ~SPMD__STORE_FLAG_AUTH) {
            status = (uint32_t)SPMD_ERR_MISMATCH;
            spmd__fail(err, errlen, SPMD_ERR_PROTOCOL, "unknown handshake flags 0x%x", flags);
        } else if (a->on && !(flags & SPMD__STORE_FLAG_AUTH)) {
            status = SPMD__STORE_HS_AUTH_REQUIRED;
            spmd__fail(err, errlen, SPMD_ERR_PROTOCOL, "client has no job secret");
        }
        spmd__store_encode_hello(out, SPMD__STORE_VERSION, status);
        spmd__put_u32(out + SPMD__STORE_HELLO_LEN, a->on ? SPMD__STORE_FLAG_AUTH : 0u);
        unsigned char *nonce = out + SPMD__STORE_HELLO_LEN + 4, *proof = nonce + SPMD__AUTH_NONCE;
        memset(nonce, 0, SPMD__AUTH_NONCE + SPMD__AUTH_MAC);
        if (a->on && status == 0) {
            if (spmd__auth_random(hs->nonce_s, sizeof hs->nonce_s)) {
                *refuse = 2;
                spmd__fail(err, errlen, SPMD_ERR_SYSTEM, "no randomness for a nonce");
                return 0;
            }
            memcpy(nonce, hs->nonce_s, SPMD__AUTH_NONCE);
            spmd__auth_mac(a, LABEL_SERVER, hs->chello, SPMD__STORE_CHELLO_LEN, hs->nonce_s,
                           SPMD__AUTH_NONCE, NULL, 0, proof);
        }
        *outlen = SPMD__STORE_SHELLO_LEN;
        if (status) *refuse = 1;
        else hs->stage = 1;
        return SPMD__STORE_CHELLO_LEN;
    }
    if (hs->stage == 1) {
        if (avail < SPMD__AUTH_MAC) return 0;
        uint32_t verdict = 0;
        if (a->on) {
            unsigned char want[SPMD__AUTH_MAC];
            spmd__auth_mac(a, LABEL_CLIENT, hs->chello, SPMD__STORE_CHELLO_LEN, hs->nonce_s,
                           SPMD__AUTH_NONCE, NULL, 0, want);
            if (!spmd__auth_equal(want, in, SPMD__AUTH_MAC)) {
                verdict = SPMD__STORE_HS_AUTH_FAILED;
                spmd__fail(err, errlen, SPMD_ERR_PROTOCOL, "wrong job secret (proof does not match)");
            }
        }
        if (!verdict && busy) {
            verdict = SPMD__STORE_HS_BUSY;
            spmd__fail(err, errlen, SPMD_ERR_PROTOCOL, "too many connections");
        }
        *outlen = put_verdict(out, verdict);
        if (verdict) *refuse = 1;
        else hs->stage = 2;
        return SPMD__AUTH_MAC;
    }
    return 0;
}

spmd_status spmd__store_hs_client_hello(const spmd__auth *a,
                                        unsigned char chello[SPMD__STORE_CHELLO_LEN]) {
    spmd__store_encode_hello(chello, SPMD__STORE_VERSION, a->on ? SPMD__STORE_FLAG_AUTH : 0u);
    return spmd__auth_random(chello + SPMD__STORE_HELLO_LEN, SPMD__AUTH_NONCE);
}

spmd_status spmd__store_hs_client_check(const spmd__auth *a,
                                        const unsigned char chello[SPMD__STORE_CHELLO_LEN],
                                        const unsigned char shello[SPMD__STORE_SHELLO_LEN],
                                        unsigned char proof[SPMD__AUTH_MAC], char *err,
                                        size_t errlen) {
    uint32_t version = 0, status = 0;
    if (spmd__store_decode_hello(shello, SPMD__STORE_HELLO_LEN, &version, &status, err, errlen) !=
        SPMD__WIRE_OK)
        return SPMD_ERR_PROTOCOL;
    if (version != SPMD__STORE_VERSION || status == (uint32_t)SPMD_ERR_MISMATCH)
        return spmd__fail(err, errlen, SPMD_ERR_MISMATCH,
                          "protocol version mismatch (client %u, server %u)", SPMD__STORE_VERSION,
                          version);
    if (status)
        return spmd__fail(err, errlen, SPMD_ERR_PROTOCOL, "refused: %s", spmd__store_hs_text(status));
    uint32_t flags = spmd__get_u32(shello + SPMD__STORE_HELLO_LEN);
    const unsigned char *nonce_s = shello + SPMD__STORE_HELLO_LEN + 4;
    const unsigned char *proof_s = nonce_s + SPMD__AUTH_NONCE;
    memset(proof, 0, SPMD__AUTH_MAC);
    if (!a->on) return SPMD_OK; /* the server did not ask (status 0 without auth) */
    if (!(flags & SPMD__STORE_FLAG_AUTH))
        return spmd__fail(err, errlen, SPMD_ERR_PROTOCOL,
                          "the server does not authenticate (SPMD_AUTH=off there?) but this "
                          "process has a job secret: refusing to use it");
    unsigned char want[SPMD__AUTH_MAC];
    spmd__auth_mac(a, LABEL_SERVER, chello, SPMD__STORE_CHELLO_LEN, nonce_s, SPMD__AUTH_NONCE,
                   NULL, 0, want);
    if (!spmd__auth_equal(want, proof_s, SPMD__AUTH_MAC))
        return spmd__fail(err, errlen, SPMD_ERR_PROTOCOL,
                          "wrong job secret: the server failed to prove this process's secret (from "
                          "%s; a process started with another secret, another user's or host's "
                          "per-user secret file, a different job's store, or an impostor): refusing "
                          "to use it",
                          a->source ? a->source : "?");
    spmd__auth_mac(a, LABEL_CLIENT, chello, SPMD__STORE_CHELLO_LEN, nonce_s, SPMD__AUTH_NONCE, NULL,
                   0, proof);
    return SPMD_OK;
}
