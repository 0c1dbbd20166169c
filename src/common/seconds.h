/* src/common/seconds.h — monotonic time as seconds in a double, for
 * measurements (wait times, step times, benchmarks).  Deadlines use the
 * integer clocks of common.h instead. */
#ifndef SPMD_COMMON_SECONDS_H
#define SPMD_COMMON_SECONDS_H

#include <time.h>

static inline double spmd__seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

#endif
