/* p2p_match.c — the text of a point-to-point mismatch (p2p_match.h), the
 * same from either engine. */
#include <stdio.h>
#include "p2p_match.h"

void spmd__p2p_describe(char *buf, size_t len, uint64_t bytes, int dt) {
    size_t es = dt >= 0 ? spmd_dtype_size((spmd_dtype)dt) : 0;
    if (es && bytes % es == 0)
        snprintf(buf, len, "%llu x %s (%llu bytes)", (unsigned long long)(bytes / es), spmd_dtype_name((spmd_dtype)dt),
                 (unsigned long long)bytes);
    else if (es)
        snprintf(buf, len, "%llu bytes of %s", (unsigned long long)bytes, spmd_dtype_name((spmd_dtype)dt));
    else
        snprintf(buf, len, "%llu bytes", (unsigned long long)bytes);
}

void spmd__p2p_mismatch_msg(char *buf, size_t len, int self, int src, uint32_t tag, uint64_t got, int gdt,
                            size_t want, int wdt) {
    char a[96], b[96];
    spmd__p2p_describe(a, sizeof a, got, gdt);
    spmd__p2p_describe(b, sizeof b, want, wdt);
    snprintf(buf, len, "%s mismatch: rank %d sent %s with tag %u but rank %d's receive expects %s",
             got == want ? "type" : "size", src, a, tag, self, b);
}
