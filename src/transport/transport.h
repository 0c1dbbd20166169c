/* src/transport/transport.h — building the full mesh of TCP connections
 * between the ranks of a group, with an authenticated handshake on every
 * connection.
 *
 * Each rank listens on one port (published in the store as "addr/<rank>"),
 * connects to every lower rank and accepts every higher rank, `nchan` times
 * per pair (one connection per channel).  The handshake (protocol 2):
 *
 *   connector -> acceptor  hello (32 bytes: magic, version, job id, rank,
 *                          world size, channel, flags bit 0 = has a secret,
 *                          bit 1 = wants encryption) + 32-byte nonce_c
 *   acceptor -> connector  u32 flags (bit 0: authenticates, bit 1: wants
 *                          encryption) + 32-byte nonce_s
 *                          + proof_a = HMAC(secret, "spmd-mesh-acceptor" |
 *                          hello | nonce_c | nonce_s)  (zeros without auth)
 *   connector -> acceptor  proof_c = HMAC(secret, "spmd-mesh-connector" |
 *                          hello | nonce_c | nonce_s)  (zeros without a secret)
 *   acceptor -> connector  u32 verdict
 *
 * Both sides prove the job secret (src/auth); a connector never accepts an
 * acceptor that cannot.  When either side wants encryption (SPMD_ENCRYPT=1)
 * the connection is encrypted from the next byte on: keys per direction from
 * the secret, both nonces and the hello (auth/seal.h), records as in
 * path_sealed.c.  A side that wants it without a secret refuses to start.  The acceptor reads nothing but these 96 fixed bytes
 * from a peer before the proof checks out, judges all pending connections at
 * once (a silent one cannot hold up the others) and drops any that has not
 * finished within SPMD_HANDSHAKE_TIMEOUT_MS.  Another job, a rank out of
 * range, a duplicate rank/channel, a wrong secret or garbage is refused,
 * logged with its address and dropped; the mesh building carries on. */
#ifndef SPMD_TRANSPORT_H
#define SPMD_TRANSPORT_H

#include <stdint.h>
#include "common/common.h"
#include "spmd/store.h"
#include "auth/auth.h"

#define SPMD__HELLO_MAGIC 0x444d5053u /* "SPMD" little-endian */
#define SPMD__PROTO_VERSION 2u
#define SPMD__HELLO_LEN 32

#define SPMD__MESH_FLAG_AUTH 1u
#define SPMD__MESH_FLAG_ENCRYPT 2u
#define SPMD__MESH_FIRST_LEN 64 /* hello + nonce_c */
#define SPMD__MESH_REPLY_LEN 68 /* flags + nonce_s + proof_a */
#define SPMD__MESH_PROOF_LEN 32

typedef struct {
    uint64_t job_id;
    uint32_t rank, world, channel;
    uint32_t flags;
} spmd__hello;

void spmd__hello_encode(const spmd__hello *h, unsigned char out[SPMD__HELLO_LEN]);
/* Checks magic, version and flags only; the caller checks the fields against its own. */
spmd_status spmd__hello_decode(const unsigned char in[SPMD__HELLO_LEN], spmd__hello *out,
                               char *err, size_t errlen);

/* Verdicts sent back by the acceptor. */
enum { SPMD__HELLO_OK = 0, SPMD__HELLO_BAD_JOB = 1, SPMD__HELLO_BAD_RANK = 2,
       SPMD__HELLO_DUPLICATE = 3, SPMD__HELLO_BAD_WORLD = 4, SPMD__HELLO_AUTH_REQUIRED = 5,
       SPMD__HELLO_AUTH_FAILED = 6, SPMD__HELLO_NO_ENCRYPTION = 7 };

/* The challenge-response around the hello (pure, no I/O; hello.c). */
/* Acceptor: build the reply to a connector's first 64 bytes (fills nonce_s). */
spmd_status spmd__mesh_hs_reply(const spmd__auth *a, const unsigned char first[SPMD__MESH_FIRST_LEN],
                                unsigned char nonce_s[32], unsigned char reply[SPMD__MESH_REPLY_LEN]);
/* Acceptor: the verdict on the connector's proof (SPMD__HELLO_OK or _AUTH_*). */
uint32_t spmd__mesh_hs_check(const spmd__auth *a, const unsigned char first[SPMD__MESH_FIRST_LEN],
                             const unsigned char nonce_s[32],
                             const unsigned char proof[SPMD__MESH_PROOF_LEN]);
/* Connector: check the acceptor's reply and compute our proof. */
spmd_status spmd__mesh_hs_prove(const spmd__auth *a, const unsigned char first[SPMD__MESH_FIRST_LEN],
                                const unsigned char reply[SPMD__MESH_REPLY_LEN],
                                unsigned char proof[SPMD__MESH_PROOF_LEN], char *err, size_t errlen);

/* The keys of one encrypted connection, as this side uses them. */
typedef struct {
    int on;
    unsigned char tx[32], rx[32];
} spmd__link_keys;

/* Build the mesh.  fds[c][p] receives the socket to peer p on channel c
 * (-1 for p == rank).  fds[c] must point to arrays of `world` ints.
 * bind_host: the address to listen on and publish.  keys (NULL: refuse
 * encryption) receives, at [c * world + p], whether that connection is
 * encrypted and its keys.  watch (NULL: none) may end the wait for higher
 * ranks early (mesh.h); an address published as "!reason" ends the wait for
 * a lower rank with that reason. */
struct spmd__rdzv_watch;
spmd_status spmd__mesh_build(spmd_store *store, int rank, int world, uint64_t job_id, int nchan,
                             const char *bind_host, int **fds, spmd__link_keys *keys,
                             const struct spmd__rdzv_watch *watch, int64_t deadline, char *err,
                             size_t errlen);

#endif
