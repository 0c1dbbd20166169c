/* torch_save.c — writes what torch.save writes for one tensor or one bytes
 * object, as DCP's FileSystemWriter puts each item in a .distcp file: a zip
 * of stored entries archive/data.pkl (protocol 2), archive/byteorder,
 * archive/data/0 (64-byte aligned, as torch aligns storages) and
 * archive/version.  torch.load(weights_only=True) reads it. */
#include <stdlib.h>
#include <string.h>
#include "ckpt/ckpt_internal.h"
#include "ckpt/pickle.h"

typedef struct {
    const char *name;
    const void *data;
    size_t len;
    uint32_t crc;
    uint64_t local_off;
} zentry;

static void le(spmd__pw *w, uint64_t v, int n) {
    for (int i = 0; i < n; i++) spmd__pw_op(w, (uint8_t)(v >> (8 * i)));
}

static void put(spmd__pw *w, const void *p, size_t n) { spmd__pw_raw(w, p, n); }

/* A zip of entries (all stored, sizes < 4 GiB: checked by the caller) put
 * to f: the headers built in h, each entry's data written from where it is,
 * its CRC-32 computed as it is written and patched into its local header.
 * 0, or -1 when h could not grow. */
static int zip(spmd__fw *f, zentry *e, int n) {
    uint64_t base = f->off; /* offsets are relative to the archive's start */
    spmd__pw h = {0};
    for (int i = 0; i < n; i++) {
        size_t nlen = strlen(e[i].name);
        e[i].local_off = f->off - base;
        /* Pad the local header's extra field so the data starts 64-aligned. */
        size_t start = (size_t)(f->off - base) + 30 + nlen + 4, pad = (64 - start % 64) % 64;
        h.len = 0;
        le(&h, 0x04034b50u, 4);
        le(&h, 20, 2); le(&h, 0, 2); le(&h, 0, 2); le(&h, 0, 2); le(&h, 0, 2);
        le(&h, 0, 4); /* the CRC, patched below */
        le(&h, e[i].len, 4); le(&h, e[i].len, 4);
        le(&h, nlen, 2); le(&h, 4 + pad, 2);
        put(&h, e[i].name, nlen);
        le(&h, 0x4246, 2); le(&h, pad, 2); /* "FB": torch's padding field id */
        for (size_t k = 0; k < pad; k++) spmd__pw_op(&h, 'Z');
        spmd__fw_put(f, h.buf, h.len);
        e[i].crc = spmd__fw_put_crc(f, e[i].data, e[i].len);
        spmd__fw_patch_le32(f, base + e[i].local_off + 14, e[i].crc);
    }
    uint64_t cd = f->off - base;
    h.len = 0;
    for (int i = 0; i < n; i++) {
        size_t nlen = strlen(e[i].name);
        le(&h, 0x02014b50u, 4);
        le(&h, 20, 2); le(&h, 20, 2); le(&h, 0, 2); le(&h, 0, 2); le(&h, 0, 2); le(&h, 0, 2);
        le(&h, e[i].crc, 4); le(&h, e[i].len, 4); le(&h, e[i].len, 4);
        le(&h, nlen, 2); le(&h, 0, 2); le(&h, 0, 2); le(&h, 0, 2); le(&h, 0, 2); le(&h, 0, 4);
        le(&h, e[i].local_off, 4);
        put(&h, e[i].name, nlen);
    }
    size_t cdlen = h.len;
    le(&h, 0x06054b50u, 4);
    le(&h, 0, 2); le(&h, 0, 2); le(&h, (uint64_t)n, 2); le(&h, (uint64_t)n, 2);
    le(&h, cdlen, 4); le(&h, cd, 4); le(&h, 0, 2);
    spmd__fw_put(f, h.buf, h.len);
    int failed = h.failed;
    free(h.buf);
    return failed ? -1 : 0;
}

spmd_status spmd__torch_save_tensor(spmd__fw *f, const char *dtype, int ndim, const int64_t *shape,
                                    const void *data) {
    const char *cls = spmd__dcp_storage_class(dtype);
    size_t el = spmd__dcp_dtype_size(dtype);
    if (!cls || ndim < 0 || ndim > SPMD_DCP_MAX_DIMS) return SPMD_ERR_INVALID;
    int64_t numel = 1, stride[SPMD_DCP_MAX_DIMS];
    for (int d = ndim - 1; d >= 0; d--) {
        stride[d] = numel;
        numel *= shape[d];
    }
    if ((uint64_t)numel * el >= 0xffffffffu) return SPMD_ERR_UNSUPPORTED; /* no zip64 writer yet */
    spmd__pw p = {0};
    spmd__pw_proto(&p);
    spmd__pw_global(&p, "torch._utils", "_rebuild_tensor_v2");
    spmd__pw_op(&p, '(');
    spmd__pw_op(&p, '(');
    spmd__pw_str(&p, "storage");
    spmd__pw_global(&p, "torch", cls);
    spmd__pw_str(&p, "0");
    spmd__pw_str(&p, "cpu");
    spmd__pw_int(&p, numel);
    spmd__pw_op(&p, 't');
    spmd__pw_op(&p, 'Q');
    spmd__pw_int(&p, 0);
    spmd__pw_op(&p, '(');
    for (int d = 0; d < ndim; d++) spmd__pw_int(&p, shape[d]);
    spmd__pw_op(&p, 't');
    spmd__pw_op(&p, '(');
    for (int d = 0; d < ndim; d++) spmd__pw_int(&p, stride[d]);
    spmd__pw_op(&p, 't');
    spmd__pw_bool(&p, 0);
    spmd__pw_global(&p, "collections", "OrderedDict");
    spmd__pw_op(&p, ')');
    spmd__pw_op(&p, 'R');
    spmd__pw_op(&p, 't');
    spmd__pw_op(&p, 'R');
    spmd__pw_stop(&p);
    if (p.failed) {
        free(p.buf);
        return SPMD_ERR_NOMEM;
    }
    zentry e[4] = {{"archive/data.pkl", p.buf, p.len, 0, 0},
                   {"archive/byteorder", "little", 6, 0, 0},
                   {"archive/data/0", data, (size_t)numel * el, 0, 0},
                   {"archive/version", "3\n", 2, 0, 0}};
    int z = zip(f, e, 4);
    free(p.buf);
    return z ? SPMD_ERR_NOMEM : SPMD_OK;
}

spmd_status spmd__torch_save_bytes(spmd__fw *f, const void *data, size_t len, int pickled) {
    if (len >= 0xfff00000u) return SPMD_ERR_UNSUPPORTED;
    spmd__pw p = {0};
    if (pickled) {
        spmd__pw_raw(&p, data, len);
    } else {
        spmd__pw_proto(&p);
        spmd__pw_bytes(&p, data, len);
        spmd__pw_stop(&p);
    }
    if (p.failed) {
        free(p.buf);
        return SPMD_ERR_NOMEM;
    }
    zentry e[3] = {{"archive/data.pkl", p.buf, p.len, 0, 0},
                   {"archive/byteorder", "little", 6, 0, 0},
                   {"archive/version", "3\n", 2, 0, 0}};
    int z = zip(f, e, 3);
    free(p.buf);
    return z ? SPMD_ERR_NOMEM : SPMD_OK;
}
