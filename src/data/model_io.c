/* src/data/model_io.c — a model's state_dict in a safetensors file, and the check that
 * a data set's images fit the model.
 *
 * The file holds exactly what torch's model.state_dict() holds for the same
 * architecture: every parameter and buffer under its torch name, float32, in
 * torch's shape (Linear (OC, C), Conv2d (OC, C, KH, KW), BatchNorm vectors),
 * so model.load_state_dict(load_file(path)) works in PyTorch and a file
 * written by torch loads here.  The one entry spmd does not keep is
 * BatchNorm's num_batches_tracked (torch uses it only with momentum=None):
 * it is ignored on load and not written.  It lives in data/ (which sees nn/)
 * because it writes through the checkpoint files of data/. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "nn/internal.h"
#include "spmd/data.h"

static void to_ckpt(spmd_ckpt_tensor *ct, const spmd_tensor_info *ti, float *base) {
    memset(ct, 0, sizeof *ct);
    ct->name = ti->name;
    ct->dtype = SPMD_F32;
    ct->ndim = ti->ndim;
    for (int d = 0; d < ti->ndim; d++) ct->shape[d] = ti->shape[d];
    ct->data = base + ti->offset;
}

/* Every parameter then every buffer of m as checkpoint tensors (malloc()ed). */
static spmd_ckpt_tensor *state_dict(spmd_model *m, size_t *n) {
    int np = spmd_model_num_params(m), nb = spmd_model_num_buffers(m);
    spmd_ckpt_tensor *t = calloc((size_t)(np + nb) + 1, sizeof *t);
    if (!t) return NULL;
    float *params = spmd_model_params(m, NULL), *bufs = spmd_model_buffers(m, NULL);
    for (int i = 0; i < np; i++) to_ckpt(&t[i], spmd_model_param(m, i), params);
    for (int i = 0; i < nb; i++) to_ckpt(&t[np + i], spmd_model_buffer(m, i), bufs);
    *n = (size_t)(np + nb);
    return t;
}

/* save (1) or load (0) the state_dict; the load checks every tensor
 * (present, float32, torch's shape) before reading any, so a file for another
 * architecture changes nothing */
static spmd_status state_dict_io(spmd_model *m, const char *path, int save, char *err, size_t errlen) {
    if (!m || !path) {
        if (err && errlen) snprintf(err, errlen, "spmd_model_%s: no model or no path", save ? "save" : "load");
        return SPMD_ERR_INVALID;
    }
    size_t n;
    spmd_ckpt_tensor *t = state_dict(m, &n);
    if (!t) {
        if (err && errlen) snprintf(err, errlen, "out of memory");
        return SPMD_ERR_NOMEM;
    }
    spmd_ckpt_kv meta[] = {{"format", "pt"}, {"arch", m->arch}};
    char e[400] = "";
    spmd_status st = save ? spmd_ckpt_save(path, t, n, meta, 2, e, sizeof e) : spmd_ckpt_load(path, t, n, e, sizeof e);
    if (st != SPMD_OK && err && errlen)
        snprintf(err, errlen, "%s (the %s model's state_dict: %zu tensors)", e, m->arch, n);
    free(t);
    return st;
}

spmd_status spmd_model_save(spmd_model *m, const char *path, char *err, size_t errlen) {
    return state_dict_io(m, path, 1, err, errlen);
}

spmd_status spmd_model_load(spmd_model *m, const char *path, char *err, size_t errlen) {
    return state_dict_io(m, path, 0, err, errlen);
}

spmd_status spmd_model_check_input(const spmd_model *m, int c, int h, int w, char *err, size_t errlen) {
    if (!m) return SPMD_ERR_INVALID;
    if (c == m->in_c && h == m->in_h && w == m->in_w) return SPMD_OK;
    if (err && errlen)
        snprintf(err, errlen, "images of %dx%dx%d (CxHxW) do not fit the %s model, which takes %dx%dx%d",
                 c, h, w, m->arch, m->in_c, m->in_h, m->in_w);
    return SPMD_ERR_MISMATCH;
}
