/* env.c — strict parsing of integers and durations from the environment,
 * and the list of the library's numeric SPMD_* variables, checked together
 * when a group is formed (a malformed value is an error naming it). */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "common.h"

spmd_status spmd__env_int(const char *name, long lo, long hi, long *out) {
    const char *s = getenv(name);
    if (!s || !*s) return SPMD_ERR_NOTFOUND;
    char *end = NULL;
    errno = 0;
    long v = strtol(s, &end, 10);
    while (end && isspace((unsigned char)*end)) end++;
    if (errno || !end || *end || v < lo || v > hi) return SPMD_ERR_INVALID;
    *out = v;
    return SPMD_OK;
}

spmd_status spmd__parse_duration_ms(const char *s, long *out_ms) {
    if (!s || !*s) return SPMD_ERR_INVALID;
    char *end = NULL;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || v < 0) return SPMD_ERR_INVALID;
    double mult = 1000.0; /* bare numbers are seconds, as torch's timeout is */
    if (!strcmp(end, "ms")) mult = 1.0;
    else if (!strcmp(end, "s") || !*end) mult = 1000.0;
    else if (!strcmp(end, "m")) mult = 60000.0;
    else if (!strcmp(end, "h")) mult = 3600000.0;
    else return SPMD_ERR_INVALID;
    double ms = v * mult;
    if (ms > 2147483647.0) return SPMD_ERR_INVALID;
    *out_ms = (long)ms;
    return SPMD_OK;
}

/* Each numeric variable the library reads, with the range its reader accepts
 * (docs/API.md lists them).  Durations take the suffixes above. */
typedef struct {
    const char *name;
    int duration;
    long lo, hi;
} numeric_var;

static const numeric_var numeric_vars[] = {
    {"SPMD_TIMEOUT", 1, 0, 2147483647L},
    {"SPMD_HEARTBEAT_TIMEOUT", 1, 0, 24L * 3600 * 1000},
    {"SPMD_HANDSHAKE_TIMEOUT_MS", 0, 50, 600000},
    {"SPMD_RECORDER_ENTRIES", 0, 0, 1L << 20},
    {"SPMD_RPC_THREADS", 0, 1, 1024},
    {"SPMD_SEGMENT_BYTES", 0, 64, 1L << 30},
    {"SPMD_P2P_CMA_MIN_BYTES", 0, 1, 1L << 40},
    {"SPMD_P2P_PARALLEL_MIN_BYTES", 0, 0, 1L << 40},
    {"SPMD_CMA_MIN_BYTES", 0, 1, 1L << 40},
    {"SPMD_SHM_SLOT_BYTES", 0, 4096, 1L << 30},
    {"SPMD_SHM_RING_BYTES", 0, 4096, 64L << 20},
    {"SPMD_SPIN_US", 0, 0, 1000000},
    {"SPMD_WAIT_SLICE_US", 0, 0, 100000},
    {"SPMD_RESTART_COUNT", 0, 0, 1L << 20},
};

spmd_status spmd__env_check_numeric(char *err, size_t errlen) {
    for (size_t i = 0; i < sizeof numeric_vars / sizeof numeric_vars[0]; i++) {
        const numeric_var *v = &numeric_vars[i];
        const char *s = getenv(v->name);
        if (!s || !*s) continue;
        long x;
        if (v->duration) {
            if (spmd__parse_duration_ms(s, &x) == SPMD_OK && x >= v->lo && x <= v->hi) continue;
            return spmd__fail(err, errlen, SPMD_ERR_INVALID,
                              "environment variable %s='%s' is not a duration of at most %ld s "
                              "(e.g. 30, 30s, 500ms, 5m)", v->name, s, v->hi / 1000);
        }
        if (spmd__env_int(v->name, v->lo, v->hi, &x) == SPMD_OK) continue;
        return spmd__fail(err, errlen, SPMD_ERR_INVALID,
                          "environment variable %s='%s' is not an integer in [%ld, %ld]", v->name, s, v->lo,
                          v->hi);
    }
    return SPMD_OK;
}
