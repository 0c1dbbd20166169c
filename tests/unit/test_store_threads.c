/* Many concurrent clients: threads with their own connections and threads
 * sharing one connection through prefixed handles all add to one counter and
 * set/get their own keys; the total must be exact and nothing may mix up. */
#include <pthread.h>
#include "test_store_util.h"

enum { OWN = 12, SHARED = 6, ITERS = 150 };

typedef struct {
    int port;
    spmd_store *shared; /* NULL: open an own connection */
    int id;
    int errors;
    char msg[256];
} worker;

static void *work(void *arg) {
    worker *w = arg;
    spmd_store *root = w->shared ? w->shared : tsu_connect(w->port, 20000);
    if (!root) {
        w->errors++;
        return NULL;
    }
    char pfx[32];
    snprintf(pfx, sizeof pfx, "w%d", w->id);
    spmd_store *mine = NULL, *top = NULL;
    /* Counter through a handle on the root namespace; own keys through a prefix. */
    if (spmd_store_prefixed(root, pfx, &mine) || spmd_store_prefixed(root, "", &top)) {
        w->errors++;
        return NULL;
    }
    for (int i = 0; i < ITERS; i++) {
        int64_t r = 0;
        if (spmd_store_add(root == w->shared ? top : root, "counter", 1, &r) || r < 1) {
            snprintf(w->msg, sizeof w->msg, "add: %s", spmd_store_errmsg(top));
            w->errors++;
        }
        char key[32], val[32];
        snprintf(key, sizeof key, "k%d", i % 5);
        int vl = snprintf(val, sizeof val, "%d-%d", w->id, i);
        if (spmd_store_set(mine, key, val, (size_t)vl)) w->errors++;
        void *v = NULL;
        size_t n = 0;
        if (spmd_store_get(mine, key, &v, &n) || n != (size_t)vl || memcmp(v, val, n)) {
            snprintf(w->msg, sizeof w->msg, "get %s/%s: got %.*s want %s", pfx, key, (int)n,
                     v ? (char *)v : "", val);
            w->errors++;
        }
        free(v);
    }
    spmd_store_close(mine);
    spmd_store_close(top);
    if (!w->shared) spmd_store_close(root);
    return NULL;
}

/* Herd: HERD clients parked in get on one key, released by one set, then
 * each adds once; the server must wake every one and count exactly. */
enum { HERD = 48 };

typedef struct {
    int port;
    int ok;
} herd_arg;

static void *herd_member(void *arg) {
    herd_arg *h = arg;
    spmd_store *c = tsu_connect(h->port, 20000);
    if (!c) return NULL;
    void *v = NULL;
    size_t n = 0;
    int64_t r = 0;
    h->ok = spmd_store_get(c, "herd/start", &v, &n) == SPMD_OK && n == 2 && !memcmp(v, "go", 2) &&
            spmd_store_add(c, "herd/count", 1, &r) == SPMD_OK && r >= 1 && r <= HERD;
    free(v);
    spmd_store_close(c);
    return NULL;
}

static void test_herd(spmd_store_server *s, spmd_store *c, int port) {
    herd_arg a[HERD];
    pthread_t th[HERD];
    for (int i = 0; i < HERD; i++) {
        a[i].port = port;
        a[i].ok = 0;
        REQUIRE_VOID(pthread_create(&th[i], NULL, herd_member, &a[i]) == 0);
    }
    CHECK(tsu_wait_parked(s, HERD, 20000));
    CHECK_OK(spmd_store_set(c, "herd/start", "go", 2));
    for (int i = 0; i < HERD; i++) {
        pthread_join(th[i], NULL);
        CHECK_MSG(a[i].ok, "herd member %d failed", i);
    }
    int64_t total = 0;
    CHECK_OK(spmd_store_add(c, "herd/count", 0, &total));
    CHECK(total == HERD);
}

int main(void) {
    spmd_store_server *s = tsu_server();
    REQUIRE(s);
    int port = spmd_store_server_port(s);
    spmd_store *shared = tsu_connect(port, 20000);
    REQUIRE(shared);
    worker w[OWN + SHARED];
    pthread_t th[OWN + SHARED];
    for (int i = 0; i < OWN + SHARED; i++) {
        memset(&w[i], 0, sizeof w[i]);
        w[i].port = port;
        w[i].shared = i < OWN ? NULL : shared;
        w[i].id = i;
        REQUIRE(pthread_create(&th[i], NULL, work, &w[i]) == 0);
    }
    for (int i = 0; i < OWN + SHARED; i++) {
        pthread_join(th[i], NULL);
        CHECK_MSG(w[i].errors == 0, "worker %d: %d errors (%s)", i, w[i].errors, w[i].msg);
    }
    int64_t total = 0;
    CHECK_OK(spmd_store_add(shared, "counter", 0, &total));
    CHECK_MSG(total == (int64_t)(OWN + SHARED) * ITERS, "counter %lld, want %d", (long long)total,
              (OWN + SHARED) * ITERS);
    int64_t nk = 0;
    CHECK_OK(spmd_store_num_keys(shared, &nk));
    CHECK(nk == 1 + (OWN + SHARED) * 5);
    test_herd(s, shared, port);
    spmd_store_close(shared);
    CHECK(tsu_wait_conns(s, 0, 5000));
    spmd_store_server_stop(s);
    TEST_MAIN_END();
}
