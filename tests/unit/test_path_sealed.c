/* Encrypted paths (transport/path_sealed.c) over real sockets:
 *   - messages of every size from 1 byte to 200 KB cross a socket pair with
 *     tiny buffers (so writes are partial and the writer offers the same
 *     bytes again, as path.h asks), in order, peeks included;
 *   - the raw bytes on the socket hold no trace of the plaintext;
 *   - a flipped bit anywhere, a truncated stream, a record replayed, dropped
 *     or reordered, an impossible length: the reader fails with EBADMSG and
 *     never hands out a byte that differs from what was sent;
 *   - other bytes offered after a partial write fail with EPROTO;
 *   - the handshake: both ends of a mesh connection built with
 *     SPMD_ENCRYPT=1 hold matching keys (one's sending key is the other's
 *     receiving key, the two directions differ), fresh per connection. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include "auth/seal.h"
#include "common/common.h"
#include "harness.h"
#include "spmd/store.h"
#include "transport/path.h"
#include "transport/transport.h"

static const unsigned char K1[32] = "0123456789abcdef0123456789abcdef";
static const unsigned char K2[32] = "fedcba9876543210fedcba9876543210";

static void pair(int sv[2], int small) {
    CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
    for (int i = 0; i < 2; i++) {
        fcntl(sv[i], F_SETFL, fcntl(sv[i], F_GETFL) | O_NONBLOCK);
        if (small) {
            int v = 4096;
            setsockopt(sv[i], SOL_SOCKET, SO_SNDBUF, &v, sizeof v);
            setsockopt(sv[i], SOL_SOCKET, SO_RCVBUF, &v, sizeof v);
        }
    }
}

static void fill(unsigned char *b, size_t n, unsigned seed) {
    for (size_t i = 0; i < n; i++) b[i] = (unsigned char)((i * 131u + seed * 7u) ^ (i >> 8));
}

/* Write len bytes of msg through w (two iov pieces) while draining r into
 * got; follows the contract: after EAGAIN, offer the unwritten bytes again. */
static int pump(spmd__path *w, spmd__path *r, const unsigned char *msg, size_t len, unsigned char *got,
                size_t *gotn, size_t want_total) {
    size_t off = 0;
    int spins = 0;
    while (off < len || *gotn < want_total) {
        int moved = 0;
        if (off < len) {
            size_t left = len - off, half = left / 2;
            struct iovec iov[2] = {{(void *)(msg + off), half}, {(void *)(msg + off + half), left - half}};
            ssize_t n = spmd__path_writev(w, iov, 2);
            if (n > 0) off += (size_t)n, moved = 1;
            else if (n < 0 && errno != EAGAIN) return -1;
        }
        unsigned char peek[8];
        ssize_t pk = spmd__path_peek(r, peek, sizeof peek);
        ssize_t n = spmd__path_read(r, got + *gotn, want_total - *gotn < 7777 ? want_total - *gotn : 7777);
        if (n > 0) {
            if (pk > 0 && memcmp(peek, got + *gotn, (size_t)(pk < n ? pk : n))) return -2; /* peek lied */
            *gotn += (size_t)n, moved = 1;
        } else if (n < 0 && errno != EAGAIN) {
            return -1;
        }
        if (!moved && ++spins > 1000000) return -3;
    }
    return 0;
}

static void round_trip(void) {
    int sv[2];
    pair(sv, 1);
    spmd__path *a = spmd__path_sealed(sv[0], 1, K1, K2), *b = spmd__path_sealed(sv[1], 0, K2, K1);
    CHECK(a && b);
    static const size_t sizes[] = {1, 2, 23, 24, 100, 4095, 32767, 32768, 32769, 65536, 200000};
    enum { N = sizeof sizes / sizeof sizes[0] };
    size_t total = 0;
    for (int i = 0; i < N; i++) total += sizes[i];
    unsigned char *msg = malloc(total), *got = malloc(total);
    CHECK(msg && got);
    fill(msg, total, 3);
    size_t off = 0, gotn = 0;
    for (int i = 0; i < N; i++) {
        CHECK_MSG(pump(a, b, msg + off, sizes[i], got, &gotn, off + sizes[i]) == 0, "message of %zu bytes", sizes[i]);
        off += sizes[i];
    }
    CHECK(gotn == total && memcmp(msg, got, total) == 0);
    /* and back the other way */
    gotn = 0;
    CHECK(pump(b, a, msg, total, got, &gotn, total) == 0);
    CHECK(memcmp(msg, got, total) == 0);
    /* closed between records: end of stream, not an error */
    close(sv[0]);
    CHECK(spmd__path_read(b, got, 10) == 0);
    spmd__path_free(a);
    spmd__path_free(b);
    close(sv[1]);
    free(msg);
    free(got);
}

/* Seal msg into raw ciphertext: what crosses the socket. */
static size_t capture(const unsigned char *msg, size_t len, size_t piece, unsigned char *raw, size_t cap) {
    int sv[2];
    pair(sv, 0);
    spmd__path *a = spmd__path_sealed(sv[0], 1, K1, K2);
    size_t off = 0, got = 0;
    while (off < len) {
        struct iovec iov = {(void *)(msg + off), len - off < piece ? len - off : piece};
        ssize_t n = spmd__path_writev(a, &iov, 1);
        if (n > 0) off += (size_t)n;
        ssize_t r = recv(sv[1], raw + got, cap - got, MSG_DONTWAIT);
        if (r > 0) got += (size_t)r;
    }
    for (ssize_t r; (r = recv(sv[1], raw + got, cap - got, MSG_DONTWAIT)) > 0;) got += (size_t)r;
    spmd__path_free(a);
    close(sv[0]);
    close(sv[1]);
    return got;
}

/* Feed raw bytes to a fresh reader; return bytes delivered that match msg
 * as a prefix, -1 if any byte differs; *err gets the final errno (0: clean end). */
static long replay(const unsigned char *raw, size_t n, const unsigned char *msg, size_t msglen, int *err) {
    int sv[2];
    pair(sv, 0);
    int v = 1 << 20;
    setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &v, sizeof v);
    spmd__path *b = spmd__path_sealed(sv[1], 0, K2, K1);
    size_t sent = 0, got = 0;
    long verdict = 0;
    unsigned char buf[4096];
    *err = 0;
    for (;;) {
        if (sent < n) {
            ssize_t w = send(sv[0], raw + sent, n - sent, MSG_DONTWAIT);
            if (w > 0) sent += (size_t)w;
            if (sent == n) shutdown(sv[0], SHUT_WR);
        }
        ssize_t r = spmd__path_read(b, buf, sizeof buf);
        if (r > 0) {
            if (got + (size_t)r > msglen || memcmp(buf, msg + got, (size_t)r)) verdict = -1;
            got += (size_t)r;
            continue;
        }
        if (r == 0) break;
        if (errno == EAGAIN) continue;
        *err = errno;
        break;
    }
    spmd__path_free(b);
    close(sv[0]);
    close(sv[1]);
    return verdict < 0 ? -1 : (long)got;
}

static void tampering(void) {
    enum { LEN = 3 * 32768 + 1000, CAP = LEN + 4096 };
    unsigned char *msg = malloc(LEN), *raw = malloc(CAP), *bad = malloc(2 * CAP);
    CHECK(msg && raw && bad);
    /* a canary the plaintext repeats: none of it may show on the socket */
    for (size_t i = 0; i < LEN; i++) msg[i] = (unsigned char)"SPMD-PLAINTEXT!"[i % 15];
    size_t n = capture(msg, LEN, LEN, raw, CAP);
    CHECK(n == LEN + 4 * 20); /* four records: 32 KiB, 32 KiB, 32 KiB, 1000 bytes */
    CHECK(memmem(raw, n, "SPMD-PLAINTEXT", 14) == NULL);
    CHECK(memmem(raw, n, "PLAIN", 5) == NULL);
    int err;
    CHECK(replay(raw, n, msg, LEN, &err) == LEN && err == 0);
    /* every bit of the first record's header, and bytes across the stream */
    for (size_t pos = 0; pos < n; pos += pos < 40 ? 1 : 997) {
        memcpy(bad, raw, n);
        bad[pos] ^= (unsigned char)(1u << (pos % 8));
        long got = replay(bad, n, msg, LEN, &err);
        CHECK_MSG(got >= 0 && got < LEN && err == EBADMSG, "bit flipped at %zu: %ld bytes, errno %d", pos, got, err);
    }
    const size_t rec = 32768 + 20;
    /* truncated inside a record */
    CHECK(replay(raw, rec + 100, msg, LEN, &err) == 32768 && err == EBADMSG);
    /* records 2 and 1 swapped; record 1 replayed; record 1 dropped */
    memcpy(bad, raw + rec, rec);
    memcpy(bad + rec, raw, rec);
    memcpy(bad + 2 * rec, raw + 2 * rec, n - 2 * rec);
    CHECK(replay(bad, n, msg, LEN, &err) == 0 && err == EBADMSG);
    memcpy(bad, raw, rec);
    memcpy(bad + rec, raw, n);
    CHECK(replay(bad, n + rec, msg, LEN, &err) == 32768 && err == EBADMSG);
    CHECK(replay(raw + rec, n - rec, msg + 32768, LEN - 32768, &err) == 0 && err == EBADMSG);
    /* an impossible length */
    memcpy(bad, raw, n);
    spmd__put_u32(bad, 1u << 30);
    CHECK(replay(bad, n, msg, LEN, &err) == 0 && err == EBADMSG);
    /* garbage */
    for (size_t i = 0; i < 5000; i++) bad[i] = (unsigned char)(i * 7919u >> 3);
    CHECK(replay(bad, 5000, msg, LEN, &err) == 0 && err == EBADMSG);
    free(msg);
    free(raw);
    free(bad);
}

/* After EAGAIN the same bytes must come first: anything else is refused. */
static void changed_bytes(void) {
    int sv[2];
    pair(sv, 1);
    spmd__path *a = spmd__path_sealed(sv[0], 1, K1, K2);
    unsigned char buf[32768];
    fill(buf, sizeof buf, 9);
    struct iovec iov = {buf, sizeof buf};
    ssize_t n;
    while ((n = spmd__path_writev(a, &iov, 1)) > 0) {
    }
    CHECK(n < 0 && errno == EAGAIN);
    buf[10] ^= 1;
    CHECK(spmd__path_writev(a, &iov, 1) < 0 && errno == EPROTO);
    CHECK(spmd__path_writev(a, &iov, 1) < 0 && errno == EPROTO); /* broken for good */
    spmd__path_free(a);
    close(sv[0]);
    close(sv[1]);
}

/* ---- the keys, from a real handshake ----------------------------------------- */
typedef struct {
    int port, rank;
    spmd_status st;
    int fds0[2], fds1[2];
    spmd__link_keys keys[4];
    char err[512];
} side;

static void *build(void *arg) {
    side *s = arg;
    spmd_store *st = NULL;
    char err[256];
    if (spmd_store_connect("127.0.0.1", s->port, 10000, &st, err, sizeof err)) {
        s->st = SPMD_ERR_REMOTE;
        return NULL;
    }
    int *fds[2] = {s->fds0, s->fds1};
    s->st = spmd__mesh_build(st, s->rank, 2, 77, 2, "127.0.0.1", fds, s->keys, NULL, spmd__deadline(20000), s->err,
                             sizeof s->err);
    spmd_store_close(st);
    return NULL;
}

static void handshake_keys(void) {
    spmd_store_server *srv = NULL;
    char err[256];
    CHECK(spmd_store_server_start("127.0.0.1", 0, &srv, err, sizeof err) == SPMD_OK);
    setenv("SPMD_ENCRYPT", "1", 1);
    side s[2];
    memset(s, 0, sizeof s);
    pthread_t t[2];
    for (int i = 0; i < 2; i++) {
        s[i].port = spmd_store_server_port(srv);
        s[i].rank = i;
        pthread_create(&t[i], NULL, build, &s[i]);
    }
    for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
    unsetenv("SPMD_ENCRYPT");
    CHECK_MSG(s[0].st == SPMD_OK && s[1].st == SPMD_OK, "%s / %s", s[0].err, s[1].err);
    for (int c = 0; c < 2; c++) {
        const spmd__link_keys *k0 = &s[0].keys[c * 2 + 1], *k1 = &s[1].keys[c * 2 + 0];
        CHECK(k0->on && k1->on);
        CHECK(memcmp(k0->tx, k1->rx, 32) == 0 && memcmp(k0->rx, k1->tx, 32) == 0);
        CHECK(memcmp(k0->tx, k0->rx, 32) != 0);
    }
    CHECK(memcmp(s[0].keys[1].tx, s[0].keys[3].tx, 32) != 0); /* each connection its own */
    for (int i = 0; i < 2; i++) {
        close(i ? s[i].fds0[0] : s[i].fds0[1]);
        close(i ? s[i].fds1[0] : s[i].fds1[1]);
    }
    spmd_store_server_stop(srv);
}

int main(void) {
    setenv("SPMD_LOG_LEVEL", "error", 0); /* the tampering below is logged, as it should be */
    round_trip();
    tampering();
    changed_bytes();
    handshake_keys();
    TEST_MAIN_END();
}
