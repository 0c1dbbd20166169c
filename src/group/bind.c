/* bind.c — SPMD_BIND=core: pin each rank of a host to a core of its own, as
 * Open MPI's mpirun does by default (--bind-to core) when there are no more
 * ranks than cores.  Unpinned, the scheduler may stack two ranks that wait
 * on each other on one core (a wake-up tends to pull the woken rank next to
 * its waker), and each of their exchanges then costs a context switch
 * instead of a few hundred nanoseconds.  Off by default: a rank that runs
 * several compute threads (BLAS) wants more than one core.
 *
 * With more ranks than cores, local rank r goes to core r mod cores (as
 * mpirun's --bind-to core:overload-allowed): every core gets its even share
 * from the start, where unpinned ranks first fall unevenly and small
 * collectives at 8 ranks on 2 cores took 7 or 23 µs by that fall.
 *
 * Called by spmd_group_init before the group's threads start, so they
 * inherit the mask; threads the program started earlier keep theirs. */
#define _GNU_SOURCE
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include "group_internal.h"

void spmd__group_bind(int local_rank, int local_world) {
    const char *v = getenv("SPMD_BIND");
    if (!v || !*v || !strcmp(v, "none")) return;
    if (strcmp(v, "core") != 0) {
        SPMD_LOGW("SPMD_BIND=%s: unknown (core or none); not binding", v);
        return;
    }
    cpu_set_t allowed;
    if (sched_getaffinity(0, sizeof allowed, &allowed) != 0) return;
    int n = CPU_COUNT(&allowed);
    if (local_world < 1 || local_rank < 0 || local_rank >= local_world || n < 1) {
        SPMD_LOGI("SPMD_BIND=core: local rank %d of %d, %d cores: not binding", local_rank, local_world, n);
        return;
    }
    for (int cpu = 0, k = 0; cpu < CPU_SETSIZE; cpu++) {
        if (!CPU_ISSET(cpu, &allowed) || k++ != local_rank % n) continue;
        cpu_set_t one;
        CPU_ZERO(&one);
        CPU_SET(cpu, &one);
        if (sched_setaffinity(0, sizeof one, &one) == 0) SPMD_LOGI("local rank %d bound to core %d", local_rank, cpu);
        return;
    }
}
