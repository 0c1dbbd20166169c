/* fuzz_idx.c — libFuzzer harness for the IDX parser and the images+labels
 * join.  The first byte picks the entry point; the rest is the file image.
 * Invariants of a successful parse are checked (abort() = a finding).
 * fuzz_seed_input() gives the replay main valid inputs to mutate. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "spmd/data.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
size_t fuzz_seed_input(unsigned i, uint8_t *buf, size_t cap);

static void check_idx(const spmd_idx *x) {
    size_t count = 1;
    if (x->ndims < 1 || x->ndims > SPMD_IDX_MAX_DIMS) abort();
    for (int d = 0; d < x->ndims; d++) count *= x->dims[d];
    if (count != x->count || count > SPMD_IDX_MAX_BYTES || !x->data) abort();
    volatile uint8_t sink = x->data[0] ^ x->data[count - 1]; /* in bounds, or ASan says so */
    (void)sink;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size == 0) return 0;
    /* byte 0: mode = b % 3; for mode 1 the expected ndims is 1 + (b / 3) % 8 */
    uint8_t mode = data[0] % 3;
    int expect = 1 + (data[0] / 3) % SPMD_IDX_MAX_DIMS;
    data++, size--;
    char err[256];
    if (mode < 2) {
        spmd_idx x;
        int nd = mode == 0 ? 0 : expect;
        if (spmd_idx_parse(data, size, nd, "fuzz", &x, err, sizeof err) == SPMD_OK) {
            check_idx(&x);
            spmd_idx_free(&x);
        } else if (!memchr(err, 0, sizeof err) || !strstr(err, "fuzz")) {
            abort(); /* every message is terminated and names the input */
        }
        return 0;
    }
    /* images and labels: two bytes give the split point */
    if (size < 2) return 0;
    size_t split = ((size_t)data[0] | (size_t)data[1] << 8) % (size - 1);
    const uint8_t *img = data + 2, *lbl = data + 2 + split;
    size_t ilen = split, llen = size - 2 - split;
    spmd_dataset ds = SPMD_DATASET_INIT;
    if (spmd_dataset_parse(img, ilen, lbl, llen, 10, &ds, err, sizeof err) == SPMD_OK) {
        size_t px = (size_t)ds.rows * (size_t)ds.cols;
        if (ds.n == 0 || px == 0 || ds.n * px + 16 != ilen || ds.n + 8 != llen) abort();
        for (size_t i = 0; i < ds.n; i++)
            if (ds.labels[i] >= 10) abort();
        size_t idx[2] = {0, ds.n - 1};
        float *x = malloc(2 * px * sizeof *x);
        int y[2];
        if (!x || spmd_dataset_batch(&ds, idx, 2, 0.5f, 0.5f, x, y) != SPMD_OK) abort();
        free(x);
        spmd_dataset_free(&ds);
    }
    return 0;
}

/* Valid inputs: an idx1, an idx3, an images+labels pair, a 4-d array. */
size_t fuzz_seed_input(unsigned i, uint8_t *buf, size_t cap) {
    uint8_t t[512];
    size_t n = 0;
    static const uint32_t shapes[4][5] = {{1, 7}, {3, 3, 2, 4}, {0}, {4, 2, 1, 3, 2}};
    unsigned which = i % 4;
    if (which == 2) { /* pair: 3 images 2x2 and 3 labels */
        size_t split = 16 + 12;
        t[n++] = 2;
        t[n++] = (uint8_t)split, t[n++] = (uint8_t)(split >> 8);
        const uint8_t ih[16] = {0, 0, 8, 3, 0, 0, 0, 3, 0, 0, 0, 2, 0, 0, 0, 2};
        memcpy(t + n, ih, 16), n += 16;
        for (int k = 0; k < 12; k++) t[n++] = (uint8_t)(k * 20);
        const uint8_t lh[8] = {0, 0, 8, 1, 0, 0, 0, 3};
        memcpy(t + n, lh, 8), n += 8;
        t[n++] = 0, t[n++] = 9, t[n++] = 4;
    } else {
        const uint32_t *s = shapes[which];
        int nd = (int)s[0];
        t[n++] = (uint8_t)(i / 4 % 2 ? 1 + 3 * (nd - 1) : 0); /* any dims, or exactly nd */
        t[n++] = 0, t[n++] = 0, t[n++] = 8, t[n++] = (uint8_t)nd;
        size_t count = 1;
        for (int d = 0; d < nd; d++) {
            uint32_t v = s[1 + d];
            t[n++] = (uint8_t)(v >> 24), t[n++] = (uint8_t)(v >> 16), t[n++] = (uint8_t)(v >> 8),
            t[n++] = (uint8_t)v;
            count *= v;
        }
        for (size_t k = 0; k < count && n < sizeof t; k++) t[n++] = (uint8_t)(k % 10);
    }
    if (n > cap) n = cap;
    memcpy(buf, t, n);
    return n;
}
