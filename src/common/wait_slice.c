/* wait_slice.c — a short scheduler slice for the threads that talk to peers
 * (Linux's EEVDF scheduler, 6.12 and later).
 *
 * Why: on a busy host (more runnable threads than cores: a second job, data
 * loaders, a monitoring agent) every step of a collective needs every rank
 * on a core, and a rank that is runnable but not running waits for whoever
 * holds the core to finish its slice (~3 ms).  At world 4 beside one busy
 * process per core, an 8-byte all_reduce took 2-3 ms and 16 MiB 370-470 ms.
 * EEVDF lets a thread ask for a shorter slice (sched_attr.sched_runtime,
 * 0.1-100 ms): its virtual deadline comes sooner, so the scheduler picks it
 * as soon as it is eligible, and its wake-up preempts a thread with a longer
 * slice.  Its share of the CPU is unchanged (that is its weight, i.e. its
 * nice value): only when it gets its share changes.  Same runs with 100 µs:
 * 6-260 µs and 30-80 ms (bench/compare_load.sh, docs/performance-log.md).
 *
 * Asking only around a wait is not enough (tried: no gain): the rank that
 * the others wait for is usually one that was preempted while copying or
 * reducing, so the slice must be short while it computes too.  So a thread
 * keeps it once asked: the caller of spmd_group_init, the library's own
 * threads, and any thread whose wait on a peer goes past its spin budget.
 * On an idle host the slice changes nothing (nobody else wants the core).
 * Threads under a real-time or deadline policy, or already on a short
 * slice, are left alone; kernels without custom slices, or a sandbox that
 * refuses the call, make it a no-op after the first try.
 * SPMD_WAIT_SLICE_US: the slice (default 100; 0 leaves threads alone). */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>
#include "common.h"

struct sched_attr_v1 { /* the kernel's struct sched_attr (uapi/linux/sched/types.h) */
    uint32_t size, sched_policy;
    uint64_t sched_flags;
    int32_t sched_nice;
    uint32_t sched_priority;
    uint64_t sched_runtime, sched_deadline, sched_period;
    uint32_t sched_util_min, sched_util_max;
};

static uint64_t slice_ns; /* 0: off */
static atomic_int unsupported;
static pthread_once_t once = PTHREAD_ONCE_INIT;
static void read_env(void) {
    long us = 100;
    if (spmd__env_int("SPMD_WAIT_SLICE_US", 0, 100000, &us) != SPMD_OK) us = 100; /* init rejects a bad value */
    slice_ns = (uint64_t)us * 1000u;
}

static _Thread_local int asked; /* this thread has been through here */

static int get_attr(struct sched_attr_v1 *a) {
    memset(a, 0, sizeof *a);
    return (int)syscall(SYS_sched_getattr, 0, a, (unsigned)sizeof *a, 0u);
}
static int set_runtime(struct sched_attr_v1 *a, uint64_t runtime) {
    a->size = sizeof *a;
    a->sched_flags &= 1; /* SCHED_FLAG_RESET_ON_FORK stays as it was; nice and policy too */
    a->sched_runtime = runtime;
    return (int)syscall(SYS_sched_setattr, 0, a, 0u);
}

uint64_t spmd__wait_slice_ns(void) {
    pthread_once(&once, read_env);
    return atomic_load(&unsupported) ? 0 : slice_ns;
}

void spmd__wait_slice_thread(void) {
    if (asked) return;
    asked = 1;
    if (!spmd__wait_slice_ns()) return;
    struct sched_attr_v1 a;
    if (get_attr(&a) != 0 || (a.sched_policy != SCHED_OTHER && a.sched_policy != SCHED_BATCH)) return;
    const uint64_t own = a.sched_runtime;
    if (own && own <= slice_ns) return; /* already as short */
    if (set_runtime(&a, slice_ns) != 0) {
        atomic_store(&unsupported, 1);
        return;
    }
    /* a kernel without custom slices takes the call and ignores the value */
    struct sched_attr_v1 b;
    if (get_attr(&b) != 0 || b.sched_runtime != slice_ns) atomic_store(&unsupported, 1);
}
