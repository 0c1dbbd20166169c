/* src/auth/seal.h — keys and authenticated encryption for encrypted links
 * (SPMD_ENCRYPT=1; the record layer is transport/path_sealed.c).
 *
 * Keys: HKDF-SHA256 with the job secret as input key material, the
 * handshake's two nonces (connector's, acceptor's) as salt and "spmd link
 * keys v1" | the connection's claim (the mesh hello: job id, rank, world,
 * channel, flags) as info; 64 bytes out: the connector-to-acceptor key, then
 * the acceptor-to-connector key.  Fresh nonces make every connection's keys
 * fresh; a key never serves two directions.
 *
 * Cipher: AES-256-GCM, 16-byte tags, the 96-bit nonce 4 zero bytes | the
 * record's sequence number in its direction (u64 little-endian), which both
 * sides count: a record dropped, replayed or reordered fails like a tampered
 * one. */
#ifndef SPMD_AUTH_SEAL_H
#define SPMD_AUTH_SEAL_H

#include <stdint.h>
#include <sys/uio.h>
#include "auth/auth.h"

#define SPMD__AEAD_KEY 32
#define SPMD__AEAD_TAG 16

/* The two keys of a link (a->on required). */
spmd_status spmd__auth_link_keys(const spmd__auth *a, const unsigned char nonce_c[SPMD__AUTH_NONCE],
                                 const unsigned char nonce_s[SPMD__AUTH_NONCE], const void *claim, size_t claimlen,
                                 unsigned char c2a[SPMD__AEAD_KEY], unsigned char a2c[SPMD__AEAD_KEY]);

/* One direction's cipher: seal (1) or open (0).  NULL when out of memory. */
typedef struct spmd__aead spmd__aead;
spmd__aead *spmd__aead_new(const unsigned char key[SPMD__AEAD_KEY], int seal);
void spmd__aead_free(spmd__aead *a);
/* Encrypt the first n bytes of iov into out (n bytes) with record number
 * seq and additional data aad; the tag into tag.  0, or -1 on failure. */
int spmd__aead_seal(spmd__aead *a, uint64_t seq, const unsigned char *aad, size_t aadlen, const struct iovec *iov,
                    int iovcnt, size_t n, unsigned char *out, unsigned char tag[SPMD__AEAD_TAG]);
/* Decrypt n bytes of in into out (out may receive bytes even when the check
 * fails: use them only on 0).  0 when the tag checks out, else -1. */
int spmd__aead_open(spmd__aead *a, uint64_t seq, const unsigned char *aad, size_t aadlen, const unsigned char *in,
                    size_t n, const unsigned char tag[SPMD__AEAD_TAG], unsigned char *out);

#endif
