/* dcp_compare.h — the tests' comparison of two spmd-train checkpoints
 * (DCP directories, docs/TRAINING.md): every tensor whose key starts with
 * one of the given prefixes, loaded whole from both, element by element. */
#ifndef SPMD_TEST_DCP_COMPARE_H
#define SPMD_TEST_DCP_COMPARE_H
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "spmd/ckpt.h"

static int dcp_cmp_selected(const char *fqn, const char *const *prefixes) {
    if (!prefixes) return 1;
    for (; *prefixes; prefixes++)
        if (strncmp(fqn, *prefixes, strlen(*prefixes)) == 0) return 1;
    return 0;
}

/* 0 when both hold the same keys (of the selection) with the same dtypes and
 * shapes: *maxdiff the largest |a - b| of float32 values (relative:
 * |a - b| / (|b| + 1); +inf where one is NaN and the other not), *same 1
 * when every byte is equal; -1 (said why) otherwise.  prefixes:
 * NULL-terminated, or NULL for every tensor. */
static int dcp_compare_rel(const char *a, const char *b, const char *const *prefixes, int relative, double *maxdiff,
                           int *same) {
    spmd_dcp_metadata ma, mb;
    char err[512];
    int rc = 0;
    *maxdiff = 0.0;
    *same = 1;
    if (spmd_dcp_metadata_read(a, &ma, err, sizeof err) != SPMD_OK ||
        spmd_dcp_metadata_read(b, &mb, err, sizeof err) != SPMD_OK) {
        fprintf(stderr, "dcp_compare: %s\n", err);
        spmd_dcp_metadata_free(&ma);
        return -1;
    }
    size_t na = 0, nb = 0;
    for (size_t i = 0; i < mb.nentries; i++)
        nb += !mb.entries[i].is_bytes && dcp_cmp_selected(mb.entries[i].fqn, prefixes);
    for (size_t i = 0; i < ma.nentries && rc == 0; i++) {
        const spmd_dcp_entry *ea = &ma.entries[i];
        if (ea->is_bytes || !dcp_cmp_selected(ea->fqn, prefixes)) continue;
        na++;
        const spmd_dcp_entry *eb = spmd_dcp_metadata_find(&mb, ea->fqn);
        if (!eb || eb->is_bytes || strcmp(ea->dtype, eb->dtype) || ea->ndim != eb->ndim ||
            memcmp(ea->size, eb->size, sizeof(int64_t) * (size_t)ea->ndim)) {
            fprintf(stderr, "dcp_compare: %s: missing from %s or another dtype or shape\n", ea->fqn, b);
            rc = -1;
            break;
        }
        size_t n = 1, esz = strcmp(ea->dtype, "float32") == 0 ? 4 : 8;
        spmd_dcp_shard sa = {ea->fqn, ea->dtype, ea->ndim, {0}, {0}, {0}, NULL}, sb;
        for (int d = 0; d < ea->ndim; d++) sa.global[d] = sa.sizes[d] = ea->size[d], n *= (size_t)ea->size[d];
        sb = sa;
        sa.data = malloc(n * esz + 8);
        sb.data = malloc(n * esz + 8);
        if (!sa.data || !sb.data || spmd_dcp_load(a, &sa, 1, err, sizeof err) != SPMD_OK ||
            spmd_dcp_load(b, &sb, 1, err, sizeof err) != SPMD_OK) {
            fprintf(stderr, "dcp_compare: %s: %s\n", ea->fqn, err);
            rc = -1;
        } else {
            if (memcmp(sa.data, sb.data, n * esz)) *same = 0;
            for (size_t k = 0; esz == 4 && k < n; k++) {
                double x = ((float *)sa.data)[k], y = ((float *)sb.data)[k];
                double d = isnan(x) != isnan(y) ? INFINITY : isnan(x) ? 0.0 : fabs(x - y);
                if (relative && isfinite(d)) d /= fabs(y) + 1.0;
                if (getenv("SPMD_TEST_VERBOSE") && d > 0 && k == 0) fprintf(stderr, "  %s differs\n", ea->fqn);
                if (d > *maxdiff) *maxdiff = d;
            }
            if (esz == 8 && memcmp(sa.data, sb.data, n * esz)) *maxdiff = INFINITY;
        }
        free(sa.data);
        free(sb.data);
    }
    if (rc == 0 && na != nb) {
        fprintf(stderr, "dcp_compare: %s has %zu selected tensors, %s %zu\n", a, na, b, nb);
        rc = -1;
    }
    if (rc == 0 && na == 0) {
        fprintf(stderr, "dcp_compare: no tensor selected in %s\n", a);
        rc = -1;
    }
    spmd_dcp_metadata_free(&ma);
    spmd_dcp_metadata_free(&mb);
    return rc;
}
static inline int dcp_compare(const char *a, const char *b, const char *const *prefixes, double *maxdiff, int *same) {
    return dcp_compare_rel(a, b, prefixes, 0, maxdiff, same);
}

/* root/step-N with the largest N that has a .metadata, into out; -1: none. */
static inline int dcp_newest(const char *root, char *out, size_t len) {
    long best = -1;
    DIR *d = opendir(root);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        char p[1024], *end;
        long n = strncmp(e->d_name, "step-", 5) == 0 ? strtol(e->d_name + 5, &end, 10) : -1;
        if (n < 0 || *end) continue;
        snprintf(p, sizeof p, "%s/%s/.metadata", root, e->d_name);
        FILE *f = fopen(p, "rb");
        if (f && n > best) best = n;
        if (f) fclose(f);
    }
    if (d) closedir(d);
    if (best < 0) return -1;
    snprintf(out, len, "%s/step-%ld", root, best);
    return 0;
}
#endif
