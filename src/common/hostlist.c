/* hostlist.c — Slurm hostlist expressions, expanded as `scontrol show
 * hostnames` does: "node[01-04,07],gpu3" is node01 node02 node03 node04
 * node07 gpu3; an item may hold several bracket groups, "rack[2-3]n[05-06]"
 * being rack2n05 rack2n06 rack3n05 rack3n06 (the last group varies fastest).
 * A range keeps the zero padding of its first number ("[08-10]": 08 09 10;
 * "[8-10]": 8 9 10).  Commas inside brackets separate ranges, outside them
 * items.  Anything else (nested or unbalanced brackets, an empty item or
 * range, a descending range, a non-digit in a range) is malformed. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "common.h"

#define MAX_GROUP_HOSTS 1000000L /* per bracket group, and per item */

/* Number of hosts in one bracket group's body "1-3,07" (b..e), or -1.  With
 * want < count, writes host `want` into num (zero-padded to its range's width). */
static long group_nth(const char *b, const char *e, long want, char *num, size_t numlen) {
    long count = 0;
    const char *p = b;
    if (p == e) return -1;
    for (;;) {
        const char *comma = memchr(p, ',', (size_t)(e - p));
        const char *end = comma ? comma : e;
        const char *dash = memchr(p, '-', (size_t)(end - p));
        const char *a = p, *ae = dash ? dash : end, *z = dash ? dash + 1 : p, *ze = end;
        size_t alen = (size_t)(ae - a), zlen = (size_t)(ze - z);
        if (alen == 0 || alen > 18 || zlen == 0 || zlen > 18) return -1;
        long lo = 0, hi = 0;
        for (const char *c = a; c < ae; c++) {
            if (*c < '0' || *c > '9') return -1;
            lo = lo * 10 + (*c - '0');
        }
        for (const char *c = z; c < ze; c++) {
            if (*c < '0' || *c > '9') return -1;
            hi = hi * 10 + (*c - '0');
        }
        if (hi < lo || hi - lo >= MAX_GROUP_HOSTS || count + (hi - lo + 1) > MAX_GROUP_HOSTS)
            return -1;
        if (want >= count && want < count + (hi - lo + 1)) {
            int n = snprintf(num, numlen, "%0*ld", (int)alen, lo + (want - count));
            if (n < 0 || (size_t)n >= numlen) return -1;
        }
        count += hi - lo + 1;
        if (!comma) return count;
        p = comma + 1;
    }
}

/* Hosts in one item (text b..e, no comma outside brackets), or -1.  With
 * want < count, writes host `want` to out. */
static long item_nth(const char *b, const char *e, long want, char *out, size_t outlen) {
    if (b == e) return -1;
    /* First pass: the count, and each group's size for the mixed-radix index. */
    long total = 1, sizes[16];
    int ngroups = 0;
    char num[32];
    for (const char *p = b; p < e; p++) {
        if (*p == ']') return -1;
        if (*p != '[') continue;
        const char *rb = memchr(p, ']', (size_t)(e - p));
        if (!rb || memchr(p + 1, '[', (size_t)(rb - p - 1)) || ngroups == 16) return -1;
        long n = group_nth(p + 1, rb, -1, num, sizeof num);
        if (n < 0 || total > MAX_GROUP_HOSTS / n) return -1;
        sizes[ngroups++] = n;
        total *= n;
        p = rb;
    }
    if (want < 0 || want >= total) return total;
    /* Second pass: write host `want`, the last group varying fastest. */
    long digit[16];
    for (int g = ngroups - 1; g >= 0; g--) {
        digit[g] = want % sizes[g];
        want /= sizes[g];
    }
    size_t o = 0;
    int g = 0;
    for (const char *p = b; p < e; p++) {
        const char *piece = p;
        size_t plen = 1;
        if (*p == '[') {
            const char *rb = memchr(p, ']', (size_t)(e - p));
            group_nth(p + 1, rb, digit[g++], num, sizeof num);
            piece = num;
            plen = strlen(num);
            p = rb;
        }
        if (o + plen + 1 > outlen) return -1;
        memcpy(out + o, piece, plen);
        o += plen;
    }
    out[o] = 0;
    return total;
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
            if (depth < 0 || depth > 1) return SPMD_ERR_INVALID;
            q++;
        }
        if (depth) return SPMD_ERR_INVALID;
        /* Items after the one asked for are still checked: a malformed list
         * is refused whole, as scontrol does. */
        long want = !found && i >= seen && i - seen < (size_t)MAX_GROUP_HOSTS ? (long)(i - seen) : -1;
        long n = item_nth(p, q, want, out, outlen);
        if (n < 0) return SPMD_ERR_INVALID;
        if (want >= 0 && want < n) found = 1;
        seen += (size_t)n;
        if (*q && !q[1]) return SPMD_ERR_INVALID; /* a trailing comma */
        p = *q ? q + 1 : q;
    }
    return found ? SPMD_OK : SPMD_ERR_NOTFOUND;
}

spmd_status spmd__hostlist_first(const char *expr, char *out, size_t outlen) {
    return spmd__hostlist_nth(expr, 0, out, outlen);
}
