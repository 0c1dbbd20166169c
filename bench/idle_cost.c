/* idle_cost.c — what a group costs while nobody calls it: the progress
 * thread's ticks (at least every 100 ms: heartbeats, the recorder's clock and
 * its look for dump requests).  Two ranks (spmd_spawn) form a group, sleep
 * SECONDS between two barriers, and print the CPU time each process used
 * meanwhile.  Run it with SPMD_HEARTBEAT_TIMEOUT=0 SPMD_RECORDER_ENTRIES=0 to
 * compare (bench/watch_cost.sh does).
 *   idle_cost [SECONDS]   (default 10) */
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <time.h>
#include "spmd/group.h"

static double cpu_s(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 + (double)ru.ru_stime.tv_sec +
           (double)ru.ru_stime.tv_usec / 1e6;
}

static int rank_fn(int rank, int world, void *arg) {
    (void)world;
    int secs = *(int *)arg;
    spmd_group *g = NULL;
    char err[256];
    if (spmd_group_init(NULL, &g, err, sizeof err) != SPMD_OK) {
        fprintf(stderr, "init: %s\n", err);
        return 1;
    }
    if (spmd_barrier(g) != SPMD_OK) return 1;
    double c0 = cpu_s();
    struct timespec ts = {secs, 0};
    while (nanosleep(&ts, &ts) != 0) {
    }
    double c1 = cpu_s();
    if (spmd_barrier(g) != SPMD_OK) return 1;
    printf("rank %d: %.3f ms of CPU per idle second\n", rank, (c1 - c0) * 1000.0 / secs);
    fflush(stdout);
    spmd_group_destroy(g);
    return 0;
}

int main(int argc, char **argv) {
    int secs = argc > 1 ? atoi(argv[1]) : 10;
    if (secs < 1) secs = 1;
    char report[512] = "";
    if (spmd_spawn(2, rank_fn, &secs, report, sizeof report) != SPMD_OK) {
        fprintf(stderr, "idle_cost: %s\n", report);
        return 1;
    }
    return 0;
}
