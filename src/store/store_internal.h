/* src/store/store_internal.h — the store's wire format and the few internal
 * hooks the tests use.  wire.c holds the codec as pure functions (no I/O, no
 * allocation) so it can be fuzzed; server.c and client.c do the sockets.
 *
 * Wire format (all integers little-endian).  The client speaks first:
 *
 *   hello     u32 magic "SPKV" | u32 version | u32 word
 *             client -> server: word = 0 (reserved flags)
 *             server -> client: word = status (0, or SPMD_ERR_MISMATCH as u32
 *             when the versions differ; the server then closes)
 *
 *   request   u32 body_len | u8 op | u8 flags=0 | u16 reserved=0 | u32 seq |
 *             u32 timeout_ms | i64 num | u32 nkeys | nkeys x (u32 len, bytes) |
 *             u32 nvals | nvals x (u32 len, bytes)
 *   reply     u32 body_len | u32 seq | i32 status | i64 num | u32 vlen | bytes
 *
 * body_len counts the bytes after itself.  One request is outstanding per
 * connection; the reply echoes its seq so a client can skip the reply of a
 * request it gave up on (its own safety-net deadline).  timeout_ms is relative
 * (clocks of different hosts are not comparable) and only used by GET/WAIT.
 * On a non-OK status the reply's bytes are a human-readable message.
 */
#ifndef SPMD_STORE_INTERNAL_H
#define SPMD_STORE_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include "common/common.h"
#include "spmd/store.h"

#define SPMD__STORE_MAGIC 0x564B5053u /* bytes 'S' 'P' 'K' 'V' */
#define SPMD__STORE_VERSION 2u
#define SPMD__STORE_HELLO_LEN 12u

enum {
    SPMD__STORE_OP_SET = 1,  /* key, value                 -> OK               */
    SPMD__STORE_OP_GET,      /* key, timeout (parks)       -> value | TIMEOUT  */
    SPMD__STORE_OP_TRY_GET,  /* key                        -> value | NOTFOUND */
    SPMD__STORE_OP_WAIT,     /* 1..MAX_WAIT_KEYS keys, timeout (parks) -> OK | TIMEOUT */
    SPMD__STORE_OP_ADD,      /* key, num = delta           -> num = new value  */
    SPMD__STORE_OP_CAS,      /* key, expected, desired     -> current value    */
    SPMD__STORE_OP_DELETE,   /* key                        -> num = existed    */
    SPMD__STORE_OP_NUM_KEYS, /* nothing                    -> num = count      */
    SPMD__STORE_OP_END
};

/* Fixed parts: request up to and including nkeys, reply up to and including vlen. */
#define SPMD__STORE_REQ_HEAD 28u
#define SPMD__STORE_REP_HEAD 24u
/* Largest legal bodies (after the u32 body_len): a CAS with a maximal key and
 * two maximal values, a WAIT with MAX_WAIT_KEYS maximal keys; error messages. */
#define SPMD__STORE_MAX_CAS_BODY                                                     \
    ((size_t)SPMD__STORE_REQ_HEAD - 4u + 4u + SPMD_STORE_MAX_KEY + 4u +             \
     2u * (4u + (size_t)SPMD_STORE_MAX_VALUE))
#define SPMD__STORE_MAX_WAIT_BODY                                                    \
    ((size_t)SPMD__STORE_REQ_HEAD - 4u + (size_t)SPMD_STORE_MAX_WAIT_KEYS *         \
     (4u + SPMD_STORE_MAX_KEY) + 4u)
#define SPMD__STORE_MAX_REQ_BODY                                                     \
    (SPMD__STORE_MAX_CAS_BODY > SPMD__STORE_MAX_WAIT_BODY ? SPMD__STORE_MAX_CAS_BODY \
                                                          : SPMD__STORE_MAX_WAIT_BODY)
#define SPMD__STORE_MAX_REP_BODY ((size_t)SPMD__STORE_REP_HEAD - 4u + SPMD_STORE_MAX_VALUE)
#define SPMD__STORE_MAX_ERRMSG 1024u

typedef enum {
    SPMD__WIRE_OK = 0,   /* one whole message decoded */
    SPMD__WIRE_MORE = 1, /* consistent so far, need more bytes */
    SPMD__WIRE_BAD = -1  /* protocol violation: err says which */
} spmd__wire_result;

/* A decoded request.  Pointers point into the caller's buffer. */
typedef struct {
    uint8_t op;
    uint32_t seq;
    uint32_t timeout_ms;
    int64_t num;
    uint32_t nkeys;
    const unsigned char *keys; /* nkeys x (u32 len, bytes): walk with spmd__store_next_key */
    const unsigned char *key;  /* first key, NULL when nkeys == 0 */
    uint32_t klen;
    uint32_t nvals;
    const unsigned char *val[2];
    uint32_t vlen[2];
    size_t frame_len; /* bytes consumed, body_len + 4 */
} spmd__store_req;

typedef struct {
    uint32_t seq;
    int32_t status;
    int64_t num;
    const unsigned char *val;
    uint32_t vlen;
    size_t frame_len;
} spmd__store_rep;

/* What a client wants to send; every key is sent as prefix + keys[i]. */
typedef struct {
    uint8_t op;
    uint32_t seq;
    uint32_t timeout_ms;
    int64_t num;
    const char *prefix;
    size_t plen;
    const char *const *keys;
    const size_t *klens;
    uint32_t nkeys;
    const void *const *vals;
    const size_t *vlens;
    uint32_t nvals;
} spmd__store_req_spec;

/* ---- wire.c: pure codec ---------------------------------------------------- */
/* Each decoder validates every field that has arrived (op, counts, each length
 * against the store.h limits, lengths against body_len) before asking for more,
 * so a caller can size its buffer from bytes actually received and drop a bad
 * peer after its first wrong field.  *out is written only on SPMD__WIRE_OK. */
spmd__wire_result spmd__store_decode_hello(const void *buf, size_t len, uint32_t *version,
                                           uint32_t *word, char *err, size_t errlen);
spmd__wire_result spmd__store_decode_req(const void *buf, size_t len, spmd__store_req *out,
                                         char *err, size_t errlen);
spmd__wire_result spmd__store_decode_rep(const void *buf, size_t len, spmd__store_rep *out,
                                         char *err, size_t errlen);
/* Next key of a decoded request's key list: returns the position after it. */
const unsigned char *spmd__store_next_key(const unsigned char *p, const unsigned char **key,
                                          uint32_t *klen);

void spmd__store_encode_hello(unsigned char out[SPMD__STORE_HELLO_LEN], uint32_t version,
                              uint32_t word);
/* Bytes spmd__store_encode_req will write; the caller checks the limits first. */
size_t spmd__store_req_size(const spmd__store_req_spec *s);
size_t spmd__store_encode_req(unsigned char *buf, const spmd__store_req_spec *s);
/* Writes SPMD__STORE_REP_HEAD + vlen bytes. */
size_t spmd__store_encode_rep(unsigned char *buf, uint32_t seq, int32_t status, int64_t num,
                              const void *val, uint32_t vlen);
const char *spmd__store_op_name(unsigned op);

/* ---- server.c: observation hooks for tests ---------------------------------- */
/* Live client connections and requests parked (blocking GET/WAIT) right now. */
void spmd__store_server_stats(const spmd_store_server *s, int *conns, int *parked);
/* The highest byte count the server charged against SPMD_STORE_MAX_BYTES, the
 * clients with replies not yet sent, and those whose next reply waits for memory. */
void spmd__store_server_memory(spmd_store_server *s, size_t *peak_bytes, int *replying,
                               int *waiting);
/* Clients the server refused in the handshake so far; *at_ns and last (the
 * last one's "client ADDR: cause") when there was one. */
unsigned spmd__store_server_refusals(spmd_store_server *s, uint64_t *at_ns, char *last, size_t len);
/* spmd_store_connect to a server that was up (a standby store, the launcher's
 * successor): a refused connection means it is gone and fails at once
 * (SPMD_ERR_SYSTEM) instead of being retried until the deadline. */
spmd_status spmd__store_connect_up(const char *host, int port, int timeout_ms, spmd_store **out, char *err,
                                   size_t errlen);

#endif
