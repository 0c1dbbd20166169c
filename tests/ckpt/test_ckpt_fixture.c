/* test_ckpt_fixture.c — DCP checkpoints made by torch 2.6's dcp.save
 * (tests/ckpt/make_dcp_fixtures.py), decoded by the restricted reader:
 * entries, shapes, chunks and storage items as torch wrote them; then
 * re-encoded by spmd and decoded again to the same. */
#include <stdlib.h>
#include <string.h>
#include "harness.h"
#include "spmd/ckpt.h"

static const spmd_dcp_storage *item(const spmd_dcp_metadata *m, const char *fqn, int64_t off0) {
    for (size_t i = 0; i < m->nstorage; i++)
        if (!strcmp(m->storage[i].fqn, fqn) && (!m->storage[i].has_offset || m->storage[i].ndim == 0 ||
                                                m->storage[i].offset[0] == off0))
            return &m->storage[i];
    return NULL;
}

static void common(const spmd_dcp_metadata *m) {
    CHECK(m->nentries == 4);
    const spmd_dcp_entry *w = spmd_dcp_metadata_find(m, "w"), *b = spmd_dcp_metadata_find(m, "b"),
                         *s = spmd_dcp_metadata_find(m, "step"), *e = spmd_dcp_metadata_find(m, "extra.epoch");
    CHECK(w && !strcmp(w->dtype, "float32") && w->ndim == 2 && w->size[0] == 4 && w->size[1] == 3);
    CHECK(b && !strcmp(b->dtype, "bfloat16") && b->ndim == 1 && b->size[0] == 5 && b->nchunks == 1);
    CHECK(s && !strcmp(s->dtype, "int64") && s->ndim == 0 && s->nchunks == 1);
    CHECK(e && e->is_bytes);
    CHECK(m->nstorage == (size_t)(4 + (w && w->nchunks == 2)));
}

static void check_dir(const char *dir, int world) {
    spmd_dcp_metadata m, again;
    char err[512];
    CHECK_MSG(spmd_dcp_metadata_read(dir, &m, err, sizeof err) == SPMD_OK, "%s", err);
    common(&m);
    const spmd_dcp_entry *w = spmd_dcp_metadata_find(&m, "w");
    if (world == 1) {
        CHECK(w && w->nchunks == 1 && w->chunks[0].sizes[0] == 4);
        const spmd_dcp_storage *s = item(&m, "w", 0);
        CHECK(s && !strcmp(s->relative_path, "__0_0.distcp") && s->length > 48);
    } else {
        /* Rank r saved rows [2r, 2r+2) of w, in __r_0.distcp. */
        CHECK(w && w->nchunks == 2);
        for (int r = 0; r < 2; r++) {
            const spmd_dcp_storage *s = item(&m, "w", 2 * r);
            char want[32];
            snprintf(want, sizeof want, "__%d_0.distcp", r);
            CHECK(s && !strcmp(s->relative_path, want) && s->ndim == 2);
        }
        /* The replicated b was deduplicated: one storage item. */
        int nb = 0;
        for (size_t i = 0; i < m.nstorage; i++) nb += !strcmp(m.storage[i].fqn, "b");
        CHECK(nb == 1);
    }
    void *buf = NULL;
    size_t len = 0;
    CHECK_MSG(spmd_dcp_metadata_encode(&m, &buf, &len, err, sizeof err) == SPMD_OK, "%s", err);
    CHECK_MSG(spmd_dcp_metadata_decode(buf, len, "re-encoded", &again, err, sizeof err) == SPMD_OK, "%s", err);
    common(&again);
    CHECK(again.nstorage == m.nstorage);
    for (size_t i = 0; i < m.nstorage && i < again.nstorage; i++)
        CHECK(again.storage[i].file_offset == m.storage[i].file_offset &&
              again.storage[i].length == m.storage[i].length);
    free(buf);
    spmd_dcp_metadata_free(&again);
    spmd_dcp_metadata_free(&m);
}

/* Write dir's metadata re-encoded by spmd, and a copy of its data files, into
 * out (for tests/ckpt/check_torch_load.py: torch's dcp.load of it). */
static int reencode_to(const char *dir, const char *out) {
    spmd_dcp_metadata m;
    char err[512], path[4096];
    if (spmd_dcp_metadata_read(dir, &m, err, sizeof err) != SPMD_OK) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    void *buf = NULL;
    size_t len = 0;
    int rc = spmd_dcp_metadata_encode(&m, &buf, &len, err, sizeof err) != SPMD_OK;
    snprintf(path, sizeof path, "%s/.metadata", out);
    FILE *f = rc ? NULL : fopen(path, "wb");
    rc = !f || fwrite(buf, 1, len, f) != len;
    if (f && fclose(f)) rc = 1;
    for (size_t i = 0; !rc && i < m.nstorage; i++) { /* copy each data file once (overwrites are equal) */
        char src[4096], dst[4096];
        snprintf(src, sizeof src, "%s/%s", dir, m.storage[i].relative_path);
        snprintf(dst, sizeof dst, "%s/%s", out, m.storage[i].relative_path);
        FILE *a = fopen(src, "rb"), *b = fopen(dst, "wb");
        char chunk[4096];
        size_t n;
        while (a && b && (n = fread(chunk, 1, sizeof chunk, a)) > 0)
            if (fwrite(chunk, 1, n, b) != n) rc = 1;
        if (!a || !b) rc = 1;
        if (a) fclose(a);
        if (b && fclose(b)) rc = 1;
    }
    free(buf);
    spmd_dcp_metadata_free(&m);
    return rc;
}

int main(int argc, char **argv) {
    if (argc == 4 && !strcmp(argv[1], "reencode")) return reencode_to(argv[2], argv[3]);
    if (argc < 2) {
        fprintf(stderr, "usage: %s FIXTURES_DIR\n", argv[0]);
        return 2;
    }
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/dcp_w1", argv[1]);
    check_dir(dir, 1);
    snprintf(dir, sizeof dir, "%s/dcp_w2", argv[1]);
    check_dir(dir, 2);
    return test_failures ? 1 : 0;
}
