/* hello.c — the handshake that opens every mesh connection (transport.h):
 *   hello: u32 magic "SPMD" | u32 version | u64 job id | u32 rank | u32 world |
 *          u32 channel | u32 flags
 * and the challenge-response around it. */
#include <string.h>
#include "transport.h"

static const char LABEL_ACCEPTOR[] = "spmd-mesh-acceptor";
static const char LABEL_CONNECTOR[] = "spmd-mesh-connector";

void spmd__hello_encode(const spmd__hello *h, unsigned char out[SPMD__HELLO_LEN]) {
    memset(out, 0, SPMD__HELLO_LEN);
    spmd__put_u32(out, SPMD__HELLO_MAGIC);
    spmd__put_u32(out + 4, SPMD__PROTO_VERSION);
    spmd__put_u64(out + 8, h->job_id);
    spmd__put_u32(out + 16, h->rank);
    spmd__put_u32(out + 20, h->world);
    spmd__put_u32(out + 24, h->channel);
    spmd__put_u32(out + 28, h->flags);
}

spmd_status spmd__hello_decode(const unsigned char in[SPMD__HELLO_LEN], spmd__hello *out,
                               char *err, size_t errlen) {
    uint32_t magic = spmd__get_u32(in), version = spmd__get_u32(in + 4);
    if (magic != SPMD__HELLO_MAGIC)
        return spmd__fail(err, errlen, SPMD_ERR_PROTOCOL, "bad magic 0x%08x (not an spmd peer)", magic);
    if (version != SPMD__PROTO_VERSION)
        return spmd__fail(err, errlen, SPMD_ERR_PROTOCOL, "protocol version %u, expected %u", version,
                          SPMD__PROTO_VERSION);
    uint32_t flags = spmd__get_u32(in + 28);
    if (flags & ~(SPMD__MESH_FLAG_AUTH | SPMD__MESH_FLAG_ENCRYPT))
        return spmd__fail(err, errlen, SPMD_ERR_PROTOCOL, "unknown hello flags 0x%x", flags);
    out->job_id = spmd__get_u64(in + 8);
    out->rank = spmd__get_u32(in + 16);
    out->world = spmd__get_u32(in + 20);
    out->channel = spmd__get_u32(in + 24);
    out->flags = flags;
    return SPMD_OK;
}

spmd_status spmd__mesh_hs_reply(const spmd__auth *a, const unsigned char first[SPMD__MESH_FIRST_LEN],
                                unsigned char nonce_s[32], unsigned char reply[SPMD__MESH_REPLY_LEN]) {
    memset(reply, 0, SPMD__MESH_REPLY_LEN);
    memset(nonce_s, 0, 32);
    if (!a->on) return SPMD_OK;
    if (spmd__auth_random(nonce_s, 32)) return SPMD_ERR_SYSTEM;
    spmd__put_u32(reply, SPMD__MESH_FLAG_AUTH);
    memcpy(reply + 4, nonce_s, 32);
    spmd__auth_mac(a, LABEL_ACCEPTOR, first, SPMD__MESH_FIRST_LEN, nonce_s, 32, NULL, 0, reply + 36);
    return SPMD_OK;
}

uint32_t spmd__mesh_hs_check(const spmd__auth *a, const unsigned char first[SPMD__MESH_FIRST_LEN],
                             const unsigned char nonce_s[32],
                             const unsigned char proof[SPMD__MESH_PROOF_LEN]) {
    if (!a->on) return SPMD__HELLO_OK;
    if (!(spmd__get_u32(first + 28) & SPMD__MESH_FLAG_AUTH)) return SPMD__HELLO_AUTH_REQUIRED;
    unsigned char want[SPMD__AUTH_MAC];
    spmd__auth_mac(a, LABEL_CONNECTOR, first, SPMD__MESH_FIRST_LEN, nonce_s, 32, NULL, 0, want);
    return spmd__auth_equal(want, proof, SPMD__AUTH_MAC) ? SPMD__HELLO_OK : SPMD__HELLO_AUTH_FAILED;
}

spmd_status spmd__mesh_hs_prove(const spmd__auth *a, const unsigned char first[SPMD__MESH_FIRST_LEN],
                                const unsigned char reply[SPMD__MESH_REPLY_LEN],
                                unsigned char proof[SPMD__MESH_PROOF_LEN], char *err, size_t errlen) {
    memset(proof, 0, SPMD__MESH_PROOF_LEN);
    uint32_t flags = spmd__get_u32(reply);
    if (!a->on) return SPMD_OK; /* the acceptor will refuse us if it needs a proof */
    if (!(flags & SPMD__MESH_FLAG_AUTH))
        return spmd__fail(err, errlen, SPMD_ERR_PROTOCOL,
                          "the peer does not authenticate (SPMD_AUTH=off there?) but this process "
                          "has a job secret: refusing it");
    unsigned char want[SPMD__AUTH_MAC];
    spmd__auth_mac(a, LABEL_ACCEPTOR, first, SPMD__MESH_FIRST_LEN, reply + 4, 32, NULL, 0, want);
    if (!spmd__auth_equal(want, reply + 36, SPMD__AUTH_MAC))
        return spmd__fail(err, errlen, SPMD_ERR_PROTOCOL,
                          "the peer failed to prove the job secret (an impostor at that address?)");
    spmd__auth_mac(a, LABEL_CONNECTOR, first, SPMD__MESH_FIRST_LEN, reply + 4, 32, NULL, 0, proof);
    return SPMD_OK;
}
