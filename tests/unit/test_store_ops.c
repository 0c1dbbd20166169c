/* Every store operation against a live server on loopback: set/get/try_get,
 * add, compare_set (torch semantics), delete, num_keys, wait, prefixes,
 * limits, error messages, connection errors, the standalone server mode. */
#include <poll.h>
#include <pthread.h>
#include <sys/socket.h>
#include <unistd.h>
#include "test_store_util.h"

static int get_str(spmd_store *c, const char *key, const char *want) {
    void *v = NULL;
    size_t n = 0;
    spmd_status st = spmd_store_get(c, key, &v, &n);
    int ok = st == SPMD_OK && n == strlen(want) && memcmp(v, want, n) == 0 &&
             ((char *)v)[n] == 0;
    if (!ok)
        fprintf(stderr, "get '%s': st=%d len=%zu want '%s' (%s)\n", key, st, n, want,
                spmd_store_errmsg(c));
    free(v);
    return ok;
}

static void test_basic(spmd_store *c) {
    CHECK_OK(spmd_store_set(c, "a", "hello", 5));
    CHECK(get_str(c, "a", "hello"));
    CHECK_OK(spmd_store_set(c, "a", "bye", 3)); /* overwrite */
    CHECK(get_str(c, "a", "bye"));
    CHECK_OK(spmd_store_set(c, "empty", NULL, 0)); /* empty value is a value */
    CHECK(get_str(c, "empty", ""));
    CHECK_OK(spmd_store_set(c, "", "root", 4)); /* empty key is a key */
    CHECK(get_str(c, "", "root"));

    void *v = (void *)0x1;
    size_t n = 77;
    CHECK(spmd_store_try_get(c, "absent", &v, &n) == SPMD_ERR_NOTFOUND);
    CHECK(v == (void *)0x1 && n == 77); /* untouched on failure */
    CHECK(strstr(spmd_store_errmsg(c), "absent") != NULL);
    CHECK(spmd_store_try_get(c, "a", &v, &n) == SPMD_OK && n == 3 && !memcmp(v, "bye", 3));
    free(v);

    /* Binary values with zero bytes survive. */
    unsigned char bin[300];
    for (int i = 0; i < 300; i++) bin[i] = (unsigned char)(i * 7);
    CHECK_OK(spmd_store_set(c, "bin", bin, sizeof bin));
    CHECK(spmd_store_get(c, "bin", &v, &n) == SPMD_OK && n == 300 && !memcmp(v, bin, 300));
    free(v);
}

static void test_add(spmd_store *c) {
    int64_t r = 0;
    CHECK(spmd_store_add(c, "ctr", 5, &r) == SPMD_OK && r == 5); /* missing counts as 0 */
    CHECK(spmd_store_add(c, "ctr", -7, &r) == SPMD_OK && r == -2);
    CHECK(spmd_store_add(c, "ctr", 0, NULL) == SPMD_OK);
    CHECK(get_str(c, "ctr", "-2")); /* stored as decimal text, as torch does */
    CHECK_OK(spmd_store_set(c, "ctr2", "41", 2));
    CHECK(spmd_store_add(c, "ctr2", 1, &r) == SPMD_OK && r == 42);
    CHECK_OK(spmd_store_set(c, "word", "abc", 3));
    r = 99;
    CHECK(spmd_store_add(c, "word", 1, &r) == SPMD_ERR_INVALID && r == 99);
    CHECK(strstr(spmd_store_errmsg(c), "not a decimal integer") != NULL);
    CHECK(get_str(c, "word", "abc")); /* untouched */
    CHECK_OK(spmd_store_set(c, "big", "9223372036854775806", 19));
    CHECK(spmd_store_add(c, "big", 1, &r) == SPMD_OK && r == INT64_MAX);
    CHECK(spmd_store_add(c, "big", 1, &r) == SPMD_ERR_INVALID);
    CHECK(strstr(spmd_store_errmsg(c), "overflow") != NULL);
    CHECK(spmd_store_add(c, "neg", INT64_MIN, &r) == SPMD_OK && r == INT64_MIN);
    CHECK(get_str(c, "neg", "-9223372036854775808"));
    CHECK(spmd_store_add(c, "neg", 1, &r) == SPMD_OK && r == INT64_MIN + 1);
}

static int cas(spmd_store *c, const char *key, const char *exp, const char *des, const char *want) {
    void *cur = NULL;
    size_t n = 0;
    spmd_status st = spmd_store_compare_set(c, key, exp, exp ? strlen(exp) : 0, des, strlen(des),
                                            &cur, &n);
    int ok = st == SPMD_OK && n == strlen(want) && memcmp(cur, want, n) == 0;
    if (!ok) fprintf(stderr, "cas %s: st=%d got %.*s want %s\n", key, st, (int)n, (char *)cur, want);
    free(cur);
    return ok;
}

static void test_compare_set(spmd_store *c) {
    /* absent + empty expected: set, returns desired */
    CHECK(cas(c, "cs", NULL, "one", "one"));
    CHECK(get_str(c, "cs", "one"));
    /* present + matching expected: swap */
    CHECK(cas(c, "cs", "one", "two", "two"));
    CHECK(get_str(c, "cs", "two"));
    /* present + wrong expected: no swap, returns the current value */
    CHECK(cas(c, "cs", "one", "three", "two"));
    CHECK(get_str(c, "cs", "two"));
    /* present + empty expected does not match a non-empty value */
    CHECK(cas(c, "cs", "", "four", "two"));
    /* absent + non-empty expected: torch answers `expected` and sets nothing */
    CHECK(cas(c, "cs-absent", "x", "y", "x"));
    void *v;
    size_t n;
    CHECK(spmd_store_try_get(c, "cs-absent", &v, &n) == SPMD_ERR_NOTFOUND);
    /* present empty value + empty expected matches */
    CHECK_OK(spmd_store_set(c, "cs-empty", "", 0));
    CHECK(cas(c, "cs-empty", "", "filled", "filled"));
    /* current may be omitted */
    CHECK_OK(spmd_store_compare_set(c, "cs", "two", 3, "five", 4, NULL, NULL));
    CHECK(get_str(c, "cs", "five"));
    CHECK(spmd_store_compare_set(c, "cs", "two", 3, "five", 4, &v, NULL) == SPMD_ERR_INVALID);
}

static void test_delete_num_keys(spmd_store *c) {
    int64_t n0 = -1, n1 = -1;
    CHECK_OK(spmd_store_num_keys(c, &n0));
    CHECK_OK(spmd_store_set(c, "d1", "x", 1));
    CHECK_OK(spmd_store_set(c, "d2", "y", 1));
    CHECK_OK(spmd_store_num_keys(c, &n1));
    CHECK(n1 == n0 + 2);
    int del = -1;
    CHECK(spmd_store_delete(c, "d1", &del) == SPMD_OK && del == 1);
    CHECK(spmd_store_delete(c, "d1", &del) == SPMD_OK && del == 0);
    CHECK(spmd_store_delete(c, "never", NULL) == SPMD_OK);
    CHECK_OK(spmd_store_num_keys(c, &n1));
    CHECK(n1 == n0 + 1);
    void *v;
    size_t len;
    CHECK(spmd_store_try_get(c, "d1", &v, &len) == SPMD_ERR_NOTFOUND);
    /* a timed-out get leaves no key behind */
    spmd_store_set_timeout(c, 30);
    CHECK(spmd_store_get(c, "ghost", &v, &len) == SPMD_ERR_TIMEOUT);
    spmd_store_set_timeout(c, 10000);
    CHECK_OK(spmd_store_num_keys(c, &n1));
    CHECK(n1 == n0 + 1);
}

static void test_wait_present(spmd_store *c) {
    CHECK_OK(spmd_store_set(c, "w1", "1", 1));
    CHECK_OK(spmd_store_set(c, "w2", "2", 1));
    const char *keys[] = {"w1", "w2"};
    CHECK_OK(spmd_store_wait(c, keys, 2, 1000));
    CHECK_OK(spmd_store_wait(c, keys, 0, 1000)); /* nothing to wait for */
    const char *bad[] = {"w1", NULL};
    CHECK(spmd_store_wait(c, bad, 2, 1000) == SPMD_ERR_INVALID);
    /* the maximal number of keys, all present */
    enum { N = SPMD_STORE_MAX_WAIT_KEYS };
    static char names[N][16];
    static const char *many[N + 1];
    for (int i = 0; i < N; i++) {
        snprintf(names[i], sizeof names[i], "many%d", i);
        many[i] = names[i];
        if (i % 2 == 0) CHECK_OK(spmd_store_set(c, names[i], "v", 1));
    }
    for (int i = 1; i < N; i += 2) CHECK_OK(spmd_store_add(c, names[i], 1, NULL));
    CHECK_OK(spmd_store_wait(c, many, N, 2000));
    many[N] = "x";
    CHECK(spmd_store_wait(c, many, N + 1, 2000) == SPMD_ERR_INVALID);
}

static void test_prefixes(spmd_store *c) {
    spmd_store *g1 = NULL, *g10 = NULL, *g1a = NULL;
    CHECK_OK(spmd_store_prefixed(c, "g1", &g1));
    CHECK_OK(spmd_store_prefixed(c, "g10", &g10));
    REQUIRE_VOID(g1 && g10);
    CHECK_OK(spmd_store_prefixed(g1, "a", &g1a));
    CHECK_OK(spmd_store_set(g1, "k", "in-g1", 5));
    CHECK_OK(spmd_store_set(g10, "k", "in-g10", 6));
    CHECK_OK(spmd_store_set(g1a, "k", "in-g1a", 6));
    CHECK_OK(spmd_store_set(c, "k", "in-root", 7));
    CHECK(get_str(g1, "k", "in-g1"));
    CHECK(get_str(g10, "k", "in-g10"));
    CHECK(get_str(g1a, "k", "in-g1a"));
    CHECK(get_str(c, "k", "in-root"));
    CHECK(get_str(c, "g1/k", "in-g1")); /* the real key, torch PrefixStore style */
    CHECK(get_str(c, "g1/a/k", "in-g1a"));
    void *v;
    size_t n;
    CHECK(spmd_store_try_get(g1, "g1/k", &v, &n) == SPMD_ERR_NOTFOUND);
    int64_t r;
    CHECK(spmd_store_add(g1, "ctr", 3, &r) == SPMD_OK && r == 3);
    CHECK(spmd_store_add(g10, "ctr", 4, &r) == SPMD_OK && r == 4);
    int del = 0;
    CHECK(spmd_store_delete(g10, "k", &del) == SPMD_OK && del == 1);
    CHECK(get_str(g1, "k", "in-g1"));
    const char *keys[] = {"k", "ctr"};
    CHECK_OK(spmd_store_wait(g1, keys, 2, 1000));
    CHECK(spmd_store_wait(g10, keys, 2, 50) == SPMD_ERR_TIMEOUT);
    CHECK(strstr(spmd_store_errmsg(g10), "g10/k") != NULL);
    /* closing the parent first is fine: the connection goes with the last handle */
    spmd_store *tmp = NULL, *tmp2 = NULL;
    CHECK_OK(spmd_store_prefixed(c, "tmp", &tmp));
    CHECK_OK(spmd_store_prefixed(tmp, "sub", &tmp2));
    spmd_store_close(tmp);
    CHECK_OK(spmd_store_set(tmp2, "x", "1", 1));
    CHECK(get_str(c, "tmp/sub/x", "1"));
    spmd_store_close(tmp2);
    spmd_store_close(g1a);
    spmd_store_close(g1);
    spmd_store_close(g10);
}

static void test_limits(spmd_store *c) {
    char *key = malloc(SPMD_STORE_MAX_KEY + 2);
    memset(key, 'k', SPMD_STORE_MAX_KEY + 1);
    key[SPMD_STORE_MAX_KEY] = 0;
    CHECK_OK(spmd_store_set(c, key, "max", 3)); /* exactly the limit */
    CHECK(get_str(c, key, "max"));
    key[SPMD_STORE_MAX_KEY] = 'k';
    key[SPMD_STORE_MAX_KEY + 1] = 0;
    CHECK(spmd_store_set(c, key, "x", 1) == SPMD_ERR_INVALID);
    CHECK(strstr(spmd_store_errmsg(c), "over the limit") != NULL);
    spmd_store *p = NULL;
    CHECK_OK(spmd_store_prefixed(c, "pre", &p));
    key[SPMD_STORE_MAX_KEY - 3] = 0; /* fits alone, not with "pre/" */
    CHECK_OK(spmd_store_set(c, key, "x", 1));
    CHECK(spmd_store_set(p, key, "x", 1) == SPMD_ERR_INVALID);
    spmd_store_close(p);
    free(key);
    char one = 'x';
    /* value over the limit: refused by length alone, the bytes are never read */
    CHECK(spmd_store_set(c, "v", &one, (size_t)SPMD_STORE_MAX_VALUE + 1) == SPMD_ERR_INVALID);
    CHECK(spmd_store_set(c, "v", NULL, 3) == SPMD_ERR_INVALID);
    CHECK(spmd_store_set(c, NULL, "x", 1) == SPMD_ERR_INVALID);
    CHECK(spmd_store_set(NULL, "k", "x", 1) == SPMD_ERR_INVALID);
    void *v;
    size_t n;
    CHECK(spmd_store_get(c, "k", NULL, &n) == SPMD_ERR_INVALID);
    CHECK(spmd_store_num_keys(c, NULL) == SPMD_ERR_INVALID);
    CHECK(spmd_store_prefixed(c, NULL, &p) == SPMD_ERR_INVALID);
    (void)v;
    /* A large value (several read chunks and buffer growths) round-trips. */
    size_t big = 6u << 20;
    unsigned char *b = malloc(big);
    for (size_t i = 0; i < big; i++) b[i] = (unsigned char)(i * 2654435761u >> 13);
    CHECK_OK(spmd_store_set(c, "bigval", b, big));
    CHECK(spmd_store_get(c, "bigval", &v, &n) == SPMD_OK && n == big && !memcmp(v, b, big));
    free(v);
    void *cur = NULL;
    CHECK(spmd_store_compare_set(c, "bigval", b, big, "small", 5, &cur, &n) == SPMD_OK && n == 5);
    free(cur);
    free(b);
    CHECK(get_str(c, "bigval", "small"));
}

/* A fake server answering the hello with the given 12 bytes. */
typedef struct {
    int lfd;
    unsigned char answer[12];
} fake_arg;

static void *fake_server(void *arg) {
    fake_arg *f = arg;
    char err[128];
    int64_t deadline = spmd__deadline(5000);
    int fd = -1;
    while (fd < 0 && spmd__remaining_ms(deadline) > 0) {
        struct pollfd p = {.fd = f->lfd, .events = POLLIN, .revents = 0};
        if (poll(&p, 1, spmd__remaining_ms(deadline)) > 0) fd = spmd__accept(f->lfd);
    }
    if (fd < 0) return NULL;
    unsigned char hello[12];
    if (spmd__read_full(fd, hello, 12, deadline, NULL, err, sizeof err) == SPMD_OK)
        spmd__write_full(fd, f->answer, 12, deadline, NULL, err, sizeof err);
    /* keep the socket open until the client has read and closed */
    char b;
    while (recv(fd, &b, 1, 0) != 0) {
        struct pollfd p = {.fd = fd, .events = POLLIN, .revents = 0};
        if (poll(&p, 1, spmd__remaining_ms(deadline)) <= 0) break;
    }
    close(fd);
    return NULL;
}

static spmd_status connect_to_fake(const unsigned char answer[12], char *err, size_t errlen) {
    fake_arg f;
    int port = 0;
    f.lfd = spmd__listen("127.0.0.1", 0, 4, &port, err, errlen);
    if (f.lfd < 0) return SPMD_ERR_SYSTEM;
    memcpy(f.answer, answer, 12);
    pthread_t th;
    pthread_create(&th, NULL, fake_server, &f);
    spmd_store *c = NULL;
    spmd_status st = spmd_store_connect("127.0.0.1", port, 3000, &c, err, errlen);
    if (st == SPMD_OK) spmd_store_close(c);
    pthread_join(th, NULL);
    close(f.lfd);
    return st;
}

static void test_connect_errors(void) {
    char err[256] = "";
    spmd_store *c = (spmd_store *)0x1;
    /* A port nobody listens on (bind one, learn it, close it): retried until the deadline. */
    int port = 0;
    int fd = spmd__listen("127.0.0.1", 0, 1, &port, err, sizeof err);
    REQUIRE_VOID(fd >= 0);
    close(fd);
    uint64_t t0 = spmd__now_ns();
    CHECK(spmd_store_connect("127.0.0.1", port, 150, &c, err, sizeof err) == SPMD_ERR_TIMEOUT);
    double ms = tsu_ms_since(t0);
    CHECK_MSG(ms >= 140 && ms < 30000, "connect gave up after %.1f ms", ms);
    CHECK(c == (spmd_store *)0x1);
    CHECK_MSG(strstr(err, "127.0.0.1") != NULL, "%s", err);
    /* The same port to a server that was up (a standby store): the refusal
     * is final at once, not a timeout after the deadline (10 min here). */
    CHECK(spmd__store_connect_up("127.0.0.1", port, 600000, &c, err, sizeof err) == SPMD_ERR_SYSTEM);
    CHECK(c == (spmd_store *)0x1);
    CHECK_MSG(strstr(err, "refused") != NULL, "%s", err);
    CHECK(spmd_store_connect("127.0.0.1", 0, 100, &c, err, sizeof err) == SPMD_ERR_INVALID);
    CHECK(spmd_store_connect("127.0.0.1", 1, 100, NULL, err, sizeof err) == SPMD_ERR_INVALID);

    /* A peer that is not a store server. */
    CHECK(connect_to_fake((const unsigned char *)"HTTP/1.1 200", err, sizeof err) ==
          SPMD_ERR_PROTOCOL);
    CHECK_MSG(strstr(err, "magic") != NULL, "%s", err);
    /* A store server of another protocol version. */
    unsigned char other[12];
    spmd__store_encode_hello(other, SPMD__STORE_VERSION + 1, 0);
    CHECK(connect_to_fake(other, err, sizeof err) == SPMD_ERR_MISMATCH);
    CHECK_MSG(strstr(err, "version") != NULL, "%s", err);
}

/* The standalone mode: open, run in a thread of ours, interrupt. */
static void *run_thread(void *arg) {
    spmd_store_server_run(arg);
    return NULL;
}

static void test_standalone(void) {
    char err[256];
    spmd_store_server *s = NULL;
    REQUIRE_VOID(spmd_store_server_open("127.0.0.1", 0, &s, err, sizeof err) == SPMD_OK);
    int port = spmd_store_server_port(s);
    CHECK(port > 0);
    pthread_t th;
    REQUIRE_VOID(pthread_create(&th, NULL, run_thread, s) == 0);
    spmd_store *c = tsu_connect(port, 5000);
    REQUIRE_VOID(c);
    CHECK_OK(spmd_store_set(c, "k", "v", 1));
    CHECK(get_str(c, "k", "v"));
    spmd_store_server_interrupt(s);
    pthread_join(th, NULL);
    spmd_store_server_stop(s);
    void *v;
    size_t n;
    CHECK(spmd_store_get(c, "k", &v, &n) == SPMD_ERR_REMOTE);
    spmd_store_close(c);
    /* stop on a server that never ran, and on NULL */
    REQUIRE_VOID(spmd_store_server_open(NULL, 0, &s, err, sizeof err) == SPMD_OK);
    spmd_store_server_stop(s);
    spmd_store_server_stop(NULL);
    spmd_store_server_forget(NULL);
    spmd_store_close(NULL);
}

int main(void) {
    spmd_store_server *s = tsu_server();
    REQUIRE(s);
    int port = spmd_store_server_port(s);
    REQUIRE(port > 0 && port < 65536);
    spmd_store *c = tsu_connect(port, 10000);
    REQUIRE(c);
    CHECK(strcmp(spmd_store_errmsg(c), "") == 0);
    test_basic(c);
    test_add(c);
    test_compare_set(c);
    test_delete_num_keys(c);
    test_wait_present(c);
    test_prefixes(c);
    test_limits(c);
    /* A second connection sees the same data. */
    spmd_store *c2 = tsu_connect(port, 10000);
    REQUIRE(c2);
    CHECK(get_str(c2, "a", "bye"));
    spmd_store_close(c2);
    spmd_store_close(c);
    spmd_store_server_stop(s);
    test_connect_errors();
    test_standalone();
    TEST_MAIN_END();
}
