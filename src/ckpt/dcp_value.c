/* dcp_value.c — reading a checkpoint's bytes items (BytesStorageMetadata):
 * as bytes (spmd_dcp_load_bytes) or as the plain Python value torch.save
 * wrote (spmd_dcp_load_value), through the restricted pickle reader with no
 * global allowed, so anything but plain data is refused by name. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "ckpt/ckpt_internal.h"
#include "ckpt/pickle.h"
#include "common/common.h"

#define MAX_DEPTH 64
#define MAX_VALUES (1u << 20)
#define MAX_TEXT ((size_t)256 << 20) /* bytes of str/bytes copied: a memo reference may repeat one */

/* The torch.save archive of bytes item fqn (malloc'd) and its name for messages. */
static spmd_status item_archive(const char *dir, const char *fqn, uint8_t **buf, size_t *len, char *what,
                                size_t whatlen, char *err, size_t errlen) {
    spmd_dcp_metadata m;
    spmd_status st = spmd_dcp_metadata_read(dir, &m, err, errlen);
    if (st) return st;
    const spmd_dcp_entry *e = spmd_dcp_metadata_find(&m, fqn);
    const spmd_dcp_storage *s = NULL;
    for (size_t i = 0; e && e->is_bytes && i < m.nstorage; i++)
        if (!strcmp(m.storage[i].fqn, fqn)) s = &m.storage[i];
    if (!s) {
        spmd_dcp_metadata_free(&m);
        return spmd__fail(err, errlen, SPMD_ERR_NOTFOUND, "%s: no bytes item %s", dir, fqn);
    }
    st = spmd__dcp_read_range(dir, s, buf, err, errlen);
    snprintf(what, whatlen, "%s/%s (%s)", dir, s->relative_path, fqn);
    *len = (size_t)s->length;
    spmd_dcp_metadata_free(&m);
    return st;
}

spmd_status spmd_dcp_load_bytes(const char *dir, const char *fqn, void **data, size_t *len, char *err,
                                size_t errlen) {
    if (!dir || !fqn || !data || !len) return spmd__fail(err, errlen, SPMD_ERR_INVALID, "spmd_dcp_load_bytes: bad args");
    uint8_t *buf = NULL;
    size_t n = 0;
    char what[4200];
    spmd_status st = item_archive(dir, fqn, &buf, &n, what, sizeof what, err, errlen);
    if (!st) st = spmd__torch_bytes_parse(buf, n, what, data, len, err, errlen);
    free(buf);
    return st;
}

typedef struct {
    size_t made, text;
    const char *what;
    char *err;
    size_t errlen;
} conv;

static spmd_status convert(conv *c, const spmd__pv *v, spmd_dcp_value *out, int depth) {
    memset(out, 0, sizeof *out);
    if (depth > MAX_DEPTH)
        return spmd__fail(c->err, c->errlen, SPMD_ERR_FORMAT, "%s: the value is nested deeper than %d", c->what, MAX_DEPTH);
    if (++c->made > MAX_VALUES)
        return spmd__fail(c->err, c->errlen, SPMD_ERR_FORMAT, "%s: the value holds more than %u values", c->what, MAX_VALUES);
    switch (v->type) {
    case SPMD__PV_NONE: out->type = SPMD_DCP_NONE; return SPMD_OK;
    case SPMD__PV_BOOL: out->type = SPMD_DCP_BOOL, out->i = v->i; return SPMD_OK;
    case SPMD__PV_INT: out->type = SPMD_DCP_INT, out->i = v->i; return SPMD_OK;
    case SPMD__PV_FLOAT: out->type = SPMD_DCP_FLOAT, out->f = v->f; return SPMD_OK;
    case SPMD__PV_STR:
    case SPMD__PV_BYTES:
        out->type = v->type == SPMD__PV_STR ? SPMD_DCP_STR : SPMD_DCP_BYTES;
        out->len = v->len;
        if ((c->text += v->len) > MAX_TEXT)
            return spmd__fail(c->err, c->errlen, SPMD_ERR_FORMAT, "%s: the value holds more than %zu bytes of text",
                              c->what, MAX_TEXT);
        if (!(out->s = malloc(v->len + 1))) break;
        if (v->len) memcpy(out->s, v->s, v->len);
        out->s[v->len] = 0;
        return SPMD_OK;
    case SPMD__PV_TUPLE:
    case SPMD__PV_LIST:
    case SPMD__PV_DICT: {
        out->type = v->type == SPMD__PV_DICT ? SPMD_DCP_DICT : SPMD_DCP_LIST;
        out->is_tuple = v->type == SPMD__PV_TUPLE;
        out->n = v->type == SPMD__PV_DICT ? v->n / 2 : v->n;
        if (v->n && !(out->items = calloc(v->n, sizeof *out->items))) break;
        for (size_t i = 0; i < v->n; i++) {
            spmd_status st = convert(c, v->items[i], &out->items[i], depth + 1);
            if (st) return st;
        }
        return SPMD_OK;
    }
    case SPMD__PV_OBJ: { /* the only objects allowed: protocol 2's bytes */
        int r = spmd__pv_protocol2_bytes(v, &out->s, &out->len);
        out->type = SPMD_DCP_BYTES;
        if (r > 0 && (c->text += out->len) > MAX_TEXT)
            return spmd__fail(c->err, c->errlen, SPMD_ERR_FORMAT, "%s: the value holds more than %zu bytes of text",
                              c->what, MAX_TEXT);
        if (r > 0) return SPMD_OK;
        if (r < 0) break;
        return spmd__fail(c->err, c->errlen, SPMD_ERR_FORMAT, "%s: holds %s.%s(...), not plain data", c->what,
                          v->g->module, v->g->name);
    }
    default: /* no other global is allowed, so none can be here; say so if one is */
        return spmd__fail(c->err, c->errlen, SPMD_ERR_FORMAT, "%s: holds an object, not plain data", c->what);
    }
    return spmd__fail(c->err, c->errlen, SPMD_ERR_NOMEM, "%s: out of memory", c->what);
}

spmd_status spmd__dcp_value_parse(const uint8_t *z, size_t n, const char *what, spmd_dcp_value *out, char *err,
                                  size_t errlen) {
    memset(out, 0, sizeof *out);
    const uint8_t *pk = NULL;
    uint64_t pklen = 0;
    spmd_status st = spmd__zip_find(z, n, "data.pkl", &pk, &pklen, what, err, errlen);
    spmd__pickle_limits lim = {spmd__plain_data_allow, 0, MAX_VALUES, MAX_VALUES, 4 * MAX_DEPTH, 1};
    spmd__pickle *p = NULL;
    spmd__pv *root = NULL;
    if (!st) st = spmd__pickle_load(pk, (size_t)pklen, &lim, what, &p, &root, err, errlen);
    conv c = {0, 0, what, err, errlen};
    if (!st) st = convert(&c, root, out, 0);
    if (st) spmd_dcp_value_free(out);
    spmd__pickle_free(p);
    return st;
}

spmd_status spmd_dcp_load_value(const char *dir, const char *fqn, spmd_dcp_value *out, char *err, size_t errlen) {
    if (!dir || !fqn || !out) return spmd__fail(err, errlen, SPMD_ERR_INVALID, "spmd_dcp_load_value: bad args");
    memset(out, 0, sizeof *out);
    uint8_t *buf = NULL;
    size_t n = 0;
    char what[4200];
    spmd_status st = item_archive(dir, fqn, &buf, &n, what, sizeof what, err, errlen);
    if (!st) st = spmd__dcp_value_parse(buf, n, what, out, err, errlen);
    free(buf);
    return st;
}

void spmd_dcp_value_free(spmd_dcp_value *v) {
    if (!v) return;
    size_t k = v->type == SPMD_DCP_DICT ? 2 * v->n : v->n;
    for (size_t i = 0; v->items && i < k; i++) spmd_dcp_value_free(&v->items[i]);
    free(v->items);
    free(v->s);
    memset(v, 0, sizeof *v);
}

spmd_status spmd_dcp_load_number(const char *dir, const char *fqn, double *out, char *err, size_t errlen) {
    if (!out) return spmd__fail(err, errlen, SPMD_ERR_INVALID, "spmd_dcp_load_number: bad args");
    spmd_dcp_value v;
    spmd_status st = spmd_dcp_load_value(dir, fqn, &v, err, errlen);
    if (st) return st;
    if (v.type == SPMD_DCP_FLOAT) *out = v.f;
    else if (v.type == SPMD_DCP_INT || v.type == SPMD_DCP_BOOL) *out = (double)v.i;
    else st = spmd__fail(err, errlen, SPMD_ERR_MISMATCH, "%s: %s: not a number", dir, fqn);
    spmd_dcp_value_free(&v);
    return st;
}

static int encode(spmd__pw *w, const spmd_dcp_value *v, int depth) {
    if (depth > 64) return -1;
    switch (v->type) {
    case SPMD_DCP_NONE: spmd__pw_none(w); return 0;
    case SPMD_DCP_BOOL: spmd__pw_bool(w, v->i != 0); return 0;
    case SPMD_DCP_INT: spmd__pw_int(w, v->i); return 0;
    case SPMD_DCP_FLOAT: spmd__pw_float(w, v->f); return 0;
    case SPMD_DCP_STR: spmd__pw_str(w, v->s ? v->s : ""); return 0;
    case SPMD_DCP_BYTES: spmd__pw_bytes(w, v->s, v->len); return 0;
    case SPMD_DCP_LIST: /* a tuple: MARK items TUPLE; a list: EMPTY_LIST MARK items APPENDS */
        if (!v->is_tuple) spmd__pw_op(w, ']');
        spmd__pw_op(w, '(');
        for (size_t i = 0; i < v->n; i++)
            if (encode(w, &v->items[i], depth + 1)) return -1;
        spmd__pw_op(w, v->is_tuple ? 't' : 'e');
        return 0;
    case SPMD_DCP_DICT: /* EMPTY_DICT MARK key value ... SETITEMS */
        spmd__pw_op(w, '}');
        spmd__pw_op(w, '(');
        for (size_t i = 0; i < 2 * v->n; i++)
            if (encode(w, &v->items[i], depth + 1)) return -1;
        spmd__pw_op(w, 'u');
        return 0;
    }
    return -1;
}

spmd_status spmd_dcp_value_encode(const spmd_dcp_value *v, void **buf, size_t *len) {
    if (!v || !buf || !len) return SPMD_ERR_INVALID;
    *buf = NULL;
    *len = 0;
    spmd__pw w = {0};
    spmd__pw_proto(&w);
    int bad = encode(&w, v, 0);
    spmd__pw_stop(&w);
    if (bad || w.failed) {
        free(w.buf);
        return bad ? SPMD_ERR_INVALID : SPMD_ERR_NOMEM;
    }
    *buf = w.buf;
    *len = w.len;
    return SPMD_OK;
}
