/* pingpong — seed 000's exercise: P1 prints "ping", P2 prints "pong", ten
 * rounds, strictly alternating with no race: each process prints only while
 * it holds the token, and hands the token over with send/recv.
 *
 * Run: ./pingpong [rounds]  (spawns 2 ranks), or spmdrun --nproc-per-node 2 ./pingpong */
#include <stdio.h>
#include <stdlib.h>
#include "spmd/group.h"

static int rounds = 10;

static int run(int rank, int size, void *arg) {
    (void)arg;
    (void)size;
    spmd_group *g = NULL;
    char err[256];
    if (spmd_group_init(NULL, &g, err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    rank = spmd_group_rank(g);
    if (spmd_group_size(g) != 2) {
        fprintf(stderr, "pingpong needs exactly 2 ranks\n");
        spmd_group_destroy(g);
        return 2;
    }
    int32_t token = 0;
    spmd_status st = SPMD_OK;
    for (int i = 0; i < rounds && !st; i++) {
        if (rank == 0) {
            if (i > 0) st = spmd_recv(g, &token, 1, SPMD_I32, 1, 0, NULL);
            if (st) break;
            printf("ping\n");
            fflush(stdout);
            st = spmd_send(g, &token, 1, SPMD_I32, 1, 0);
        } else {
            st = spmd_recv(g, &token, 1, SPMD_I32, 0, 0, NULL);
            if (st) break;
            printf("pong\n");
            fflush(stdout);
            token++;
            if (i + 1 < rounds) st = spmd_send(g, &token, 1, SPMD_I32, 0, 0);
        }
    }
    if (st) fprintf(stderr, "rank %d: %s\n", rank, spmd_group_errmsg(g));
    spmd_group_destroy(g);
    return st ? 1 : 0;
}

int main(int argc, char **argv) {
    if (argc > 1) rounds = atoi(argv[1]);
    if (getenv("WORLD_SIZE")) return run(-1, -1, NULL);
    char report[256];
    if (spmd_spawn(2, run, NULL, report, sizeof report)) {
        fprintf(stderr, "pingpong: %s\n", report);
        return 1;
    }
    return 0;
}
