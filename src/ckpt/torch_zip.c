/* torch_zip.c — one tensor saved by torch.save (what DCP's FileSystemWriter
 * writes for each tensor item of a .distcp file): a zip archive of stored
 * (uncompressed) entries, <archive>/data.pkl holding
 * torch._utils._rebuild_tensor_v2(persistent storage id, offset, size,
 * stride, requires_grad, hooks) and <archive>/data/<key> holding the bytes.
 * The pickle goes through the restricted reader (nothing is called); the zip
 * is parsed with every offset and length checked against the buffer. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "ckpt/ckpt_internal.h"
#include "ckpt/pickle.h"
#include "common/common.h"

static uint64_t rd(const uint8_t *p, int n) {
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

static spmd_status zbad(const char *what, const char *why, char *err, size_t errlen) {
    return spmd__fail(err, errlen, SPMD_ERR_FORMAT, "%s: torch.save archive: %s", what, why);
}

/* Zip64 extra field (id 1): the 0xffffffff fields of the central header, in
 * the order uncompressed size, compressed size, local header offset. */
static int zip64_fields(const uint8_t *x, size_t xlen, uint64_t *usz, uint64_t *csz, uint64_t *off) {
    size_t i = 0;
    while (i + 4 <= xlen) {
        uint16_t id = (uint16_t)rd(x + i, 2), len = (uint16_t)rd(x + i + 2, 2);
        if (i + 4 + len > xlen) return -1;
        if (id == 1) {
            const uint8_t *f = x + i + 4;
            size_t left = len;
            uint64_t *want[3] = {usz, csz, off};
            for (int k = 0; k < 3; k++) {
                if (*want[k] != 0xffffffffu) continue;
                if (left < 8) return -1;
                *want[k] = rd(f, 8);
                f += 8;
                left -= 8;
            }
            return 0;
        }
        i += 4 + (size_t)len;
    }
    return (*usz == 0xffffffffu || *csz == 0xffffffffu || *off == 0xffffffffu) ? -1 : 0;
}

spmd_status spmd__zip_find(const uint8_t *z, size_t n, const char *suffix, const uint8_t **data,
                           uint64_t *size, const char *what, char *err, size_t errlen) {
    if (n < 22) return zbad(what, "shorter than a zip end record", err, errlen);
    size_t eocd = SIZE_MAX;
    for (size_t i = n - 22 + 1; i-- > 0 && n - i <= 22 + 65535;)
        if (rd(z + i, 4) == 0x06054b50u) {
            eocd = i;
            break;
        }
    if (eocd == SIZE_MAX) return zbad(what, "no zip end record", err, errlen);
    uint64_t count = rd(z + eocd + 10, 2), cdsize = rd(z + eocd + 12, 4), cdoff = rd(z + eocd + 16, 4);
    if (count == 0xffff || cdsize == 0xffffffffu || cdoff == 0xffffffffu) {
        if (eocd < 20 || rd(z + eocd - 20, 4) != 0x07064b50u) return zbad(what, "zip64 locator missing", err, errlen);
        uint64_t z64 = rd(z + eocd - 20 + 8, 8);
        if (z64 > n || n - z64 < 56 || rd(z + z64, 4) != 0x06064b50u) return zbad(what, "bad zip64 end record", err, errlen);
        count = rd(z + z64 + 32, 8);
        cdsize = rd(z + z64 + 40, 8);
        cdoff = rd(z + z64 + 48, 8);
    }
    if (cdoff > n || cdsize > n - cdoff) return zbad(what, "central directory outside the archive", err, errlen);
    size_t slen = strlen(suffix), at = (size_t)cdoff, end = (size_t)(cdoff + cdsize);
    for (uint64_t e = 0; e < count; e++) {
        if (end - at < 46 || rd(z + at, 4) != 0x02014b50u) return zbad(what, "bad central directory entry", err, errlen);
        uint64_t method = rd(z + at + 10, 2), csz = rd(z + at + 20, 4), usz = rd(z + at + 24, 4);
        size_t nlen = (size_t)rd(z + at + 28, 2), xlen = (size_t)rd(z + at + 30, 2), clen = (size_t)rd(z + at + 32, 2);
        uint64_t loff = rd(z + at + 42, 4);
        if (end - at - 46 < nlen + xlen + clen) return zbad(what, "central directory entry overruns", err, errlen);
        const char *name = (const char *)z + at + 46;
        if (zip64_fields(z + at + 46 + nlen, xlen, &usz, &csz, &loff))
            return zbad(what, "bad zip64 extra field", err, errlen);
        /* <archive>/<suffix>: exactly one leading directory. */
        const char *slash = memchr(name, '/', nlen);
        int match = slash && (size_t)(name + nlen - slash - 1) == slen && !memcmp(slash + 1, suffix, slen);
        at += 46 + nlen + xlen + clen;
        if (!match) continue;
        if (method != 0 || csz != usz) return zbad(what, "compressed entry (torch.save stores entries)", err, errlen);
        if (loff > n || n - loff < 30 || rd(z + loff, 4) != 0x04034b50u) return zbad(what, "bad local header", err, errlen);
        uint64_t dstart = loff + 30 + rd(z + loff + 26, 2) + rd(z + loff + 28, 2);
        if (dstart > n || usz > n - dstart) return zbad(what, "entry data outside the archive", err, errlen);
        *data = z + dstart;
        *size = usz;
        return SPMD_OK;
    }
    char why[96];
    snprintf(why, sizeof why, "no entry <archive>/%.60s", suffix);
    return spmd__fail(err, errlen, SPMD_ERR_FORMAT, "%s: torch.save archive: %s", what, why);
}

/* torch's storage classes and the dtype each holds. */
static const struct {
    const char *storage, *dtype;
    size_t elsize;
} storages[] = {{"FloatStorage", "float32", 4}, {"DoubleStorage", "float64", 8}, {"HalfStorage", "float16", 2},
                {"BFloat16Storage", "bfloat16", 2}, {"CharStorage", "int8", 1}, {"ByteStorage", "uint8", 1},
                {"ShortStorage", "int16", 2}, {"IntStorage", "int32", 4}, {"LongStorage", "int64", 8},
                {"BoolStorage", "bool", 1}};
#define NSTORAGES (sizeof storages / sizeof storages[0])

size_t spmd__dcp_dtype_size(const char *dtype) {
    for (size_t i = 0; i < NSTORAGES; i++)
        if (!strcmp(storages[i].dtype, dtype)) return storages[i].elsize;
    return 0;
}

const char *spmd__dcp_storage_class(const char *dtype) {
    for (size_t i = 0; i < NSTORAGES; i++)
        if (!strcmp(storages[i].dtype, dtype)) return storages[i].storage;
    return NULL;
}

static const spmd__global tensor_allow[] = {
    {"torch._utils", "_rebuild_tensor_v2", SPMD__G_REDUCE},
    {"collections", "OrderedDict", SPMD__G_REDUCE},
    {"torch", "FloatStorage", SPMD__G_VALUE}, {"torch", "DoubleStorage", SPMD__G_VALUE},
    {"torch", "HalfStorage", SPMD__G_VALUE}, {"torch", "BFloat16Storage", SPMD__G_VALUE},
    {"torch", "CharStorage", SPMD__G_VALUE}, {"torch", "ByteStorage", SPMD__G_VALUE},
    {"torch", "ShortStorage", SPMD__G_VALUE}, {"torch", "IntStorage", SPMD__G_VALUE},
    {"torch", "LongStorage", SPMD__G_VALUE}, {"torch", "BoolStorage", SPMD__G_VALUE},
    {NULL, NULL, 0}};

static int int_tuple(const spmd__pv *t, int64_t *out, int max) {
    if (!t || t->type != SPMD__PV_TUPLE || t->n > (size_t)max) return -1;
    for (size_t i = 0; i < t->n; i++) {
        if (t->items[i]->type != SPMD__PV_INT || t->items[i]->i < 0) return -1;
        out[i] = t->items[i]->i;
    }
    return (int)t->n;
}

spmd_status spmd__torch_tensor_parse(const uint8_t *z, size_t n, const char *what, spmd__torch_tensor *t,
                                     char *err, size_t errlen) {
    const uint8_t *pk;
    uint64_t pklen;
    spmd_status st = spmd__zip_find(z, n, "data.pkl", &pk, &pklen, what, err, errlen);
    if (st) return st;
    spmd__pickle_limits lim = {tensor_allow, 1, 4096, 4096, 256, 0};
    spmd__pickle *p = NULL;
    spmd__pv *root = NULL;
    if ((st = spmd__pickle_load(pk, (size_t)pklen, &lim, what, &p, &root, err, errlen))) return st;
    const spmd__pv *a = root->type == SPMD__PV_OBJ && !strcmp(root->g->name, "_rebuild_tensor_v2") ? root->args : NULL;
    const spmd__pv *pid = a && a->n >= 5 && a->items[0]->type == SPMD__PV_PERSID ? a->items[0]->args : NULL;
    int64_t stride[SPMD_DCP_MAX_DIMS], numel_saved = -1;
    const char *key = NULL;
    memset(t, 0, sizeof *t);
    t->elsize = 0;
    if (pid && pid->type == SPMD__PV_TUPLE && pid->n == 5 && pid->items[0]->type == SPMD__PV_STR &&
        !strcmp(pid->items[0]->s, "storage") && pid->items[1]->type == SPMD__PV_GLOBAL &&
        pid->items[2]->type == SPMD__PV_STR && pid->items[4]->type == SPMD__PV_INT) {
        for (size_t i = 0; i < NSTORAGES; i++)
            if (!strcmp(pid->items[1]->g->name, storages[i].storage)) {
                snprintf(t->dtype, sizeof t->dtype, "%s", storages[i].dtype);
                t->elsize = storages[i].elsize;
            }
        key = pid->items[2]->s;
        numel_saved = pid->items[4]->i;
    }
    int nd = a ? int_tuple(a->items[2], t->shape, SPMD_DCP_MAX_DIMS) : -1;
    int ns = a ? int_tuple(a->items[3], stride, SPMD_DCP_MAX_DIMS) : -1;
    char why[128] = "";
    if (!key || !t->elsize || numel_saved < 0) snprintf(why, sizeof why, "data.pkl is not a tensor record");
    else if (a->items[1]->type != SPMD__PV_INT || a->items[1]->i < 0) snprintf(why, sizeof why, "bad storage offset");
    else if (nd < 0 || ns != nd) snprintf(why, sizeof why, "bad size or stride");
    else if (strlen(key) > 20 || strchr(key, '/')) snprintf(why, sizeof why, "bad storage key");
    if (!*why) {
        t->ndim = nd;
        /* DCP saves contiguous clones: row-major strides only. */
        int64_t expect = 1, numel = 1;
        for (int d = nd - 1; d >= 0; d--) {
            if (t->shape[d] != 1 && stride[d] != expect) snprintf(why, sizeof why, "non-contiguous tensor");
            if (t->shape[d] && expect > INT64_MAX / t->shape[d]) snprintf(why, sizeof why, "tensor too large");
            else expect *= t->shape[d];
        }
        numel = expect;
        int64_t off = a->items[1]->i;
        char ename[40];
        snprintf(ename, sizeof ename, "data/%s", key);
        if (!*why && (off > numel_saved || numel > numel_saved - off))
            snprintf(why, sizeof why, "tensor larger than its storage");
        if (!*why) {
            st = spmd__zip_find(z, n, ename, &t->data, &t->nbytes, what, err, errlen);
            if (!st && t->nbytes != (uint64_t)numel_saved * t->elsize) {
                snprintf(why, sizeof why, "storage entry of %llu bytes, not %lld elements",
                         (unsigned long long)t->nbytes, (long long)numel_saved);
            } else if (!st) {
                t->data += (size_t)off * t->elsize;
                t->nbytes = (uint64_t)numel * t->elsize;
            }
        }
    }
    spmd__pickle_free(p);
    if (st) return st;
    if (*why) return zbad(what, why, err, errlen);
    return SPMD_OK;
}

spmd_status spmd__torch_bytes_parse(const uint8_t *z, size_t n, const char *what, void **data, size_t *len,
                                    char *err, size_t errlen) {
    const uint8_t *pk;
    uint64_t pklen;
    spmd_status st = spmd__zip_find(z, n, "data.pkl", &pk, &pklen, what, err, errlen);
    if (st) return st;
    spmd__pickle_limits lim = {spmd__plain_data_allow, 0, 16, 16, 16, 1};
    spmd__pickle *p = NULL;
    spmd__pv *root = NULL;
    if ((st = spmd__pickle_load(pk, (size_t)pklen, &lim, what, &p, &root, err, errlen))) return st;
    char *b = NULL;
    int r = spmd__pv_protocol2_bytes(root, &b, len); /* torch.save's own bytes */
    *data = b;
    if (r == 0 && root->type != SPMD__PV_BYTES && root->type != SPMD__PV_STR) {
        spmd__pickle_free(p);
        return zbad(what, "the saved object is not bytes or str", err, errlen);
    }
    if (r == 0) {
        *data = malloc(root->len ? root->len : 1);
        if (*data) memcpy(*data, root->s, root->len);
        *len = root->len;
    } else if (r < 0) {
        *data = NULL;
    }
    spmd__pickle_free(p);
    return *data ? SPMD_OK : spmd__fail(err, errlen, SPMD_ERR_NOMEM, "%s: out of memory", what);
}
