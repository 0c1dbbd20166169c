/* dcp_load.c — loading with resharding: each requested box is filled from
 * every saved chunk that overlaps it (n-d intersection), reading only the
 * chunk's byte range of its data file. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "ckpt/ckpt_internal.h"
#include "common/common.h"

static void shape_str(char *buf, size_t len, const int64_t *v, int n) {
    size_t at = 0;
    at += (size_t)snprintf(buf, len, "[");
    for (int i = 0; i < n && at < len; i++)
        at += (size_t)snprintf(buf + at, len - at, "%s%lld", i ? ", " : "", (long long)v[i]);
    if (at < len) snprintf(buf + at, len - at, "]");
}

/* Copy the overlap box [lo, hi) from src (a chunk at coffs with csize) to dst
 * (the shard at soffs with ssize), row-major, elsize bytes per element. */
static void copy_box(int nd, const int64_t *lo, const int64_t *hi, const uint8_t *src, const int64_t *coffs,
                     const int64_t *csize, uint8_t *dst, const int64_t *soffs, const int64_t *ssize, size_t elsize) {
    int64_t idx[SPMD_DCP_MAX_DIMS];
    for (int d = 0; d < nd; d++) idx[d] = lo[d];
    size_t run = elsize * (size_t)(nd ? hi[nd - 1] - lo[nd - 1] : 1);
    for (;;) {
        int64_t so = 0, dof = 0;
        for (int d = 0; d < nd; d++) {
            so = so * csize[d] + (idx[d] - coffs[d]);
            dof = dof * ssize[d] + (idx[d] - soffs[d]);
        }
        memcpy(dst + (size_t)dof * elsize, src + (size_t)so * elsize, run);
        int d = nd - 2;
        while (d >= 0 && ++idx[d] == hi[d]) {
            idx[d] = lo[d];
            d--;
        }
        if (d < 0) return;
    }
}

spmd_status spmd__dcp_read_range(const char *dir, const spmd_dcp_storage *s, uint8_t **out, char *err,
                                 size_t errlen) {
    char path[4096];
    if ((size_t)snprintf(path, sizeof path, "%s/%s", dir, s->relative_path) >= sizeof path)
        return spmd__fail(err, errlen, SPMD_ERR_INVALID, "%s: path too long", dir);
    if (s->length > ((uint64_t)1 << 40))
        return spmd__fail(err, errlen, SPMD_ERR_FORMAT, "%s: item %s of %llu bytes", path, s->fqn,
                          (unsigned long long)s->length);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return spmd__fail_errno(err, errlen, SPMD_ERR_IO, errno, "%s (for %s): open", path, s->fqn);
    uint8_t *b = malloc(s->length ? (size_t)s->length : 1);
    if (!b) {
        close(fd);
        return spmd__fail(err, errlen, SPMD_ERR_NOMEM, "%s: out of memory", path);
    }
    size_t got = 0;
    while (got < s->length) {
        ssize_t r = pread(fd, b + got, (size_t)s->length - got, (off_t)(s->file_offset + got));
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            int e = r < 0 ? errno : 0;
            free(b);
            close(fd);
            if (!e)
                return spmd__fail(err, errlen, SPMD_ERR_FORMAT, "%s: %s: file ends before byte %llu", path, s->fqn,
                                  (unsigned long long)(s->file_offset + s->length));
            return spmd__fail_errno(err, errlen, SPMD_ERR_IO, e, "%s: read", path);
        }
        got += (size_t)r;
    }
    close(fd);
    *out = b;
    return SPMD_OK;
}

static spmd_status load_one(const char *dir, const spmd_dcp_metadata *m, const spmd_dcp_shard *sh, char *err,
                            size_t errlen) {
    char a[160], b[160];
    const spmd_dcp_entry *e = spmd_dcp_metadata_find(m, sh->fqn);
    if (!e) return spmd__fail(err, errlen, SPMD_ERR_NOTFOUND, "%s: no tensor %s in the checkpoint", dir, sh->fqn);
    size_t elsize = spmd__dcp_dtype_size(sh->dtype);
    if (e->is_bytes || strcmp(e->dtype, sh->dtype) || !elsize)
        return spmd__fail(err, errlen, SPMD_ERR_MISMATCH, "%s: %s: saved as %s, wanted %s", dir, sh->fqn,
                          e->is_bytes ? "bytes" : e->dtype, sh->dtype);
    shape_str(a, sizeof a, e->size, e->ndim);
    shape_str(b, sizeof b, sh->global, sh->ndim);
    if (e->ndim != sh->ndim || memcmp(e->size, sh->global, sizeof(int64_t) * (size_t)e->ndim))
        return spmd__fail(err, errlen, SPMD_ERR_MISMATCH, "%s: %s: saved with global shape %s, wanted %s", dir,
                          sh->fqn, a, b);
    int nd = e->ndim;
    int64_t want = 1, covered = 0;
    for (int d = 0; d < nd; d++) {
        if (sh->offsets[d] < 0 || sh->sizes[d] < 0 || sh->offsets[d] > e->size[d] ||
            sh->sizes[d] > e->size[d] - sh->offsets[d])
            return spmd__fail(err, errlen, SPMD_ERR_INVALID, "%s: the box asked for lies outside its shape %s",
                              sh->fqn, a);
        want *= sh->sizes[d];
    }
    for (size_t i = 0; want && i < m->nstorage; i++) {
        const spmd_dcp_storage *s = &m->storage[i];
        if (strcmp(s->fqn, sh->fqn)) continue;
        const spmd_dcp_chunk *c = NULL;
        for (size_t k = 0; !c && k < e->nchunks; k++)
            if (!memcmp(e->chunks[k].offsets, s->offset, sizeof(int64_t) * (size_t)nd)) c = &e->chunks[k];
        if (!c) continue; /* spmd__dcp_check guarantees one */
        int64_t lo[SPMD_DCP_MAX_DIMS], hi[SPMD_DCP_MAX_DIMS], vol = 1;
        for (int d = 0; d < nd; d++) {
            lo[d] = c->offsets[d] > sh->offsets[d] ? c->offsets[d] : sh->offsets[d];
            int64_t h1 = c->offsets[d] + c->sizes[d], h2 = sh->offsets[d] + sh->sizes[d];
            hi[d] = h1 < h2 ? h1 : h2;
            vol *= hi[d] > lo[d] ? hi[d] - lo[d] : 0;
        }
        if (!vol) continue;
        uint8_t *buf = NULL;
        spmd_status st = spmd__dcp_read_range(dir, s, &buf, err, errlen);
        if (st) return st;
        char what[512];
        snprintf(what, sizeof what, "%s/%s (%s at byte %llu)", dir, s->relative_path, s->fqn,
                 (unsigned long long)s->file_offset);
        spmd__torch_tensor t;
        st = spmd__torch_tensor_parse(buf, (size_t)s->length, what, &t, err, errlen);
        if (!st && (strcmp(t.dtype, e->dtype) || t.ndim != nd ||
                    memcmp(t.shape, c->sizes, sizeof(int64_t) * (size_t)nd))) {
            shape_str(a, sizeof a, t.shape, t.ndim);
            shape_str(b, sizeof b, c->sizes, nd);
            st = spmd__fail(err, errlen, SPMD_ERR_FORMAT, "%s: holds %s %s, the metadata says %s %s", what, t.dtype,
                            a, e->dtype, b);
        }
        if (!st) copy_box(nd, lo, hi, t.data, c->offsets, c->sizes, sh->data, sh->offsets, sh->sizes, elsize);
        free(buf);
        if (st) return st;
        covered += vol;
    }
    if (covered != want) {
        shape_str(a, sizeof a, sh->offsets, nd);
        shape_str(b, sizeof b, sh->sizes, nd);
        return spmd__fail(err, errlen, SPMD_ERR_MISMATCH,
                          "%s: %s: the saved chunks cover %lld of the %lld elements of the box at %s of size %s",
                          dir, sh->fqn, (long long)covered, (long long)want, a, b);
    }
    return SPMD_OK;
}

spmd_status spmd_dcp_load(const char *dir, const spmd_dcp_shard *shards, size_t nshards, char *err,
                          size_t errlen) {
    if (!dir || (!shards && nshards)) return spmd__fail(err, errlen, SPMD_ERR_INVALID, "spmd_dcp_load: bad args");
    for (size_t i = 0; i < nshards; i++)
        if (!shards[i].fqn || !shards[i].dtype || !shards[i].data || shards[i].ndim < 0 ||
            shards[i].ndim > SPMD_DCP_MAX_DIMS)
            return spmd__fail(err, errlen, SPMD_ERR_INVALID, "spmd_dcp_load: shard %zu: bad fqn, dtype, data or ndim", i);
    spmd_dcp_metadata m;
    spmd_status st = spmd_dcp_metadata_read(dir, &m, err, errlen);
    for (size_t i = 0; !st && i < nshards; i++) st = load_one(dir, &m, &shards[i], err, errlen);
    spmd_dcp_metadata_free(&m);
    return st;
}
