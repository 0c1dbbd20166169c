/* SPMD_BIND=core (group/bind.c): with no more ranks on the host than cores,
 * each rank's thread ends up on one core of its own, the local ranks on
 * distinct cores; with more
 * ranks than cores, or SPMD_BIND unset or unknown, nothing is bound. */
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
        for (int r = 0; r < world; r++)
            for (int q = 0; q < r; q++) RREQUIRE(all[r] != all[q]); /* a core each */
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
    run(n + 1 <= 8 ? n + 1 : 8, "core", n + 1 > 8); /* more ranks than cores: not bound */
    run(2, NULL, 0);
    run(2, "socket", 0);
    TEST_MAIN_END();
}
