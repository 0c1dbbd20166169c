/* proof.c — randomness, HMAC-SHA256 and constant-time comparison, all from
 * OpenSSL's libcrypto. */
#include <string.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include "auth/auth.h"
#include "spmd/auth.h"

spmd_status spmd__auth_random(void *buf, size_t n) {
    return n <= (size_t)2147483647 && RAND_bytes(buf, (int)n) == 1 ? SPMD_OK : SPMD_ERR_SYSTEM;
}

spmd_status spmd_auth_new_token(char out[SPMD_AUTH_TOKEN_CHARS + 1]) {
    if (!out) return SPMD_ERR_INVALID;
    unsigned char raw[SPMD_AUTH_TOKEN_CHARS / 2];
    if (spmd__auth_random(raw, sizeof raw)) return SPMD_ERR_SYSTEM;
    static const char hex[] = "0123456789abcdef";
    for (size_t i = 0; i < sizeof raw; i++) {
        out[2 * i] = hex[raw[i] >> 4];
        out[2 * i + 1] = hex[raw[i] & 15];
    }
    out[SPMD_AUTH_TOKEN_CHARS] = 0;
    OPENSSL_cleanse(raw, sizeof raw);
    return SPMD_OK;
}

void spmd__auth_mac(const spmd__auth *key, const char *label, const void *a, size_t alen,
                    const void *b, size_t blen, const void *c, size_t clen,
                    unsigned char mac[SPMD__AUTH_MAC]) {
    /* Every transcript here is a few hundred bytes at most. */
    unsigned char msg[512];
    size_t ll = strlen(label), n = 0;
    if (ll + alen + blen + clen > sizeof msg) {
        memset(mac, 0, SPMD__AUTH_MAC); /* never matches a real proof of a valid transcript */
        return;
    }
    memcpy(msg, label, ll);
    n = ll;
    if (alen) memcpy(msg + n, a, alen);
    n += alen;
    if (blen) memcpy(msg + n, b, blen);
    n += blen;
    if (clen) memcpy(msg + n, c, clen);
    n += clen;
    unsigned int outlen = 0;
    if (!HMAC(EVP_sha256(), key->key, (int)key->keylen, msg, n, mac, &outlen) ||
        outlen != SPMD__AUTH_MAC)
        memset(mac, 0, SPMD__AUTH_MAC);
}

void spmd__auth_wipe(void *p, size_t n) { OPENSSL_cleanse(p, n); }

int spmd__auth_equal(const unsigned char *x, const unsigned char *y, size_t n) {
    return CRYPTO_memcmp(x, y, n) == 0;
}
