/* tools/size_arg.h — a byte count on the command line: "4", "64K", "1M",
 * "2G", "512KB" (binary units, case-insensitive), as nccl-tests' -b/-e take
 * them.  Shared by spmd-bench and the benchmarks under bench/. */
#ifndef SPMD_TOOLS_SIZE_ARG_H
#define SPMD_TOOLS_SIZE_ARG_H

#include <errno.h>
#include <stddef.h>
#include <stdlib.h>

/* 0 and *out set, or -1 when s is not such a count. */
static inline int spmd_size_arg(const char *s, size_t *out) {
    char *end = NULL;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || v < 0) return -1;
    double m = 1;
    if (*end == 'K' || *end == 'k') m = 1024, end++;
    else if (*end == 'M' || *end == 'm') m = 1024.0 * 1024, end++;
    else if (*end == 'G' || *end == 'g') m = 1024.0 * 1024 * 1024, end++;
    if (*end == 'B' || *end == 'b') end++;
    if (*end) return -1;
    *out = (size_t)(v * m);
    return 0;
}

#endif
