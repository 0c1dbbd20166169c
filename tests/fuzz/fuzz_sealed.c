/* fuzz_sealed.c — libFuzzer harness for the record layer of encrypted links
 * (src/transport/path_sealed.c), the code that parses bytes arriving from
 * the network once SPMD_ENCRYPT=1: record lengths, tags, the end of the
 * stream.  The bytes go through a real socket pair into a sealed path.
 *
 * Input byte 0 picks the target:
 *   even  the rest arrives as is: no key is known to the input, so not one
 *         byte may come out as plaintext (a forgery), and the reader ends in
 *         an error or the end of the stream — never a crash or a hang;
 *   odd   the rest is plaintext, sealed into records with the right key
 *         (written in pieces whose sizes come from byte 1), then byte 2..3
 *         pick one bit to flip (0: none): the reader delivers a prefix of
 *         the plaintext and nothing else — all of it when nothing was flipped,
 *         and then the stream ends cleanly. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include "fuzz/fuzz_prop.h"
#include "transport/path.h"

static const unsigned char KEY_A[32] = "fuzz-key-a-fuzz-key-a-fuzz-key-a";
static const unsigned char KEY_B[32] = "fuzz-key-b-fuzz-key-b-fuzz-key-b";

/* Read everything raw[0..n) turns into; compare with want (NULL: nothing
 * may come out).  Returns the plaintext bytes delivered; *clean: the stream
 * ended without an error. */
static size_t drain(const unsigned char *raw, size_t n, const unsigned char *want, size_t wantlen, int *clean) {
    int sv[2];
    REQUIRE_PROP(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
    int big = 1 << 20;
    setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &big, sizeof big);
    spmd__path *r = spmd__path_sealed(sv[1], 1, KEY_B, KEY_A);
    REQUIRE_PROP(r != NULL);
    size_t sent = 0, got = 0;
    unsigned char buf[1000];
    *clean = 0;
    for (;;) {
        if (sent < n) {
            ssize_t w = send(sv[0], raw + sent, n - sent, MSG_DONTWAIT);
            if (w > 0) sent += (size_t)w;
        }
        if (sent == n && sv[0] >= 0) {
            close(sv[0]);
            sv[0] = -1;
        }
        ssize_t k = spmd__path_read(r, buf, 1 + (got * 7 + n) % sizeof buf);
        if (k > 0) {
            REQUIRE_PROP(want && got + (size_t)k <= wantlen && !memcmp(buf, want + got, (size_t)k));
            got += (size_t)k;
            continue;
        }
        if (k == 0) {
            *clean = 1;
            break;
        }
        if (errno == EAGAIN) continue;
        REQUIRE_PROP(errno == EBADMSG);
        break;
    }
    spmd__path_free(r);
    if (sv[0] >= 0) close(sv[0]);
    close(sv[1]);
    return got;
}

/* Seal msg as a writer would (pieces of up to `piece` bytes). */
static size_t seal(const unsigned char *msg, size_t len, size_t piece, unsigned char *raw, size_t cap) {
    int sv[2];
    REQUIRE_PROP(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
    spmd__path *w = spmd__path_sealed(sv[0], 0, KEY_A, KEY_B);
    REQUIRE_PROP(w != NULL);
    size_t off = 0, got = 0;
    while (off < len) {
        struct iovec iov = {(void *)(msg + off), len - off < piece ? len - off : piece};
        ssize_t k = spmd__path_writev(w, &iov, 1);
        if (k > 0) off += (size_t)k;
        else REQUIRE_PROP(errno == EAGAIN);
        ssize_t r = recv(sv[1], raw + got, cap - got, MSG_DONTWAIT);
        if (r > 0) got += (size_t)r;
    }
    for (ssize_t r; (r = recv(sv[1], raw + got, cap - got, MSG_DONTWAIT)) > 0;) got += (size_t)r;
    spmd__path_free(w);
    close(sv[0]);
    close(sv[1]);
    return got;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    int clean;
    if (data[0] % 2 == 0) {
        REQUIRE_PROP(drain(data + 1, size - 1, NULL, 0, &clean) == 0);
        return 0;
    }
    if (size < 4) return 0;
    const unsigned char *msg = data + 4;
    size_t len = size - 4, piece = 1 + data[1] * 37u, cap = len + 20 * (len / piece + 2);
    unsigned char *raw = malloc(cap);
    REQUIRE_PROP(raw != NULL);
    size_t n = seal(msg, len, piece, raw, cap);
    unsigned flip = (unsigned)data[2] << 8 | data[3];
    if (flip && n) raw[(flip >> 3) % n] ^= (unsigned char)(1u << (flip & 7));
    size_t got = drain(raw, n, msg, len, &clean);
    if (!flip || !n) REQUIRE_PROP(got == len && clean);
    else REQUIRE_PROP(!clean && got < len); /* a flip ends the stream in an error */
    free(raw);
    return 0;
}

/* Seeds for the replay main: plaintext to seal, with and without a flip. */
size_t fuzz_seed_input(unsigned i, uint8_t *buf, size_t cap);
size_t fuzz_seed_input(unsigned i, uint8_t *buf, size_t cap) {
    size_t len = 4 + (i * 97u) % (cap - 4 < 3000 ? cap - 4 : 3000);
    buf[0] = 1;
    buf[1] = (uint8_t)(i * 11);
    buf[2] = (uint8_t)(i % 4 ? i * 5 : 0);
    buf[3] = (uint8_t)(i * 3);
    for (size_t k = 4; k < len; k++) buf[k] = (uint8_t)(k * 31 + i);
    return len;
}
