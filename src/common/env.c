/* env.c — strict parsing of integers and durations from the environment. */
#include <ctype.h>
#include <errno.h>
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
