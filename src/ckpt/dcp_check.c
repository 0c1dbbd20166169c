/* dcp_check.c — consistency of a DCP metadata (shared by decode and encode)
 * and the lookup of an entry by key. */
#include <string.h>
#include "ckpt/ckpt_internal.h"
#include "common/common.h"

static int same_offset(const spmd_dcp_storage *s, const spmd_dcp_entry *e, const spmd_dcp_chunk *c) {
    if (s->ndim != e->ndim) return 0;
    for (int d = 0; d < e->ndim; d++)
        if (s->offset[d] != c->offsets[d]) return 0;
    return 1;
}

/* Do two chunks of an ndim tensor share an element? */
static int overlap(const spmd_dcp_chunk *a, const spmd_dcp_chunk *b, int ndim) {
    for (int d = 0; d < ndim; d++)
        if (a->offsets[d] >= b->offsets[d] + b->sizes[d] || b->offsets[d] >= a->offsets[d] + a->sizes[d])
            return 0;
    return 1;
}

spmd_status spmd__dcp_check(const spmd_dcp_metadata *m, const char *what, char *err,
                            size_t errlen, spmd_status st) {
    for (size_t i = 0; i < m->nentries; i++) {
        const spmd_dcp_entry *e = &m->entries[i];
        if (e->ndim < 0 || e->ndim > SPMD_DCP_MAX_DIMS)
            return spmd__fail(err, errlen, st, "%s: %s: %d dims (at most %d)", what, e->fqn, e->ndim,
                              SPMD_DCP_MAX_DIMS);
        for (size_t j = 0; j < i; j++)
            if (!strcmp(m->entries[j].fqn, e->fqn))
                return spmd__fail(err, errlen, st, "%s: key %s appears twice", what, e->fqn);
        for (size_t k = 0; k < e->nchunks; k++)
            for (int d = 0; d < e->ndim; d++)
                if (e->chunks[k].offsets[d] < 0 || e->chunks[k].sizes[d] < 0 ||
                    e->chunks[k].offsets[d] > e->size[d] ||
                    e->chunks[k].sizes[d] > e->size[d] - e->chunks[k].offsets[d])
                    return spmd__fail(err, errlen, st, "%s: %s: chunk %zu lies outside the tensor", what,
                                      e->fqn, k);
        /* Chunks are disjoint (DCP deduplicates replicas), so a load can
         * count what it covered. */
        for (size_t k = 0; k < e->nchunks; k++)
            for (size_t j = 0; j < k; j++)
                if (overlap(&e->chunks[j], &e->chunks[k], e->ndim))
                    return spmd__fail(err, errlen, st, "%s: %s: chunks %zu and %zu overlap", what, e->fqn, j, k);
    }
    for (size_t i = 0; i < m->nstorage; i++) {
        const spmd_dcp_storage *s = &m->storage[i];
        const spmd_dcp_entry *e = spmd_dcp_metadata_find(m, s->fqn);
        if (!e)
            return spmd__fail(err, errlen, st, "%s: storage item for %s, which is not a key", what, s->fqn);
        if (s->file_offset > UINT64_MAX - s->length)
            return spmd__fail(err, errlen, st, "%s: %s: byte range overflows", what, s->fqn);
        if (e->is_bytes) {
            if (s->has_offset)
                return spmd__fail(err, errlen, st, "%s: %s: bytes item stored with a tensor offset", what, s->fqn);
            continue;
        }
        int found = 0;
        for (size_t k = 0; !found && k < e->nchunks; k++) found = s->has_offset && same_offset(s, e, &e->chunks[k]);
        if (!found)
            return spmd__fail(err, errlen, st, "%s: %s: storage item's offset is not one of its chunks", what,
                              s->fqn);
    }
    return SPMD_OK;
}

const spmd_dcp_entry *spmd_dcp_metadata_find(const spmd_dcp_metadata *m, const char *fqn) {
    if (!m || !fqn) return NULL;
    for (size_t i = 0; i < m->nentries; i++)
        if (!strcmp(m->entries[i].fqn, fqn)) return &m->entries[i];
    return NULL;
}
