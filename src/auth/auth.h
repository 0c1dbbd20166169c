/* src/auth/auth.h — the job secret and the challenge-response that every store
 * and mesh connection runs before anything else is read from the peer.
 *
 * The secret (docs/SECURITY.md), in this order: SPMD_AUTH=off (none, loudly);
 * SPMD_AUTH_TOKEN (32..1024 characters); the first line of the file named by
 * SPMD_AUTH_FILE; a random 256-bit token generated in this process
 * (spmd__auth_ensure: spmd_spawn; spmdrun puts its own in SPMD_AUTH_TOKEN) and
 * inherited by forked children; else the per-user secret file
 * (user_secret.c), created on first use.  Files are checked by
 * secret_file.c.  Leading and trailing blanks of a secret are ignored.
 *
 * The proof: each side sends a fresh 32-byte nonce; each proves knowledge of
 * the secret with HMAC-SHA256(secret, label | transcript | nonce_a | nonce_b),
 * where the labels differ by role (so a proof cannot be reflected) and the
 * transcript binds what the connection claims (e.g. rank and job id).  Proofs
 * are compared in constant time (CRYPTO_memcmp).  libcrypto (OpenSSL). */
#ifndef SPMD_AUTH_INTERNAL_H
#define SPMD_AUTH_INTERNAL_H

#include <stddef.h>
#include "common/common.h"

#define SPMD__AUTH_NONCE 32
#define SPMD__AUTH_MAC 32
#define SPMD__AUTH_MAX_SECRET 1024
#define SPMD__AUTH_MIN_SECRET 32

typedef struct {
    int on;                                  /* 0: SPMD_AUTH=off or no secret known */
    unsigned char key[SPMD__AUTH_MAX_SECRET];
    size_t keylen;
    const char *source;                      /* "SPMD_AUTH_TOKEN", "SPMD_AUTH_FILE", "generated",
                                                "the per-user secret file" */
} spmd__auth;

/* This process's secret.  SPMD_OK with a->on = 0 only when authentication is
 * off (SPMD_AUTH=off); an error (SPMD_ERR_INVALID, naming the source, what is
 * wrong and the fix) when the secret is unusable or the per-user file can be
 * neither read nor created. */
spmd_status spmd__auth_get(spmd__auth *a, char *err, size_t errlen);
/* Only a secret given to this process: SPMD_AUTH_TOKEN, SPMD_AUTH_FILE or one
 * generated here (a->on = 0 when none; never the per-user file). */
spmd_status spmd__auth_given(spmd__auth *a, char *err, size_t errlen);
/* 1 when SPMD_AUTH=off (logs the warning once per process). */
int spmd__auth_disabled(void);
/* A per-job secret for a launcher (spmd_spawn): unless one is given or auth
 * is off, generate a random one and keep it for this process and its forked
 * children (it then comes before the per-user file). */
spmd_status spmd__auth_ensure(char *err, size_t errlen);
/* The secret as a token string for a child's environment; "" when off/none. */
spmd_status spmd__auth_token(char *out, size_t outlen, char *err, size_t errlen);

/* Cryptographically random bytes (RAND_bytes). */
spmd_status spmd__auth_random(void *buf, size_t n);
/* mac = HMAC-SHA256(key, label | a | b | c). */
void spmd__auth_mac(const spmd__auth *key, const char *label, const void *a, size_t alen,
                    const void *b, size_t blen, const void *c, size_t clen,
                    unsigned char mac[SPMD__AUTH_MAC]);
/* Overwrite secret bytes (OPENSSL_cleanse: not optimised away). */
void spmd__auth_wipe(void *p, size_t n);
/* Constant-time comparison of two proofs: 1 when equal. */
int spmd__auth_equal(const unsigned char *x, const unsigned char *y, size_t n);

#endif
