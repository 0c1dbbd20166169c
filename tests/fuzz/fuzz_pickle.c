/* fuzz_pickle.c — libFuzzer harness for the restricted pickle reader behind
 * DCP's .metadata (src/ckpt): any input is decoded; a refusal must carry a
 * message naming the input, an acceptance must re-encode and decode to the
 * same entries (abort() = a finding).  Nothing is ever executed: the reader
 * has no call path to any global.  fuzz_seed_input() gives the replay main
 * valid metadata to mutate. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "fuzz/fuzz_prop.h"
#include "spmd/ckpt.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
size_t fuzz_seed_input(unsigned i, uint8_t *buf, size_t cap);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    spmd_dcp_metadata m, again;
    char err[512];
    spmd_status st = spmd_dcp_metadata_decode(data, size, "fuzz", &m, err, sizeof err);
    if (st != SPMD_OK) {
        REQUIRE_PROP(memchr(err, 0, sizeof err) && strstr(err, "fuzz"));
        REQUIRE_PROP(st == SPMD_ERR_FORMAT || st == SPMD_ERR_NOMEM || st == SPMD_ERR_UNSUPPORTED);
        return 0;
    }
    void *buf = NULL;
    size_t len = 0;
    REQUIRE_PROP(spmd_dcp_metadata_encode(&m, &buf, &len, err, sizeof err) == SPMD_OK);
    REQUIRE_PROP(spmd_dcp_metadata_decode(buf, len, "again", &again, err, sizeof err) == SPMD_OK);
    REQUIRE_PROP(again.nentries == m.nentries && again.nstorage == m.nstorage);
    for (size_t i = 0; i < m.nentries; i++) {
        const spmd_dcp_entry *a = &m.entries[i], *b = &again.entries[i];
        REQUIRE_PROP(!strcmp(a->fqn, b->fqn) && a->is_bytes == b->is_bytes && a->ndim == b->ndim &&
                     a->nchunks == b->nchunks && !strcmp(a->dtype, b->dtype));
        REQUIRE_PROP(!memcmp(a->size, b->size, sizeof a->size));
        for (size_t k = 0; k < a->nchunks; k++)
            REQUIRE_PROP(!memcmp(&a->chunks[k], &b->chunks[k], sizeof a->chunks[k]));
    }
    for (size_t i = 0; i < m.nstorage; i++)
        REQUIRE_PROP(m.storage[i].file_offset == again.storage[i].file_offset &&
                     m.storage[i].length == again.storage[i].length &&
                     !strcmp(m.storage[i].relative_path, again.storage[i].relative_path));
    free(buf);
    spmd_dcp_metadata_free(&again);
    spmd_dcp_metadata_free(&m);
    return 0;
}

/* Seeds: metadata encoded by spmd (protocol 2) of a few shapes. */
size_t fuzz_seed_input(unsigned i, uint8_t *buf, size_t cap) {
    spmd_dcp_chunk ch[2] = {{{0, 0}, {2, 3}}, {{2, 0}, {2, 3}}}, scalar = {{0}, {0}};
    spmd_dcp_entry e[3] = {
        {.fqn = "w", .dtype = "float32", .ndim = 2, .size = {4, 3}, .nchunks = 2, .chunks = ch},
        {.fqn = "rng", .is_bytes = 1},
        {.fqn = "step", .dtype = "int64", .ndim = 0, .nchunks = 1, .chunks = &scalar}};
    spmd_dcp_storage s[3] = {
        {.fqn = "w", .has_offset = 1, .ndim = 2, .offset = {2, 0}, .index = 1, .relative_path = "__1_0.distcp",
         .length = 600},
        {.fqn = "rng", .index = -1, .relative_path = "__0_0.distcp", .file_offset = 600, .length = 9},
        {.fqn = "step", .has_offset = 1, .index = 0, .relative_path = "__0_0.distcp", .file_offset = 700000,
         .length = 70000}};
    spmd_dcp_metadata m = {1 + i % 3, e, 0, s};
    m.nstorage = m.nentries;
    void *out = NULL;
    size_t len = 0;
    if (spmd_dcp_metadata_encode(&m, &out, &len, NULL, 0) != SPMD_OK || len > cap) {
        free(out);
        return 0;
    }
    memcpy(buf, out, len);
    free(out);
    return len;
}
