/* hostlist.c — Slurm hostlist expressions: "node[01-04,07],gpu3" expands to
 * node01 node02 node03 node04 node07 gpu3 (zero padding kept).  Only the
 * first bracket group of each item is expanded, which is what Slurm emits for
 * SLURM_JOB_NODELIST. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "common.h"

/* Visit host number `want` of one item "prefix[ranges]suffix" (or a plain
 * name).  Returns the number of hosts in the item, or -1 when malformed;
 * when want < count, writes that host to out. */
static long item_nth(const char *item, size_t len, size_t want, char *out, size_t outlen,
                     int *found) {
    const char *lb = memchr(item, '[', len);
    if (!lb) {
        if (len == 0) return -1;
        if (want == 0) {
            if (len + 1 > outlen) return -1;
            memcpy(out, item, len);
            out[len] = 0;
            *found = 1;
        }
        return 1;
    }
    const char *rb = memchr(lb, ']', len - (size_t)(lb - item));
    if (!rb) return -1;
    size_t plen = (size_t)(lb - item);
    const char *suffix = rb + 1;
    size_t slen = len - (size_t)(suffix - item);
    long count = 0;
    const char *p = lb + 1;
    while (p < rb) {
        const char *comma = memchr(p, ',', (size_t)(rb - p));
        const char *e = comma ? comma : rb;
        const char *dash = memchr(p, '-', (size_t)(e - p));
        char a[32], b[32];
        size_t alen = (size_t)((dash ? dash : e) - p);
        if (alen == 0 || alen >= sizeof a) return -1;
        memcpy(a, p, alen);
        a[alen] = 0;
        size_t blen = dash ? (size_t)(e - dash - 1) : alen;
        if (blen == 0 || blen >= sizeof b) return -1;
        memcpy(b, dash ? dash + 1 : p, blen);
        b[blen] = 0;
        for (size_t i = 0; i < alen; i++) if (a[i] < '0' || a[i] > '9') return -1;
        for (size_t i = 0; i < blen; i++) if (b[i] < '0' || b[i] > '9') return -1;
        long lo = strtol(a, NULL, 10), hi = strtol(b, NULL, 10);
        if (hi < lo || hi - lo > 1000000) return -1;
        int width = (int)alen;
        if (!*found && want >= (size_t)count && want < (size_t)(count + hi - lo + 1)) {
            long v = lo + (long)(want - (size_t)count);
            int n = snprintf(out, outlen, "%.*s%0*ld%.*s", (int)plen, item, width, v, (int)slen,
                             suffix);
            if (n < 0 || (size_t)n >= outlen) return -1;
            *found = 1;
        }
        count += hi - lo + 1;
        p = comma ? comma + 1 : rb;
    }
    return count;
}

spmd_status spmd__hostlist_nth(const char *expr, size_t i, char *out, size_t outlen) {
    if (!expr || !out || !outlen) return SPMD_ERR_INVALID;
    size_t seen = 0;
    int found = 0;
    const char *p = expr;
    while (*p) {
        /* Items are separated by commas outside brackets. */
        const char *q = p;
        int depth = 0;
        while (*q && (depth || *q != ',')) {
            if (*q == '[') depth++;
            else if (*q == ']') depth--;
            q++;
        }
        if (depth) return SPMD_ERR_INVALID;
        long n = item_nth(p, (size_t)(q - p), i >= seen ? i - seen : (size_t)-1, out, outlen, &found);
        if (n < 0) return SPMD_ERR_INVALID;
        if (found) return SPMD_OK;
        seen += (size_t)n;
        p = *q ? q + 1 : q;
    }
    return SPMD_ERR_NOTFOUND;
}

spmd_status spmd__hostlist_first(const char *expr, char *out, size_t outlen) {
    return spmd__hostlist_nth(expr, 0, out, outlen);
}
