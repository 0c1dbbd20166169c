/* hello.c — the 32-byte handshake that opens every mesh connection:
 *   u32 magic "SPMD" | u32 version | u64 job id | u32 rank | u32 world | u32 channel | u32 zero */
#include <string.h>
#include "transport.h"

void spmd__hello_encode(const spmd__hello *h, unsigned char out[SPMD__HELLO_LEN]) {
    memset(out, 0, SPMD__HELLO_LEN);
    spmd__put_u32(out, SPMD__HELLO_MAGIC);
    spmd__put_u32(out + 4, SPMD__PROTO_VERSION);
    spmd__put_u64(out + 8, h->job_id);
    spmd__put_u32(out + 16, h->rank);
    spmd__put_u32(out + 20, h->world);
    spmd__put_u32(out + 24, h->channel);
}

spmd_status spmd__hello_decode(const unsigned char in[SPMD__HELLO_LEN], spmd__hello *out,
                               char *err, size_t errlen) {
    uint32_t magic = spmd__get_u32(in), version = spmd__get_u32(in + 4);
    if (magic != SPMD__HELLO_MAGIC)
        return spmd__fail(err, errlen, SPMD_ERR_PROTOCOL, "bad magic 0x%08x (not an spmd peer)", magic);
    if (version != SPMD__PROTO_VERSION)
        return spmd__fail(err, errlen, SPMD_ERR_PROTOCOL, "protocol version %u, expected %u", version,
                          SPMD__PROTO_VERSION);
    if (spmd__get_u32(in + 28) != 0)
        return spmd__fail(err, errlen, SPMD_ERR_PROTOCOL, "reserved hello field not zero");
    out->job_id = spmd__get_u64(in + 8);
    out->rank = spmd__get_u32(in + 16);
    out->world = spmd__get_u32(in + 20);
    out->channel = spmd__get_u32(in + 24);
    return SPMD_OK;
}
