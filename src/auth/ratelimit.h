/* src/auth/ratelimit.h — refusals of strangers are logged, but a stranger that
 * reconnects in a loop must not fill the disk: at most SPMD__RL_LINES lines
 * per SPMD__RL_WINDOW_S seconds, then one line counting the rest. */
#ifndef SPMD_AUTH_RATELIMIT_H
#define SPMD_AUTH_RATELIMIT_H

#include <stdint.h>

#define SPMD__RL_LINES 10
#define SPMD__RL_WINDOW_S 10

typedef struct {
    uint64_t window_start_ns;
    unsigned shown, suppressed;
} spmd__ratelimit;

/* 1 when a warning may be logged now.  `who` names the logger in the line
 * that reports how many were suppressed. */
int spmd__ratelimit_ok(spmd__ratelimit *r, const char *who);

#endif
