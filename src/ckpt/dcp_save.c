/* dcp_save.c — the collective save (see spmd_dcp_save in spmd/ckpt.h):
 * plans all-gathered, replicas deduplicated (lowest rank writes), each rank
 * its file through a synced temporary, rank 0 the metadata last. */
#include <dirent.h>
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

/* One item of a rank's plan, as exchanged (fqn then a fixed record). */
typedef struct {
    char *fqn;
    int is_bytes;
    char dtype[16];
    int ndim;
    int64_t global[SPMD_DCP_MAX_DIMS], offsets[SPMD_DCP_MAX_DIMS], sizes[SPMD_DCP_MAX_DIMS];
    int rank, owned;
    uint64_t file_offset, length;
} item;

typedef struct {
    item *it;
    size_t n;
} plan;

/* ---- exchange ------------------------------------------------------------ */
/* One rank's outcome as exchanged: its status and its message. */
typedef struct {
    int32_t st;
    char msg[252];
} outcome;

/* Every rank learns every rank's outcome; all return the lowest failing
 * rank's status and message, naming that rank ("rank 1: ..."), so a failure
 * reads the same everywhere and says where it happened. */
static spmd_status agree(spmd_group *g, spmd_status mine, const char *dir, char *err, size_t errlen) {
    if (!g) return mine;
    int world = spmd_group_size(g);
    outcome me = {(int32_t)mine, ""}, *all = calloc((size_t)world, sizeof *all);
    if (!all) return spmd__fail(err, errlen, SPMD_ERR_NOMEM, "save %s: out of memory", dir);
    if (mine) snprintf(me.msg, sizeof me.msg, "%s", err && errlen && *err ? err : spmd_status_str(mine));
    spmd_status st = spmd_all_gather(g, &me, all, sizeof me, SPMD_U8);
    if (st) {
        free(all);
        return spmd__fail(err, errlen, st, "save %s: all_gather of the outcome: %s", dir, spmd_group_errmsg(g));
    }
    int first = -1, alike = 1; /* alike: every rank failed with one message (a disagreement all saw) */
    for (int r = 0; r < world; r++) {
        all[r].msg[sizeof all[r].msg - 1] = 0;
        if (all[r].st != SPMD_OK && first < 0) first = r;
        alike &= all[r].st != SPMD_OK && all[r].st == all[0].st && !strcmp(all[r].msg, all[0].msg);
    }
    if (first >= 0 && alike) st = spmd__fail(err, errlen, (spmd_status)all[0].st, "%s", all[0].msg);
    else if (first >= 0) st = spmd__fail(err, errlen, (spmd_status)all[first].st, "rank %d: %s", first, all[first].msg);
    free(all);
    return st;
}

/* All-gather variable-length buffers: *all holds world slots of *slot bytes. */
static spmd_status gather_var(spmd_group *g, const void *buf, size_t len, uint8_t **all, size_t *slot,
                              uint64_t **lens, const char *dir, char *err, size_t errlen) {
    int world = g ? spmd_group_size(g) : 1;
    *lens = calloc((size_t)world, sizeof **lens);
    if (!*lens) return spmd__fail(err, errlen, SPMD_ERR_NOMEM, "save %s: out of memory", dir);
    int64_t mine = (int64_t)len;
    spmd_status st = g ? spmd_all_gather(g, &mine, *lens, 1, SPMD_I64) : SPMD_OK;
    if (!g) (*lens)[0] = len;
    if (st) return spmd__fail(err, errlen, st, "save %s: all_gather of plan sizes: %s", dir, spmd_group_errmsg(g));
    size_t mx = 1;
    for (int r = 0; r < world; r++) mx = (*lens)[r] > mx ? (size_t)(*lens)[r] : mx;
    uint8_t *mine_pad = calloc(1, mx);
    *all = calloc((size_t)world, mx);
    if (!mine_pad || !*all) {
        free(mine_pad);
        return spmd__fail(err, errlen, SPMD_ERR_NOMEM, "save %s: out of memory", dir);
    }
    if (len) memcpy(mine_pad, buf, len);
    st = g ? spmd_all_gather(g, mine_pad, *all, mx, SPMD_U8) : SPMD_OK;
    if (!g) memcpy(*all, mine_pad, mx);
    free(mine_pad);
    *slot = mx;
    if (st) return spmd__fail(err, errlen, st, "save %s: all_gather of plans: %s", dir, spmd_group_errmsg(g));
    return SPMD_OK;
}

#define REC (4 + 16 + 4 + 3 * 8 * SPMD_DCP_MAX_DIMS)

static void put_plan(spmd__pw *w, const spmd_dcp_shard *s, size_t ns, const spmd_dcp_bytes *b, size_t nb) {
    for (size_t i = 0; i < ns + nb; i++) {
        const char *fqn = i < ns ? s[i].fqn : b[i - ns].fqn;
        uint32_t fl = (uint32_t)strlen(fqn);
        uint8_t rec[REC] = {0};
        int32_t kind = i >= ns, nd = i < ns ? s[i].ndim : 0;
        memcpy(rec, &kind, 4);
        if (i < ns) {
            snprintf((char *)rec + 4, 16, "%s", s[i].dtype);
            memcpy(rec + 20, &nd, 4);
            memcpy(rec + 24, s[i].global, 8 * SPMD_DCP_MAX_DIMS);
            memcpy(rec + 24 + 64, s[i].offsets, 8 * SPMD_DCP_MAX_DIMS);
            memcpy(rec + 24 + 128, s[i].sizes, 8 * SPMD_DCP_MAX_DIMS);
        }
        spmd__pw_raw(w, &fl, 4);
        spmd__pw_raw(w, fqn, fl);
        spmd__pw_raw(w, rec, REC);
    }
}

/* Parse every rank's plan (all bytes come from our own ranks, still checked). */
static spmd_status read_plans(const uint8_t *all, size_t slot, const uint64_t *lens, int world, plan *p,
                              const char *dir, char *err, size_t errlen) {
    size_t cap = 0;
    for (int r = 0; r < world; r++) {
        const uint8_t *b = all + (size_t)r * slot;
        size_t at = 0, len = (size_t)lens[r];
        while (at < len) {
            uint32_t fl;
            if (len - at < 4) goto bad;
            memcpy(&fl, b + at, 4);
            if (len - at - 4 < (size_t)fl + REC) goto bad;
            if (p->n == cap) {
                cap = cap ? 2 * cap : 16;
                item *ni = realloc(p->it, cap * sizeof *ni);
                if (!ni) return spmd__fail(err, errlen, SPMD_ERR_NOMEM, "save %s: out of memory", dir);
                p->it = ni;
            }
            item *it = &p->it[p->n];
            memset(it, 0, sizeof *it);
            if (!(it->fqn = strndup((const char *)b + at + 4, fl)))
                return spmd__fail(err, errlen, SPMD_ERR_NOMEM, "save %s: out of memory", dir);
            p->n++;
            const uint8_t *rec = b + at + 4 + fl;
            int32_t kind, nd;
            memcpy(&kind, rec, 4);
            memcpy(it->dtype, rec + 4, 16);
            it->dtype[15] = 0;
            memcpy(&nd, rec + 20, 4);
            if (nd < 0 || nd > SPMD_DCP_MAX_DIMS) goto bad;
            it->is_bytes = kind != 0;
            it->ndim = nd;
            memcpy(it->global, rec + 24, 64);
            memcpy(it->offsets, rec + 88, 64);
            memcpy(it->sizes, rec + 152, 64);
            it->rank = r;
            at += 4 + fl + REC;
        }
    }
    return SPMD_OK;
bad:
    return spmd__fail(err, errlen, SPMD_ERR_PROTOCOL, "save %s: a rank's plan is malformed", dir);
}

static void shape_txt(char *buf, size_t len, const int64_t *v, int n) {
    size_t at = (size_t)snprintf(buf, len, "[");
    for (int i = 0; i < n && at < len; i++) at += (size_t)snprintf(buf + at, len - at, "%s%lld", i ? ", " : "", (long long)v[i]);
    if (at < len) snprintf(buf + at, len - at, "]");
}

/* Plan order (rank, then the rank's own order) within one key. */
static int by_key(const void *a, const void *b) {
    const item *x = *(item *const *)a, *y = *(item *const *)b;
    int c = strcmp(x->fqn, y->fqn);
    return c ? c : (x < y ? -1 : x > y);
}

/* Ranks agree on each tensor; the lowest rank holding a box owns it.  Items
 * are grouped by key first (sorted), so the pairwise checks stay within a
 * key: O(n log n + sum of per-key squares). */
static spmd_status dedup(plan *p, const char *dir, char *err, size_t errlen) {
    item **ix = malloc((p->n ? p->n : 1) * sizeof *ix);
    if (!ix) return spmd__fail(err, errlen, SPMD_ERR_NOMEM, "save %s: out of memory", dir);
    for (size_t i = 0; i < p->n; i++) ix[i] = &p->it[i];
    qsort(ix, p->n, sizeof *ix, by_key);
    spmd_status st = SPMD_OK;
    for (size_t g = 0, end; !st && g < p->n; g = end) {
        for (end = g + 1; end < p->n && !strcmp(ix[end]->fqn, ix[g]->fqn);) end++;
        for (size_t i = g; !st && i < end; i++) {
            item *a = ix[i];
            a->owned = 1;
            for (size_t j = g; j < i; j++) {
                item *b = ix[j];
                if (a->is_bytes != b->is_bytes || strcmp(a->dtype, b->dtype) || a->ndim != b->ndim ||
                    memcmp(a->global, b->global, 8 * (size_t)a->ndim)) {
                    char sa[160], sb[160];
                    shape_txt(sa, sizeof sa, a->global, a->ndim);
                    shape_txt(sb, sizeof sb, b->global, b->ndim);
                    st = spmd__fail(err, errlen, SPMD_ERR_MISMATCH,
                                    "save %s: %s: rank %d has %s %s %s, rank %d has %s %s %s", dir, a->fqn, b->rank,
                                    b->is_bytes ? "bytes" : "tensor", b->dtype, sb, a->rank,
                                    a->is_bytes ? "bytes" : "tensor", a->dtype, sa);
                    break;
                }
                if (b->owned && (a->is_bytes || (!memcmp(a->offsets, b->offsets, 8 * (size_t)a->ndim) &&
                                                 !memcmp(a->sizes, b->sizes, 8 * (size_t)a->ndim))))
                    a->owned = 0; /* a replica */
            }
        }
    }
    free(ix);
    return st;
}

/* ---- files --------------------------------------------------------------- */
static spmd_status sync_dir(const char *dir, char *err, size_t errlen) {
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return spmd__fail_errno(err, errlen, SPMD_ERR_IO, errno, "%s: open directory", dir);
    int r = fsync(fd), e = errno;
    close(fd);
    if (r != 0 && e != EINVAL) return spmd__fail_errno(err, errlen, SPMD_ERR_IO, e, "%s: fsync directory", dir);
    return SPMD_OK;
}

/* A new tmp file for path ("path.tmp"); -1 (err said) when it cannot be. */
static int create_tmp(const char *path, char *tmp, size_t tmplen, char *err, size_t errlen) {
    snprintf(tmp, tmplen, "%s.tmp", path);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) spmd__fail_errno(err, errlen, SPMD_ERR_IO, errno, "%s: create", tmp);
    return fd;
}

/* fd (tmp, fully written, or write_errno the first failure) fsynced,
 * closed and renamed to path; on failure tmp is removed. */
static spmd_status commit_tmp(int fd, const char *tmp, const char *path, int write_errno, char *err, size_t errlen) {
    if (write_errno) {
        close(fd);
        unlink(tmp);
        return spmd__fail_errno(err, errlen, SPMD_ERR_IO, write_errno, "%s: write", tmp);
    }
    int r = fsync(fd), e = errno;
    close(fd);
    if (r != 0 || rename(tmp, path) != 0) {
        if (r == 0) e = errno;
        unlink(tmp);
        return spmd__fail_errno(err, errlen, SPMD_ERR_IO, e, "%s: fsync or rename", tmp);
    }
    return SPMD_OK;
}

/* path through path.tmp: written, fsynced, renamed. */
static spmd_status write_file(const char *path, const void *buf, size_t len, char *err, size_t errlen) {
    char tmp[4200];
    int fd = create_tmp(path, tmp, sizeof tmp, err, errlen);
    if (fd < 0) return SPMD_ERR_IO;
    spmd__fw f = {.fd = fd};
    spmd__fw_put(&f, buf, len);
    spmd__fw_flush(&f);
    spmd__fw_free(&f);
    return commit_tmp(fd, tmp, path, f.err, err, errlen);
}

/* Rank 0 before anyone writes: no .metadata (the directory no longer looks
 * complete), no temporaries of a killed save. */
static spmd_status prepare(const char *dir, char *err, size_t errlen) {
    if (mkdir(dir, 0755) != 0 && errno != EEXIST) return spmd__fail_errno(err, errlen, SPMD_ERR_IO, errno, "mkdir %s", dir);
    char path[4200];
    snprintf(path, sizeof path, "%s/.metadata", dir);
    if (unlink(path) != 0 && errno != ENOENT) return spmd__fail_errno(err, errlen, SPMD_ERR_IO, errno, "unlink %s", path);
    DIR *d = opendir(dir);
    if (!d) return spmd__fail_errno(err, errlen, SPMD_ERR_IO, errno, "opendir %s", dir);
    struct dirent *de;
    while ((de = readdir(d))) {
        size_t n = strlen(de->d_name);
        if (n > 4 && !strcmp(de->d_name + n - 4, ".tmp") && (!strncmp(de->d_name, "__", 2) || de->d_name[0] == '.')) {
            snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
            unlink(path);
        }
    }
    closedir(d);
    return sync_dir(dir, err, errlen);
}

/* Rank 0 after the metadata: data files of ranks >= world (an earlier, larger save). */
static void remove_stale(const char *dir, int world) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *de;
    char path[4200];
    while ((de = readdir(d))) {
        int r, k = 0;
        if (sscanf(de->d_name, "__%d_0.distcp%n", &r, &k) == 1 && k && !de->d_name[k] && r >= world) {
            snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
            unlink(path);
        }
    }
    closedir(d);
}

/* This rank's file, written as it is encoded, straight from the shards'
 * memory (no copy of the whole file; each tensor's CRC computed as it is
 * written); the place of every owned item appended to locs. */
static spmd_status write_mine(const char *dir, int rank, plan *p, const spmd_dcp_shard *s, size_t ns,
                              const spmd_dcp_bytes *b, size_t nb, spmd__pw *locs, char *err, size_t errlen) {
    char path[4200], tmp[4200];
    snprintf(path, sizeof path, "%s/__%d_0.distcp", dir, rank);
    int fd = create_tmp(path, tmp, sizeof tmp, err, errlen);
    if (fd < 0) return SPMD_ERR_IO;
    spmd__fw f = {.fd = fd};
    size_t k = 0;
    spmd_status st = SPMD_OK;
    (void)nb; /* the plan holds ns + nb items of this rank */
    for (size_t i = 0; i < p->n && !st; i++) {
        item *it = &p->it[i];
        if (it->rank != rank) continue;
        size_t local = k++;
        if (!it->owned) continue;
        uint64_t off = f.off;
        if (local < ns) st = spmd__torch_save_tensor(&f, s[local].dtype, s[local].ndim, s[local].sizes, s[local].data);
        else st = spmd__torch_save_bytes(&f, b[local - ns].data, b[local - ns].len, b[local - ns].pickled);
        if (st) st = spmd__fail(err, errlen, st, "save %s: %s: cannot encode (%s)", dir, it->fqn, spmd_status_str(st));
        uint64_t loc[2] = {off, f.off - off};
        spmd__pw_raw(locs, loc, sizeof loc);
    }
    spmd__fw_flush(&f);
    spmd__fw_free(&f);
    if (!st && f.err == ENOMEM) st = spmd__fail(err, errlen, SPMD_ERR_NOMEM, "save %s: out of memory", dir);
    if (!st && locs->failed) st = spmd__fail(err, errlen, SPMD_ERR_NOMEM, "save %s: out of memory", dir);
    if (st) {
        close(fd);
        unlink(tmp);
        return st;
    }
    return commit_tmp(fd, tmp, path, f.err, err, errlen);
}

/* Rank 0: the metadata from every plan and every owned item's place. */
static spmd_status write_metadata(const char *dir, plan *p, char *err, size_t errlen) {
    spmd_dcp_metadata m = {0};
    spmd_status st = SPMD_OK;
    m.entries = calloc(p->n + 1, sizeof *m.entries);
    m.storage = calloc(p->n + 1, sizeof *m.storage);
    if (!m.entries || !m.storage) st = spmd__fail(err, errlen, SPMD_ERR_NOMEM, "save %s: out of memory", dir);
    for (size_t i = 0; !st && i < p->n; i++) {
        item *it = &p->it[i];
        if (!it->owned) continue;
        spmd_dcp_entry *e = (spmd_dcp_entry *)spmd_dcp_metadata_find(&m, it->fqn);
        if (!e) {
            e = &m.entries[m.nentries++];
            e->fqn = it->fqn;
            e->is_bytes = it->is_bytes;
            memcpy(e->dtype, it->dtype, sizeof e->dtype);
            e->ndim = it->ndim;
            memcpy(e->size, it->global, sizeof e->size);
            e->chunks = calloc(p->n, sizeof *e->chunks);
            if (!e->chunks) st = spmd__fail(err, errlen, SPMD_ERR_NOMEM, "save %s: out of memory", dir);
        }
        spmd_dcp_storage *s = &m.storage[m.nstorage++];
        char name[64];
        snprintf(name, sizeof name, "__%d_0.distcp", it->rank);
        *s = (spmd_dcp_storage){.fqn = it->fqn, .has_offset = !it->is_bytes, .ndim = it->ndim, .index = -1,
                                .relative_path = strdup(name), .file_offset = it->file_offset, .length = it->length};
        memcpy(s->offset, it->offsets, sizeof s->offset);
        if (!s->relative_path) st = spmd__fail(err, errlen, SPMD_ERR_NOMEM, "save %s: out of memory", dir);
        if (!st && !it->is_bytes) {
            s->index = (int64_t)e->nchunks;
            memcpy(e->chunks[e->nchunks].offsets, it->offsets, sizeof it->offsets);
            memcpy(e->chunks[e->nchunks].sizes, it->sizes, sizeof it->sizes);
            e->nchunks++;
        }
    }
    void *buf = NULL;
    size_t len = 0;
    if (!st) st = spmd_dcp_metadata_encode(&m, &buf, &len, err, errlen);
    char path[4200];
    snprintf(path, sizeof path, "%s/.metadata", dir);
    if (!st) st = write_file(path, buf, len, err, errlen);
    if (!st) st = sync_dir(dir, err, errlen);
    free(buf);
    for (size_t i = 0; i < m.nentries; i++) free(m.entries[i].chunks);
    for (size_t i = 0; i < m.nstorage; i++) free(m.storage[i].relative_path);
    free(m.entries);
    free(m.storage);
    return st;
}

spmd_status spmd__dcp_save_check(const spmd_dcp_shard *shards, size_t nshards, const spmd_dcp_bytes *bytes,
                                 size_t nbytes, char *err, size_t errlen) {
    spmd_status st = SPMD_OK;
    if ((!shards && nshards) || (!bytes && nbytes)) st = spmd__fail(err, errlen, SPMD_ERR_INVALID, "spmd_dcp_save: bad args");
    for (size_t i = 0; !st && i < nshards; i++) {
        const spmd_dcp_shard *s = &shards[i];
        int ok = s->fqn && s->dtype && spmd__dcp_dtype_size(s->dtype) && s->data && s->ndim >= 0 &&
                 s->ndim <= SPMD_DCP_MAX_DIMS;
        for (int d = 0; ok && d < s->ndim; d++)
            ok = s->offsets[d] >= 0 && s->sizes[d] >= 0 && s->offsets[d] <= s->global[d] &&
                 s->sizes[d] <= s->global[d] - s->offsets[d];
        if (!ok) st = spmd__fail(err, errlen, SPMD_ERR_INVALID, "spmd_dcp_save: %s: bad dtype, ndim or box", s->fqn ? s->fqn : "(null)");
    }
    for (size_t i = 0; !st && i < nbytes; i++)
        if (!bytes[i].fqn || (!bytes[i].data && bytes[i].len))
            st = spmd__fail(err, errlen, SPMD_ERR_INVALID, "spmd_dcp_save: bytes item %zu: no fqn or data", i);
    return st;
}

spmd_status spmd_dcp_save(spmd_group *g, const char *dir, const spmd_dcp_shard *shards, size_t nshards,
                          const spmd_dcp_bytes *bytes, size_t nbytes, char *err, size_t errlen) {
    spmd_status st = dir ? spmd__dcp_save_check(shards, nshards, bytes, nbytes, err, errlen)
                         : spmd__fail(err, errlen, SPMD_ERR_INVALID, "spmd_dcp_save: no directory");
    if (st) shards = NULL, nshards = 0, bytes = NULL, nbytes = 0;
    return spmd__dcp_save_run(g, dir ? dir : "?", shards, nshards, bytes, nbytes, st, err, errlen);
}

spmd_status spmd__dcp_save_run(spmd_group *g, const char *dir, const spmd_dcp_shard *shards, size_t nshards,
                               const spmd_dcp_bytes *bytes, size_t nbytes, spmd_status st, char *err,
                               size_t errlen) {
    int rank = g ? spmd_group_rank(g) : 0, world = g ? spmd_group_size(g) : 1;
    if (rank == 0 && !st) st = prepare(dir, err, errlen);
    if ((st = agree(g, st, dir, err, errlen))) return st;

    spmd__pw mine = {0}, locs = {0};
    put_plan(&mine, shards, nshards, bytes, nbytes);
    uint8_t *all = NULL, *all_locs = NULL;
    uint64_t *lens = NULL, *loc_lens = NULL;
    size_t slot = 0, loc_slot = 0;
    plan p = {0};
    if (mine.failed) st = spmd__fail(err, errlen, SPMD_ERR_NOMEM, "save %s: out of memory", dir);
    st = agree(g, st, dir, err, errlen);
    if (!st) st = gather_var(g, mine.buf, mine.len, &all, &slot, &lens, dir, err, errlen);
    if (!st) st = read_plans(all, slot, lens, world, &p, dir, err, errlen);
    if (!st) st = dedup(&p, dir, err, errlen); /* same result on every rank */
    if (!st) st = write_mine(dir, rank, &p, shards, nshards, bytes, nbytes, &locs, err, errlen);
    st = agree(g, st, dir, err, errlen); /* every file written and synced */
    if (!st) st = gather_var(g, locs.buf, locs.len, &all_locs, &loc_slot, &loc_lens, dir, err, errlen);
    for (int r = 0; !st && r < world; r++) { /* rank r's owned items' places, in plan order */
        size_t k = 0;
        for (size_t i = 0; !st && i < p.n; i++) {
            item *it = &p.it[i];
            if (it->rank != r || !it->owned) continue;
            uint64_t loc[2];
            if ((k + 1) * sizeof loc > loc_lens[r]) {
                st = spmd__fail(err, errlen, SPMD_ERR_PROTOCOL, "save %s: rank %d reported too few items", dir, r);
                break;
            }
            memcpy(loc, all_locs + (size_t)r * loc_slot + k++ * sizeof loc, sizeof loc);
            it->file_offset = loc[0];
            it->length = loc[1];
        }
    }
    if (!st && rank == 0) st = write_metadata(dir, &p, err, errlen);
    st = agree(g, st, dir, err, errlen);
    if (!st && rank == 0) remove_stale(dir, world);
    for (size_t i = 0; i < p.n; i++) free(p.it[i].fqn);
    free(p.it);
    free(mine.buf);
    free(locs.buf);
    free(all);
    free(all_locs);
    free(lens);
    free(loc_lens);
    return st;
}
