/* src/coll/pattern.c — peer and chunk arithmetic shared by the algorithms
 * (see pattern.h for the conventions).  Pure functions, no I/O. */
#include "coll/pattern.h"

size_t spmd__chunk_off(size_t n, size_t parts, size_t i) {
    size_t q = n / parts, rem = n % parts;
    return i * q + (i < rem ? i : rem);
}

size_t spmd__chunk_len(size_t n, size_t parts, size_t i) {
    size_t q = n / parts, rem = n % parts;
    return q + (i < rem ? 1 : 0);
}

size_t spmd__chunks_len(size_t n, size_t parts, size_t first, size_t nchunks) {
    return spmd__chunk_off(n, parts, first + nchunks) - spmd__chunk_off(n, parts, first);
}

size_t spmd__nsegs(size_t n, size_t seg) {
    if (n == 0) return 0;
    if (seg == 0) return 1;
    return (n + seg - 1) / seg;
}

int spmd__pow2_floor(int w) {
    int p = 1;
    while (p <= w / 2) p *= 2;
    return p;
}

int spmd__log2_floor(int w) {
    int k = 0;
    while ((1 << (k + 1)) <= w && k < 30) k++;
    return k;
}

int spmd__ceil_log2(int w) {
    int k = 0;
    while ((1 << k) < w && k < 30) k++;
    return k;
}

spmd__fold spmd__fold_of(int r, int w) {
    spmd__fold f;
    f.p = spmd__pow2_floor(w);
    int extra = w - f.p;
    if (r >= f.p) {
        f.in_core = 0;
        f.partner = r - f.p;
    } else {
        f.in_core = 1;
        f.partner = r < extra ? r + f.p : -1;
    }
    return f;
}

spmd__rh_step spmd__rh_step_of(int r, int p, int k) {
    spmd__rh_step s;
    int range = p >> k;           /* chunks this rank covers before step k */
    int half = range >> 1;
    int start = r & ~(range - 1);
    s.half = half;
    s.peer = r ^ half;
    if (r & half) {
        s.keep_first = start + half;
        s.send_first = start;
    } else {
        s.keep_first = start;
        s.send_first = start + half;
    }
    return s;
}

int spmd__tree_parent(int r, int root, int w) {
    int v = spmd__vrank(r, root, w);
    if (v == 0) return -1;
    return spmd__unvrank(v & (v - 1), root, w);
}

/* Lowest set bit of v; for the root, a bound above every child distance. */
static long lowbit_of(int v, int w) {
    if (v == 0) return 2L * (long)spmd__pow2_floor(w);
    return (long)(v & -v);
}

int spmd__tree_children(int r, int root, int w, int *children, int max) {
    int v = spmd__vrank(r, root, w);
    long lb = lowbit_of(v, w);
    int n = 0;
    for (long m = lb >> 1; m >= 1; m >>= 1) {
        if ((long)v + m < (long)w) {
            if (n < max) children[n] = spmd__unvrank(v + (int)m, root, w);
            n++;
        }
    }
    return n < max ? n : max;
}

int spmd__tree_subtree(int r, int root, int w) {
    int v = spmd__vrank(r, root, w);
    long lb = lowbit_of(v, w);
    long rest = (long)w - v;
    return (int)(lb < rest ? lb : rest);
}

int spmd__dissem_rounds(int w) { return spmd__ceil_log2(w); }
