/* fuzz_hostlist.c — libFuzzer harness for the Slurm hostlist expander
 * (src/common/hostlist.c), which reads SLURM_JOB_NODELIST.
 *
 * Besides "no crash, no read past the input" it checks: a list is either
 * refused whole (every index answers SPMD_ERR_INVALID) or its hosts are
 * indices 0..n-1 followed by SPMD_ERR_NOTFOUND; a host is a non-empty string
 * without brackets or commas, made of the list's own characters and digits;
 * the expansion of the list with one host per item ("a,b,c") is itself. */
#include <stdint.h>
#include <string.h>
#include "common/common.h"

#include "fuzz/fuzz_prop.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char expr[257];
    if (size > 256) size = 256;
    memcpy(expr, data, size);
    expr[size] = 0;
    char h[300];
    spmd_status first = spmd__hostlist_nth(expr, 0, h, sizeof h);
    REQUIRE_PROP(first == SPMD_OK || first == SPMD_ERR_INVALID || first == SPMD_ERR_NOTFOUND);
    size_t i = 0;
    for (; i < 2000; i++) {
        spmd_status st = spmd__hostlist_nth(expr, i, h, sizeof h);
        if (first == SPMD_ERR_INVALID) {
            REQUIRE_PROP(st == SPMD_ERR_INVALID);
            if (i == 3) break;
            continue;
        }
        if (st == SPMD_ERR_NOTFOUND) break;
        REQUIRE_PROP(st == SPMD_OK);
        REQUIRE_PROP(h[0] != 0 && strlen(h) < sizeof h);
        for (const char *c = h; *c; c++) {
            REQUIRE_PROP(*c != '[' && *c != ']' && *c != ',');
            REQUIRE_PROP((*c >= '0' && *c <= '9') || memchr(expr, *c, size));
        }
    }
    if (first != SPMD_ERR_INVALID && i < 2000)
        REQUIRE_PROP(spmd__hostlist_nth(expr, i + 1, h, sizeof h) == SPMD_ERR_NOTFOUND);
    /* Without brackets a list is its own expansion. */
    if (first == SPMD_OK && !memchr(expr, '[', size)) {
        char again[300] = "";
        size_t o = 0;
        for (size_t k = 0; spmd__hostlist_nth(expr, k, h, sizeof h) == SPMD_OK; k++) {
            size_t n = strlen(h);
            REQUIRE_PROP(o + n + 2 < sizeof again);
            if (k) again[o++] = ',';
            memcpy(again + o, h, n + 1);
            o += n;
        }
        REQUIRE_PROP(!strcmp(again, expr));
    }
    return 0;
}

size_t fuzz_seed_input(unsigned i, uint8_t *buf, size_t cap);
size_t fuzz_seed_input(unsigned i, uint8_t *buf, size_t cap) {
    static const char *seeds[] = {"node[01-04,07],gpu3", "rack[2-3]n[05-06]", "a1,b[8-10]x,c",
                                  "a[01,03]-x[1,3-4],gpu7,c[8-10]", "n[098-101]", "host"};
    const char *s = seeds[i % (sizeof seeds / sizeof *seeds)];
    size_t n = strlen(s) < cap ? strlen(s) : cap;
    memcpy(buf, s, n);
    return n;
}
