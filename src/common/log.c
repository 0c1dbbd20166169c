/* log.c — stderr logging gated by SPMD_LOG_LEVEL; one write() per line so
 * lines from threads and processes never interleave mid-line. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>
#include "common.h"

static atomic_int log_level = -1;

static int read_level(void) {
    const char *s = getenv("SPMD_LOG_LEVEL");
    if (!s || !*s) return SPMD__LOG_WARN;
    if (!strcasecmp(s, "error")) return SPMD__LOG_ERROR;
    if (!strcasecmp(s, "warn") || !strcasecmp(s, "warning")) return SPMD__LOG_WARN;
    if (!strcasecmp(s, "info")) return SPMD__LOG_INFO;
    if (!strcasecmp(s, "debug")) return SPMD__LOG_DEBUG;
    return SPMD__LOG_WARN;
}

int spmd__log_enabled(int level) {
    int l = atomic_load_explicit(&log_level, memory_order_relaxed);
    if (l < 0) {
        l = read_level();
        atomic_store(&log_level, l);
    }
    return level <= l;
}

void spmd__log(int level, const char *fmt, ...) {
    static const char *names[] = {"error", "warn", "info", "debug"};
    char line[1024];
    int n = snprintf(line, sizeof line, "spmd[%ld] %s: ", (long)getpid(),
                     names[level < 0 ? 0 : level > 3 ? 3 : level]);
    va_list ap;
    va_start(ap, fmt);
    if (n > 0 && (size_t)n < sizeof line) n += vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if ((size_t)n >= sizeof line - 1) n = (int)sizeof line - 2;
    line[n++] = '\n';
    ssize_t w = write(2, line, (size_t)n);
    (void)w;
}
