/* idx.c — the IDX container of MNIST: 4-byte magic (0, 0, dtype, ndims),
 * ndims big-endian u32 dimensions, then the payload.  One parser reads from a
 * byte source that is either memory (tests, fuzzers) or a zlib gzFile (which
 * reads raw files transparently), so every validation runs on both paths.
 * Every message names the file and the byte offset in the uncompressed stream. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>
#include "data_internal.h"

typedef struct {
    const uint8_t *mem; /* memory source, or NULL */
    size_t memlen;
    gzFile gz; /* file source */
    size_t pos; /* bytes consumed so far */
    const char *name;
} idx_src;

/* Read up to n bytes; *got < n means end of data.  SPMD_ERR_IO on a read or
 * decompression error. */
static spmd_status src_read(idx_src *s, void *buf, size_t n, size_t *got, char *err,
                            size_t errlen) {
    *got = 0;
    if (s->mem) {
        size_t left = s->memlen - s->pos;
        size_t k = n < left ? n : left;
        if (k) memcpy(buf, s->mem + s->pos, k);
        s->pos += k;
        *got = k;
        return SPMD_OK;
    }
    uint8_t *p = buf;
    while (*got < n) {
        size_t want = n - *got;
        if (want > (1u << 30)) want = 1u << 30; /* gzread takes an unsigned int */
        int r = gzread(s->gz, p + *got, (unsigned)want);
        if (r < 0) {
            int zerr = Z_OK;
            const char *msg = gzerror(s->gz, &zerr);
            if (zerr == Z_ERRNO)
                return spmd__fail_errno(err, errlen, SPMD_ERR_IO, errno,
                                        "%s: read failed at byte offset %zu", s->name,
                                        s->pos + *got);
            return spmd__fail(err, errlen, SPMD_ERR_IO,
                              "%s: decompression failed at byte offset %zu: %s", s->name,
                              s->pos + *got, msg ? msg : "zlib error");
        }
        if (r == 0) break;
        *got += (size_t)r;
    }
    s->pos += *got;
    return SPMD_OK;
}

/* Why a short read stopped: a damaged gzip stream says so through gzerror. */
static const char *src_eof_reason(idx_src *s) {
    if (s->mem) return "";
    int zerr = Z_OK;
    const char *msg = gzerror(s->gz, &zerr);
    if (zerr != Z_OK && msg && *msg) return msg;
    return "";
}

static const char *idx_dtype_text(uint8_t t) {
    switch (t) {
    case 0x08: return "unsigned byte";
    case 0x09: return "signed byte";
    case 0x0B: return "int16";
    case 0x0C: return "int32";
    case 0x0D: return "float32";
    case 0x0E: return "float64";
    default: return NULL;
    }
}

static spmd_status idx_read(idx_src *s, int expected_ndims, spmd_idx *out, char *err,
                            size_t errlen) {
    const char *nm = s->name;
    uint8_t hdr[4 + 4 * SPMD_IDX_MAX_DIMS];
    size_t got = 0;
    spmd_status st = src_read(s, hdr, 4, &got, err, errlen);
    if (st) return st;
    if (got < 4) {
        const char *why = src_eof_reason(s);
        return spmd__fail(err, errlen, SPMD_ERR_FORMAT,
                          "%s: truncated at byte offset %zu: an IDX header needs 4 bytes%s%s",
                          nm, got, *why ? ": " : "", why);
    }
    if (hdr[0] != 0 || hdr[1] != 0)
        return spmd__fail(err, errlen, SPMD_ERR_FORMAT,
                          "%s: byte offset 0: bad magic 0x%02x%02x (an IDX file starts with "
                          "two zero bytes)",
                          nm, hdr[0], hdr[1]);
    if (hdr[2] != 0x08) {
        const char *t = idx_dtype_text(hdr[2]);
        if (t)
            return spmd__fail(err, errlen, SPMD_ERR_FORMAT,
                              "%s: byte offset 2: IDX dtype 0x%02x (%s) is not supported "
                              "(expected 0x08, unsigned byte)",
                              nm, hdr[2], t);
        return spmd__fail(err, errlen, SPMD_ERR_FORMAT,
                          "%s: byte offset 2: unknown IDX dtype byte 0x%02x", nm, hdr[2]);
    }
    int ndims = hdr[3];
    if (ndims < 1 || ndims > SPMD_IDX_MAX_DIMS)
        return spmd__fail(err, errlen, SPMD_ERR_FORMAT,
                          "%s: byte offset 3: %d dimensions (expected 1..%d)", nm, ndims,
                          SPMD_IDX_MAX_DIMS);
    if (expected_ndims > 0 && ndims != expected_ndims)
        return spmd__fail(err, errlen, SPMD_ERR_FORMAT,
                          "%s: byte offset 3: %d dimensions, expected %d (idx%d file)", nm, ndims,
                          expected_ndims, expected_ndims);
    st = src_read(s, hdr + 4, 4 * (size_t)ndims, &got, err, errlen);
    if (st) return st;
    if (got < 4 * (size_t)ndims) {
        const char *why = src_eof_reason(s);
        return spmd__fail(err, errlen, SPMD_ERR_FORMAT,
                          "%s: truncated at byte offset %zu: the header declares %d dimensions "
                          "(%zu bytes)%s%s",
                          nm, 4 + got, ndims, 4 + 4 * (size_t)ndims, *why ? ": " : "", why);
    }
    spmd_idx x;
    memset(&x, 0, sizeof x);
    x.ndims = ndims;
    size_t count = 1;
    for (int d = 0; d < ndims; d++) {
        const uint8_t *p = hdr + 4 + 4 * d;
        uint32_t v = ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
        if (v == 0 || v > SPMD_IDX_MAX_DIM)
            return spmd__fail(err, errlen, SPMD_ERR_FORMAT,
                              "%s: byte offset %d: dimension %d is %u (expected 1..%u)", nm,
                              4 + 4 * d, d, v, (unsigned)SPMD_IDX_MAX_DIM);
        if (count > SPMD_IDX_MAX_BYTES / v)
            return spmd__fail(err, errlen, SPMD_ERR_FORMAT,
                              "%s: byte offset %d: dimensions make a payload larger than the "
                              "%zu-byte limit",
                              nm, 4 + 4 * d, (size_t)SPMD_IDX_MAX_BYTES);
        count *= v;
        x.dims[d] = v;
    }
    size_t start = 4 + 4 * (size_t)ndims;
    x.count = count;
    /* A short header must not make us allocate what its dims claim: memory
     * sources are checked first, file sources grow the buffer as data
     * actually arrives (doubling from 1 MiB). */
    size_t have = 0, cap = count;
    int short_data = s->mem && s->memlen - s->pos < count;
    if (short_data) {
        have = s->memlen - s->pos;
    } else {
        if (!s->mem && cap > ((size_t)1 << 20)) cap = (size_t)1 << 20;
        x.data = malloc(cap);
        if (!x.data)
            return spmd__fail(err, errlen, SPMD_ERR_NOMEM, "%s: cannot allocate %zu bytes", nm,
                              cap);
        for (;;) {
            st = src_read(s, x.data + have, cap - have, &got, err, errlen);
            if (st) {
                free(x.data);
                return st;
            }
            have += got;
            if (have < cap || have == count) break; /* end of data, or all of it */
            cap = count - cap < cap ? count : cap * 2;
            uint8_t *bigger = realloc(x.data, cap);
            if (!bigger) {
                free(x.data);
                return spmd__fail(err, errlen, SPMD_ERR_NOMEM, "%s: cannot allocate %zu bytes",
                                  nm, cap);
            }
            x.data = bigger;
        }
        if (have < count) {
            free(x.data);
            short_data = 1;
        }
    }
    if (short_data) {
        const char *why = src_eof_reason(s);
        return spmd__fail(err, errlen, SPMD_ERR_FORMAT,
                          "%s: truncated at byte offset %zu: the header declares %zu payload "
                          "bytes ending at offset %zu%s%s",
                          nm, start + have, count, start + count, *why ? ": " : "", why);
    }
    uint8_t extra;
    st = src_read(s, &extra, 1, &got, err, errlen);
    if (st) {
        free(x.data);
        return st;
    }
    if (got) {
        free(x.data);
        return spmd__fail(err, errlen, SPMD_ERR_FORMAT,
                          "%s: trailing bytes at byte offset %zu: the payload declared by the "
                          "header ends there",
                          nm, start + count);
    }
    *out = x;
    return SPMD_OK;
}

spmd_status spmd_idx_parse(const void *buf, size_t len, int expected_ndims, const char *name,
                           spmd_idx *out, char *err, size_t errlen) {
    const char *nm = name ? name : "<memory>";
    if (!out || (!buf && len) || expected_ndims < 0 || expected_ndims > SPMD_IDX_MAX_DIMS)
        return spmd__fail(err, errlen, SPMD_ERR_INVALID, "%s: invalid arguments", nm);
    static const uint8_t empty[1] = {0};
    idx_src s = {buf ? (const uint8_t *)buf : empty, len, NULL, 0, nm};
    return idx_read(&s, expected_ndims, out, err, errlen);
}

spmd_status spmd_idx_load(const char *path, int expected_ndims, spmd_idx *out, char *err,
                          size_t errlen) {
    if (!path || !out || expected_ndims < 0 || expected_ndims > SPMD_IDX_MAX_DIMS)
        return spmd__fail(err, errlen, SPMD_ERR_INVALID, "spmd_idx_load: invalid arguments");
    errno = 0;
    gzFile gz = gzopen(path, "rb");
    if (!gz) {
        int e = errno ? errno : ENOMEM;
        return spmd__fail_errno(err, errlen, e == ENOENT ? SPMD_ERR_NOTFOUND : SPMD_ERR_IO, e,
                                "%s: cannot open", path);
    }
    gzbuffer(gz, 1 << 17);
    idx_src s = {NULL, 0, gz, 0, path};
    spmd_status st = idx_read(&s, expected_ndims, out, err, errlen);
    gzclose_r(gz);
    return st;
}

void spmd_idx_free(spmd_idx *x) {
    if (!x) return;
    free(x->data);
    memset(x, 0, sizeof *x);
}
