/* src/transport/transport.h — building the full mesh of TCP connections
 * between the ranks of a group, with a handshake on every connection.
 *
 * Each rank listens on one port (published in the store as "addr/<rank>"),
 * connects to every lower rank and accepts every higher rank, `nchan` times
 * per pair (one connection per channel).  The first 32 bytes on every
 * connection are a hello: magic, protocol version, job id, rank, world size,
 * channel.  The acceptor answers with a 4-byte verdict; a hello from another
 * job, a rank out of range, a duplicate rank/channel or garbage is refused,
 * logged and dropped, and the mesh building carries on. */
#ifndef SPMD_TRANSPORT_H
#define SPMD_TRANSPORT_H

#include <stdint.h>
#include "common/common.h"
#include "spmd/store.h"

#define SPMD__HELLO_MAGIC 0x444d5053u /* "SPMD" little-endian */
#define SPMD__PROTO_VERSION 1u
#define SPMD__HELLO_LEN 32

typedef struct {
    uint64_t job_id;
    uint32_t rank, world, channel;
} spmd__hello;

void spmd__hello_encode(const spmd__hello *h, unsigned char out[SPMD__HELLO_LEN]);
/* Checks magic and version only; the caller checks the fields against its own. */
spmd_status spmd__hello_decode(const unsigned char in[SPMD__HELLO_LEN], spmd__hello *out,
                               char *err, size_t errlen);

/* Verdicts sent back by the acceptor. */
enum { SPMD__HELLO_OK = 0, SPMD__HELLO_BAD_JOB = 1, SPMD__HELLO_BAD_RANK = 2,
       SPMD__HELLO_DUPLICATE = 3, SPMD__HELLO_BAD_WORLD = 4 };

/* Build the mesh.  fds[c][p] receives the socket to peer p on channel c
 * (-1 for p == rank).  fds[c] must point to arrays of `world` ints.
 * bind_host: the address to listen on and publish. */
spmd_status spmd__mesh_build(spmd_store *store, int rank, int world, uint64_t job_id, int nchan,
                             const char *bind_host, int **fds, int64_t deadline, char *err,
                             size_t errlen);

#endif
