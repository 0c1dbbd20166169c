/* auth_setup.c — what authentication costs at connection set-up: the time of
 * spmd_store_connect (TCP connect + handshake) and of spmd_group_init (store
 * rendezvous + the whole mesh) with the job secret and with SPMD_AUTH=off,
 * and of spmd_group_init with SPMD_ENCRYPT=1 too (keys derived for every
 * connection), interleaved in one run.  Prints medians.
 *   auth_setup [store connects per mode] [group inits per mode] [world] */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "common/common.h"
#include "spmd/group.h"
#include "spmd/store.h"

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static int fds[2];

/* Each rank times its own init; rank 0 sends the slowest rank's to the parent. */
static int rank_fn(int rank, int world, void *arg) {
    (void)world;
    (void)arg;
    uint64_t t0 = spmd__now_ns();
    spmd_group_opts o = SPMD_GROUP_OPTS_DEFAULT;
    spmd_group *g = NULL;
    char err[512];
    if (spmd_group_init(&o, &g, err, sizeof err)) {
        fprintf(stderr, "init: %s\n", err);
        return 1;
    }
    double us = (double)(spmd__now_ns() - t0) / 1e3;
    if (spmd_all_reduce(g, &us, &us, 1, SPMD_F64, SPMD_MAX)) return 1;
    if (rank == 0 && write(fds[1], &us, sizeof us) != (ssize_t)sizeof us) return 1;
    spmd_group_destroy(g);
    return 0;
}

int main(int argc, char **argv) {
    int nconn = argc > 1 ? atoi(argv[1]) : 2000, ninit = argc > 2 ? atoi(argv[2]) : 20;
    int world = argc > 3 ? atoi(argv[3]) : 4;
    setenv("SPMD_LOG_LEVEL", "error", 1);
    double *c[2], *g[3];
    for (int m = 0; m < 3; m++) {
        if (m < 2 && !(c[m] = calloc((size_t)nconn, sizeof(double)))) return 1;
        if (!(g[m] = calloc((size_t)ninit, sizeof(double)))) return 1;
    }
    if (pipe(fds)) return 1;
    /* One server per mode: a server's mode is fixed when it starts. */
    spmd_store_server *srv[2];
    char err[512];
    for (int m = 0; m < 2; m++) {
        if (m) setenv("SPMD_AUTH", "off", 1);
        else unsetenv("SPMD_AUTH");
        if (spmd_store_server_start("127.0.0.1", 0, &srv[m], err, sizeof err)) {
            fprintf(stderr, "%s\n", err);
            return 1;
        }
    }
    for (int i = 0; i < nconn; i++)
        for (int m = 0; m < 2; m++) {
            if (m) setenv("SPMD_AUTH", "off", 1);
            else unsetenv("SPMD_AUTH");
            uint64_t t0 = spmd__now_ns();
            spmd_store *s = NULL;
            if (spmd_store_connect("127.0.0.1", spmd_store_server_port(srv[m]), 5000, &s, err,
                                   sizeof err)) {
                fprintf(stderr, "%s\n", err);
                return 1;
            }
            c[m][i] = (double)(spmd__now_ns() - t0) / 1e3;
            spmd_store_close(s);
        }
    for (int m = 0; m < 2; m++) spmd_store_server_stop(srv[m]);
    for (int i = 0; i < ninit; i++)
        for (int m = 0; m < 3; m++) { /* auth, SPMD_AUTH=off, auth + SPMD_ENCRYPT=1 */
            if (m == 1) setenv("SPMD_AUTH", "off", 1);
            else unsetenv("SPMD_AUTH");
            if (m == 2) setenv("SPMD_ENCRYPT", "1", 1);
            else unsetenv("SPMD_ENCRYPT");
            char rep[512];
            if (spmd_spawn(world, rank_fn, NULL, rep, sizeof rep)) {
                fprintf(stderr, "spawn: %s\n", rep);
                return 1;
            }
            if (read(fds[0], &g[m][i], sizeof(double)) != (ssize_t)sizeof(double)) return 1;
        }
    double ca = median(c[0], nconn), co = median(c[1], nconn);
    double ga = median(g[0], ninit), go = median(g[1], ninit), ge = median(g[2], ninit);
    printf("store connect (median of %d): auth %.1f us, SPMD_AUTH=off %.1f us, +%.1f us (%.2fx)\n",
           nconn, ca, co, ca - co, ca / co);
    printf("group init, world %d (median of %d, slowest rank): auth %.0f us, SPMD_AUTH=off %.0f "
           "us, %+.1f%%; auth + SPMD_ENCRYPT=1 %.0f us, %+.1f%%\n",
           world, ninit, ga, go, 100.0 * (ga - go) / go, ge, 100.0 * (ge - go) / go);
    return 0;
}
