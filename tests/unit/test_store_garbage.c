/* Hostile and broken clients: random bytes, a bad magic, a wrong protocol
 * version, oversized lengths, unknown ops, a truncated frame, a connection
 * closed mid-frame, a client flooding requests without reading replies.  Each
 * is dropped (or answered and closed) while good clients — including one
 * parked in a blocking get the whole time — keep being served. */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <sys/socket.h>
#include <unistd.h>
#include "test_store_util.h"

static int port;
static spmd_store_server *srv;

static int raw_connect(void) {
    char err[128];
    return spmd__connect("127.0.0.1", port, spmd__deadline(5000), err, sizeof err);
}

static int raw_send(int fd, const void *p, size_t n) {
    char err[128];
    return spmd__write_full(fd, p, n, spmd__deadline(5000), NULL, err, sizeof err) == SPMD_OK;
}

/* Did the server close this socket (EOF or reset) within 5 s?  Any bytes it
 * sent first are skipped. */
static int closed_by_server(int fd) {
    int64_t dl = spmd__deadline(5000);
    char b[4096];
    for (;;) {
        ssize_t n = recv(fd, b, sizeof b, 0);
        if (n == 0) return 1;
        if (n < 0 && errno == ECONNRESET) return 1;
        if (n < 0 && errno != EAGAIN && errno != EINTR) return 0;
        if (n > 0) continue;
        struct pollfd p = {.fd = fd, .events = POLLIN, .revents = 0};
        if (poll(&p, 1, spmd__remaining_ms(dl)) <= 0) return 0;
    }
}

static int handshake(int fd) { return tsu_client_handshake(fd); }

/* A good client does a full set/get/add cycle. */
static int good_client_works(spmd_store *c, int round) {
    char key[32], val[32];
    snprintf(key, sizeof key, "good%d", round);
    int vl = snprintf(val, sizeof val, "value%d", round);
    void *v = NULL;
    size_t n = 0;
    int64_t r = 0;
    int ok = spmd_store_set(c, key, val, (size_t)vl) == SPMD_OK &&
             spmd_store_get(c, key, &v, &n) == SPMD_OK && n == (size_t)vl && !memcmp(v, val, n) &&
             spmd_store_add(c, "good-counter", 1, &r) == SPMD_OK && r == round + 1;
    if (!ok) fprintf(stderr, "good client round %d: %s\n", round, spmd_store_errmsg(c));
    free(v);
    return ok;
}

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static uint32_t next_rand(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 16);
}

typedef struct {
    spmd_status st;
    char val[32];
} parked_get;

static void *parked_thread(void *arg) {
    parked_get *g = arg;
    spmd_store *c = tsu_connect(port, 30000);
    if (!c) {
        g->st = SPMD_ERR_SYSTEM;
        return NULL;
    }
    void *v = NULL;
    size_t n = 0;
    g->st = spmd_store_get(c, "released-at-the-end", &v, &n);
    if (!g->st) snprintf(g->val, sizeof g->val, "%.*s", (int)n, (char *)v);
    free(v);
    spmd_store_close(c);
    return NULL;
}

static size_t get_frame(unsigned char *buf, const char *key) {
    size_t kl = strlen(key);
    const char *keys[] = {key};
    spmd__store_req_spec s = {SPMD__STORE_OP_GET, 1, 1000, 0, NULL, 0, keys, &kl, 1, NULL, NULL, 0};
    return spmd__store_encode_req(buf, &s);
}

int main(void) {
    srv = tsu_server();
    REQUIRE(srv);
    port = spmd_store_server_port(srv);
    spmd_store *good = tsu_connect(port, 20000);
    REQUIRE(good);
    parked_get pg = {SPMD_ERR_AGAIN, ""};
    pthread_t pth;
    pthread_create(&pth, NULL, parked_thread, &pg);
    CHECK(tsu_wait_parked(srv, 1, 10000));
    int round = 0;
    unsigned char buf[4096];

    /* 1. random bytes instead of a handshake (first byte never 'S'). */
    for (int i = 0; i < 20; i++) {
        int fd = raw_connect();
        REQUIRE(fd >= 0);
        size_t n = 1 + next_rand() % sizeof buf;
        for (size_t j = 0; j < n; j++) buf[j] = (unsigned char)next_rand();
        if (buf[0] == 'S') buf[0] = 'X';
        raw_send(fd, buf, n);
        CHECK_MSG(closed_by_server(fd), "random client %d not dropped", i);
        close(fd);
        CHECK(good_client_works(good, round++));
    }

    /* 1b. a correct handshake, then random bytes (reserved byte forced non-zero) */
    for (int i = 0; i < 20; i++) {
        int fd = raw_connect();
        REQUIRE(fd >= 0);
        REQUIRE(handshake(fd));
        size_t n = 8 + next_rand() % (sizeof buf - 8);
        for (size_t j = 0; j < n; j++) buf[j] = (unsigned char)next_rand();
        buf[5] = 0xFF;
        raw_send(fd, buf, n);
        CHECK_MSG(closed_by_server(fd), "random framed client %d not dropped", i);
        close(fd);
        CHECK(good_client_works(good, round++));
    }

    /* 2. bad magic, HTTP-like */
    int fd = raw_connect();
    raw_send(fd, "GET / HTTP/1.1\r\n\r\n", 18);
    CHECK(closed_by_server(fd));
    close(fd);
    CHECK(good_client_works(good, round++));

    /* 3. another protocol version: answered with MISMATCH, then closed */
    fd = raw_connect();
    spmd__store_encode_hello(buf, 99, 0);
    raw_send(fd, buf, SPMD__STORE_HELLO_LEN);
    char err[128];
    unsigned char h[SPMD__STORE_HELLO_LEN];
    CHECK(spmd__read_full(fd, h, sizeof h, spmd__deadline(5000), NULL, err, sizeof err) == SPMD_OK);
    CHECK((int32_t)spmd__get_u32(h + 8) == SPMD_ERR_MISMATCH);
    CHECK(spmd__get_u32(h + 4) == SPMD__STORE_VERSION);
    CHECK(closed_by_server(fd));
    close(fd);
    CHECK(good_client_works(good, round++));

    /* 4. oversized length: 4 GiB claimed, dropped on the 4 bytes alone */
    fd = raw_connect();
    REQUIRE(handshake(fd));
    spmd__put_u32(buf, 0xFFFFFFF0u);
    raw_send(fd, buf, 4);
    CHECK(closed_by_server(fd));
    close(fd);
    CHECK(good_client_works(good, round++));

    /* 5. a legal frame length with a key length over the limit: dropped before
     * the megabytes the frame claims are sent or allocated */
    fd = raw_connect();
    REQUIRE(handshake(fd));
    size_t n = get_frame(buf, "k");
    spmd__put_u32(buf, 100u << 20);
    spmd__put_u32(buf + SPMD__STORE_REQ_HEAD, SPMD_STORE_MAX_KEY + 1);
    raw_send(fd, buf, SPMD__STORE_REQ_HEAD + 4);
    CHECK(closed_by_server(fd));
    close(fd);
    CHECK(good_client_works(good, round++));

    /* 6. unknown op */
    fd = raw_connect();
    REQUIRE(handshake(fd));
    n = get_frame(buf, "k");
    buf[4] = 0x7f;
    raw_send(fd, buf, n);
    CHECK(closed_by_server(fd));
    close(fd);
    CHECK(good_client_works(good, round++));

    /* 7. truncated frame, then closed mid-frame; and closed mid-handshake */
    fd = raw_connect();
    REQUIRE(handshake(fd));
    n = get_frame(buf, "some-key");
    raw_send(fd, buf, n - 3);
    close(fd);
    fd = raw_connect();
    raw_send(fd, "SPK", 3);
    close(fd);
    CHECK(good_client_works(good, round++));

    /* 8. a valid request, then garbage: the first is answered, then dropped */
    fd = raw_connect();
    REQUIRE(handshake(fd));
    {
        size_t kl = 10;
        const char *keys[] = {"good-count"};
        spmd__store_req_spec s = {SPMD__STORE_OP_NUM_KEYS, 5, 0, 0, NULL, 0, keys, &kl, 0,
                                  NULL, NULL, 0};
        n = spmd__store_encode_req(buf, &s);
    }
    memset(buf + n, 0xEE, 64);
    raw_send(fd, buf, n + 64);
    unsigned char rep[SPMD__STORE_REP_HEAD];
    CHECK(spmd__read_full(fd, rep, sizeof rep, spmd__deadline(5000), NULL, err, sizeof err) == SPMD_OK);
    spmd__store_rep r;
    CHECK(spmd__store_decode_rep(rep, sizeof rep, &r, err, sizeof err) == SPMD__WIRE_OK &&
          r.seq == 5 && r.status == 0 && r.num >= 1);
    CHECK(closed_by_server(fd));
    close(fd);
    CHECK(good_client_works(good, round++));

    /* 9. a flood of pipelined gets that never reads the replies: the server
     * stops decoding while replies are unsent, so its buffers stay bounded,
     * and it keeps serving others; the flooder is cut off when it closes. */
    fd = raw_connect();
    REQUIRE(handshake(fd));
    CHECK_OK(spmd_store_set(good, "fat", NULL, 0));
    {
        size_t fat = 1u << 20;
        unsigned char *big = calloc(1, fat);
        CHECK_OK(spmd_store_set(good, "fat", big, fat));
        free(big);
    }
    n = get_frame(buf, "fat");
    size_t sent = 0;
    for (int i = 0; i < 64; i++) {
        ssize_t w = send(fd, buf, n, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w > 0) sent += (size_t)w;
        if (w != (ssize_t)n) break;
    }
    CHECK(sent > 0);
    CHECK(good_client_works(good, round++));
    close(fd);
    CHECK(good_client_works(good, round++));

    /* All garbage connections are gone: the good one and the parked one remain. */
    CHECK(tsu_wait_conns(srv, 2, 5000));
    CHECK_OK(spmd_store_set(good, "released-at-the-end", "yes", 3));
    pthread_join(pth, NULL);
    CHECK(pg.st == SPMD_OK && !strcmp(pg.val, "yes"));
    spmd_store_close(good);
    spmd_store_server_stop(srv);
    TEST_MAIN_END();
}
