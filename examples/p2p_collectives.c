/* p2p_collectives — seeds 003 and 004's exercises: measure the latency of a
 * message between two ranks, then implement broadcast, reduce and all_reduce
 * with point-to-point send/recv only, check them against the library's own
 * collectives, and time both.
 *
 *   broadcast(src):  src sends the tensor to every other rank in turn.
 *   reduce(dst):     every rank sends to dst, which adds them up one by one.
 *   all_reduce:      reduce to rank 0, then broadcast from rank 0 (seed 004).
 *   ring all_reduce: seed 004's bonus — reduce-scatter then all-gather around
 *                    the ring with isend/irecv, one chunk per rank per step.
 *
 * Inputs are small integers, so every version must agree bit for bit.
 *
 * Run: ./p2p_collectives [world_size [count [iterations]]]
 *      (defaults 4, 65536 floats, 20).  Exit status 0 when all agree. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "spmd/group.h"

typedef struct {
    size_t count;
    int iters;
} opts;

static double now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static int p2p_broadcast(spmd_group *g, float *t, size_t n, int rank, int size, int src) {
    if (rank == src) {
        for (int r = 0; r < size; r++)
            if (r != src && spmd_send(g, t, n, SPMD_F32, r, 1)) return 1;
        return 0;
    }
    return spmd_recv(g, t, n, SPMD_F32, src, 1, NULL) != SPMD_OK;
}

static int p2p_reduce(spmd_group *g, float *t, float *tmp, size_t n, int rank, int size, int dst) {
    if (rank != dst) return spmd_send(g, t, n, SPMD_F32, dst, 2) != SPMD_OK;
    for (int r = 0; r < size; r++) {
        if (r == dst) continue;
        if (spmd_recv(g, tmp, n, SPMD_F32, r, 2, NULL)) return 1;
        for (size_t i = 0; i < n; i++) t[i] += tmp[i];
    }
    return 0;
}

static int p2p_all_reduce(spmd_group *g, float *t, float *tmp, size_t n, int rank, int size) {
    return p2p_reduce(g, t, tmp, n, rank, size, 0) || p2p_broadcast(g, t, n, rank, size, 0);
}

/* Chunk c of n elements cut into `size` parts. */
static size_t off_of(size_t n, int size, int c) { return n / (size_t)size * (size_t)c + ((size_t)c < n % (size_t)size ? (size_t)c : n % (size_t)size); }
static size_t len_of(size_t n, int size, int c) { return off_of(n, size, c + 1) - off_of(n, size, c); }

static int sendrecv(spmd_group *g, const float *s, size_t sn, int to, float *r, size_t rn, int from) {
    spmd_work *ws = NULL, *wr = NULL;
    if (spmd_irecv(g, r, rn, SPMD_F32, from, 3, &wr)) return 1;
    if (spmd_isend(g, s, sn, SPMD_F32, to, 3, &ws)) return 1;
    int rc = spmd_work_wait(wr, -1) != SPMD_OK;
    rc |= spmd_work_wait(ws, -1) != SPMD_OK;
    spmd_work_free(wr);
    spmd_work_free(ws);
    return rc;
}

static int ring_all_reduce(spmd_group *g, float *t, float *tmp, size_t n, int rank, int size) {
    const int next = (rank + 1) % size, prev = (rank + size - 1) % size;
    for (int s = 0; s < size - 1; s++) { /* reduce-scatter */
        int sc = ((rank - s) % size + size) % size, rc = ((rank - s - 1) % size + size) % size;
        if (sendrecv(g, t + off_of(n, size, sc), len_of(n, size, sc), next, tmp, len_of(n, size, rc), prev)) return 1;
        float *dst = t + off_of(n, size, rc);
        for (size_t i = 0; i < len_of(n, size, rc); i++) dst[i] += tmp[i];
    }
    for (int s = 0; s < size - 1; s++) { /* all-gather */
        int sc = ((rank + 1 - s) % size + size) % size, rc = ((rank - s) % size + size) % size;
        if (sendrecv(g, t + off_of(n, size, sc), len_of(n, size, sc), next, t + off_of(n, size, rc),
                     len_of(n, size, rc), prev))
            return 1;
    }
    return 0;
}

static void fill(float *t, size_t n, int rank) {
    for (size_t i = 0; i < n; i++) t[i] = (float)((rank * 7 + (int)(i % 13)) % 11);
}

/* Slowest rank's mean time per call, in µs. */
static double slowest(spmd_group *g, double us) {
    double mx = us;
    spmd_all_reduce(g, &us, &mx, 1, SPMD_F64, SPMD_MAX);
    return mx;
}

static int run(int rank, int size, void *arg) {
    const opts *o = arg;
    const size_t n = o->count;
    spmd_group *g = NULL;
    char err[256];
    if (spmd_group_init(NULL, &g, err, sizeof err) != SPMD_OK) {
        fprintf(stderr, "rank %d: %s\n", rank, err);
        return 1;
    }
    float *a = malloc(n * sizeof(float) + 4), *b = malloc(n * sizeof(float) + 4);
    float *tmp = malloc(n * sizeof(float) + 4), *want = malloc(n * sizeof(float) + 4);
    int rc = 0;

    /* seed 003 (a): one small message between ranks 0 and 1, half round trip */
    if (size > 1) {
        float x = 42.0f;
        spmd_barrier(g);
        double t0 = now_us();
        for (int i = 0; i < 1000 && rank < 2; i++) {
            if (rank == 0) {
                rc |= spmd_send(g, &x, 1, SPMD_F32, 1, 9) != SPMD_OK;
                rc |= spmd_recv(g, &x, 1, SPMD_F32, 1, 9, NULL) != SPMD_OK;
            } else {
                rc |= spmd_recv(g, &x, 1, SPMD_F32, 0, 9, NULL) != SPMD_OK;
                rc |= spmd_send(g, &x, 1, SPMD_F32, 0, 9) != SPMD_OK;
            }
        }
        double lat = (now_us() - t0) / 2000.0;
        if (rank == 0) printf("send latency, 4 bytes, rank 0 <-> 1: %.2f us (half round trip)\n", lat);
    }

    /* expected sums */
    memset(want, 0, n * sizeof(float));
    for (int r = 0; r < size; r++) {
        fill(tmp, n, r);
        for (size_t i = 0; i < n; i++) want[i] += tmp[i];
    }
    const char *names[] = {"broadcast", "reduce", "all_reduce", "ring all_reduce"};
    for (int k = 0; k < 4 && !rc; k++) {
        double t_p2p = 0, t_lib = 0;
        for (int it = 0; it < o->iters && !rc; it++) {
            fill(a, n, rank);
            fill(b, n, rank);
            spmd_barrier(g);
            double t0 = now_us();
            switch (k) {
            case 0: rc |= p2p_broadcast(g, a, n, rank, size, size - 1); break;
            case 1: rc |= p2p_reduce(g, a, tmp, n, rank, size, 0); break;
            case 2: rc |= p2p_all_reduce(g, a, tmp, n, rank, size); break;
            default: rc |= ring_all_reduce(g, a, tmp, n, rank, size); break;
            }
            t_p2p += now_us() - t0;
            spmd_barrier(g);
            t0 = now_us();
            switch (k) {
            case 0: rc |= spmd_broadcast(g, b, n, SPMD_F32, size - 1) != SPMD_OK; break;
            case 1: rc |= spmd_reduce(g, b, b, n, SPMD_F32, SPMD_SUM, 0) != SPMD_OK; break;
            default: rc |= spmd_all_reduce(g, b, b, n, SPMD_F32, SPMD_SUM) != SPMD_OK; break;
            }
            t_lib += now_us() - t0;
            /* check: the p2p version, the library and the local reference agree */
            if (k == 0) {
                fill(tmp, n, size - 1);
                rc |= memcmp(a, tmp, n * sizeof(float)) != 0;
            } else if (k == 1 && rank != 0) {
                fill(tmp, n, rank); /* non-root buffers unchanged */
                rc |= memcmp(b, tmp, n * sizeof(float)) != 0;
            } else {
                rc |= memcmp(a, want, n * sizeof(float)) != 0;
            }
            rc |= memcmp(a, b, n * sizeof(float)) != 0 && !(k == 1 && rank != 0);
        }
        double p = slowest(g, t_p2p / o->iters), l = slowest(g, t_lib / o->iters);
        if (rank == 0)
            printf("%-16s %zu floats x %d ranks: send/recv %9.1f us   library %9.1f us   (x%.1f)%s\n", names[k], n,
                   size, p, l, l > 0 ? p / l : 0.0, rc ? "  WRONG RESULT" : "");
    }
    int bad = rc, anybad = 0;
    spmd_all_reduce(g, &bad, &anybad, 1, SPMD_I32, SPMD_MAX);
    if (rank == 0) printf("%s\n", anybad ? "results DISAGREE" : "all results agree bit for bit");
    free(a);
    free(b);
    free(tmp);
    free(want);
    spmd_group_destroy(g);
    return anybad;
}

int main(int argc, char **argv) {
    int size = argc > 1 ? atoi(argv[1]) : 4;
    opts o = {argc > 2 ? (size_t)strtoull(argv[2], NULL, 10) : 65536, argc > 3 ? atoi(argv[3]) : 20};
    if (size < 1 || size > 64 || o.iters < 1) {
        fprintf(stderr, "usage: %s [world_size 1..64 [count [iterations]]]\n", argv[0]);
        return 2;
    }
    char report[256];
    if (spmd_spawn(size, run, &o, report, sizeof report) != SPMD_OK) {
        fprintf(stderr, "p2p_collectives: %s\n", report);
        return 1;
    }
    return 0;
}
