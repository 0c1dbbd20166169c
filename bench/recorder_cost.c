/* recorder_cost.c — what the flight recorder adds to one operation, measured
 * alone (no network noise): the calls a collective makes (issue, start, end)
 * and a point-to-point operation makes (post, end), timed over many
 * operations, with the recorder on and with it off (SPMD_RECORDER_ENTRIES=0:
 * the same calls return at once).  Times come from a clock variable, as in a
 * group (its progress thread keeps it fresh).  Compare with a 4 B all_reduce or
 * ping-pong of bench/watch_cost.sh.
 *   recorder_cost [MILLIONS]   (default 10) */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include "group/recorder.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* ns per collective and per p2p op through recorder r (NULL: off). */
static void measure(spmd__rec *r, long n, double *coll_ns, double *p2p_ns) {
    spmd__coll_args a = {.kind = SPMD__C_ALL_REDUCE, .count = 1, .dt = SPMD_F32, .op = SPMD_SUM, .root = 0};
    double t0 = now_s();
    for (long i = 1; i <= n; i++) {
        a.seq = (uint32_t)i;
        spmd__rec_coll_issue(r, &a, 1);
        spmd__rec_coll_start(r, a.seq);
        spmd__rec_coll_end(r, a.seq, SPMD_OK);
    }
    double t1 = now_s();
    for (long i = 1; i <= n; i++) {
        uint64_t t = spmd__rec_p2p_post(r, (int)(i & 1), 1, 7, 4, SPMD_I32);
        spmd__rec_p2p_end(r, t, SPMD_OK);
    }
    double t2 = now_s();
    *coll_ns = (t1 - t0) / (double)n * 1e9;
    *p2p_ns = (t2 - t1) / (double)n * 1e9;
}

int main(int argc, char **argv) {
    long n = (argc > 1 ? atol(argv[1]) : 10) * 1000000L;
    if (n <= 0) n = 1000000;
    spmd__rec *r = spmd__rec_new();
    if (!r) {
        fprintf(stderr, "recorder_cost: the recorder is off (SPMD_RECORDER_ENTRIES=0?)\n");
        return 1;
    }
    /* as in a group: the clock is a progress thread's (here one fixed value) */
    static _Atomic int64_t clock_ms = 1000;
    spmd__rec_set_clock(r, &clock_ms);
    double c_on = 0, p_on = 0, c_off = 0, p_off = 0;
    for (int round = 0; round < 3; round++) { /* interleaved; the last round counts (warm) */
        measure(r, n, &c_on, &p_on);
        measure(NULL, n, &c_off, &p_off);
    }
    printf("flight recorder, per operation: collective %.1f ns (off: %.1f ns), point-to-point %.1f ns (off: %.1f ns)\n",
           c_on, c_off, p_on, p_off);
    spmd__rec_free(r);
    return 0;
}
