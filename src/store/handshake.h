/* src/store/handshake.h — the store's authenticated handshake (protocol 2).
 *
 *   client -> server  hello: u32 magic "SPKV" | u32 version 2 | u32 flags
 *                     (bit 0: the client has a job secret) | 32-byte nonce_c
 *   server -> client  u32 magic | u32 version | u32 status | u32 flags
 *                     (bit 0: the server authenticates) | 32-byte nonce_s |
 *                     32-byte proof_s = HMAC(secret, "spmd-store-server" |
 *                     client hello | nonce_s)   (zeros when not authenticating)
 *   client -> server  32-byte proof_c = HMAC(secret, "spmd-store-client" |
 *                     client hello | nonce_s)   (zeros without a secret)
 *   server -> client  u32 verdict (0 = ok; else a SPMD__STORE_HS_* code, and
 *                     the server closes)
 *
 * A hello of another version is answered with a 12-byte v1-style hello
 * carrying SPMD_ERR_MISMATCH, so older clients get a clear error.  The server
 * reads nothing but these fixed-size messages until the proof checks out. */
#ifndef SPMD_STORE_HANDSHAKE_H
#define SPMD_STORE_HANDSHAKE_H

#include <stddef.h>
#include <stdint.h>
#include "auth/auth.h"
#include "store/store_internal.h"

#define SPMD__STORE_CHELLO_LEN (SPMD__STORE_HELLO_LEN + SPMD__AUTH_NONCE)                    /* 44 */
#define SPMD__STORE_SHELLO_LEN (SPMD__STORE_HELLO_LEN + 4u + SPMD__AUTH_NONCE + SPMD__AUTH_MAC) /* 80 */
#define SPMD__STORE_FLAG_AUTH 1u

/* Handshake status/verdict codes (besides 0 and SPMD_ERR_MISMATCH as u32). */
enum { SPMD__STORE_HS_AUTH_REQUIRED = 100, SPMD__STORE_HS_AUTH_FAILED = 101,
       SPMD__STORE_HS_BUSY = 102, SPMD__STORE_HS_UNAUTHENTICATED = 103 };

typedef struct {
    int stage; /* 0: want the client hello; 1: want the proof; 2: done */
    unsigned char chello[SPMD__STORE_CHELLO_LEN];
    unsigned char nonce_s[SPMD__AUTH_NONCE];
} spmd__store_hs;

/* Server side, pure (no I/O): consume what is buffered, write the reply to
 * out (room for SPMD__STORE_SHELLO_LEN bytes).  Returns the bytes consumed;
 * *outlen gets the reply's length; *refuse is set when the connection must be
 * closed after the reply is flushed (err says why).  Never consumes more than
 * the fixed-size message of the current stage.  busy: refuse with
 * SPMD__STORE_HS_BUSY once the client has proved itself. */
size_t spmd__store_hs_server(spmd__store_hs *hs, const spmd__auth *a, int busy,
                             const unsigned char *in, size_t avail, unsigned char *out,
                             size_t *outlen, int *refuse, char *err, size_t errlen);
/* Bytes the server wants next at this stage (0 when done). */
size_t spmd__store_hs_want(const spmd__store_hs *hs);

/* Client side: build the hello (fills nonce_c). */
spmd_status spmd__store_hs_client_hello(const spmd__auth *a,
                                        unsigned char chello[SPMD__STORE_CHELLO_LEN]);
/* Check the server's reply; on success writes our proof (32 bytes). */
spmd_status spmd__store_hs_client_check(const spmd__auth *a,
                                        const unsigned char chello[SPMD__STORE_CHELLO_LEN],
                                        const unsigned char shello[SPMD__STORE_SHELLO_LEN],
                                        unsigned char proof[SPMD__AUTH_MAC], char *err,
                                        size_t errlen);
const char *spmd__store_hs_text(uint32_t code);

#endif
