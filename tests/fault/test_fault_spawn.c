/* SIGKILL one rank of an spmd_spawn job at a random iteration of an
 * all_reduce loop: spmd_spawn's report must name the killed rank and its
 * signal — never a survivor that exited (code 3) after seeing it die.  Then
 * the same with SIGSTOP (a frozen rank, SPMD_HEARTBEAT_TIMEOUT=1): the report
 * names the stopped rank.
 *   test_fault_spawn [trials] [max world]     (default 4 trials, worlds 2..4) */
#define _GNU_SOURCE
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include "harness.h"
#include "spmd/group.h"

typedef struct {
    int victim, at, stop;
    size_t count;
} trial;

static int rank_fn(int rank, int world, void *arg) {
    const trial *t = arg;
    setenv("SPMD_LOG_LEVEL", "error", 1);
    if (t->stop) setenv("SPMD_HEARTBEAT_TIMEOUT", "1", 1);
    spmd_group_opts o = SPMD_GROUP_OPTS_DEFAULT;
    o.timeout_ms = 60000;
    spmd_group *g = NULL;
    char err[512];
    if (spmd_group_init(&o, &g, err, sizeof err) != SPMD_OK) return 3;
    int32_t *v = malloc(t->count * sizeof *v);
    if (!v) return 1;
    for (int it = 0; it < 8; it++) {
        if (rank == t->victim && it == t->at) raise(t->stop ? SIGSTOP : SIGKILL);
        for (size_t i = 0; i < t->count; i++) v[i] = rank + 1;
        if (spmd_all_reduce(g, v, v, t->count, SPMD_I32, SPMD_SUM) != SPMD_OK) return 3;
        if (v[0] != world * (world + 1) / 2) return 1;
    }
    free(v);
    spmd_group_destroy(g);
    return 0;
}

int main(int argc, char **argv) {
    int trials = argc > 1 ? atoi(argv[1]) : 4, maxw = argc > 2 ? atoi(argv[2]) : 4;
    if (maxw < 2) maxw = 2;
    int right = 0;
    for (int k = 0; k < 2 * trials; k++) {
        uint32_t r = 0;
        if (getrandom(&r, sizeof r, 0) != sizeof r) r = (uint32_t)k * 2654435761u;
        int world = 2 + k % (maxw - 1);
        trial t = {.victim = (int)(r % (uint32_t)world), .at = (int)((r >> 8) % 6), .stop = k >= trials,
                   .count = k % 2 ? (4u << 20) / 4 : 1};
        char report[1024] = "", want[32];
        spmd_status st = spmd_spawn_timeout(world, rank_fn, &t, 120000, report, sizeof report);
        snprintf(want, sizeof want, "rank %d (", t.victim);
        int ok = st == SPMD_ERR_REMOTE && strstr(report, want) == strstr(report, "rank ") &&
                 strstr(report, want) && strstr(report, t.stop ? "was stopped" : "SIGKILL");
        CHECK_MSG(ok, "trial %d: world %d, rank %d %s before iteration %d (%zu B): report '%s'", k, world,
                  t.victim, t.stop ? "stopped" : "killed", t.at, t.count * 4, report);
        right += ok;
    }
    printf("test_fault_spawn: %d trials (SIGKILL, then as many SIGSTOP), %d named the killed or stopped rank, "
           "%d wrong\n", 2 * trials, right, 2 * trials - right);
    TEST_MAIN_END();
}
