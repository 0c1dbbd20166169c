/* idle_core.c — does any runnable task wait for a core right now?
 *
 * A receiver reads a large message with a second thread only when that
 * thread finds a core nobody else wants (transport/cma_parallel.c), and a
 * sender steps aside for it only then (group/work.c).  On a busy host the
 * second thread waits for a busy program's slice, and the caller for it:
 * beside one CPU-bound process per core a 512 KiB round trip went from 0.2
 * to 1.6 ms.  The kernel's count of runnable tasks (the fourth field of
 * /proc/loadavg, host-wide, this thread included) says whether cores are
 * left over.  It is read at most every 5 ms, by whoever asks first, and
 * the fewest of the last four readings counts: a busy program is there at
 * every reading, a thread of ours that runs for a moment (a progress
 * thread, the helper on its way back to sleep) is not. */
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <unistd.h>
#include "common.h"

#define REFRESH_NS 5000000ull
#define SAMPLES 4 /* the answer looks at the last few: a thread runnable for a moment is not load */

static _Atomic uint64_t read_at; /* when the last sample was taken (0: never) */
static atomic_int answer;
static atomic_int sample[SAMPLES]; /* runnable tasks at the last samples (0: none yet) */
static atomic_uint next_sample;

/* Runnable tasks now, from /proc/loadavg ("0.50 0.40 0.30 3/250 1234"); -1 unknown. */
static int runnable_now(void) {
    int fd = open("/proc/loadavg", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    char b[128];
    ssize_t n = read(fd, b, sizeof b - 1);
    close(fd);
    if (n <= 0) return -1;
    b[n] = '\0';
    int running = -1, total = -1;
    if (sscanf(b, "%*f %*f %*f %d/%d", &running, &total) != 2 || running < 0) return -1;
    return running;
}

int spmd__idle_core(void) {
    uint64_t now = spmd__now_ns(), at = atomic_load_explicit(&read_at, memory_order_acquire);
    if (at && now - at < REFRESH_NS) return atomic_load_explicit(&answer, memory_order_relaxed);
    atomic_store_explicit(&read_at, now ? now : 1, memory_order_release); /* others use the old answer meanwhile */
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    int running = runnable_now();
    if (running <= 0 || ncpu < 2) { /* unknown: no, which keeps one thread per message (the old way) */
        atomic_store_explicit(&answer, 0, memory_order_relaxed);
        return 0;
    }
    atomic_store_explicit(&sample[atomic_fetch_add(&next_sample, 1) % SAMPLES], running, memory_order_relaxed);
    int fewest = running;
    for (int i = 0; i < SAMPLES; i++) {
        int v = atomic_load_explicit(&sample[i], memory_order_relaxed);
        if (v > 0 && v < fewest) fewest = v;
    }
    int idle = fewest <= ncpu;
    atomic_store_explicit(&answer, idle, memory_order_relaxed);
    return idle;
}
