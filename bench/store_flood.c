/* store_flood.c — one local client floods the store (the job secret known:
 * the worst case, a buggy or hostile rank) with 64 MiB values it never reads
 * back, plus `strangers` silent connections without the secret, while a rank
 * measures its own small set+get round trips.  Reports the store process's
 * memory (VmHWM), the rank's round-trip percentiles with and without the
 * flood, and what the flood was told.
 *   store_flood [seconds] [strangers] */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>
#include "common/common.h"
#include "spmd/store.h"

static int port;
static volatile int stop;
static long refused, accepted;

static void *flood(void *arg) {
    (void)arg;
    spmd_store *c = NULL;
    char err[256];
    if (spmd_store_connect("127.0.0.1", port, 30000, &c, err, sizeof err)) return NULL;
    size_t n = SPMD_STORE_MAX_VALUE;
    char *big = malloc(n);
    if (!big) return NULL;
    memset(big, 'x', n);
    for (long i = 0; !stop; i++) {
        char k[32];
        snprintf(k, sizeof k, "flood/%ld", i);
        if (spmd_store_set(c, k, big, n) == SPMD_OK) accepted++;
        else refused++;
    }
    free(big);
    spmd_store_close(c);
    return NULL;
}

static int cmpd(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void rank_rtt(double secs, const char *label) {
    spmd_store *c = NULL;
    char err[256];
    if (spmd_store_connect("127.0.0.1", port, 30000, &c, err, sizeof err)) {
        fprintf(stderr, "rank: %s\n", err);
        return;
    }
    size_t cap = 1 << 20, n = 0;
    double *t = malloc(cap * sizeof *t);
    uint64_t end = spmd__now_ns() + (uint64_t)(secs * 1e9);
    while (spmd__now_ns() < end && n < cap) {
        uint64_t t0 = spmd__now_ns();
        void *v = NULL;
        size_t vl = 0;
        if (spmd_store_set(c, "rank/k", "v", 1) || spmd_store_get(c, "rank/k", &v, &vl)) break;
        free(v);
        t[n++] = (double)(spmd__now_ns() - t0) / 1e3;
    }
    qsort(t, n, sizeof *t, cmpd);
    if (n)
        printf("%-22s rank set+get: %zu round trips, median %.0f us, p99 %.0f us, max %.0f us\n",
               label, n, t[n / 2], t[n * 99 / 100], t[n - 1]);
    free(t);
    spmd_store_close(c);
}

static long hwm_kb(pid_t pid) {
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    long kb = -1;
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "VmHWM:", 6)) kb = atol(line + 6);
    if (f) fclose(f);
    return kb;
}

int main(int argc, char **argv) {
    double secs = argc > 1 ? atof(argv[1]) : 3;
    int strangers = argc > 2 ? atoi(argv[2]) : 700;
    setenv("SPMD_LOG_LEVEL", "error", 1);
    spmd_store_server *srv = NULL;
    char err[256];
    if (spmd_store_server_open("127.0.0.1", 0, &srv, err, sizeof err)) return 1;
    port = spmd_store_server_port(srv);
    pid_t sp = fork();
    if (sp == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        _exit(spmd_store_server_run(srv) == SPMD_OK ? 0 : 1);
    }
    spmd_store_server_forget(srv);
    rank_rtt(secs, "quiet:");
    printf("store memory before the flood: %ld kB\n", hwm_kb(sp));
    int *fds = calloc((size_t)strangers, sizeof *fds);
    int open_ok = 0;
    for (int i = 0; i < strangers; i++)
        if ((fds[i] = spmd__connect("127.0.0.1", port, spmd__deadline(2000), err, sizeof err)) >= 0)
            open_ok++;
    pthread_t th;
    pthread_create(&th, NULL, flood, NULL);
    rank_rtt(secs, "flood + strangers:");
    stop = 1;
    pthread_join(th, NULL);
    printf("flood: %ld values of 64 MiB stored, %ld refused (limits); %d silent strangers opened\n",
           accepted, refused, open_ok);
    printf("store memory high-water mark: %ld kB\n", hwm_kb(sp));
    for (int i = 0; i < strangers; i++)
        if (fds[i] >= 0) close(fds[i]);
    free(fds);
    kill(sp, SIGKILL);
    waitpid(sp, NULL, 0);
    return 0;
}
