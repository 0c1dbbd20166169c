/* Cross-memory attach (src/transport/cma.c, xfer.c): ranks on one kernel agree to
 * read large collective messages from each other's memory, a rank started
 * with SPMD_CMA=0 keeps every pair it is in on TCP, and in both cases
 * messages above and below the CMA threshold, several per peer in one call
 * (all_to_all_v, gather), arrive bit for bit; once a rank's group fails its
 * memory can no longer be read.
 *
 * Where this kernel forbids process_vm_readv (containers, Yama), the test
 * checks that no pair claims CMA and the traffic still flows. */
#define _GNU_SOURCE
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>
#include "coll_common.h"
#include "group/group_internal.h"

static int cma_works; /* can a process read its child's memory here? */

static int probe_kernel(void) {
    static volatile uint64_t cookie = 0;
    int up[2], down[2];
    if (pipe(up) != 0 || pipe(down) != 0) return 0;
    pid_t pid = fork();
    if (pid == 0) {
        cookie = 0x5a5a1234abcdull;
        char b;
        if (write(up[1], "x", 1) != 1) _exit(1);
        close(down[1]);
        ssize_t r = read(down[0], &b, 1); /* until the parent closes its end */
        (void)r;
        _exit(0);
    }
    close(up[1]);
    close(down[0]);
    char b;
    int ok = 0;
    if (pid > 0 && read(up[0], &b, 1) == 1) {
        uint64_t got = 0;
        struct iovec l = {&got, sizeof got}, r = {(void *)&cookie, sizeof cookie};
        ok = process_vm_readv(pid, &l, 1, &r, 1, 0) == (ssize_t)sizeof got && got == 0x5a5a1234abcdull;
    }
    close(down[1]);
    close(up[0]);
    if (pid > 0) waitpid(pid, NULL, 0);
    return ok;
}

/* Elements rank i sends to rank j: 0, ~4 KB, ~80 KB (inline) and ~1.2 MB (CMA). */
static size_t count_of(int i, int j) {
    static const size_t sizes[] = {0, 1000, 20011, 300007};
    return sizes[(size_t)(i * 3 + j) % 4];
}

static float value(int from, int to, size_t k) { return (float)((from * 131 + to * 17 + (int)(k % 1009)) % 4093); }

static int check_pairs(spmd_group *g, int rank, int w, int off_rank) {
    for (int p = 0; p < w; p++) {
        if (p == rank) continue;
        int want = cma_works && rank != off_rank && p != off_rank;
        if (g->t.cma[p].ok != want) {
            fprintf(stderr, "rank %d: pair with rank %d: cma %d, want %d\n", rank, p, g->t.cma[p].ok, want);
            return 1;
        }
    }
    return 0;
}

static int traffic(spmd_group *g, int rank, int w) {
    size_t sc[16] = {0}, sd[16] = {0}, rc[16] = {0}, rd[16] = {0}, stot = 0, rtot = 0;
    RREQUIRE(w <= 16);
    for (int j = 0; j < w; j++) {
        sc[j] = count_of(rank, j);
        sd[j] = stot;
        stot += sc[j];
        rc[j] = count_of(j, rank);
        rd[j] = rtot;
        rtot += rc[j];
    }
    float *sb = calloc(stot + 1, 4), *rb = calloc(rtot + 1, 4);
    RREQUIRE(sb && rb);
    for (int j = 0; j < w; j++)
        for (size_t k = 0; k < sc[j]; k++) sb[sd[j] + k] = value(rank, j, k);
    RREQUIRE(spmd_all_to_all_v(g, sb, sc, sd, rb, rc, rd, SPMD_F32) == SPMD_OK);
    for (int i = 0; i < w; i++)
        for (size_t k = 0; k < rc[i]; k++)
            if (rb[rd[i] + k] != value(i, rank, k)) {
                fprintf(stderr, "rank %d: all_to_all_v from %d element %zu: %g\n", rank, i, k, (double)rb[rd[i] + k]);
                return 1;
            }
    free(sb);
    free(rb);

    /* gather to the last rank: it receives a CMA message from every peer in one call */
    const size_t n = 70001;
    float *mine = malloc(n * 4), *all = rank == w - 1 ? malloc(n * 4 * (size_t)w) : NULL;
    RREQUIRE(mine && (rank != w - 1 || all));
    for (size_t k = 0; k < n; k++) mine[k] = value(rank, w - 1, k);
    RREQUIRE(spmd_gather(g, mine, all, n, SPMD_F32, w - 1) == SPMD_OK);
    if (all)
        for (int i = 0; i < w; i++)
            for (size_t k = 0; k < n; k++) RREQUIRE(all[(size_t)i * n + k] == value(i, w - 1, k));
    free(mine);
    free(all);

    /* all_reduce of ~3 MiB, in place, every rank's pieces by CMA */
    const size_t m = (3u << 20) / 4 + 5;
    float *x = malloc(m * 4);
    RREQUIRE(x);
    for (size_t k = 0; k < m; k++) x[k] = (float)((size_t)rank + k % 7);
    RREQUIRE(spmd_all_reduce(g, x, x, m, SPMD_F32, SPMD_SUM) == SPMD_OK);
    for (size_t k = 0; k < m; k++) RREQUIRE(x[k] == (float)((size_t)w * (w - 1) / 2 + (size_t)w * (k % 7)));
    free(x);
    return 0;
}

/* A rank whose group failed changes its token, so a peer can no longer read
 * its memory (its caller may free buffers a peer was about to read). */
static int failed_group(int rank, int w, void *arg) {
    (void)arg;
    (void)w;
    spmd_group *g = join_group(rank);
    if (!g) return 1;
    RREQUIRE(g->t.cma[1 - rank].ok == cma_works);
    if (!cma_works) {
        spmd_group_destroy(g);
        return 0;
    }
    char buf[8];
    char err[256];
    uint64_t peer_token_addr = g->t.cma[1 - rank].token_addr;
    /* before: the peer's memory reads fine */
    RREQUIRE(spmd__cma_read(&g->t, 1 - rank, buf, peer_token_addr, sizeof buf, err, sizeof err) == SPMD_OK);
    RREQUIRE(spmd_barrier(g) == SPMD_OK);
    void *v = NULL;
    size_t n = 0;
    if (rank == 0) {
        spmd_group_abort(g, "test: rank 0 gives up");
        /* stay alive (and mapped) until rank 1 has tried to read us */
        RREQUIRE(spmd_store_get(g->store, "tried", &v, &n) == SPMD_OK);
        free(v);
    } else {
        /* the abort reaches us: wait for our group to fail */
        while (spmd_barrier(g) == SPMD_OK) {
        }
        spmd_status st = spmd__cma_read(&g->t, 0, buf, peer_token_addr, sizeof buf, err, sizeof err);
        if (st == SPMD_OK || !strstr(err, "token")) {
            fprintf(stderr, "rank 1: read after rank 0 failed: %d %s\n", st, err);
            return 1;
        }
        RREQUIRE(spmd_store_set(g->store, "tried", "1", 1) == SPMD_OK);
    }
    spmd_group_destroy(g);
    return 0;
}

static int body(int rank, int w, void *arg) {
    int off_rank = *(int *)arg;
    spmd_group *g = NULL;
    if (rank == off_rank) setenv("SPMD_CMA", "0", 1);
    g = join_group(rank);
    if (!g) return 1;
    if (check_pairs(g, rank, w, off_rank) || traffic(g, rank, w)) return 1;
    spmd_group_destroy(g);
    return 0;
}

int main(void) {
    unsetenv("SPMD_TRANSPORT"); /* this test chooses the paths it checks itself */
    cma_works = probe_kernel();
    printf("process_vm_readv %s on this kernel\n", cma_works ? "works" : "is refused");
    unsetenv("SPMD_CMA");
    setenv("SPMD_SEGMENT_BYTES", "", 1); /* empty: the library's default pieces (run_world keeps it) */
    int none = -1, second = 1;
    CHECK_MSG(run_world(2, body, &none, 60) == 0, "world 2, every rank willing");
    CHECK_MSG(run_world(3, body, &none, 60) == 0, "world 3, every rank willing");
    CHECK_MSG(run_world(3, body, &second, 60) == 0, "world 3, rank 1 with SPMD_CMA=0");
    CHECK_MSG(run_world(2, failed_group, NULL, 60) == 0, "world 2, a rank's group fails");
    setenv("SPMD_CMA_MIN_BYTES", "1", 1); /* every non-empty message by CMA, several per call */
    CHECK_MSG(run_world(3, body, &none, 60) == 0, "world 3, SPMD_CMA_MIN_BYTES=1");
    TEST_MAIN_END();
}
