/* clock.c — monotonic time and deadlines. */
#include <time.h>
#include "common.h"

uint64_t spmd__now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

int64_t spmd__now_ms(void) { return (int64_t)(spmd__now_ns() / 1000000ull); }

int64_t spmd__deadline(int timeout_ms) {
    if (timeout_ms < 0) return INT64_MAX;
    return spmd__now_ms() + timeout_ms;
}

int spmd__remaining_ms(int64_t deadline) {
    if (deadline == INT64_MAX) return -1;
    int64_t left = deadline - spmd__now_ms();
    if (left <= 0) return 0;
    if (left > 1000000000) return 1000000000;
    return (int)left;
}
