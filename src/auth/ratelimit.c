/* ratelimit.c — see ratelimit.h.  Not thread-safe: one per serving thread. */
#include "auth/ratelimit.h"
#include "common/common.h"

int spmd__ratelimit_ok(spmd__ratelimit *r, const char *who) {
    uint64_t now = spmd__now_ns(), window = (uint64_t)SPMD__RL_WINDOW_S * 1000000000ull;
    if (r->window_start_ns == 0 || now - r->window_start_ns >= window) {
        if (r->suppressed)
            SPMD_LOGW("%s: %u more refused connections in the last %d s were not logged", who,
                      r->suppressed, SPMD__RL_WINDOW_S);
        r->window_start_ns = now;
        r->shown = r->suppressed = 0;
    }
    if (r->shown < SPMD__RL_LINES) {
        r->shown++;
        return 1;
    }
    r->suppressed++;
    return 0;
}
