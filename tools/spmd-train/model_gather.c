/* model_gather.c — the whole model and the parts the ranks hold with --pp or
 * --tp > 1 (ckpt_state.c's boxes of each rank): --save-model sends the
 * stages and tensor-parallel blocks to rank 0, which pastes them into the
 * whole model and writes it; --load-model cuts each rank's boxes out of the
 * whole state_dict every rank read. */
#include <stdlib.h>
#include <string.h>
#include "ckpt_state.h"

enum { GATHER_TAG = 0x7a11 };

typedef struct {
    char name[200];
    int64_t ndim, global[4], off[4], size[4];
} box_head;

/* Copy the box (row-major in box) into the whole tensor of shape h->global
 * (into_whole), or out of it. */
static void copy_box(float *whole, const box_head *h, float *box, int into_whole) {
    int nd = (int)h->ndim;
    int64_t rows = 1, run = h->size[nd - 1];
    for (int d = 0; d < nd - 1; d++) rows *= h->size[d];
    for (int64_t r = 0; r < rows; r++) {
        int64_t rem = r, flat = 0;
        int64_t idx[4] = {0};
        for (int d = nd - 2; d >= 0; d--) {
            idx[d] = rem % h->size[d];
            rem /= h->size[d];
        }
        for (int d = 0; d < nd; d++) flat = flat * h->global[d] + (d < nd - 1 ? idx[d] : 0) + h->off[d];
        if (into_whole) memcpy(whole + flat, box + r * run, sizeof(float) * (size_t)run);
        else memcpy(box + r * run, whole + flat, sizeof(float) * (size_t)run);
    }
}

/* The tensor of `whole` named name (parameter or buffer) and its memory. */
static float *whole_tensor(spmd_model *whole, const char *name, const spmd_tensor_info **ti) {
    for (int i = 0; i < spmd_model_num_params(whole); i++)
        if (strcmp(spmd_model_param(whole, i)->name, name) == 0) {
            *ti = spmd_model_param(whole, i);
            return spmd_model_params(whole, NULL) + (*ti)->offset;
        }
    for (int i = 0; i < spmd_model_num_buffers(whole); i++)
        if (strcmp(spmd_model_buffer(whole, i)->name, name) == 0) {
            *ti = spmd_model_buffer(whole, i);
            return spmd_model_buffers(whole, NULL) + (*ti)->offset;
        }
    return NULL;
}

/* The whole tensor box h is part of: NULL when whole has no tensor of that
 * name and global shape holding the box. */
static float *whole_box(spmd_model *whole, const box_head *h) {
    const spmd_tensor_info *ti = NULL;
    float *dst = whole_tensor(whole, h->name + 6 /* "model." */, &ti);
    int ok = dst && ti->ndim == h->ndim && h->ndim >= 1 && h->ndim <= 4;
    for (int d = 0; ok && d < h->ndim; d++)
        ok = h->global[d] == ti->shape[d] && h->off[d] >= 0 && h->size[d] >= 1 &&
             h->off[d] + h->size[d] <= h->global[d];
    return ok ? dst : NULL;
}

static spmd_status place(spmd_model *whole, const box_head *h, float *data, int from, char *err, size_t errlen) {
    float *dst = whole_box(whole, h);
    if (!dst) {
        snprintf(err, errlen, "--save-model: rank %d sent %s, which the whole %s model does not have in that shape",
                 from, h->name, spmd_model_arch(whole));
        return SPMD_ERR_MISMATCH;
    }
    copy_box(dst, h, data, 1);
    return SPMD_OK;
}

static void head_of(box_head *h, const spmd_dcp_shard *s) {
    memset(h, 0, sizeof *h);
    snprintf(h->name, sizeof h->name, "%s", s->fqn);
    h->ndim = s->ndim;
    for (int d = 0; d < s->ndim; d++) h->global[d] = s->global[d], h->off[d] = s->offsets[d], h->size[d] = s->sizes[d];
}

spmd_status ckpt_scatter_model(const ckpt_layout *L, spmd_model *whole, char *err, size_t errlen) {
    ckpt_boxes b;
    if (ckpt_boxes_build(L, 0, &b) != 0) {
        ckpt_boxes_free(&b);
        snprintf(err, errlen, "out of memory");
        return SPMD_ERR_NOMEM;
    }
    spmd_status st = SPMD_OK;
    for (size_t k = 0; k < b.n && st == SPMD_OK; k++) {
        box_head h;
        head_of(&h, &b.s[k]);
        float *src = whole_box(whole, &h);
        if (src) copy_box(src, &h, b.s[k].data, 0);
        else {   /* this rank's part of the model is not a part of the whole one: a bug, not the file */
            snprintf(err, errlen, "--load-model: this rank's %s is not part of the whole %s model", h.name,
                     spmd_model_arch(whole));
            st = SPMD_ERR_MISMATCH;
        }
    }
    ckpt_boxes_free(&b);
    return st;
}

spmd_status ckpt_gather_model(spmd_group *g, const ckpt_layout *L, int owner, spmd_model *whole, char *err,
                              size_t errlen) {
    int rank = spmd_group_rank(g), world = spmd_group_size(g);
    ckpt_boxes b;
    spmd_status st = SPMD_OK;
    if (ckpt_boxes_build(L, 0, &b) != 0) {
        snprintf(err, errlen, "out of memory");
        st = SPMD_ERR_NOMEM;
    }
    /* what this rank sends: its blocks, and whole tensors only from t = 0 */
    int64_t count = 0;
    for (size_t k = 0; st == SPMD_OK && owner && k < b.n; k++) {
        spmd_dcp_shard *s = &b.s[k];
        int whole_tensor_here = 1;
        for (int d = 0; d < s->ndim; d++) whole_tensor_here &= s->sizes[d] == s->global[d];
        if (!whole_tensor_here || L->t == 0) b.s[count++] = *s;
    }
    if (rank != 0) {
        if (st != SPMD_OK) count = -1;   /* rank 0 learns of the failure */
        st = spmd_send(g, &count, 1, SPMD_I64, 0, GATHER_TAG);
        for (int64_t k = 0; st == SPMD_OK && k < count; k++) {
            const spmd_dcp_shard *s = &b.s[k];
            box_head h;
            head_of(&h, s);
            size_t n = 1;
            for (int d = 0; d < s->ndim; d++) n *= (size_t)s->sizes[d];
            st = spmd_send(g, &h, sizeof h, SPMD_U8, 0, GATHER_TAG);
            if (st == SPMD_OK) st = spmd_send(g, s->data, n, SPMD_F32, 0, GATHER_TAG);
        }
        if (st != SPMD_OK && !err[0]) snprintf(err, errlen, "%s", spmd_group_errmsg(g));
    } else {
        for (int64_t k = 0; st == SPMD_OK && k < count; k++) {
            box_head h;
            head_of(&h, &b.s[k]);
            st = place(whole, &h, b.s[k].data, 0, err, errlen);
        }
        float *buf = NULL;
        size_t cap = 0;
        /* every rank's message is received, even after a failure, so no sender waits in vain */
        for (int r = 1; r < world; r++) {
            int64_t n = 0;
            spmd_status sr = spmd_recv(g, &n, 1, SPMD_I64, r, GATHER_TAG, NULL);
            if (sr != SPMD_OK) {
                snprintf(err, errlen, "%s", spmd_group_errmsg(g));
                return ckpt_boxes_free(&b), free(buf), sr;
            }
            if (n < 0 && st == SPMD_OK) {
                snprintf(err, errlen, "--save-model: rank %d could not describe its part of the model", r);
                st = SPMD_ERR_NOMEM;
            }
            for (int64_t k = 0; k < n; k++) {
                box_head h;
                if ((sr = spmd_recv(g, &h, sizeof h, SPMD_U8, r, GATHER_TAG, NULL)) != SPMD_OK) {
                    snprintf(err, errlen, "%s", spmd_group_errmsg(g));
                    return ckpt_boxes_free(&b), free(buf), sr;
                }
                h.name[sizeof h.name - 1] = 0;
                size_t elems = 1;
                int sane = h.ndim >= 1 && h.ndim <= 4;
                for (int d = 0; sane && d < h.ndim; d++) sane = h.size[d] >= 1 && h.size[d] <= (1 << 28);
                for (int d = 0; sane && d < h.ndim; d++) elems *= (size_t)h.size[d];
                if (!sane || elems > ((size_t)1 << 30)) {
                    snprintf(err, errlen, "--save-model: rank %d sent a malformed box", r);
                    return ckpt_boxes_free(&b), free(buf), SPMD_ERR_FORMAT;
                }
                if (elems > cap) {
                    float *q = realloc(buf, elems * sizeof *q);
                    if (!q) {
                        snprintf(err, errlen, "out of memory");
                        return ckpt_boxes_free(&b), free(buf), SPMD_ERR_NOMEM;
                    }
                    buf = q, cap = elems;
                }
                if ((sr = spmd_recv(g, buf, elems, SPMD_F32, r, GATHER_TAG, NULL)) != SPMD_OK) {
                    snprintf(err, errlen, "%s", spmd_group_errmsg(g));
                    return ckpt_boxes_free(&b), free(buf), sr;
                }
                if (st == SPMD_OK) st = place(whole, &h, buf, r, err, errlen);
            }
        }
        free(buf);
    }
    ckpt_boxes_free(&b);
    return st;
}
