/* fuzz_torch_item.c — libFuzzer harness for the reader of one DCP data item
 * (a torch.save archive: zip directory, zip64 records, the restricted
 * data.pkl, the storage entry; a bytes item as bytes and as a plain Python
 * value).  An accepted tensor's bytes must lie inside the input and match its
 * shape; a refusal must name the input (abort() = a finding).  Seeds: archives written by spmd's torch.save writer. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "ckpt/ckpt_internal.h"
#include "ckpt/pickle.h"
#include "fuzz/fuzz_prop.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
size_t fuzz_seed_input(unsigned i, uint8_t *buf, size_t cap);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    spmd__torch_tensor t;
    char err[512];
    if (spmd__torch_tensor_parse(data, size, "fuzz", &t, err, sizeof err) == SPMD_OK) {
        REQUIRE_PROP(t.data >= data && t.nbytes <= size && (size_t)(t.data - data) <= size - t.nbytes);
        uint64_t n = t.elsize;
        for (int d = 0; d < t.ndim; d++) n *= (uint64_t)t.shape[d];
        REQUIRE_PROP(n == t.nbytes && t.ndim <= SPMD_DCP_MAX_DIMS);
    } else {
        REQUIRE_PROP(memchr(err, 0, sizeof err) && strstr(err, "fuzz"));
    }
    void *b = NULL;
    size_t len = 0;
    if (spmd__torch_bytes_parse(data, size, "fuzz", &b, &len, err, sizeof err) == SPMD_OK) {
        REQUIRE_PROP(len <= size);
        free(b);
    } else {
        REQUIRE_PROP(strstr(err, "fuzz"));
    }
    spmd_dcp_value v;
    if (spmd__dcp_value_parse(data, size, "fuzz", &v, err, sizeof err) == SPMD_OK) {
        REQUIRE_PROP(v.type <= SPMD_DCP_DICT && (v.type != SPMD_DCP_BYTES || v.len <= size));
        spmd_dcp_value_free(&v);
    } else {
        REQUIRE_PROP(strstr(err, "fuzz") && v.type == SPMD_DCP_NONE && !v.items && !v.s);
    }
    return 0;
}

size_t fuzz_seed_input(unsigned i, uint8_t *buf, size_t cap) {
    static const float f[6] = {1, 2, 3, 4, 5, 6};
    static const int64_t shapes[3][2] = {{2, 3}, {6, 1}, {0, 0}};
    FILE *tf = tmpfile(); /* the archives are written to a file, as a save writes them */
    if (!tf) return 0;
    spmd__fw w = {.fd = fileno(tf)};
    if (i % 4 == 3) spmd__torch_save_bytes(&w, "rng-state", 9, 0);
    else spmd__torch_save_tensor(&w, i % 2 ? "int32" : "float32", (int)(i % 4 == 2 ? 0 : 2), shapes[i % 3], f);
    spmd__fw_flush(&w);
    spmd__fw_free(&w);
    size_t n = w.err || w.off > cap ? 0 : (size_t)w.off;
    if (n && pread(fileno(tf), buf, n, 0) != (ssize_t)n) n = 0;
    fclose(tf);
    return n;
}
