/* seal.c — the keys and the cipher of encrypted links (SPMD_ENCRYPT=1),
 * from OpenSSL's libcrypto: HKDF-SHA256 derives a key per direction from
 * the job secret and the handshake's two nonces; AES-256-GCM seals each
 * record under a 96-bit nonce made of the direction's record count, so a
 * record replayed, dropped or moved fails its tag like a tampered one. */
#include <stdlib.h>
#include <string.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/kdf.h>
#include "auth/seal.h"

struct spmd__aead {
    EVP_CIPHER_CTX *ctx;
    int seal;
};

spmd_status spmd__auth_link_keys(const spmd__auth *a, const unsigned char nonce_c[SPMD__AUTH_NONCE],
                                 const unsigned char nonce_s[SPMD__AUTH_NONCE], const void *claim, size_t claimlen,
                                 unsigned char c2a[SPMD__AEAD_KEY], unsigned char a2c[SPMD__AEAD_KEY]) {
    static const char label[] = "spmd link keys v1";
    unsigned char salt[2 * SPMD__AUTH_NONCE], info[sizeof label + 256], out[2 * SPMD__AEAD_KEY];
    if (!a->on || claimlen > 256) return SPMD_ERR_INVALID;
    memcpy(salt, nonce_c, SPMD__AUTH_NONCE);
    memcpy(salt + SPMD__AUTH_NONCE, nonce_s, SPMD__AUTH_NONCE);
    memcpy(info, label, sizeof label - 1);
    memcpy(info + sizeof label - 1, claim, claimlen);
    size_t outlen = sizeof out;
    EVP_PKEY_CTX *k = EVP_PKEY_CTX_new_id(EVP_PKEY_HKDF, NULL);
    int ok = k && EVP_PKEY_derive_init(k) > 0 && EVP_PKEY_CTX_set_hkdf_md(k, EVP_sha256()) > 0 &&
             EVP_PKEY_CTX_set1_hkdf_salt(k, salt, (int)sizeof salt) > 0 &&
             EVP_PKEY_CTX_set1_hkdf_key(k, a->key, (int)a->keylen) > 0 &&
             EVP_PKEY_CTX_add1_hkdf_info(k, info, (int)(sizeof label - 1 + claimlen)) > 0 &&
             EVP_PKEY_derive(k, out, &outlen) > 0 && outlen == sizeof out;
    EVP_PKEY_CTX_free(k);
    if (ok) {
        memcpy(c2a, out, SPMD__AEAD_KEY);
        memcpy(a2c, out + SPMD__AEAD_KEY, SPMD__AEAD_KEY);
    }
    OPENSSL_cleanse(out, sizeof out);
    return ok ? SPMD_OK : SPMD_ERR_SYSTEM;
}

spmd__aead *spmd__aead_new(const unsigned char key[SPMD__AEAD_KEY], int seal) {
    spmd__aead *a = calloc(1, sizeof *a);
    if (!a) return NULL;
    a->seal = seal;
    a->ctx = EVP_CIPHER_CTX_new();
    int ok = a->ctx && (seal ? EVP_EncryptInit_ex(a->ctx, EVP_aes_256_gcm(), NULL, key, NULL)
                             : EVP_DecryptInit_ex(a->ctx, EVP_aes_256_gcm(), NULL, key, NULL)) > 0;
    if (!ok) {
        spmd__aead_free(a);
        return NULL;
    }
    return a;
}

void spmd__aead_free(spmd__aead *a) {
    if (!a) return;
    EVP_CIPHER_CTX_free(a->ctx); /* also wipes the key schedule */
    free(a);
}

static void nonce_of(uint64_t seq, unsigned char iv[12]) {
    memset(iv, 0, 12);
    spmd__put_u64(iv + 4, seq);
}

int spmd__aead_seal(spmd__aead *a, uint64_t seq, const unsigned char *aad, size_t aadlen, const struct iovec *iov,
                    int iovcnt, size_t n, unsigned char *out, unsigned char tag[SPMD__AEAD_TAG]) {
    unsigned char iv[12];
    nonce_of(seq, iv);
    int len = 0;
    if (!a->seal || EVP_EncryptInit_ex(a->ctx, NULL, NULL, NULL, iv) <= 0 ||
        EVP_EncryptUpdate(a->ctx, NULL, &len, aad, (int)aadlen) <= 0)
        return -1;
    size_t done = 0;
    for (int i = 0; i < iovcnt && done < n; i++) {
        size_t take = iov[i].iov_len < n - done ? iov[i].iov_len : n - done;
        if (!take) continue;
        if (EVP_EncryptUpdate(a->ctx, out + done, &len, iov[i].iov_base, (int)take) <= 0 || (size_t)len != take)
            return -1;
        done += take;
    }
    if (done != n || EVP_EncryptFinal_ex(a->ctx, out + done, &len) <= 0 ||
        EVP_CIPHER_CTX_ctrl(a->ctx, EVP_CTRL_GCM_GET_TAG, SPMD__AEAD_TAG, tag) <= 0)
        return -1;
    return 0;
}

int spmd__aead_open(spmd__aead *a, uint64_t seq, const unsigned char *aad, size_t aadlen, const unsigned char *in,
                    size_t n, const unsigned char tag[SPMD__AEAD_TAG], unsigned char *out) {
    unsigned char iv[12], t[SPMD__AEAD_TAG];
    nonce_of(seq, iv);
    memcpy(t, tag, sizeof t);
    int len = 0;
    if (a->seal || EVP_DecryptInit_ex(a->ctx, NULL, NULL, NULL, iv) <= 0 ||
        EVP_DecryptUpdate(a->ctx, NULL, &len, aad, (int)aadlen) <= 0 ||
        (n && EVP_DecryptUpdate(a->ctx, out, &len, in, (int)n) <= 0) ||
        EVP_CIPHER_CTX_ctrl(a->ctx, EVP_CTRL_GCM_SET_TAG, SPMD__AEAD_TAG, t) <= 0)
        return -1;
    return EVP_DecryptFinal_ex(a->ctx, out + n, &len) > 0 ? 0 : -1;
}
