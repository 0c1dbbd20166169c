/* wire.c — strategy 1: a bucket reduced by an async all_reduce (or the
 * user's comm hook), optionally compressed to fp16/bf16 as torch's hooks do;
 * finish waits for it and averages (or widens) into the gradients. */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "coll/reduce.h"
#include "ddp_internal.h"

spmd_status spmd__ddp_wire_launch(spmd_ddp *d, bucket *b) {
    float *data = spmd__ddp_bucket_data(b);
    int w = spmd_group_size(d->g);
    spmd_status st;
    if (d->hook) {
        st = d->hook(d->hook_state, d->g, data, b->count, &b->work);
    } else if (d->o.compression != SPMD_DDP_COMPRESS_NONE) {
        /* As torch's fp16/bf16 hooks: divide first (no overflow), reduce the
         * narrow copy, widen back at finish. */
        int fp16 = d->o.compression == SPMD_DDP_COMPRESS_FP16;
        if (fp16) spmd__ddp_to_f16(b->half, data, b->count, (float)w);
        else spmd__ddp_to_bf16(b->half, data, b->count, (float)w);
        st = spmd_all_reduce_async(d->g, b->half, b->half, b->count, fp16 ? SPMD_F16 : SPMD_BF16, SPMD_SUM,
                                   NULL, &b->work);
    } else {
        st = spmd_all_reduce_async(d->g, data, data, b->count, SPMD_F32, SPMD_SUM, NULL, &b->work);
    }
    if (st) return spmd__ddp_fail(d, st, "bucket all_reduce: %s", spmd_group_errmsg(d->g));
    return SPMD_OK;
}


spmd_status spmd__ddp_wire_complete(spmd_ddp *d, bucket *b, int discard) {
    spmd_status st = SPMD_OK;
    if (b->work) {
        st = spmd_work_wait(b->work, -1);
        if (st) spmd__ddp_fail(d, st, "bucket all_reduce: %s", spmd_work_errmsg(b->work));
        spmd_work_free(b->work);
        b->work = NULL;
    }
    b->launched = 0;
    if (st || discard) return st;
    float *data = spmd__ddp_bucket_data(b);
    int w = spmd_group_size(d->g);
    if (!d->hook && d->o.compression != SPMD_DDP_COMPRESS_NONE) {
        if (d->o.compression == SPMD_DDP_COMPRESS_FP16) spmd__ddp_from_f16(data, b->half, b->count);
        else spmd__ddp_from_bf16(data, b->half, b->count);
    } else if (w > 1) {
        /* divide (as torch does), with the reduce kernels' vectorised AVG finish */
        spmd__avg_finish(data, b->count, SPMD_F32, w);
    }
    if (b->flat)
        for (int k = 0; k < b->n; k++) {
            dparam *p = &d->p[b->idx[k]];
            memcpy(p->grad, b->flat + p->offset, p->count * sizeof(float));
        }
    return SPMD_OK;
}

