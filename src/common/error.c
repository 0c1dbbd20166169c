/* error.c — formatting detailed messages into caller-owned buffers. */
#include <stdio.h>
#include <string.h>
#include "common.h"

spmd_status spmd__vfail(char *buf, size_t len, spmd_status st, const char *fmt, va_list ap) {
    if (buf && len) vsnprintf(buf, len, fmt, ap);
    return st;
}

spmd_status spmd__fail(char *buf, size_t len, spmd_status st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    spmd__vfail(buf, len, st, fmt, ap);
    va_end(ap);
    return st;
}

spmd_status spmd__vfail_locked(pthread_mutex_t *mu, char *buf, size_t len, spmd_status st, const char *fmt,
                               va_list ap) {
    char tmp[SPMD__ERRLEN];
    vsnprintf(tmp, sizeof tmp, fmt, ap);
    pthread_mutex_lock(mu);
    snprintf(buf, len, "%s", tmp);
    pthread_mutex_unlock(mu);
    return st;
}

spmd_status spmd__fail_errno(char *buf, size_t len, spmd_status st, int errno_value,
                             const char *fmt, ...) {
    if (buf && len) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(buf, len, fmt, ap);
        va_end(ap);
        if (n >= 0 && (size_t)n < len) {
            char tmp[128];
            /* XSI strerror_r: returns int and fills tmp. */
            if (strerror_r(errno_value, tmp, sizeof tmp) != 0) snprintf(tmp, sizeof tmp, "errno %d", errno_value);
            snprintf(buf + n, len - (size_t)n, ": %s", tmp);
        }
    }
    return st;
}
