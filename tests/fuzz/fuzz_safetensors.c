/* fuzz_safetensors.c — libFuzzer harness for the safetensors reader (header
 * length, the bounded JSON parser, the layout rules, tensor reads).
 * Invariants of an accepted file are checked (abort() = a finding).
 * fuzz_seed_input() gives the replay main valid files to mutate. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "spmd/data.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
size_t fuzz_seed_input(unsigned i, uint8_t *buf, size_t cap);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    spmd_ckpt *c = NULL;
    char err[256];
    if (spmd_ckpt_open_mem(data, size, "fuzz", &c, err, sizeof err) != SPMD_OK) {
        if (!memchr(err, 0, sizeof err) || !strstr(err, "fuzz")) abort();
        return 0;
    }
    uint64_t total = 0;
    for (size_t i = 0; i < spmd_ckpt_count(c); i++) {
        spmd_ckpt_info info, again;
        if (spmd_ckpt_info_at(c, i, &info) != SPMD_OK) abort();
        if (info.nbytes > size || info.ndim < 0 || info.ndim > SPMD_CKPT_MAX_DIMS) abort();
        total += info.nbytes;
        if (spmd_ckpt_find(c, info.name, &again) != SPMD_OK || again.nbytes != info.nbytes) abort();
        if (info.dtype == SPMD_DTYPE_COUNT) continue;
        void *dst = malloc(info.nbytes ? (size_t)info.nbytes : 1);
        spmd_ckpt_tensor t = {info.name, info.dtype, info.ndim, {0}, dst};
        memcpy(t.shape, info.shape, sizeof t.shape);
        if (!dst || spmd_ckpt_read(c, &t, err, sizeof err) != SPMD_OK) abort();
        free(dst);
    }
    if (total > size) abort();
    for (size_t i = 0; i < spmd_ckpt_meta_count(c); i++) {
        const char *k, *v;
        if (spmd_ckpt_meta_at(c, i, &k, &v) != SPMD_OK || !spmd_ckpt_meta(c, k)) abort();
        (void)v;
    }
    spmd_ckpt_close(c);
    return 0;
}

/* A valid file: 8-byte length, padded header, data of the offsets' size. */
static size_t build(const char *json, size_t datalen, uint8_t *buf, size_t cap) {
    size_t h = strlen(json), pad = (8 - h % 8) % 8, n = 8 + h + pad + datalen;
    if (n > cap) return 0;
    for (int i = 0; i < 8; i++) buf[i] = (uint8_t)((uint64_t)(h + pad) >> (8 * i));
    memcpy(buf + 8, json, h);
    memset(buf + 8 + h, ' ', pad);
    for (size_t i = 0; i < datalen; i++) buf[8 + h + pad + i] = (uint8_t)(i * 37);
    return n;
}

size_t fuzz_seed_input(unsigned i, uint8_t *buf, size_t cap) {
    static const struct {
        const char *json;
        size_t datalen;
    } seeds[] = {
        {"{}", 0},
        {"{\"__metadata__\":{\"epoch\":\"3\",\"rng\":\"a\\\"b\\u00e9\"},"
         "\"w\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,16]},"
         "\"b\":{\"dtype\":\"U8\",\"shape\":[3],\"data_offsets\":[16,19]}}", 19},
        {"{\"s\":{\"dtype\":\"I64\",\"shape\":[],\"data_offsets\":[0,8]},"
         "\"e\":{\"dtype\":\"F16\",\"shape\":[0,4],\"data_offsets\":[8,8]},"
         "\"m\":{\"dtype\":\"BOOL\",\"shape\":[1,1,1,1,1,1,1,2],\"data_offsets\":[8,10]}}", 10},
        {"{\"\\ud83d\\ude00 x\":{\"dtype\":\"BF16\",\"shape\":[3],\"data_offsets\":[0,6]},"
         "\"d\":{\"data_offsets\":[6,14],\"dtype\":\"F64\",\"shape\":[1]}}", 14},
    };
    unsigned k = i % (sizeof seeds / sizeof seeds[0]);
    return build(seeds[k].json, seeds[k].datalen, buf, cap);
}
