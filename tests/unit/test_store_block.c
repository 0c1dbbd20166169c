/* Blocking operations: get/wait parked on the server until another client
 * sets the keys, timeouts (server-side answer, the connection stays in step),
 * the client's own safety-net deadline and skipping a late reply, and a server
 * stopped while a client waits (SPMD_ERR_REMOTE, never a hang). */
#include <poll.h>
#include <pthread.h>
#include <sys/socket.h>
#include <unistd.h>
#include "test_store_util.h"

typedef struct {
    int port;
    const char *key;
    int timeout_ms;
    spmd_status st;
    char val[64];
    double ms;
    char msg[512];
} getter;

static void *get_thread(void *arg) {
    getter *g = arg;
    spmd_store *c = tsu_connect(g->port, g->timeout_ms);
    if (!c) {
        g->st = SPMD_ERR_SYSTEM;
        return NULL;
    }
    uint64_t t0 = spmd__now_ns();
    void *v = NULL;
    size_t n = 0;
    g->st = spmd_store_get(c, g->key, &v, &n);
    g->ms = tsu_ms_since(t0);
    if (g->st == SPMD_OK) {
        snprintf(g->val, sizeof g->val, "%.*s", (int)n, (char *)v);
        free(v);
    }
    snprintf(g->msg, sizeof g->msg, "%s", spmd_store_errmsg(c));
    spmd_store_close(c);
    return NULL;
}

static void test_get_blocks_until_set(spmd_store_server *s, spmd_store *c, int port) {
    enum { N = 8 };
    getter g[N];
    pthread_t th[N];
    for (int i = 0; i < N; i++) {
        memset(&g[i], 0, sizeof g[i]);
        g[i].port = port;
        g[i].key = "go";
        g[i].timeout_ms = 20000;
        pthread_create(&th[i], NULL, get_thread, &g[i]);
    }
    /* All N are parked on the server: none can have returned (no "go" yet). */
    CHECK(tsu_wait_parked(s, N, 10000));
    CHECK_OK(spmd_store_set(c, "go", "now", 3));
    for (int i = 0; i < N; i++) {
        pthread_join(th[i], NULL);
        CHECK_MSG(g[i].st == SPMD_OK && !strcmp(g[i].val, "now"), "getter %d: %d %s", i, g[i].st,
                  g[i].msg);
    }
    int parked = -1;
    spmd__store_server_stats(s, NULL, &parked);
    CHECK(parked == 0);
    /* add (not only set) wakes a getter too */
    getter a = {.port = port, .key = "counter-wake", .timeout_ms = 20000};
    pthread_t ta;
    pthread_create(&ta, NULL, get_thread, &a);
    CHECK(tsu_wait_parked(s, 1, 10000));
    CHECK_OK(spmd_store_add(c, "counter-wake", 7, NULL));
    pthread_join(ta, NULL);
    CHECK(a.st == SPMD_OK && !strcmp(a.val, "7"));
}

typedef struct {
    int port;
    const char *const *keys;
    size_t nkeys;
    int timeout_ms;
    spmd_status st;
    double ms;
} waiter;

static void *wait_thread(void *arg) {
    waiter *w = arg;
    spmd_store *c = tsu_connect(w->port, 20000);
    if (!c) {
        w->st = SPMD_ERR_SYSTEM;
        return NULL;
    }
    uint64_t t0 = spmd__now_ns();
    w->st = spmd_store_wait(c, w->keys, w->nkeys, w->timeout_ms);
    w->ms = tsu_ms_since(t0);
    spmd_store_close(c);
    return NULL;
}

static void test_wait_all_keys(spmd_store_server *s, spmd_store *c, int port) {
    const char *keys[] = {"wa", "wb", "wc"};
    waiter w = {port, keys, 3, 20000, SPMD_ERR_AGAIN, 0};
    pthread_t th;
    CHECK_OK(spmd_store_set(c, "wb", "present before", 14));
    pthread_create(&th, NULL, wait_thread, &w);
    CHECK(tsu_wait_parked(s, 1, 10000));
    CHECK_OK(spmd_store_set(c, "wa", "1", 1));
    /* "wa" existed for a moment, then goes away again before the last key
     * arrives: wait must still want it (all keys present at once). */
    CHECK_OK(spmd_store_delete(c, "wa", NULL));
    CHECK_OK(spmd_store_set(c, "wc", "1", 1));
    int64_t n;
    CHECK_OK(spmd_store_num_keys(c, &n)); /* one more round trip: the server re-checked */
    int parked = 0;
    spmd__store_server_stats(s, NULL, &parked);
    CHECK_MSG(parked == 1, "waiter no longer parked (%d) though 'wa' is missing", parked);
    CHECK_OK(spmd_store_set(c, "wa", "2", 1));
    pthread_join(th, NULL);
    CHECK(w.st == SPMD_OK);
}

static void test_timeouts(spmd_store_server *s, spmd_store *c, int port) {
    (void)s;
    /* get: 200 ms, answered by the server's own deadline */
    spmd_store_set_timeout(c, 200);
    void *v = NULL;
    size_t n = 0;
    uint64_t t0 = spmd__now_ns();
    spmd_status st = spmd_store_get(c, "never-set", &v, &n);
    double ms = tsu_ms_since(t0);
    CHECK(st == SPMD_ERR_TIMEOUT);
    CHECK_MSG(ms >= 199 && ms < 15000, "get timed out after %.1f ms (timeout 200)", ms);
    CHECK_MSG(strstr(spmd_store_errmsg(c), "never-set") && strstr(spmd_store_errmsg(c), "200 ms"),
              "%s", spmd_store_errmsg(c));
    /* the connection is still in step */
    CHECK_OK(spmd_store_set(c, "after-timeout", "ok", 2));
    CHECK(spmd_store_get(c, "after-timeout", &v, &n) == SPMD_OK && n == 2 && !memcmp(v, "ok", 2));
    free(v);
    spmd_store_set_timeout(c, 20000);

    /* wait: explicit 200 ms, one of two keys present */
    const char *keys[] = {"after-timeout", "missing-key"};
    t0 = spmd__now_ns();
    st = spmd_store_wait(c, keys, 2, 200);
    ms = tsu_ms_since(t0);
    CHECK(st == SPMD_ERR_TIMEOUT);
    CHECK_MSG(ms >= 199 && ms < 15000, "wait timed out after %.1f ms (timeout 200)", ms);
    CHECK_MSG(strstr(spmd_store_errmsg(c), "missing-key") != NULL, "%s", spmd_store_errmsg(c));
    CHECK_OK(spmd_store_num_keys(c, &(int64_t){0}));

    /* several clients timing out at different moments, in the right order */
    getter g[3];
    pthread_t th[3];
    int tmo[3] = {300, 100, 200};
    for (int i = 0; i < 3; i++) {
        memset(&g[i], 0, sizeof g[i]);
        g[i].port = port;
        g[i].key = "nobody-sets-this";
        g[i].timeout_ms = tmo[i];
        pthread_create(&th[i], NULL, get_thread, &g[i]);
    }
    for (int i = 0; i < 3; i++) {
        pthread_join(th[i], NULL);
        CHECK(g[i].st == SPMD_ERR_TIMEOUT);
        CHECK_MSG(g[i].ms >= tmo[i] - 1 && g[i].ms < tmo[i] + 1500, "timeout %d took %.1f ms",
                  tmo[i], g[i].ms);
    }
}

/* A scripted peer: shakes hands, never answers request 1, and once request 2
 * arrives sends the late reply to 1 followed by the reply to 2. */
typedef struct {
    int lfd;
    int ok;
} mute_arg;

static void *mute_server(void *arg) {
    mute_arg *m = arg;
    char err[128];
    int64_t dl = spmd__deadline(20000);
    int fd = -1;
    while (fd < 0 && spmd__remaining_ms(dl) > 0) {
        struct pollfd p = {.fd = m->lfd, .events = POLLIN, .revents = 0};
        if (poll(&p, 1, 1000) > 0) fd = spmd__accept(m->lfd);
    }
    if (fd < 0) return NULL;
    if (!tsu_server_handshake(fd, dl)) goto out;
    unsigned char req[2][256];
    spmd__store_req r[2];
    for (int i = 0; i < 2; i++) {
        size_t have = 0;
        for (;;) {
            spmd__wire_result w = spmd__store_decode_req(req[i], have, &r[i], err, sizeof err);
            if (w == SPMD__WIRE_OK) break;
            if (w == SPMD__WIRE_BAD || have == sizeof req[i]) goto out;
            if (spmd__read_full(fd, req[i] + have, 1, dl, NULL, err, sizeof err)) goto out;
            have++;
        }
    }
    unsigned char rep[2 * (SPMD__STORE_REP_HEAD + 8)];
    size_t n = spmd__store_encode_rep(rep, r[0].seq, SPMD_OK, 0, "stale", 5);
    n += spmd__store_encode_rep(rep + n, r[1].seq, SPMD_OK, 0, "fresh", 5);
    if (spmd__write_full(fd, rep, n, dl, NULL, err, sizeof err)) goto out;
    m->ok = r[0].op == SPMD__STORE_OP_GET && r[1].op == SPMD__STORE_OP_TRY_GET &&
            r[1].seq == r[0].seq + 1;
    char b;
    while (recv(fd, &b, 1, 0) != 0) { /* until the client closes */
        struct pollfd p = {.fd = fd, .events = POLLIN, .revents = 0};
        if (poll(&p, 1, spmd__remaining_ms(dl)) <= 0) break;
    }
out:
    close(fd);
    return NULL;
}

static void test_safety_net_and_late_reply(void) {
    char err[128];
    mute_arg m = {-1, 0};
    int port = 0;
    m.lfd = spmd__listen("127.0.0.1", 0, 4, &port, err, sizeof err);
    REQUIRE_VOID(m.lfd >= 0);
    pthread_t th;
    pthread_create(&th, NULL, mute_server, &m);
    spmd_store *c = tsu_connect(port, 100);
    REQUIRE_VOID(c);
    void *v = NULL;
    size_t n = 0;
    uint64_t t0 = spmd__now_ns();
    CHECK(spmd_store_get(c, "k", &v, &n) == SPMD_ERR_TIMEOUT);
    double ms = tsu_ms_since(t0);
    CHECK_MSG(ms >= 100 && ms < 10000, "safety net fired after %.1f ms", ms);
    CHECK_MSG(strstr(spmd_store_errmsg(c), "no reply") != NULL, "%s", spmd_store_errmsg(c));
    spmd_store_set_timeout(c, 10000);
    CHECK(spmd_store_try_get(c, "k", &v, &n) == SPMD_OK && n == 5 && !memcmp(v, "fresh", 5));
    free(v);
    spmd_store_close(c);
    pthread_join(th, NULL);
    CHECK(m.ok);
    close(m.lfd);
}

static void test_server_stops_while_waiting(void) {
    spmd_store_server *s = tsu_server();
    REQUIRE_VOID(s);
    int port = spmd_store_server_port(s);
    getter g = {.port = port, .key = "forever", .timeout_ms = 60000};
    pthread_t th;
    spmd_store *c = tsu_connect(port, 60000);
    REQUIRE_VOID(c);
    pthread_create(&th, NULL, get_thread, &g);
    CHECK(tsu_wait_parked(s, 1, 10000));
    uint64_t t0 = spmd__now_ns();
    spmd_store_server_stop(s);
    pthread_join(th, NULL);
    double ms = tsu_ms_since(t0);
    CHECK_MSG(g.st == SPMD_ERR_REMOTE, "waiting get returned %d: %s", g.st, g.msg);
    CHECK_MSG(ms < 30000, "waiting client noticed after %.1f ms", ms);
    CHECK_MSG(strstr(g.msg, "closed the connection") != NULL, "%s", g.msg);
    /* an idle client finds out at its next call, and every later call fails at once */
    CHECK(spmd_store_set(c, "x", "1", 1) == SPMD_ERR_REMOTE);
    CHECK_MSG(strstr(spmd_store_errmsg(c), "server") != NULL, "%s", spmd_store_errmsg(c));
    t0 = spmd__now_ns();
    void *v;
    size_t n;
    CHECK(spmd_store_get(c, "x", &v, &n) == SPMD_ERR_REMOTE);
    CHECK(tsu_ms_since(t0) < 10000); /* at once: no wait for the 60 s timeout */
    spmd_store_close(c);
}

int main(void) {
    spmd_store_server *s = tsu_server();
    REQUIRE(s);
    int port = spmd_store_server_port(s);
    spmd_store *c = tsu_connect(port, 20000);
    REQUIRE(c);
    test_get_blocks_until_set(s, c, port);
    test_wait_all_keys(s, c, port);
    test_timeouts(s, c, port);
    spmd_store_close(c);
    spmd_store_server_stop(s);
    test_safety_net_and_late_reply();
    test_server_stops_while_waiting();
    TEST_MAIN_END();
}
