/* SPMD_BIND=core (group/bind.c): with no more ranks on the host than cores,
 * each rank's thread ends up on one core of its own, the local ranks on
 * distinct cores; with more ranks than cores, each on one core, dealt
 * round them (no core has two more ranks than another); SPMD_BIND unset or
 * unknown: nothing is bound. */
#define _GNU_SOURCE
#include <sched.h>
#include "coll_common.h"

static int allowed_cpus(void) {
    cpu_set_t s;
    return sched_getaffinity(0, sizeof s, &s) == 0 ? CPU_COUNT(&s) : -1;
}

/* the single CPU this thread may run on, or -1 */
static int bound_cpu(void) {
    cpu_set_t s;
    if (sched_getaffinity(0, sizeof s, &s) != 0 || CPU_COUNT(&s) != 1) return -1;
    for (int c = 0; c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, &s)) return c;
    return -1;
}

static int expect_bound;

static int body(int rank, int world, void *arg) {
    (void)arg;
    const int before = allowed_cpus();
    spmd_group *g = join_group(rank);
    if (!g) return 1;
    int cpu = bound_cpu();
    if (expect_bound) {
        RREQUIRE(cpu >= 0);
        int32_t mine = cpu, all[8] = {0};
        RREQUIRE(spmd_all_gather(g, &mine, all, 1, SPMD_I32) == SPMD_OK);
        if (world <= before) {
            for (int r = 0; r < world; r++)
                for (int q = 0; q < r; q++) RREQUIRE(all[r] != all[q]); /* a core each */
        } else {
            int per[CPU_SETSIZE] = {0}, lo = world, hi = 0, used = 0;
            for (int r = 0; r < world; r++) per[all[r]]++;
            for (int c = 0; c < CPU_SETSIZE; c++) {
                if (!per[c]) continue;
                used++;
                lo = per[c] < lo ? per[c] : lo;
                hi = per[c] > hi ? per[c] : hi;
            }
            RREQUIRE(used == before); /* every core has ranks, evenly */
            RREQUIRE(hi - lo <= 1);
        }
    } else {
        RREQUIRE(allowed_cpus() == before); /* untouched */
    }
    spmd_group_destroy(g);
    return 0;
}

static void run(int world, const char *bind, int bound) {
    if (bind) setenv("SPMD_BIND", bind, 1);
    else unsetenv("SPMD_BIND");
    expect_bound = bound;
    char report[512];
    spmd_status st = spmd_spawn_timeout(world, body, NULL, 60000, report, sizeof report);
    CHECK_MSG(st == SPMD_OK, "world %d, SPMD_BIND=%s: %s", world, bind ? bind : "(unset)", report);
}

int main(void) {
    const int n = allowed_cpus();
    CHECK(n >= 1);
    if (n >= 2) run(2, "core", 1);
    if (n < 8) run(2 * n + 1 < 8 ? 2 * n + 1 : 8, "core", 1); /* more ranks than cores: dealt round */
    run(2, NULL, 0);
    run(2, "socket", 0);
    TEST_MAIN_END();
}
