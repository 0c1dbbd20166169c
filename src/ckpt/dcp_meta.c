/* dcp_meta.c — DCP's `.metadata` (a pickle of
 * torch.distributed.checkpoint.metadata.Metadata) to and from
 * spmd_dcp_metadata, through the restricted pickle codec: the allow-list of
 * globals below is the whole vocabulary the reader accepts. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "ckpt/ckpt_internal.h"
#include "ckpt/pickle.h"
#include "common/common.h"
#include "spmd/ckpt.h"

#define DCP_MOD "torch.distributed.checkpoint.metadata"
#define FS_MOD "torch.distributed.checkpoint.filesystem"
#define META_FILE_MAX (256u << 20)

/* The torch dtypes a tensor entry may name (pickled as the global torch.<name>). */
static const char *const dtypes[] = {"float32", "float64", "float16", "bfloat16", "int8", "uint8",
                                     "int16", "int32", "int64", "bool", "complex64", "complex128",
                                     "uint16", "uint32", "uint64", "float8_e4m3fn", "float8_e5m2"};
#define NDTYPES (sizeof dtypes / sizeof dtypes[0])

#define CLS(m, n) {m, n, SPMD__G_CLASS}
#define RED(m, n) {m, n, SPMD__G_REDUCE}
#define VAL(n) {"torch", n, SPMD__G_VALUE}
static const spmd__global meta_allow[] = {
    CLS(DCP_MOD, "Metadata"), CLS(DCP_MOD, "TensorStorageMetadata"),
    CLS(DCP_MOD, "ChunkStorageMetadata"), CLS(DCP_MOD, "BytesStorageMetadata"),
    CLS(DCP_MOD, "MetadataIndex"), CLS(DCP_MOD, "StorageMeta"), CLS(DCP_MOD, "TensorProperties"),
    RED(DCP_MOD, "_MEM_FORMAT_ENCODING"), CLS(FS_MOD, "_StorageInfo"),
    RED("torch", "Size"), RED("collections", "OrderedDict"), RED("pathlib", "PosixPath"),
    RED("pathlib._local", "PosixPath"), RED("torch.serialization", "_get_layout"),
    VAL("float32"), VAL("float64"), VAL("float16"), VAL("bfloat16"), VAL("int8"), VAL("uint8"),
    VAL("int16"), VAL("int32"), VAL("int64"), VAL("bool"), VAL("complex64"), VAL("complex128"),
    VAL("uint16"), VAL("uint32"), VAL("uint64"), VAL("float8_e4m3fn"), VAL("float8_e5m2"),
    {NULL, NULL, 0}};

typedef struct {
    const char *what;
    char *err;
    size_t errlen;
} ctx;

static spmd_status fmt(ctx *c, const char *fqn, const char *why) {
    return spmd__fail(c->err, c->errlen, SPMD_ERR_FORMAT, "%s: %s%s%s", c->what,
                      fqn ? fqn : "", fqn ? ": " : "", why);
}

/* A torch.Size: REDUCE(torch.Size, ((d0, d1, ...),)). */
static spmd_status size_of(ctx *c, const char *fqn, const spmd__pv *v, int *ndim, int64_t *dims,
                           const char *field) {
    char why[128];
    snprintf(why, sizeof why, "%s is not a torch.Size of at most %d non-negative ints", field,
             SPMD_DCP_MAX_DIMS);
    if (!v || v->type != SPMD__PV_OBJ || strcmp(v->g->module, "torch") || strcmp(v->g->name, "Size") ||
        v->args->n != 1 || v->args->items[0]->type != SPMD__PV_TUPLE || v->state)
        return fmt(c, fqn, why);
    const spmd__pv *t = v->args->items[0];
    if (t->n > SPMD_DCP_MAX_DIMS) return fmt(c, fqn, why);
    for (size_t i = 0; i < t->n; i++) {
        if (t->items[i]->type != SPMD__PV_INT || t->items[i]->i < 0) return fmt(c, fqn, why);
        dims[i] = t->items[i]->i;
    }
    *ndim = (int)t->n;
    return SPMD_OK;
}

/* The BUILD state of an object of class name (a dict), or NULL. */
static const spmd__pv *state_of(const spmd__pv *v, const char *name) {
    if (!spmd__pv_is_obj(v, name) || v->args->n != 0 || !v->state) return NULL;
    return v->state->type == SPMD__PV_DICT ? v->state : NULL;
}

static spmd_status props(ctx *c, const char *fqn, const spmd__pv *v, spmd_dcp_entry *e) {
    if (!spmd__pv_is_obj(v, "TensorProperties") || v->args->n != 0 || !v->state)
        return fmt(c, fqn, "properties is not a TensorProperties");
    const spmd__pv *dt = NULL, *rg = NULL;
    if (v->state->type == SPMD__PV_TUPLE && v->state->n == 5) { /* its __getstate__ */
        dt = v->state->items[0];
        rg = v->state->items[2];
    } else if (v->state->type == SPMD__PV_DICT) {
        dt = spmd__pv_dict_get(v->state, "dtype");
        rg = spmd__pv_dict_get(v->state, "requires_grad");
    }
    if (!dt || dt->type != SPMD__PV_GLOBAL || strcmp(dt->g->module, "torch"))
        return fmt(c, fqn, "TensorProperties without a torch dtype");
    for (size_t i = 0; i < NDTYPES; i++)
        if (!strcmp(dt->g->name, dtypes[i])) {
            snprintf(e->dtype, sizeof e->dtype, "%s", dtypes[i]);
            e->requires_grad = rg && rg->type == SPMD__PV_BOOL && rg->i;
            return SPMD_OK;
        }
    return fmt(c, fqn, "TensorProperties's dtype is not a tensor dtype");
}

static spmd_status decode_chunks(ctx *c, const char *fqn, const spmd__pv *l, spmd_dcp_entry *e) {
    if (!l || l->type != SPMD__PV_LIST) return fmt(c, fqn, "chunks is not a list");
    e->chunks = calloc(l->n ? l->n : 1, sizeof *e->chunks);
    if (!e->chunks) return spmd__fail(c->err, c->errlen, SPMD_ERR_NOMEM, "%s: out of memory", c->what);
    for (size_t k = 0; k < l->n; k++) {
        const spmd__pv *s = state_of(l->items[k], "ChunkStorageMetadata");
        if (!s) return fmt(c, fqn, "a chunk is not a ChunkStorageMetadata");
        spmd_dcp_chunk *ch = &e->chunks[k];
        int n1 = 0, n2 = 0;
        spmd_status st = size_of(c, fqn, spmd__pv_dict_get(s, "offsets"), &n1, ch->offsets, "a chunk's offsets");
        if (!st) st = size_of(c, fqn, spmd__pv_dict_get(s, "sizes"), &n2, ch->sizes, "a chunk's sizes");
        if (st) return st;
        if (n1 != e->ndim || n2 != e->ndim) return fmt(c, fqn, "a chunk's rank differs from the tensor's");
        for (int d = 0; d < e->ndim; d++)
            if (ch->offsets[d] > e->size[d] || ch->sizes[d] > e->size[d] - ch->offsets[d])
                return fmt(c, fqn, "a chunk lies outside the tensor");
        e->nchunks = k + 1;
    }
    return SPMD_OK;
}

static spmd_status entry(ctx *c, const spmd__pv *k, const spmd__pv *v, spmd_dcp_entry *e) {
    if (k->type != SPMD__PV_STR) return fmt(c, NULL, "a state_dict_metadata key is not a string");
    if (!(e->fqn = strdup(k->s))) return spmd__fail(c->err, c->errlen, SPMD_ERR_NOMEM, "%s: out of memory", c->what);
    if (spmd__pv_is_obj(v, "BytesStorageMetadata") && v->args->n == 0 &&
        (!v->state || v->state->type == SPMD__PV_NONE || (v->state->type == SPMD__PV_DICT && v->state->n == 0))) {
        e->is_bytes = 1;
        return SPMD_OK;
    }
    const spmd__pv *s = state_of(v, "TensorStorageMetadata");
    if (!s) return fmt(c, e->fqn, "neither a TensorStorageMetadata nor a BytesStorageMetadata");
    spmd_status st = props(c, e->fqn, spmd__pv_dict_get(s, "properties"), e);
    if (!st) st = size_of(c, e->fqn, spmd__pv_dict_get(s, "size"), &e->ndim, e->size, "size");
    if (!st) st = decode_chunks(c, e->fqn, spmd__pv_dict_get(s, "chunks"), e);
    return st;
}

/* A file name inside the checkpoint directory: no separator, not . or .. */
static int safe_name(const char *s) {
    return *s && !strchr(s, '/') && !strchr(s, '\\') && strcmp(s, ".") && strcmp(s, "..");
}

static spmd_status decode_storage(ctx *c, const spmd__pv *k, const spmd__pv *v, spmd_dcp_storage *s) {
    const spmd__pv *ks = state_of(k, "MetadataIndex"), *vs = state_of(v, "_StorageInfo");
    if (!ks || !vs) return fmt(c, NULL, "a storage_data item is not MetadataIndex -> _StorageInfo");
    const spmd__pv *fqn = spmd__pv_dict_get(ks, "fqn"), *off = spmd__pv_dict_get(ks, "offset"),
                   *idx = spmd__pv_dict_get(ks, "index");
    if (!fqn || fqn->type != SPMD__PV_STR) return fmt(c, NULL, "a MetadataIndex without an fqn");
    if (!(s->fqn = strdup(fqn->s))) return spmd__fail(c->err, c->errlen, SPMD_ERR_NOMEM, "%s: out of memory", c->what);
    s->index = -1;
    if (idx && idx->type == SPMD__PV_INT && idx->i >= 0) s->index = idx->i;
    else if (idx && idx->type != SPMD__PV_NONE) return fmt(c, s->fqn, "MetadataIndex.index is not an int");
    if (off && off->type != SPMD__PV_NONE) {
        spmd_status st = size_of(c, s->fqn, off, &s->ndim, s->offset, "MetadataIndex.offset");
        if (st) return st;
        s->has_offset = 1;
    }
    const spmd__pv *rp = spmd__pv_dict_get(vs, "relative_path"), *fo = spmd__pv_dict_get(vs, "offset"),
                   *ln = spmd__pv_dict_get(vs, "length"), *td = spmd__pv_dict_get(vs, "transform_descriptors");
    if (!rp || rp->type != SPMD__PV_STR || !safe_name(rp->s))
        return fmt(c, s->fqn, "_StorageInfo.relative_path is not a file name inside the checkpoint");
    if (!fo || fo->type != SPMD__PV_INT || fo->i < 0 || !ln || ln->type != SPMD__PV_INT || ln->i < 0)
        return fmt(c, s->fqn, "_StorageInfo offset/length are not non-negative ints");
    if (td && !(td->type == SPMD__PV_NONE || ((td->type == SPMD__PV_LIST || td->type == SPMD__PV_TUPLE) && td->n == 0)))
        return spmd__fail(c->err, c->errlen, SPMD_ERR_UNSUPPORTED,
                          "%s: %s: transformed storage (transform_descriptors) is not supported", c->what, s->fqn);
    if (!(s->relative_path = strdup(rp->s))) return spmd__fail(c->err, c->errlen, SPMD_ERR_NOMEM, "%s: out of memory", c->what);
    s->file_offset = (uint64_t)fo->i;
    s->length = (uint64_t)ln->i;
    return SPMD_OK;
}

spmd_status spmd_dcp_metadata_decode(const void *buf, size_t len, const char *what,
                                     spmd_dcp_metadata *out, char *err, size_t errlen) {
    if (!buf || !out) return spmd__fail(err, errlen, SPMD_ERR_INVALID, "spmd_dcp_metadata_decode: bad args");
    memset(out, 0, sizeof *out);
    ctx c = {what ? what : ".metadata", err, errlen};
    spmd__pickle_limits lim = {meta_allow, 0, 64u << 20, 64u << 20, 1u << 16, 0};
    spmd__pickle *p = NULL;
    spmd__pv *root = NULL;
    spmd_status st = spmd__pickle_load(buf, len, &lim, c.what, &p, &root, err, errlen);
    if (st) return st;
    const spmd__pv *ms = state_of(root, "Metadata");
    const spmd__pv *sdm = ms ? spmd__pv_dict_get(ms, "state_dict_metadata") : NULL;
    const spmd__pv *sd = ms ? spmd__pv_dict_get(ms, "storage_data") : NULL;
    if (!ms) st = fmt(&c, NULL, "the pickle is not a DCP Metadata object");
    else if (!sdm || sdm->type != SPMD__PV_DICT) st = fmt(&c, NULL, "Metadata.state_dict_metadata is not a dict");
    else if (sd && sd->type != SPMD__PV_DICT && sd->type != SPMD__PV_NONE) st = fmt(&c, NULL, "Metadata.storage_data is not a dict");
    if (!st) {
        size_t ne = sdm->n / 2, ns = sd && sd->type == SPMD__PV_DICT ? sd->n / 2 : 0;
        out->entries = calloc(ne ? ne : 1, sizeof *out->entries);
        out->storage = calloc(ns ? ns : 1, sizeof *out->storage);
        if (!out->entries || !out->storage) st = spmd__fail(err, errlen, SPMD_ERR_NOMEM, "%s: out of memory", c.what);
        for (size_t i = 0; !st && i < ne; i++) {
            out->nentries = i + 1;
            st = entry(&c, sdm->items[2 * i], sdm->items[2 * i + 1], &out->entries[i]);
        }
        for (size_t i = 0; !st && i < ns; i++) {
            out->nstorage = i + 1;
            st = decode_storage(&c, sd->items[2 * i], sd->items[2 * i + 1], &out->storage[i]);
        }
    }
    spmd__pickle_free(p);
    if (!st) st = spmd__dcp_check(out, c.what, err, errlen, SPMD_ERR_FORMAT);
    if (st) spmd_dcp_metadata_free(out);
    return st;
}

/* Read a whole regular file of at most max bytes into a malloc'd buffer. */
static spmd_status read_small_file(const char *path, size_t max, void **buf, size_t *len,
                             char *err, size_t errlen) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return spmd__fail_errno(err, errlen, errno == ENOENT ? SPMD_ERR_NOTFOUND : SPMD_ERR_IO, errno,
                                "%s: open", path);
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        int e = errno;
        close(fd);
        return spmd__fail_errno(err, errlen, SPMD_ERR_IO, e, "%s: fstat", path);
    }
    if (!S_ISREG(sb.st_mode) || (uint64_t)sb.st_size > max) {
        close(fd);
        return spmd__fail(err, errlen, SPMD_ERR_FORMAT, "%s: not a regular file of at most %zu bytes", path, max);
    }
    size_t n = (size_t)sb.st_size, got = 0;
    uint8_t *b = malloc(n ? n : 1);
    if (!b) {
        close(fd);
        return spmd__fail(err, errlen, SPMD_ERR_NOMEM, "%s: out of memory for %zu bytes", path, n);
    }
    while (got < n) {
        ssize_t r = read(fd, b + got, n - got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            int e = r < 0 ? errno : EIO;
            free(b);
            close(fd);
            return spmd__fail_errno(err, errlen, SPMD_ERR_IO, e, "%s: read (file changed while read?)", path);
        }
        got += (size_t)r;
    }
    close(fd);
    *buf = b;
    *len = n;
    return SPMD_OK;
}

spmd_status spmd_dcp_metadata_read(const char *dir, spmd_dcp_metadata *out, char *err, size_t errlen) {
    if (!dir || !out) return spmd__fail(err, errlen, SPMD_ERR_INVALID, "spmd_dcp_metadata_read: bad args");
    memset(out, 0, sizeof *out); /* freeable whatever happens */
    char path[4096];
    if ((size_t)snprintf(path, sizeof path, "%s/.metadata", dir) >= sizeof path)
        return spmd__fail(err, errlen, SPMD_ERR_INVALID, "%s: path too long", dir);
    void *buf = NULL;
    size_t len = 0;
    spmd_status st = read_small_file(path, META_FILE_MAX, &buf, &len, err, errlen);
    if (st) return st;
    st = spmd_dcp_metadata_decode(buf, len, path, out, err, errlen);
    free(buf);
    return st;
}

void spmd_dcp_metadata_free(spmd_dcp_metadata *m) {
    if (!m) return;
    for (size_t i = 0; i < m->nentries; i++) {
        free(m->entries[i].fqn);
        free(m->entries[i].chunks);
    }
    for (size_t i = 0; i < m->nstorage; i++) {
        free(m->storage[i].fqn);
        free(m->storage[i].relative_path);
    }
    free(m->entries);
    free(m->storage);
    memset(m, 0, sizeof *m);
}

/* ---- encoding ------------------------------------------------------------ */

static void put_entry(spmd__pw *w, const spmd_dcp_entry *e) {
    if (e->is_bytes) {
        spmd__pw_newobj(w, DCP_MOD, "BytesStorageMetadata");
        return;
    }
    spmd__pw_newobj(w, DCP_MOD, "TensorStorageMetadata");
    spmd__pw_op(w, '}');
    spmd__pw_op(w, '(');
    spmd__pw_str(w, "properties");
    /* TensorProperties.__setstate__ takes (dtype, layout, requires_grad,
     * memory format as _MEM_FORMAT_ENCODING, pin_memory). */
    spmd__pw_newobj(w, DCP_MOD, "TensorProperties");
    spmd__pw_op(w, '(');
    spmd__pw_global(w, "torch", e->dtype);
    spmd__pw_global(w, "torch.serialization", "_get_layout"); /* as torch pickles a layout */
    spmd__pw_str(w, "torch.strided");
    spmd__pw_op(w, 0x85);
    spmd__pw_op(w, 'R');
    spmd__pw_bool(w, e->requires_grad);
    spmd__pw_global(w, DCP_MOD, "_MEM_FORMAT_ENCODING");
    spmd__pw_int(w, 0); /* TORCH_CONTIGUOUS_FORMAT */
    spmd__pw_op(w, 0x85);
    spmd__pw_op(w, 'R');
    spmd__pw_bool(w, 0);
    spmd__pw_op(w, 't');
    spmd__pw_op(w, 'b');
    spmd__pw_str(w, "size");
    spmd__pw_size(w, e->size, e->ndim);
    spmd__pw_str(w, "chunks");
    spmd__pw_op(w, ']');
    spmd__pw_op(w, '(');
    for (size_t k = 0; k < e->nchunks; k++) {
        spmd__pw_newobj(w, DCP_MOD, "ChunkStorageMetadata");
        spmd__pw_op(w, '}');
        spmd__pw_op(w, '(');
        spmd__pw_str(w, "offsets");
        spmd__pw_size(w, e->chunks[k].offsets, e->ndim);
        spmd__pw_str(w, "sizes");
        spmd__pw_size(w, e->chunks[k].sizes, e->ndim);
        spmd__pw_op(w, 'u');
        spmd__pw_op(w, 'b');
    }
    spmd__pw_op(w, 'e');
    spmd__pw_op(w, 'u');
    spmd__pw_op(w, 'b');
}

static void put_storage(spmd__pw *w, const spmd_dcp_storage *s) {
    spmd__pw_newobj(w, DCP_MOD, "MetadataIndex");
    spmd__pw_op(w, '}');
    spmd__pw_op(w, '(');
    spmd__pw_str(w, "fqn");
    spmd__pw_str(w, s->fqn);
    spmd__pw_str(w, "offset");
    if (s->has_offset) spmd__pw_size(w, s->offset, s->ndim);
    else spmd__pw_none(w);
    spmd__pw_str(w, "index");
    if (s->index >= 0) spmd__pw_int(w, s->index);
    else spmd__pw_none(w);
    spmd__pw_op(w, 'u');
    spmd__pw_op(w, 'b');
    spmd__pw_newobj(w, FS_MOD, "_StorageInfo");
    spmd__pw_op(w, '}');
    spmd__pw_op(w, '(');
    spmd__pw_str(w, "relative_path");
    spmd__pw_str(w, s->relative_path);
    spmd__pw_str(w, "offset");
    spmd__pw_int(w, (int64_t)s->file_offset);
    spmd__pw_str(w, "length");
    spmd__pw_int(w, (int64_t)s->length);
    spmd__pw_op(w, 'u');
    spmd__pw_op(w, 'b');
}

spmd_status spmd_dcp_metadata_encode(const spmd_dcp_metadata *m, void **buf, size_t *len,
                                     char *err, size_t errlen) {
    if (!m || !buf || !len) return spmd__fail(err, errlen, SPMD_ERR_INVALID, "spmd_dcp_metadata_encode: bad args");
    for (size_t i = 0; i < m->nentries; i++) {
        const spmd_dcp_entry *e = &m->entries[i];
        int known = e->is_bytes;
        for (size_t d = 0; !known && d < NDTYPES; d++) known = !strcmp(e->dtype, dtypes[d]);
        if (!e->fqn || !known)
            return spmd__fail(err, errlen, SPMD_ERR_INVALID, "spmd_dcp_metadata_encode: entry %zu (%s): %s", i,
                              e->fqn ? e->fqn : "(null)", e->fqn ? "unknown dtype" : "no fqn");
    }
    for (size_t i = 0; i < m->nstorage; i++)
        if (!m->storage[i].fqn || !m->storage[i].relative_path || !safe_name(m->storage[i].relative_path))
            return spmd__fail(err, errlen, SPMD_ERR_INVALID,
                              "spmd_dcp_metadata_encode: storage item %zu has no fqn or a bad file name", i);
    spmd_status st = spmd__dcp_check(m, "spmd_dcp_metadata_encode", err, errlen, SPMD_ERR_INVALID);
    if (st) return st;
    spmd__pw w = {0};
    spmd__pw_proto(&w);
    spmd__pw_newobj(&w, DCP_MOD, "Metadata");
    spmd__pw_op(&w, '}');
    spmd__pw_op(&w, '(');
    spmd__pw_str(&w, "state_dict_metadata");
    spmd__pw_op(&w, '}');
    spmd__pw_op(&w, '(');
    for (size_t i = 0; i < m->nentries; i++) {
        spmd__pw_str(&w, m->entries[i].fqn);
        put_entry(&w, &m->entries[i]);
    }
    spmd__pw_op(&w, 'u');
    /* DefaultLoadPlanner unflattens with planner_data: a flat state dict
     * maps each key to the one-element path (key,). */
    spmd__pw_str(&w, "planner_data");
    spmd__pw_op(&w, '}');
    spmd__pw_op(&w, '(');
    for (size_t i = 0; i < m->nentries; i++) {
        spmd__pw_str(&w, m->entries[i].fqn);
        spmd__pw_str(&w, m->entries[i].fqn);
        spmd__pw_op(&w, 0x85);
    }
    spmd__pw_op(&w, 'u');
    spmd__pw_str(&w, "storage_data");
    spmd__pw_op(&w, '}');
    spmd__pw_op(&w, '(');
    for (size_t i = 0; i < m->nstorage; i++) put_storage(&w, &m->storage[i]);
    spmd__pw_op(&w, 'u');
    spmd__pw_str(&w, "storage_meta");
    spmd__pw_none(&w);
    spmd__pw_op(&w, 'u');
    spmd__pw_op(&w, 'b');
    spmd__pw_stop(&w);
    if (w.failed) {
        free(w.buf);
        return spmd__fail(err, errlen, SPMD_ERR_NOMEM, "spmd_dcp_metadata_encode: out of memory");
    }
    *buf = w.buf;
    *len = w.len;
    return SPMD_OK;
}
