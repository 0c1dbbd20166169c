/* ckpt_save.c — writing a safetensors checkpoint so that a crash never
 * leaves a torn file under the checkpoint's name: write a temporary in the
 * same directory (same filesystem, so rename is atomic), fsync it, rename it
 * over the target, fsync the directory (so the rename itself is durable). */
#define _GNU_SOURCE /* mkostemp */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "data_internal.h"

/* A growable text buffer for the JSON header. */
typedef struct {
    char *p;
    size_t n, cap;
    int oom;
} sbuf;

static void sb_reserve(sbuf *b, size_t more) {
    if (b->oom || b->n + more + 1 <= b->cap) return;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->n + more + 1) cap *= 2;
    char *q = realloc(b->p, cap);
    if (!q) {
        b->oom = 1;
        return;
    }
    b->p = q;
    b->cap = cap;
}

static void sb_put(sbuf *b, const char *s) {
    size_t k = strlen(s);
    sb_reserve(b, k);
    if (b->oom) return;
    memcpy(b->p + b->n, s, k + 1);
    b->n += k;
}

static void sb_quote(sbuf *b, const char *s) {
    size_t k = spmd__json_quote(s, NULL, 0);
    sb_reserve(b, k);
    if (b->oom) return;
    spmd__json_quote(s, b->p + b->n, k + 1);
    b->n += k;
}

static void sb_u64(sbuf *b, uint64_t v) {
    char t[24];
    snprintf(t, sizeof t, "%llu", (unsigned long long)v);
    sb_put(b, t);
}

typedef struct {
    size_t idx;
    size_t esize;
} order_ix;

/* Larger elements first, then the caller's order (a stable sort). */
static int cmp_order(const void *a, const void *b) {
    const order_ix *x = a, *y = b;
    if (x->esize != y->esize) return x->esize > y->esize ? -1 : 1;
    return x->idx < y->idx ? -1 : x->idx > y->idx;
}

static int cmp_str_ptr(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static spmd_status check_unique(const char **names, size_t n, const char *what, char *err,
                                size_t errlen) {
    if (n < 2) return SPMD_OK;
    const char **s = malloc(n * sizeof *s);
    if (!s) return spmd__fail(err, errlen, SPMD_ERR_NOMEM, "checkpoint: out of memory");
    memcpy(s, names, n * sizeof *s);
    qsort(s, n, sizeof *s, cmp_str_ptr);
    for (size_t i = 1; i < n; i++) {
        if (!strcmp(s[i], s[i - 1])) {
            spmd_status st = spmd__fail(err, errlen, SPMD_ERR_INVALID,
                                        "checkpoint: duplicate %s \"%s\"", what, s[i]);
            free(s);
            return st;
        }
    }
    free(s);
    return SPMD_OK;
}

/* Validate the caller's list; nbytes[i] receives each tensor's byte size. */
static spmd_status check_args(const spmd_ckpt_tensor *t, size_t nt, const spmd_ckpt_kv *meta,
                              size_t nmeta, uint64_t *nbytes, char *err, size_t errlen) {
    if (nt > SPMD_CKPT_MAX_TENSORS)
        return spmd__fail(err, errlen, SPMD_ERR_INVALID, "checkpoint: %zu tensors (limit %u)", nt,
                          SPMD_CKPT_MAX_TENSORS);
    for (size_t i = 0; i < nt; i++) {
        const char *nm = t[i].name;
        if (!nm || !*nm || strlen(nm) > SPMD_CKPT_MAX_NAME || !spmd__utf8_valid(nm) ||
            !strcmp(nm, "__metadata__"))
            return spmd__fail(err, errlen, SPMD_ERR_INVALID,
                              "checkpoint: tensor %zu: name must be 1..%u bytes of UTF-8 and not "
                              "\"__metadata__\"",
                              i, SPMD_CKPT_MAX_NAME);
        const spmd__st_dtype *dt = spmd__st_dtype_of(t[i].dtype);
        if (!dt)
            return spmd__fail(err, errlen, SPMD_ERR_INVALID, "checkpoint: tensor \"%s\": bad dtype %d",
                              nm, (int)t[i].dtype);
        if (t[i].ndim < 0 || t[i].ndim > SPMD_CKPT_MAX_DIMS)
            return spmd__fail(err, errlen, SPMD_ERR_INVALID,
                              "checkpoint: tensor \"%s\": ndim %d out of range 0..%d", nm,
                              t[i].ndim, SPMD_CKPT_MAX_DIMS);
        uint64_t b = dt->size;
        int zero = 0;
        for (int d = 0; d < t[i].ndim; d++) {
            int64_t v = t[i].shape[d];
            if (v < 0)
                return spmd__fail(err, errlen, SPMD_ERR_INVALID,
                                  "checkpoint: tensor \"%s\": negative dimension %lld", nm,
                                  (long long)v);
            if (v == 0) zero = 1;
            else if (!zero && b > ((uint64_t)1 << 62) / (uint64_t)v)
                return spmd__fail(err, errlen, SPMD_ERR_INVALID,
                                  "checkpoint: tensor \"%s\": too large", nm);
            else if (!zero) b *= (uint64_t)v;
        }
        nbytes[i] = zero ? 0 : b;
        if (nbytes[i] && !t[i].data)
            return spmd__fail(err, errlen, SPMD_ERR_INVALID, "checkpoint: tensor \"%s\": NULL data",
                              nm);
    }
    for (size_t i = 0; i < nmeta; i++) {
        if (!meta[i].key || !meta[i].value || !*meta[i].key ||
            strlen(meta[i].key) > SPMD_CKPT_MAX_NAME || strlen(meta[i].value) > SPMD_CKPT_MAX_VALUE ||
            !spmd__utf8_valid(meta[i].key) || !spmd__utf8_valid(meta[i].value))
            return spmd__fail(err, errlen, SPMD_ERR_INVALID,
                              "checkpoint: metadata entry %zu: key 1..%u and value 0..%u bytes of "
                              "UTF-8",
                              i, SPMD_CKPT_MAX_NAME, SPMD_CKPT_MAX_VALUE);
    }
    return SPMD_OK;
}

static spmd_status write_all(int fd, const void *buf, size_t n, const char *path, char *err,
                             size_t errlen) {
    const uint8_t *p = buf;
    while (n) {
        size_t want = n > (1u << 30) ? (1u << 30) : n;
        ssize_t w = write(fd, p, want);
        if (w < 0) {
            if (errno == EINTR) continue;
            return spmd__fail_errno(err, errlen, SPMD_ERR_IO, errno, "%s: write", path);
        }
        p += w;
        n -= (size_t)w;
    }
    return SPMD_OK;
}

static int host_is_big_endian(void) {
    const uint16_t one = 1;
    return *(const uint8_t *)&one == 0;
}

/* Tensor bytes in little-endian order: as they are on a little-endian host,
 * element-swapped through a bounce buffer otherwise. */
static spmd_status write_tensor(int fd, const void *data, uint64_t nbytes, size_t esize,
                                const char *path, char *err, size_t errlen) {
    if (!host_is_big_endian() || esize == 1)
        return write_all(fd, data, (size_t)nbytes, path, err, errlen);
    uint8_t tmp[1 << 16];
    const uint8_t *p = data;
    while (nbytes) {
        size_t k = nbytes < sizeof tmp ? (size_t)nbytes : sizeof tmp;
        for (size_t i = 0; i < k; i += esize)
            for (size_t j = 0; j < esize; j++) tmp[i + j] = p[i + esize - 1 - j];
        spmd_status st = write_all(fd, tmp, k, path, err, errlen);
        if (st) return st;
        p += k;
        nbytes -= k;
    }
    return SPMD_OK;
}

/* Header JSON for the given layout, padded with spaces so the data starts at
 * a multiple of 8 bytes in the file. */
static spmd_status build_header(const spmd_ckpt_tensor *t, size_t nt, const spmd_ckpt_kv *meta,
                                size_t nmeta, const order_ix *ord, const uint64_t *nbytes,
                                sbuf *b) {
    sb_put(b, "{");
    int first = 1;
    if (nmeta) {
        sb_put(b, "\"__metadata__\":{");
        for (size_t i = 0; i < nmeta; i++) {
            if (i) sb_put(b, ",");
            sb_quote(b, meta[i].key);
            sb_put(b, ":");
            sb_quote(b, meta[i].value);
        }
        sb_put(b, "}");
        first = 0;
    }
    uint64_t at = 0;
    for (size_t k = 0; k < nt; k++) {
        const spmd_ckpt_tensor *x = &t[ord[k].idx];
        if (!first) sb_put(b, ",");
        first = 0;
        sb_quote(b, x->name);
        sb_put(b, ":{\"dtype\":\"");
        sb_put(b, spmd__st_dtype_of(x->dtype)->name);
        sb_put(b, "\",\"shape\":[");
        for (int d = 0; d < x->ndim; d++) {
            if (d) sb_put(b, ",");
            sb_u64(b, (uint64_t)x->shape[d]);
        }
        sb_put(b, "],\"data_offsets\":[");
        sb_u64(b, at);
        sb_put(b, ",");
        at += nbytes[ord[k].idx];
        sb_u64(b, at);
        sb_put(b, "]}");
    }
    sb_put(b, "}");
    while (!b->oom && (8 + b->n) % 8) sb_put(b, " ");
    if (b->oom) return SPMD_ERR_NOMEM;
    return SPMD_OK;
}

static spmd_status fsync_dir(const char *dir, char *err, size_t errlen) {
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return spmd__fail_errno(err, errlen, SPMD_ERR_IO, errno, "%s: open directory", dir);
    int r;
    do r = fsync(fd);
    while (r != 0 && errno == EINTR);
    int e = errno;
    close(fd);
    /* Some filesystems cannot fsync a directory; the data itself is synced. */
    if (r != 0 && e != EINVAL && e != EROFS)
        return spmd__fail_errno(err, errlen, SPMD_ERR_IO, e, "%s: fsync directory", dir);
    return SPMD_OK;
}

spmd_status spmd_ckpt_save(const char *path, const spmd_ckpt_tensor *tensors, size_t ntensors,
                           const spmd_ckpt_kv *meta, size_t nmeta, char *err, size_t errlen) {
    if (!path || !*path || (ntensors && !tensors) || (nmeta && !meta))
        return spmd__fail(err, errlen, SPMD_ERR_INVALID, "spmd_ckpt_save: invalid arguments");
    spmd_status st;
    uint64_t *nbytes = malloc((ntensors ? ntensors : 1) * sizeof *nbytes);
    order_ix *ord = malloc((ntensors ? ntensors : 1) * sizeof *ord);
    const char **names = malloc((ntensors + nmeta + 1) * sizeof *names);
    sbuf hdr = {NULL, 0, 0, 0};
    char *tmp = NULL, *dir = NULL;
    int fd = -1;
    if (!nbytes || !ord || !names) {
        st = spmd__fail(err, errlen, SPMD_ERR_NOMEM, "%s: out of memory", path);
        goto out;
    }
    if ((st = check_args(tensors, ntensors, meta, nmeta, nbytes, err, errlen))) goto out;
    for (size_t i = 0; i < ntensors; i++) names[i] = tensors[i].name;
    if ((st = check_unique(names, ntensors, "tensor name", err, errlen))) goto out;
    for (size_t i = 0; i < nmeta; i++) names[i] = meta[i].key;
    if ((st = check_unique(names, nmeta, "metadata key", err, errlen))) goto out;
    for (size_t i = 0; i < ntensors; i++)
        ord[i] = (order_ix){i, spmd__st_dtype_of(tensors[i].dtype)->size};
    qsort(ord, ntensors, sizeof *ord, cmp_order);
    if ((st = build_header(tensors, ntensors, meta, nmeta, ord, nbytes, &hdr))) {
        st = spmd__fail(err, errlen, st, "%s: out of memory for the header", path);
        goto out;
    }
    if (hdr.n > SPMD_CKPT_MAX_HEADER) {
        st = spmd__fail(err, errlen, SPMD_ERR_INVALID, "%s: header of %zu bytes exceeds the limit",
                        path, hdr.n);
        goto out;
    }

    /* dir and basename of path; the temporary is
     * "<dir>/.<base>.tmp-<host>-<pid>-XXXXXX" (ckpt_stale.c), and the ones of
     * writers that died on this host go first. */
    (void)spmd_ckpt_remove_stale(path, NULL, NULL, 0);
    const char *slash = strrchr(path, '/');
    const char *base = slash ? slash + 1 : path;
    if (!*base) {
        st = spmd__fail(err, errlen, SPMD_ERR_INVALID, "%s: names a directory", path);
        goto out;
    }
    size_t dlen = slash ? (size_t)(slash - path) : 1;
    dir = malloc(dlen + 2);
    tmp = malloc(strlen(path) + 400);
    if (!dir || !tmp) {
        st = spmd__fail(err, errlen, SPMD_ERR_NOMEM, "%s: out of memory", path);
        goto out;
    }
    if (slash) {
        memcpy(dir, path, dlen);
        dir[dlen] = '\0';
        if (dlen == 0) strcpy(dir, "/");
    } else {
        strcpy(dir, ".");
    }
    fd = spmd__ckpt_tmp_template(path, tmp, strlen(path) + 400) == 0 ? mkostemp(tmp, O_CLOEXEC) : -1;
    if (fd < 0) {
        st = spmd__fail_errno(err, errlen, SPMD_ERR_IO, errno, "%s: cannot create a temporary file",
                              path);
        free(tmp);
        tmp = NULL;
        goto out;
    }
    (void)fchmod(fd, 0644); /* mkstemp makes 0600; a checkpoint is an ordinary file */

    unsigned char lenb[8];
    spmd__put_u64(lenb, (uint64_t)hdr.n);
    if ((st = write_all(fd, lenb, 8, tmp, err, errlen))) goto out;
    if ((st = write_all(fd, hdr.p, hdr.n, tmp, err, errlen))) goto out;
    for (size_t k = 0; k < ntensors; k++) {
        size_t i = ord[k].idx;
        if (!nbytes[i]) continue;
        st = write_tensor(fd, tensors[i].data, nbytes[i], ord[k].esize, tmp, err, errlen);
        if (st) goto out;
    }
    int r;
    do r = fsync(fd);
    while (r != 0 && errno == EINTR);
    if (r != 0) {
        st = spmd__fail_errno(err, errlen, SPMD_ERR_IO, errno, "%s: fsync", tmp);
        goto out;
    }
    r = close(fd);
    fd = -1;
    if (r != 0) {
        st = spmd__fail_errno(err, errlen, SPMD_ERR_IO, errno, "%s: close", tmp);
        goto out;
    }
    if (rename(tmp, path) != 0) {
        st = spmd__fail_errno(err, errlen, SPMD_ERR_IO, errno, "rename %s -> %s", tmp, path);
        goto out;
    }
    free(tmp);
    tmp = NULL; /* renamed: nothing to remove any more */
    st = fsync_dir(dir, err, errlen);
out:
    if (fd >= 0) close(fd);
    if (tmp) unlink(tmp);
    free(tmp);
    free(dir);
    free(hdr.p);
    free(names);
    free(ord);
    free(nbytes);
    return st;
}
