/* stop_worker — a worker for spmdrun --on-failure shrink (stopped.sh): at
 * world 4, data-parallel SGD on 64 weights over spmd_elastic; rank 2
 * SIGSTOPs itself as step 5 begins, the others lose its heartbeat, recover
 * at world 3 and go on; their new rank 0 resumes it (SIGCONT) as step 10
 * begins.  The resumed rank's recovery fails: the others decided without it
 * (spmd_group_was_excluded), so it exits with SPMD_EXIT_EXCLUDED.  The
 * others finish 40 steps and compare their replicas to the bit. */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include "common/fnv.h"
#include "spmd/elastic.h"
#include "spmd/group.h"

#define NW 64
#define STEPS 40
#define VICTIM 2

int main(void) {
    char err[512];
    spmd_group *g = NULL;
    if (spmd_group_init(NULL, &g, err, sizeof err)) return fprintf(stderr, "%s\n", err), 1;
    const int me0 = spmd_group_rank(g);
    int32_t pid = (int32_t)getpid(), pids[4];
    if (spmd_group_size(g) != 4 || spmd_all_gather(g, &pid, pids, 1, SPMD_I32))
        return fprintf(stderr, "needs world 4: %s\n", spmd_group_errmsg(g)), 1;
    double w[NW] = {0}, grad[NW];
    int64_t step = 0;
    spmd_elastic *e = NULL;
    if (spmd_elastic_create(g, &e, err, sizeof err) || spmd_elastic_add_state(e, "w", w, sizeof w, 0) ||
        spmd_elastic_add_state(e, "step", &step, sizeof step, 0))
        return fprintf(stderr, "elastic setup: %s\n", err), 1;
    int woken = 0;
    while (step < STEPS) {
        if (me0 == VICTIM && step == 4) raise(SIGSTOP);
        spmd_group *cur = spmd_elastic_group(e);
        if (!woken && step == 9 && spmd_group_size(cur) == 3) {
            woken = 1;
            if (spmd_group_rank(cur) == 0) kill(pids[VICTIM], SIGCONT);
        }
        spmd_elastic_begin_step(e);
        for (int j = 0; j < NW; j++) grad[j] = w[j] - (double)((j * 7 + step) % 11);
        if (spmd_all_reduce(cur, grad, grad, NW, SPMD_F64, SPMD_SUM) == SPMD_OK) {
            for (int j = 0; j < NW; j++) w[j] -= 0.1 * grad[j] / spmd_group_size(cur);
            step++;
            spmd_elastic_commit(e);
        } else if (spmd_elastic_recover(e) != SPMD_OK) {
            fprintf(stderr, "rank %d: %s\n", me0, spmd_elastic_errmsg(e));
            int excluded = spmd_group_was_excluded(spmd_elastic_group(e));
            spmd_group_destroy(spmd_elastic_group(e));
            spmd_elastic_free(e);
            return excluded ? SPMD_EXIT_EXCLUDED : 1;
        }
    }
    spmd_group *cur = spmd_elastic_group(e);
    uint64_t h = spmd__fnv1a64(SPMD__FNV64_OFFSET, w, sizeof w);
    int64_t v[2] = {(int64_t)h, (int64_t)~h};
    if (spmd_all_reduce(cur, v, v, 2, SPMD_I64, SPMD_MAX)) return fprintf(stderr, "%s\n", spmd_group_errmsg(cur)), 1;
    int same = (uint64_t)v[0] == ~(uint64_t)v[1];
    printf("rank %d: replicas %s at world %d after %lld steps\n", me0, same ? "identical" : "DIFFER",
           spmd_group_size(cur), (long long)step);
    spmd_group_destroy(cur);
    spmd_elastic_free(e);
    return same ? 0 : 1;
}
