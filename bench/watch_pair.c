/* watch_pair.c — heartbeats and the flight recorder on against off, in one
 * run and one pair of processes: each of 2 ranks (spmd_spawn) forms two groups,
 * "on" (the defaults) and "off" (SPMD_HEARTBEAT_TIMEOUT=0,
 * SPMD_RECORDER_ENTRIES=0 while it forms), then times batches of 4-byte
 * all_reduces and of 4-byte ping-pongs on each in turn, alternating which
 * goes first.  Both groups see the same machine at the same moments, so the
 * per-batch ratio on/off is what the two features cost.  Prints, for each
 * test, the median and best ns per operation of each group and the median
 * (and quartiles) of the per-batch ratios.
 *   watch_pair [BATCHES] [OPS_PER_BATCH]     (defaults 40, 20000)
 * SPMD_TRANSPORT chooses the path as usual. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "spmd/group.h"

typedef struct {
    int batches, ops;
} cfg;

static double now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

/* ns per operation of one batch: all_reduce (kind 0) or ping-pong round trip / 2 (kind 1). */
static double batch(spmd_group *g, int kind, int ops) {
    int rank = spmd_group_rank(g);
    float v = 1.0f;
    if (spmd_barrier(g) != SPMD_OK) return -1;
    double t0 = now_ns();
    for (int i = 0; i < ops; i++) {
        spmd_status st;
        if (kind == 0) {
            st = spmd_all_reduce(g, &v, &v, 1, SPMD_F32, SPMD_SUM);
            v = 1.0f;
        } else if (rank == 0) {
            st = spmd_send(g, &v, 1, SPMD_F32, 1, 0);
            if (!st) st = spmd_recv(g, &v, 1, SPMD_F32, 1, 0, NULL);
        } else {
            st = spmd_recv(g, &v, 1, SPMD_F32, 0, 0, NULL);
            if (!st) st = spmd_send(g, &v, 1, SPMD_F32, 0, 0);
        }
        if (st) return -1;
    }
    double ns = (now_ns() - t0) / ops;
    return kind == 1 ? ns / 2 : ns;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static int rank_fn(int rank, int world, void *arg) {
    (void)world;
    const cfg *c = arg;
    spmd_group *on = NULL, *off = NULL;
    char err[256];
    spmd_group_opts o = SPMD_GROUP_OPTS_DEFAULT;
    o.name = "on";
    if (spmd_group_init(&o, &on, err, sizeof err) != SPMD_OK) {
        fprintf(stderr, "group on: %s\n", err);
        return 1;
    }
    setenv("SPMD_HEARTBEAT_TIMEOUT", "0", 1);
    setenv("SPMD_RECORDER_ENTRIES", "0", 1);
    o.name = "off";
    if (spmd_group_init(&o, &off, err, sizeof err) != SPMD_OK) {
        fprintf(stderr, "group off: %s\n", err);
        return 1;
    }
    double *t = malloc(sizeof *t * (size_t)c->batches * 4), *ratio = malloc(sizeof *ratio * (size_t)c->batches * 2);
    if (!t || !ratio) return 1;
    for (int kind = 0; kind < 2; kind++) {
        batch(on, kind, c->ops / 10); /* warm both up */
        batch(off, kind, c->ops / 10);
        for (int b = 0; b < c->batches; b++) {
            double x, y;
            if (b % 2) {
                x = batch(on, kind, c->ops);
                y = batch(off, kind, c->ops);
            } else {
                y = batch(off, kind, c->ops);
                x = batch(on, kind, c->ops);
            }
            if (x < 0 || y < 0) {
                fprintf(stderr, "rank %d: a batch failed\n", rank);
                return 1;
            }
            t[(kind * 2 + 0) * c->batches + b] = x;
            t[(kind * 2 + 1) * c->batches + b] = y;
            ratio[kind * c->batches + b] = x / y;
        }
    }
    if (rank == 0) {
        static const char *const names[] = {"all_reduce 4 B", "ping-pong 4 B (half round trip)"};
        printf("# %s, %d batches of %d operations, on and off alternating; ns per operation\n",
               spmd_group_backend(on), c->batches, c->ops);
        printf("%-32s %10s %10s %10s %10s   %s\n", "test", "on median", "on best", "off median", "off best",
               "on/off per batch: median (quartiles)");
        for (int kind = 0; kind < 2; kind++) {
            double *a = t + (kind * 2) * c->batches, *b = t + (kind * 2 + 1) * c->batches, *r = ratio + kind * c->batches;
            qsort(a, (size_t)c->batches, sizeof *a, cmp);
            qsort(b, (size_t)c->batches, sizeof *b, cmp);
            qsort(r, (size_t)c->batches, sizeof *r, cmp);
            printf("%-32s %10.1f %10.1f %10.1f %10.1f   %.4f (%.4f-%.4f)\n", names[kind], a[c->batches / 2], a[0],
                   b[c->batches / 2], b[0], r[c->batches / 2], r[c->batches / 4], r[3 * c->batches / 4]);
        }
        fflush(stdout);
    }
    free(t);
    free(ratio);
    spmd_group_destroy(off);
    spmd_group_destroy(on);
    return 0;
}

int main(int argc, char **argv) {
    cfg c = {argc > 1 ? atoi(argv[1]) : 40, argc > 2 ? atoi(argv[2]) : 20000};
    if (c.batches < 1) c.batches = 1;
    if (c.ops < 10) c.ops = 10;
    char report[512] = "";
    if (spmd_spawn(2, rank_fn, &c, report, sizeof report) != SPMD_OK) {
        fprintf(stderr, "watch_pair: %s\n", report);
        return 1;
    }
    return 0;
}
