/* buckets.c — cutting the registered parameters into buckets: reverse
 * registration order at first (backward's order), rank 0's observed ready
 * order after the first step; first bucket small (first_bucket_bytes), the
 * rest up to bucket_cap_bytes, as torch.  A bucket whose gradients are one
 * contiguous run of memory is reduced in place; others get a staging copy. */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "coll/reduce.h"
#include "ddp_internal.h"

void spmd__ddp_free_buckets(spmd_ddp *d) {
    for (int i = 0; i < d->nbk; i++) {
        if (d->bk[i].work) spmd_work_free(d->bk[i].work);
        free(d->bk[i].idx);
        free(d->bk[i].flat);
        free(d->bk[i].half);
    }
    free(d->bk);
    d->bk = NULL;
    d->nbk = 0;
}

spmd_status spmd__ddp_build_buckets(spmd_ddp *d, const int *order) {
    spmd__ddp_free_buckets(d);
    d->bk = calloc((size_t)(d->np ? d->np : 1), sizeof *d->bk);
    if (!d->bk) return spmd__ddp_fail(d, SPMD_ERR_NOMEM, "out of memory");
    size_t cap = d->o.first_bucket_bytes;
    bucket *cur = NULL;
    size_t cur_bytes = 0;
    for (int k = 0; k < d->np; k++) {
        int i = order[k];
        size_t bytes = d->p[i].count * sizeof(float);
        if (!cur || (cur_bytes > 0 && cur_bytes + bytes > cap)) {
            if (cur) cap = d->o.bucket_cap_bytes;
            cur = &d->bk[d->nbk++];
            cur->idx = malloc(sizeof(int) * (size_t)d->np);
            if (!cur->idx) return spmd__ddp_fail(d, SPMD_ERR_NOMEM, "out of memory");
            cur_bytes = 0;
        }
        d->p[i].bucket = (int)(cur - d->bk);
        d->p[i].offset = cur->count;
        cur->idx[cur->n++] = i;
        cur->count += d->p[i].count;
        cur_bytes += bytes;
    }
    for (int b = 0; b < d->nbk; b++) {
        bucket *bk = &d->bk[b];
        /* In place when the bucket's gradients, in bucket order, are one
         * contiguous run of memory (ascending or descending). */
        float *lo = d->p[bk->idx[0]].grad;
        int asc = 1, desc = 1;
        for (int k = 1; k < bk->n; k++) {
            const dparam *prev = &d->p[bk->idx[k - 1]], *p = &d->p[bk->idx[k]];
            if (p->grad != prev->grad + prev->count) asc = 0;
            if (p->grad + p->count != prev->grad) desc = 0;
            if (p->grad < lo) lo = p->grad;
        }
        if (asc || desc) {
            bk->view = lo;
            for (int k = 0; k < bk->n; k++) d->p[bk->idx[k]].offset = (size_t)(d->p[bk->idx[k]].grad - lo);
        } else {
            bk->flat = malloc(sizeof(float) * (bk->count ? bk->count : 1));
            if (!bk->flat) return spmd__ddp_fail(d, SPMD_ERR_NOMEM, "out of memory");
        }
        if (d->o.compression != SPMD_DDP_COMPRESS_NONE) {
            bk->half = malloc(sizeof(uint16_t) * (bk->count ? bk->count : 1));
            if (!bk->half) return spmd__ddp_fail(d, SPMD_ERR_NOMEM, "out of memory");
        }
        bk->pending = bk->n;
    }
    d->all_views = 1;
    for (int b = 0; b < d->nbk; b++) d->all_views &= d->bk[b].view != NULL;
    d->next_launch = 0;
    return SPMD_OK;
}

