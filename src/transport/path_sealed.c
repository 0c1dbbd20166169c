/* path_sealed.c — a TCP path whose bytes are encrypted and authenticated
 * (SPMD_ENCRYPT=1, path.h; keys and cipher: auth/seal.h).
 *
 * The stream is cut into records:
 *     u32 n (plaintext bytes, 1..SPMD__SEAL_MAX) | n bytes of ciphertext | 16-byte tag
 * sealed with AES-256-GCM under the record's number in its direction, the
 * length as additional data.  A record that fails its tag (tampered with,
 * replayed, dropped or reordered), a length out of range, or a connection
 * that ends inside a record breaks the path for good: every later call
 * fails with EBADMSG (spmd__path_strerror says what it means), logged
 * naming the peer.
 *
 * Writing (non-blocking, send semantics): a writev seals up to
 * SPMD__SEAL_MAX bytes of what it is offered into one record and reports
 * them written only once the whole record is on the socket.  A record the
 * socket took part of stays here; the caller, having seen EAGAIN, offers
 * the same bytes again (a byte stream: nothing else can go first), which
 * is checked, and the rest of the record goes out.
 *
 * Reading: whole records are read into a buffer and opened, straight into
 * the caller's buffer when it wants the whole record, else into a plaintext
 * buffer read from first.  read() says EAGAIN only when nothing is left in
 * either and the socket has nothing: callers read until EAGAIN before they
 * sleep in poll, so nothing buffered here is ever slept on. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <openssl/crypto.h>
#include "auth/seal.h"
#include "common/common.h"
#include "path.h"

#define LEN 4
#define OVERHEAD (LEN + SPMD__AEAD_TAG)
#define REC_CAP (SPMD__SEAL_MAX + OVERHEAD)
#define IN_CAP (2 * REC_CAP) /* a record and the start of the next: fewer recv calls */

typedef struct {
    spmd__path base;
    spmd__aead *tx, *rx;
    uint64_t tx_seq, rx_seq;
    int err;                  /* sticky errno once broken */
    /* writing: a sealed record the socket has not taken whole */
    unsigned char *out, *plain; /* the record, its plaintext (to check what the caller offers again) */
    size_t out_len, out_sent, plain_len;
    const void *checked;      /* the buffer last found to hold that plaintext: offered again, no compare */
    /* reading */
    unsigned char *in;        /* ciphertext received, not opened yet: in[in_off, in_len) */
    size_t in_off, in_len;
    unsigned char *pt;        /* plaintext opened, not read yet: pt[pt_off, pt_len) */
    size_t pt_off, pt_len;
} sealed;

static ssize_t broken(sealed *s, int err, const char *why) {
    if (!s->err) {
        s->err = err;
        SPMD_LOGW("encrypted link with rank %d: %s", s->base.peer, why);
    }
    errno = s->err;
    return -1;
}

static size_t iov_total(const struct iovec *iov, int n) {
    size_t t = 0;
    for (int i = 0; i < n; i++) t += iov[i].iov_len;
    return t;
}

/* Do the first len bytes offered equal p? */
static int offered_again(const struct iovec *iov, int n, const unsigned char *p, size_t len) {
    for (int i = 0; i < n && len; i++) {
        size_t take = iov[i].iov_len < len ? iov[i].iov_len : len;
        if (take && memcmp(iov[i].iov_base, p, take)) return 0;
        p += take;
        len -= take;
    }
    return len == 0;
}

/* Push the pending record: 1 all gone, 0 not yet, -1 socket error (errno). */
static int flush(sealed *s) {
    while (s->out_sent < s->out_len) {
        ssize_t n = send(s->base.fd, s->out + s->out_sent, s->out_len - s->out_sent, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return errno == EAGAIN || errno == EWOULDBLOCK ? 0 : -1;
        s->out_sent += (size_t)n;
    }
    return 1;
}

static ssize_t sealed_writev(spmd__path *p, const struct iovec *iov, int n) {
    sealed *s = (sealed *)p;
    if (s->err) return broken(s, s->err, "");
    const size_t offered = iov_total(iov, n);
    if (s->out_len) { /* a record half on the socket: the same bytes must come again */
        if (offered < s->plain_len ||
            (iov[0].iov_base != s->checked && !offered_again(iov, n, s->plain, s->plain_len)))
            return broken(s, EPROTO, "internal: the bytes offered after a partial write changed");
        s->checked = iov[0].iov_base; /* a caller waiting for room offers the same buffer many times */
        int r = flush(s);
        if (r < 0) return -1;
        if (!r) {
            errno = EAGAIN;
            return -1;
        }
        s->out_len = s->out_sent = 0;
        return (ssize_t)s->plain_len;
    }
    size_t len = offered < SPMD__SEAL_MAX ? offered : SPMD__SEAL_MAX;
    if (!len) return 0;
    if (!s->out && !(s->out = malloc(REC_CAP))) return broken(s, ENOMEM, "out of memory");
    spmd__put_u32(s->out, (uint32_t)len);
    if (spmd__aead_seal(s->tx, s->tx_seq, s->out, LEN, iov, n, len, s->out + LEN, s->out + LEN + len))
        return broken(s, EPROTO, "sealing a record failed");
    s->tx_seq++;
    s->out_len = len + OVERHEAD;
    s->out_sent = 0;
    int r = flush(s);
    if (r > 0) {
        s->out_len = 0;
        return (ssize_t)len;
    }
    if (r < 0) return -1; /* the connection is gone: the caller says so */
    /* keep what the caller must offer again */
    if (!s->plain && !(s->plain = malloc(SPMD__SEAL_MAX))) return broken(s, ENOMEM, "out of memory");
    size_t done = 0;
    for (int i = 0; i < n && done < len; i++) {
        size_t take = iov[i].iov_len < len - done ? iov[i].iov_len : len - done;
        if (take) memcpy(s->plain + done, iov[i].iov_base, take);
        done += take;
    }
    s->plain_len = len;
    s->checked = NULL;
    errno = EAGAIN;
    return -1;
}

/* Is a whole record waiting in s->in?  Its plaintext length, 0 if not yet,
 * -1 if its length is impossible (broken). */
static long whole_record(sealed *s) {
    size_t have = s->in_len - s->in_off;
    if (have < LEN) return 0;
    uint32_t n = spmd__get_u32(s->in + s->in_off);
    if (n == 0 || n > SPMD__SEAL_MAX) return -1;
    return have >= n + OVERHEAD ? (long)n : 0;
}

/* Open the record at s->in_off (n plaintext bytes) into dst. */
static int open_record(sealed *s, size_t n, unsigned char *dst) {
    const unsigned char *r = s->in + s->in_off;
    if (spmd__aead_open(s->rx, s->rx_seq, r, LEN, r + LEN, n, r + LEN + n, dst)) return -1;
    s->rx_seq++;
    s->in_off += n + OVERHEAD;
    if (s->in_off == s->in_len) s->in_off = s->in_len = 0;
    return 0;
}

/* Make a whole record available in s->in: its length (> 0), or <= 0 with
 * errno / the socket's verdict (0: the peer closed between records). */
static ssize_t next_record(sealed *s) {
    if (!s->in && !(s->in = malloc(IN_CAP))) return broken(s, ENOMEM, "out of memory");
    for (;;) {
        long n = whole_record(s);
        if (n < 0) return broken(s, EBADMSG, "a record with an impossible length (not an encrypted spmd link?)");
        if (n > 0) return (ssize_t)n;
        if (s->in_off && s->in_len + REC_CAP > IN_CAP) { /* make room for a whole record */
            memmove(s->in, s->in + s->in_off, s->in_len - s->in_off);
            s->in_len -= s->in_off;
            s->in_off = 0;
        }
        ssize_t got = recv(s->base.fd, s->in + s->in_len, IN_CAP - s->in_len, MSG_DONTWAIT);
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) return -1;
        if (got == 0) {
            if (s->in_len == s->in_off) return 0;
            return broken(s, EBADMSG, "the connection ended inside a record (truncated)");
        }
        s->in_len += (size_t)got;
    }
}

/* Open the next record into the plaintext buffer: > 0, or as next_record. */
static ssize_t fill_plain(sealed *s) {
    ssize_t n = next_record(s);
    if (n <= 0) return n;
    if (!s->pt && !(s->pt = malloc(SPMD__SEAL_MAX))) return broken(s, ENOMEM, "out of memory");
    if (open_record(s, (size_t)n, s->pt))
        return broken(s, EBADMSG, "a record failed authentication (tampered with, replayed or reordered)");
    s->pt_off = 0;
    s->pt_len = (size_t)n;
    return n;
}

static ssize_t sealed_read(spmd__path *p, void *buf, size_t len) {
    sealed *s = (sealed *)p;
    if (s->err) return broken(s, s->err, "");
    if (!len) return 0;
    if (s->pt_off == s->pt_len) {
        ssize_t n = next_record(s);
        if (n <= 0) return n;
        if ((size_t)n <= len) { /* the caller takes it whole: open it in place */
            if (open_record(s, (size_t)n, buf))
                return broken(s, EBADMSG, "a record failed authentication (tampered with, replayed or reordered)");
            return n;
        }
        if (!s->pt && !(s->pt = malloc(SPMD__SEAL_MAX))) return broken(s, ENOMEM, "out of memory");
        if (open_record(s, (size_t)n, s->pt))
            return broken(s, EBADMSG, "a record failed authentication (tampered with, replayed or reordered)");
        s->pt_off = 0;
        s->pt_len = (size_t)n;
    }
    size_t take = s->pt_len - s->pt_off < len ? s->pt_len - s->pt_off : len;
    memcpy(buf, s->pt + s->pt_off, take);
    s->pt_off += take;
    return (ssize_t)take;
}

static ssize_t sealed_peek(spmd__path *p, void *buf, size_t len) {
    sealed *s = (sealed *)p;
    if (s->err) return broken(s, s->err, "");
    if (s->pt_off == s->pt_len) {
        ssize_t n = fill_plain(s);
        if (n <= 0) return n;
    }
    size_t take = s->pt_len - s->pt_off < len ? s->pt_len - s->pt_off : len;
    memcpy(buf, s->pt + s->pt_off, take);
    return (ssize_t)take;
}

/* Poll sees the socket; say so when bytes already wait here. */
static int sealed_arm(spmd__path *p, int reading, int writing) {
    sealed *s = (sealed *)p;
    (void)writing;
    return reading && (s->pt_off < s->pt_len || whole_record(s) != 0);
}
static int sealed_disarm(spmd__path *p) { (void)p; return 1; }
static void sealed_lower(spmd__path *p) { (void)p; }
static int sealed_idle(spmd__path *p) { (void)p; return 0; }
static int sealed_pending(spmd__path *p) { (void)p; return 1; } /* as TCP: cannot tell without a system call */
static void sealed_kick(spmd__path *p) { (void)p; }

static void sealed_free(spmd__path *p) {
    sealed *s = (sealed *)p;
    spmd__aead_free(s->tx);
    spmd__aead_free(s->rx);
    if (s->plain) OPENSSL_cleanse(s->plain, SPMD__SEAL_MAX);
    if (s->pt) OPENSSL_cleanse(s->pt, SPMD__SEAL_MAX);
    free(s->out);
    free(s->plain);
    free(s->in);
    free(s->pt);
    free(s);
}

const spmd__path_ops spmd__path_sealed_ops = {"tcp+aes-gcm", sealed_writev, sealed_read,    sealed_arm,
                                              sealed_disarm, sealed_lower,  sealed_idle,    sealed_pending,
                                              sealed_kick,   sealed_free,   sealed_peek};

spmd__path *spmd__path_sealed(int fd, int peer, const unsigned char tx_key[32], const unsigned char rx_key[32]) {
    sealed *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->base.ops = &spmd__path_sealed_ops;
    s->base.fd = fd;
    s->base.peer = peer;
    s->tx = spmd__aead_new(tx_key, 1);
    s->rx = spmd__aead_new(rx_key, 0);
    if (!s->tx || !s->rx) {
        sealed_free(&s->base);
        return NULL;
    }
    return &s->base;
}
