/* The short scheduler slice (common/wait_slice.c): after spmd_group_init,
 * every thread of a rank (the caller, the progress thread, the executor once
 * a collective ran in the background) asks the kernel for SPMD_WAIT_SLICE_US
 * (default 100 µs), with its nice value and policy untouched; with
 * SPMD_WAIT_SLICE_US=0 no thread's slice changes.  On a kernel without custom
 * slices (before Linux 6.12) nothing may change either: the test finds out
 * which kind of kernel it runs on with a thread of its own first. */
#define _GNU_SOURCE
#include <dirent.h>
#include <pthread.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>
#include "coll_common.h"

struct attr { /* the kernel's struct sched_attr */
    uint32_t size, policy;
    uint64_t flags;
    int32_t nice;
    uint32_t prio;
    uint64_t runtime, deadline, period;
    uint32_t umin, umax;
};

static int get_attr(pid_t tid, struct attr *a) {
    memset(a, 0, sizeof *a);
    return (int)syscall(SYS_sched_getattr, tid, a, (unsigned)sizeof *a, 0u);
}

/* Does this kernel keep a custom slice?  Tried on a thread of our own. */
static void *probe(void *out) {
    struct attr a;
    if (get_attr(0, &a) != 0) return NULL;
    a.size = sizeof a;
    a.flags = 0;
    a.runtime = 300000;
    if (syscall(SYS_sched_setattr, 0, &a, 0u) == 0 && get_attr(0, &a) == 0 && a.runtime == 300000) *(int *)out = 1;
    return NULL;
}

static int custom_slices;
static uint64_t want_ns; /* every thread's slice after init; 0: unchanged */

/* the caller and the library's threads (spmd-progress, spmd-exec; not a
 * sanitizer's own): each one's slice is want_ns (or, 0: the default one,
 * which the test process started with); *nlib counts the library's */
static int threads_ok(int rank, uint64_t dflt, int *nlib) {
    DIR *d = opendir("/proc/self/task");
    if (!d) return 0;
    struct dirent *e;
    int ok = 1;
    *nlib = 0;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        const pid_t tid = (pid_t)atoi(e->d_name);
        char path[64], comm[32] = "";
        snprintf(path, sizeof path, "/proc/self/task/%d/comm", (int)tid);
        FILE *f = fopen(path, "r");
        if (f) {
            if (!fgets(comm, sizeof comm, f)) comm[0] = 0;
            fclose(f);
        }
        comm[strcspn(comm, "\n")] = 0;
        const int lib = !strcmp(comm, "spmd-progress") || !strcmp(comm, "spmd-exec");
        if (tid != getpid() && !lib) continue;
        struct attr a;
        if (get_attr(tid, &a) != 0) continue; /* ended meanwhile */
        *nlib += lib;
        uint64_t want = want_ns ? want_ns : dflt;
        if (a.runtime != want || a.nice != 5) {
            fprintf(stderr, "rank %d: thread %d (%s): slice %llu ns nice %d, want %llu ns nice 5\n", rank, (int)tid,
                    comm, (unsigned long long)a.runtime, a.nice, (unsigned long long)want);
            ok = 0;
        }
    }
    closedir(d);
    return ok;
}

static int body(int rank, int world, void *arg) {
    (void)world;
    (void)arg;
    spmd_group *g = NULL;
    RREQUIRE(setpriority(PRIO_PROCESS, 0, 5) == 0); /* the caller's nice stays the caller's */
    struct attr before;
    RREQUIRE(get_attr(0, &before) == 0);
    g = join_group(rank);
    if (!g) return 1;
    float x[1024];
    for (int i = 0; i < 1024; i++) x[i] = (float)(rank + i);
    spmd_work *w = NULL; /* a background collective starts the executor */
    RREQUIRE(spmd_all_reduce_async(g, x, x, 1024, SPMD_F32, SPMD_SUM, NULL, &w) == SPMD_OK);
    RREQUIRE(spmd_work_wait(w, -1) == SPMD_OK);
    spmd_work_free(w);
    RREQUIRE(x[7] == (float)(1 + 2 * 7));
    int n = 0;
    RREQUIRE(threads_ok(rank, before.runtime, &n));
    RREQUIRE(n >= 1); /* at least the progress thread */
    spmd_group_destroy(g);
    return 0;
}

static void run(const char *slice, uint64_t expect_ns) {
    if (slice) setenv("SPMD_WAIT_SLICE_US", slice, 1);
    else unsetenv("SPMD_WAIT_SLICE_US");
    want_ns = custom_slices ? expect_ns : 0;
    char report[512];
    spmd_status st = spmd_spawn_timeout(2, body, NULL, 60000, report, sizeof report);
    CHECK_MSG(st == SPMD_OK, "SPMD_WAIT_SLICE_US=%s: %s", slice ? slice : "(unset)", report);
}

int main(void) {
    pthread_t t;
    CHECK(pthread_create(&t, NULL, probe, &custom_slices) == 0);
    pthread_join(t, NULL);
    printf("kernel keeps custom slices: %s\n", custom_slices ? "yes" : "no (nothing may change)");
    run(NULL, 100000);
    run("250", 250000);
    run("0", 0);
    TEST_MAIN_END();
}
