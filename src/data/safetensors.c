/* safetensors.c — opening and reading safetensors checkpoints.
 *
 * The header is untrusted: its length is bounded before anything is
 * allocated, it is parsed by our own bounded JSON parser, and every entry is
 * checked against the rules of the format (the same as safetensors'
 * `validate`): known dtype, byte size = prod(shape) * dtype size, offsets
 * sorted contiguous from 0 with no overlap and no hole, ending exactly at the
 * end of the file.  Tensor bytes are read on demand with pread. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "data_internal.h"

static const spmd__st_dtype st_dtypes[] = {
    {"F64", 8, SPMD_F64},   {"F32", 4, SPMD_F32},   {"F16", 2, SPMD_F16},
    {"BF16", 2, SPMD_BF16}, {"I64", 8, SPMD_I64},   {"I32", 4, SPMD_I32},
    {"I8", 1, SPMD_I8},     {"U8", 1, SPMD_U8},     {"I16", 2, SPMD_DTYPE_COUNT},
    {"U16", 2, SPMD_DTYPE_COUNT}, {"U32", 4, SPMD_DTYPE_COUNT}, {"U64", 8, SPMD_DTYPE_COUNT},
    {"BOOL", 1, SPMD_DTYPE_COUNT}, {"F8_E5M2", 1, SPMD_DTYPE_COUNT},
    {"F8_E4M3", 1, SPMD_DTYPE_COUNT},
};
#define N_ST_DTYPES (sizeof st_dtypes / sizeof st_dtypes[0])

const spmd__st_dtype *spmd__st_dtype_by_name(const char *name) {
    for (size_t i = 0; i < N_ST_DTYPES; i++)
        if (strcmp(st_dtypes[i].name, name) == 0) return &st_dtypes[i];
    return NULL;
}

const spmd__st_dtype *spmd__st_dtype_of(spmd_dtype dt) {
    for (size_t i = 0; i < N_ST_DTYPES; i++)
        if (st_dtypes[i].dtype == dt && dt != SPMD_DTYPE_COUNT) return &st_dtypes[i];
    return NULL;
}

typedef struct {
    const char *name;
    const spmd__st_dtype *dt;
    int ndim;
    int64_t shape[SPMD_CKPT_MAX_DIMS];
    uint64_t begin, end;
} st_entry;

struct spmd_ckpt {
    char *name;            /* the path, for messages */
    int fd;                /* file source, or -1 */
    const uint8_t *mem;    /* memory source, or NULL */
    uint64_t data_start;   /* 8 + header length */
    uint64_t data_len;
    spmd__json json;       /* owns every string below */
    st_entry *t;           /* sorted by offset */
    size_t nt;
    size_t *by_name;       /* indices into t sorted by name */
    const char **meta_k, **meta_v;
    size_t nmeta;
};

void spmd_ckpt_close(spmd_ckpt *c) {
    if (!c) return;
    if (c->fd >= 0) close(c->fd);
    spmd__json_free(&c->json);
    free(c->t);
    free(c->by_name);
    free(c->meta_k);
    free(c->meta_v);
    free(c->name);
    free(c);
}

/* Shape and byte size of one entry; the header starts at file offset 8. */
static spmd_status parse_entry(spmd_ckpt *c, const spmd__jnode *n, st_entry *e, char *err,
                               size_t errlen) {
    const spmd__jnode *nodes = c->json.nodes;
    const char *nm = c->name;
    if (n->type != SPMD__J_OBJ)
        return spmd__fail(err, errlen, SPMD_ERR_FORMAT,
                          "%s: header byte %zu: tensor \"%s\" is not an object", nm,
                          8 + n->offset, e->name);
    const spmd__jnode *dtype = NULL, *shape = NULL, *offs = NULL;
    for (int32_t k = n->first_child; k >= 0; k = nodes[k].next) {
        const spmd__jnode *m = &nodes[k];
        const spmd__jnode **slot = !strcmp(m->key, "dtype")          ? &dtype
                                   : !strcmp(m->key, "shape")        ? &shape
                                   : !strcmp(m->key, "data_offsets") ? &offs
                                                                      : NULL;
        if (!slot)
            return spmd__fail(err, errlen, SPMD_ERR_FORMAT,
                              "%s: header byte %zu: tensor \"%s\": unknown field \"%s\"", nm,
                              8 + m->offset, e->name, m->key);
        if (*slot)
            return spmd__fail(err, errlen, SPMD_ERR_FORMAT,
                              "%s: header byte %zu: tensor \"%s\": duplicate field \"%s\"", nm,
                              8 + m->offset, e->name, m->key);
        *slot = m;
    }
    if (!dtype || !shape || !offs)
        return spmd__fail(err, errlen, SPMD_ERR_FORMAT,
                          "%s: header byte %zu: tensor \"%s\": missing \"%s\"", nm, 8 + n->offset,
                          e->name, !dtype ? "dtype" : !shape ? "shape" : "data_offsets");
    if (dtype->type != SPMD__J_STR || !(e->dt = spmd__st_dtype_by_name(dtype->str)))
        return spmd__fail(err, errlen, SPMD_ERR_FORMAT,
                          "%s: header byte %zu: tensor \"%s\": unknown dtype%s%s", nm,
                          8 + dtype->offset, e->name, dtype->type == SPMD__J_STR ? " " : "",
                          dtype->type == SPMD__J_STR ? dtype->str : "");
    if (shape->type != SPMD__J_ARR || shape->nchildren > SPMD_CKPT_MAX_DIMS)
        return spmd__fail(err, errlen, SPMD_ERR_FORMAT,
                          "%s: header byte %zu: tensor \"%s\": shape must be an array of at "
                          "most %d integers",
                          nm, 8 + shape->offset, e->name, SPMD_CKPT_MAX_DIMS);
    /* Elements, bounded by the data size so the product cannot overflow (a
     * zero dimension anywhere makes the tensor empty whatever the others). */
    uint64_t elems = 1, limit = c->data_len / e->dt->size;
    int zero = 0, over = 0;
    e->ndim = 0;
    for (int32_t k = shape->first_child; k >= 0; k = nodes[k].next) {
        const spmd__jnode *d = &nodes[k];
        if (d->type != SPMD__J_NUM || !d->num_is_uint)
            return spmd__fail(err, errlen, SPMD_ERR_FORMAT,
                              "%s: header byte %zu: tensor \"%s\": dimension %d is not a "
                              "non-negative integer",
                              nm, 8 + d->offset, e->name, e->ndim);
        e->shape[e->ndim++] = (int64_t)d->u;
        if (d->u == 0) zero = 1;
        else if (!over && elems > limit / d->u) over = 1;
        else if (!over) elems *= d->u;
    }
    if (zero) elems = 0, over = 0;
    if (offs->type != SPMD__J_ARR || offs->nchildren != 2 ||
        nodes[offs->first_child].type != SPMD__J_NUM || !nodes[offs->first_child].num_is_uint ||
        nodes[nodes[offs->first_child].next].type != SPMD__J_NUM ||
        !nodes[nodes[offs->first_child].next].num_is_uint)
        return spmd__fail(err, errlen, SPMD_ERR_FORMAT,
                          "%s: header byte %zu: tensor \"%s\": data_offsets must be two "
                          "non-negative integers",
                          nm, 8 + offs->offset, e->name);
    e->begin = nodes[offs->first_child].u;
    e->end = nodes[nodes[offs->first_child].next].u;
    if (e->begin > e->end || e->end > c->data_len)
        return spmd__fail(err, errlen, SPMD_ERR_FORMAT,
                          "%s: header byte %zu: tensor \"%s\": data_offsets [%llu, %llu] out of "
                          "range (data is %llu bytes)",
                          nm, 8 + offs->offset, e->name, (unsigned long long)e->begin,
                          (unsigned long long)e->end, (unsigned long long)c->data_len);
    if (over || elems * e->dt->size != e->end - e->begin)
        return spmd__fail(err, errlen, SPMD_ERR_FORMAT,
                          "%s: header byte %zu: tensor \"%s\": %llu bytes in data_offsets do not "
                          "match dtype %s and its shape",
                          nm, 8 + offs->offset, e->name, (unsigned long long)(e->end - e->begin),
                          e->dt->name);
    return SPMD_OK;
}

static int cmp_offsets(const void *a, const void *b) {
    const st_entry *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return 0;
}

/* qsort has no context argument: sort (name pointer, index) pairs instead. */
typedef struct {
    const char *name;
    size_t idx;
} name_ix;
static int cmp_name_ix(const void *a, const void *b) {
    return strcmp(((const name_ix *)a)->name, ((const name_ix *)b)->name);
}

static spmd_status validate_header(spmd_ckpt *c, const char *text, size_t hlen, char *err,
                                   size_t errlen) {
    const char *nm = c->name;
    if (hlen == 0 || text[0] != '{')
        return spmd__fail(err, errlen, SPMD_ERR_FORMAT,
                          "%s: byte offset 8: the JSON header must start with '{'", nm);
    char jerr[256] = "";
    size_t max_nodes = 16 * (size_t)SPMD_CKPT_MAX_TENSORS;
    spmd_status st = spmd__json_parse(text, hlen, max_nodes, 4, SPMD_CKPT_MAX_VALUE, &c->json,
                                      jerr, sizeof jerr);
    if (st) {
        /* jerr is "offset N: why" relative to the header; make it absolute. */
        size_t off = 0;
        const char *why = jerr;
        if (!strncmp(jerr, "offset ", 7)) {
            off = strtoull(jerr + 7, NULL, 10);
            const char *colon = strchr(jerr, ':');
            if (colon) why = colon + 2;
        }
        return spmd__fail(err, errlen, st, "%s: byte offset %zu: bad JSON header: %s", nm, 8 + off,
                          why);
    }
    const spmd__jnode *nodes = c->json.nodes;
    const spmd__jnode *root = &nodes[0];
    size_t ntensors = 0;
    const spmd__jnode *meta = NULL;
    for (int32_t k = root->first_child; k >= 0; k = nodes[k].next) {
        if (!strcmp(nodes[k].key, "__metadata__")) {
            if (meta)
                return spmd__fail(err, errlen, SPMD_ERR_FORMAT,
                                  "%s: header byte %zu: duplicate \"__metadata__\"", nm,
                                  8 + nodes[k].offset);
            meta = &nodes[k];
        } else {
            ntensors++;
        }
    }
    if (ntensors > SPMD_CKPT_MAX_TENSORS)
        return spmd__fail(err, errlen, SPMD_ERR_FORMAT, "%s: %zu tensors (limit %u)", nm, ntensors,
                          SPMD_CKPT_MAX_TENSORS);
    if (meta) {
        if (meta->type != SPMD__J_OBJ)
            return spmd__fail(err, errlen, SPMD_ERR_FORMAT,
                              "%s: header byte %zu: \"__metadata__\" must be an object of strings",
                              nm, 8 + meta->offset);
        size_t nm_ = (size_t)meta->nchildren;
        c->meta_k = malloc((nm_ ? nm_ : 1) * sizeof *c->meta_k);
        c->meta_v = malloc((nm_ ? nm_ : 1) * sizeof *c->meta_v);
        if (!c->meta_k || !c->meta_v)
            return spmd__fail(err, errlen, SPMD_ERR_NOMEM, "%s: out of memory", nm);
        for (int32_t k = meta->first_child; k >= 0; k = nodes[k].next) {
            if (nodes[k].type != SPMD__J_STR)
                return spmd__fail(err, errlen, SPMD_ERR_FORMAT,
                                  "%s: header byte %zu: metadata \"%s\" is not a string", nm,
                                  8 + nodes[k].offset, nodes[k].key);
            c->meta_k[c->nmeta] = nodes[k].key;
            c->meta_v[c->nmeta++] = nodes[k].str;
        }
        name_ix *mx = malloc((nm_ ? nm_ : 1) * sizeof *mx);
        if (!mx) return spmd__fail(err, errlen, SPMD_ERR_NOMEM, "%s: out of memory", nm);
        for (size_t i = 0; i < c->nmeta; i++) mx[i] = (name_ix){c->meta_k[i], i};
        qsort(mx, c->nmeta, sizeof *mx, cmp_name_ix);
        for (size_t i = 1; i < c->nmeta; i++) {
            if (!strcmp(mx[i].name, mx[i - 1].name)) {
                const char *dup = mx[i].name;
                free(mx);
                return spmd__fail(err, errlen, SPMD_ERR_FORMAT,
                                  "%s: duplicate metadata key \"%s\"", nm, dup);
            }
        }
        free(mx);
    }
    c->t = calloc(ntensors ? ntensors : 1, sizeof *c->t);
    c->by_name = malloc((ntensors ? ntensors : 1) * sizeof *c->by_name);
    name_ix *ix = malloc((ntensors ? ntensors : 1) * sizeof *ix);
    if (!c->t || !c->by_name || !ix) {
        free(ix);
        return spmd__fail(err, errlen, SPMD_ERR_NOMEM, "%s: out of memory", nm);
    }
    for (int32_t k = root->first_child; k >= 0; k = nodes[k].next) {
        if (&nodes[k] == meta) continue;
        st_entry *e = &c->t[c->nt];
        e->name = nodes[k].key;
        if (nodes[k].key[0] == '\0' || strlen(nodes[k].key) > SPMD_CKPT_MAX_NAME) {
            free(ix);
            return spmd__fail(err, errlen, SPMD_ERR_FORMAT,
                              "%s: header byte %zu: tensor name empty or longer than %u bytes",
                              nm, 8 + nodes[k].offset, SPMD_CKPT_MAX_NAME);
        }
        st = parse_entry(c, &nodes[k], e, err, errlen);
        if (st) {
            free(ix);
            return st;
        }
        c->nt++;
    }
    qsort(c->t, c->nt, sizeof *c->t, cmp_offsets);
    uint64_t at = 0;
    for (size_t i = 0; i < c->nt; i++) {
        const st_entry *e = &c->t[i];
        if (e->begin != at) {
            free(ix);
            if (e->begin < at)
                return spmd__fail(err, errlen, SPMD_ERR_FORMAT,
                                  "%s: tensor \"%s\" (data bytes %llu..%llu) overlaps tensor "
                                  "\"%s\"",
                                  nm, e->name, (unsigned long long)e->begin,
                                  (unsigned long long)e->end, c->t[i - 1].name);
            return spmd__fail(err, errlen, SPMD_ERR_FORMAT,
                              "%s: hole in the data before tensor \"%s\" (bytes %llu..%llu are "
                              "not covered)",
                              nm, e->name, (unsigned long long)at, (unsigned long long)e->begin);
        }
        at = e->end;
    }
    if (at != c->data_len) {
        free(ix);
        return spmd__fail(err, errlen, SPMD_ERR_FORMAT,
                          "%s: byte offset %llu: the tensors cover %llu data bytes but the file "
                          "holds %llu (trailing or missing data)",
                          nm, (unsigned long long)(c->data_start + at), (unsigned long long)at,
                          (unsigned long long)c->data_len);
    }
    for (size_t i = 0; i < c->nt; i++) ix[i] = (name_ix){c->t[i].name, i};
    qsort(ix, c->nt, sizeof *ix, cmp_name_ix);
    for (size_t i = 0; i < c->nt; i++) {
        if (i && !strcmp(ix[i].name, ix[i - 1].name)) {
            const char *dup = ix[i].name;
            free(ix);
            return spmd__fail(err, errlen, SPMD_ERR_FORMAT, "%s: duplicate tensor name \"%s\"",
                              nm, dup);
        }
        c->by_name[i] = ix[i].idx;
    }
    free(ix);
    return SPMD_OK;
}

static spmd_ckpt *ckpt_new(const char *name) {
    spmd_ckpt *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->fd = -1;
    c->name = strdup(name);
    if (!c->name) {
        free(c);
        return NULL;
    }
    return c;
}

spmd_status spmd_ckpt_open_mem(const void *buf, size_t len, const char *name, spmd_ckpt **out,
                               char *err, size_t errlen) {
    const char *nm = name ? name : "<memory>";
    if (!out || (!buf && len)) return spmd__fail(err, errlen, SPMD_ERR_INVALID, "%s: bad args", nm);
    if (len < 8)
        return spmd__fail(err, errlen, SPMD_ERR_FORMAT,
                          "%s: truncated at byte offset %zu: the header length needs 8 bytes", nm,
                          len);
    const uint8_t *b = buf;
    uint64_t h = spmd__get_u64(b);
    if (h > SPMD_CKPT_MAX_HEADER)
        return spmd__fail(err, errlen, SPMD_ERR_FORMAT,
                          "%s: byte offset 0: header length %llu exceeds the limit %llu", nm,
                          (unsigned long long)h, (unsigned long long)SPMD_CKPT_MAX_HEADER);
    if (h > len - 8)
        return spmd__fail(err, errlen, SPMD_ERR_FORMAT,
                          "%s: truncated at byte offset %zu: the header needs %llu bytes", nm, len,
                          (unsigned long long)h);
    spmd_ckpt *c = ckpt_new(nm);
    if (!c) return spmd__fail(err, errlen, SPMD_ERR_NOMEM, "%s: out of memory", nm);
    c->mem = b;
    c->data_start = 8 + h;
    c->data_len = len - 8 - h;
    spmd_status st = validate_header(c, (const char *)b + 8, (size_t)h, err, errlen);
    if (st) {
        spmd_ckpt_close(c);
        return st;
    }
    *out = c;
    return SPMD_OK;
}

/* pread all n bytes at off; a short file is a format error (it shrank). */
static spmd_status pread_full(int fd, void *buf, size_t n, uint64_t off, const char *nm, char *err,
                              size_t errlen) {
    uint8_t *p = buf;
    while (n) {
        size_t want = n > (1u << 30) ? (1u << 30) : n;
        ssize_t r = pread(fd, p, want, (off_t)off);
        if (r < 0) {
            if (errno == EINTR) continue;
            return spmd__fail_errno(err, errlen, SPMD_ERR_IO, errno, "%s: read at byte offset %llu",
                                    nm, (unsigned long long)off);
        }
        if (r == 0)
            return spmd__fail(err, errlen, SPMD_ERR_FORMAT,
                              "%s: truncated at byte offset %llu (the file shrank?)", nm,
                              (unsigned long long)off);
        p += r;
        n -= (size_t)r;
        off += (uint64_t)r;
    }
    return SPMD_OK;
}

spmd_status spmd_ckpt_open(const char *path, spmd_ckpt **out, char *err, size_t errlen) {
    if (!path || !out) return spmd__fail(err, errlen, SPMD_ERR_INVALID, "spmd_ckpt_open: bad args");
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return spmd__fail_errno(err, errlen, errno == ENOENT ? SPMD_ERR_NOTFOUND : SPMD_ERR_IO,
                                errno, "%s: cannot open", path);
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        int e = errno;
        close(fd);
        return spmd__fail_errno(err, errlen, SPMD_ERR_IO, e, "%s: fstat", path);
    }
    if (!S_ISREG(sb.st_mode)) {
        close(fd);
        return spmd__fail(err, errlen, SPMD_ERR_FORMAT, "%s: not a regular file", path);
    }
    uint64_t size = (uint64_t)sb.st_size;
    uint8_t lenb[8];
    spmd_status st;
    if (size < 8) {
        close(fd);
        return spmd__fail(err, errlen, SPMD_ERR_FORMAT,
                          "%s: truncated at byte offset %llu: the header length needs 8 bytes",
                          path, (unsigned long long)size);
    }
    if ((st = pread_full(fd, lenb, 8, 0, path, err, errlen))) {
        close(fd);
        return st;
    }
    uint64_t h = spmd__get_u64(lenb);
    if (h > SPMD_CKPT_MAX_HEADER || h > size - 8) {
        close(fd);
        if (h > SPMD_CKPT_MAX_HEADER)
            return spmd__fail(err, errlen, SPMD_ERR_FORMAT,
                              "%s: byte offset 0: header length %llu exceeds the limit %llu", path,
                              (unsigned long long)h, (unsigned long long)SPMD_CKPT_MAX_HEADER);
        return spmd__fail(err, errlen, SPMD_ERR_FORMAT,
                          "%s: truncated at byte offset %llu: the header needs %llu bytes", path,
                          (unsigned long long)size, (unsigned long long)h);
    }
    char *text = malloc(h ? (size_t)h : 1);
    spmd_ckpt *c = ckpt_new(path);
    if (!text || !c) {
        free(text);
        spmd_ckpt_close(c);
        close(fd);
        return spmd__fail(err, errlen, SPMD_ERR_NOMEM, "%s: out of memory", path);
    }
    c->fd = fd;
    c->data_start = 8 + h;
    c->data_len = size - 8 - h;
    st = pread_full(fd, text, (size_t)h, 8, path, err, errlen);
    if (!st) st = validate_header(c, text, (size_t)h, err, errlen);
    free(text); /* the JSON keeps its own copies of every string */
    if (st) {
        spmd_ckpt_close(c);
        return st;
    }
    *out = c;
    return SPMD_OK;
}

size_t spmd_ckpt_count(const spmd_ckpt *c) { return c ? c->nt : 0; }

static void fill_info(const st_entry *e, spmd_ckpt_info *out) {
    memset(out, 0, sizeof *out);
    out->name = e->name;
    out->dtype_name = e->dt->name;
    out->dtype = e->dt->dtype;
    out->ndim = e->ndim;
    memcpy(out->shape, e->shape, sizeof e->shape);
    out->nbytes = e->end - e->begin;
}

spmd_status spmd_ckpt_info_at(const spmd_ckpt *c, size_t i, spmd_ckpt_info *out) {
    if (!c || !out || i >= c->nt) return SPMD_ERR_INVALID;
    fill_info(&c->t[i], out);
    return SPMD_OK;
}

static const st_entry *find(const spmd_ckpt *c, const char *name) {
    size_t lo = 0, hi = c->nt;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int r = strcmp(c->t[c->by_name[mid]].name, name);
        if (r == 0) return &c->t[c->by_name[mid]];
        if (r < 0) lo = mid + 1;
        else hi = mid;
    }
    return NULL;
}

spmd_status spmd_ckpt_find(const spmd_ckpt *c, const char *name, spmd_ckpt_info *out) {
    if (!c || !name || !out) return SPMD_ERR_INVALID;
    const st_entry *e = find(c, name);
    if (!e) return SPMD_ERR_NOTFOUND;
    fill_info(e, out);
    return SPMD_OK;
}

static void shape_text(int ndim, const int64_t *shape, char *buf, size_t cap) {
    size_t n = (size_t)snprintf(buf, cap, "[");
    for (int i = 0; i < ndim && n < cap; i++)
        n += (size_t)snprintf(buf + n, cap - n, "%s%lld", i ? ", " : "", (long long)shape[i]);
    if (n < cap) snprintf(buf + n, cap - n, "]");
}

static int host_is_big_endian(void) {
    const uint16_t one = 1;
    return *(const uint8_t *)&one == 0;
}

/* The file is little-endian; turn elements around on a big-endian host. */
static void swap_elems(uint8_t *p, size_t nbytes, size_t size) {
    for (size_t i = 0; i + size <= nbytes; i += size)
        for (size_t a = 0, b = size - 1; a < b; a++, b--) {
            uint8_t t = p[i + a];
            p[i + a] = p[i + b];
            p[i + b] = t;
        }
}

/* The entry for t if its name, dtype and shape match the file, else NULL and
 * the reason in err. */
static const st_entry *check_tensor(const spmd_ckpt *c, const spmd_ckpt_tensor *t,
                                    spmd_status *st, char *err, size_t errlen) {
    if (!t->name) {
        *st = spmd__fail(err, errlen, SPMD_ERR_INVALID, "%s: tensor without a name", c->name);
        return NULL;
    }
    const st_entry *e = find(c, t->name);
    if (!e) {
        *st = spmd__fail(err, errlen, SPMD_ERR_NOTFOUND, "%s: no tensor named \"%s\"", c->name,
                         t->name);
        return NULL;
    }
    int same = e->dt->dtype == t->dtype && e->dt->dtype != SPMD_DTYPE_COUNT && e->ndim == t->ndim;
    for (int i = 0; same && i < e->ndim; i++) same = e->shape[i] == t->shape[i];
    if (!same) {
        char fs[200], cs[200];
        const spmd__st_dtype *want = spmd__st_dtype_of(t->dtype);
        shape_text(e->ndim, e->shape, fs, sizeof fs);
        if (t->ndim >= 0 && t->ndim <= SPMD_CKPT_MAX_DIMS) shape_text(t->ndim, t->shape, cs, sizeof cs);
        else snprintf(cs, sizeof cs, "(ndim %d)", t->ndim);
        *st = spmd__fail(err, errlen, SPMD_ERR_MISMATCH,
                         "%s: tensor \"%s\": the file holds %s %s, the caller expects %s %s",
                         c->name, t->name, e->dt->name, fs, want ? want->name : "?", cs);
        return NULL;
    }
    if (e->end > e->begin && !t->data) {
        *st = spmd__fail(err, errlen, SPMD_ERR_INVALID, "tensor \"%s\": NULL destination",
                         t->name);
        return NULL;
    }
    *st = SPMD_OK;
    return e;
}

spmd_status spmd_ckpt_read(spmd_ckpt *c, const spmd_ckpt_tensor *t, char *err, size_t errlen) {
    if (!c || !t) return spmd__fail(err, errlen, SPMD_ERR_INVALID, "spmd_ckpt_read: bad args");
    spmd_status st;
    const st_entry *e = check_tensor(c, t, &st, err, errlen);
    if (!e) return st;
    uint64_t nbytes = e->end - e->begin;
    if (nbytes == 0) return SPMD_OK;
    if (c->mem) {
        memcpy(t->data, c->mem + c->data_start + e->begin, (size_t)nbytes);
    } else {
        spmd_status st = pread_full(c->fd, t->data, (size_t)nbytes, c->data_start + e->begin,
                                    c->name, err, errlen);
        if (st) return st;
    }
    if (host_is_big_endian()) swap_elems(t->data, (size_t)nbytes, e->dt->size);
    return SPMD_OK;
}

const char *spmd_ckpt_meta(const spmd_ckpt *c, const char *key) {
    if (!c || !key) return NULL;
    for (size_t i = 0; i < c->nmeta; i++)
        if (!strcmp(c->meta_k[i], key)) return c->meta_v[i];
    return NULL;
}

size_t spmd_ckpt_meta_count(const spmd_ckpt *c) { return c ? c->nmeta : 0; }

spmd_status spmd_ckpt_meta_at(const spmd_ckpt *c, size_t i, const char **key,
                              const char **value) {
    if (!c || i >= c->nmeta) return SPMD_ERR_INVALID;
    if (key) *key = c->meta_k[i];
    if (value) *value = c->meta_v[i];
    return SPMD_OK;
}

spmd_status spmd_ckpt_load(const char *path, const spmd_ckpt_tensor *tensors, size_t ntensors,
                           char *err, size_t errlen) {
    if (ntensors && !tensors)
        return spmd__fail(err, errlen, SPMD_ERR_INVALID, "spmd_ckpt_load: NULL tensor list");
    spmd_ckpt *c;
    spmd_status st = spmd_ckpt_open(path, &c, err, errlen);
    if (st) return st;
    /* Check the whole list first: a missing or mismatched tensor leaves every
     * buffer untouched. */
    for (size_t i = 0; i < ntensors && !st; i++) check_tensor(c, &tensors[i], &st, err, errlen);
    for (size_t i = 0; i < ntensors && !st; i++) st = spmd_ckpt_read(c, &tensors[i], err, errlen);
    spmd_ckpt_close(c);
    return st;
}
