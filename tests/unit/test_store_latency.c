/* Store round-trip latency on loopback: median and p99 of set, get and add
 * (small values) and of a 1 MiB set+get, printed for docs/STORE.md.  As a
 * test it checks only that every round trip succeeds; the figures are the
 * benchmark (run it by hand with more iterations).
 *   ./tests/test_store_latency [iterations] */
#include <stdlib.h>
#include "test_store_util.h"

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static void report(const char *what, uint64_t *ns, int n, double *median_us) {
    qsort(ns, (size_t)n, sizeof *ns, cmp_u64);
    *median_us = (double)ns[n / 2] / 1e3;
    printf("%-18s median %8.1f us   p99 %8.1f us   (n=%d)\n", what, *median_us,
           (double)ns[(n * 99) / 100] / 1e3, n);
}

int main(int argc, char **argv) {
    int iters = argc > 1 ? atoi(argv[1]) : 2000;
    if (iters < 10) iters = 10;
    spmd_store_server *s = tsu_server();
    REQUIRE(s);
    spmd_store *c = tsu_connect(spmd_store_server_port(s), 20000);
    REQUIRE(c);
    uint64_t *t = calloc((size_t)iters, sizeof *t);
    REQUIRE(t);
    double med_set, med_get, med_add, med_big;
    for (int i = 0; i < iters; i++) {
        uint64_t t0 = spmd__now_ns();
        CHECK_OK(spmd_store_set(c, "lat/key", "0123456789abcdef", 16));
        t[i] = spmd__now_ns() - t0;
    }
    report("set 16 B", t, iters, &med_set);
    for (int i = 0; i < iters; i++) {
        void *v = NULL;
        size_t n = 0;
        uint64_t t0 = spmd__now_ns();
        CHECK_OK(spmd_store_get(c, "lat/key", &v, &n));
        t[i] = spmd__now_ns() - t0;
        free(v);
    }
    report("get 16 B", t, iters, &med_get);
    for (int i = 0; i < iters; i++) {
        uint64_t t0 = spmd__now_ns();
        CHECK_OK(spmd_store_add(c, "lat/ctr", 1, NULL));
        t[i] = spmd__now_ns() - t0;
    }
    report("add", t, iters, &med_add);
    size_t big = 1u << 20;
    unsigned char *b = calloc(1, big);
    int nb = iters / 20 > 10 ? iters / 20 : 10;
    for (int i = 0; i < nb; i++) {
        void *v = NULL;
        size_t n = 0;
        uint64_t t0 = spmd__now_ns();
        CHECK_OK(spmd_store_set(c, "lat/big", b, big));
        CHECK_OK(spmd_store_get(c, "lat/big", &v, &n));
        t[i] = spmd__now_ns() - t0;
        CHECK(n == big);
        free(v);
    }
    report("set+get 1 MiB", t, nb, &med_big);
    free(b);
    free(t);
    /* Figures only: speed goals live in benchmarks, not in pass/fail tests. */
    (void)med_set;
    (void)med_get;
    (void)med_add;
    spmd_store_close(c);
    spmd_store_server_stop(s);
    TEST_MAIN_END();
}
