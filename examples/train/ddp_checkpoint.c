/* ddp_checkpoint — seed 001's checkpoint pattern under DDP: rank 0 alone
 * saves the model, a barrier makes sure the file is complete, then every rank
 * loads it:
 *
 *   if rank == 0: torch.save(ddp_model.state_dict(), CHECKPOINT_PATH)
 *   dist.barrier()
 *   ddp_model.load_state_dict(torch.load(CHECKPOINT_PATH, map_location=...))
 *
 * Here: a few DDP steps of the seed MLP on synthetic data, rank 0 writes a
 * safetensors file (atomically: a crash never leaves a torn checkpoint), the
 * barrier, and every rank loads it into a fresh model and checks it equals
 * the trained one.  (spmd_ckpt_save_dist / load_dist in spmd/data.h wrap the
 * same pattern.)
 *
 * Run: spmdrun --nproc-per-node 2 ddp_checkpoint [path] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "spmd/data.h"
#include "spmd/ddp.h"
#include "spmd/nn.h"

/* The model's parameters as named checkpoint tensors (state_dict()). */
static spmd_ckpt_tensor *state_dict(spmd_model *m, int *n) {
    *n = spmd_model_num_params(m);
    spmd_ckpt_tensor *t = calloc((size_t)*n, sizeof *t);
    float *base = spmd_model_params(m, NULL);
    for (int i = 0; t && i < *n; i++) {
        const spmd_tensor_info *p = spmd_model_param(m, i);
        t[i].name = p->name;
        t[i].dtype = SPMD_F32;
        t[i].ndim = p->ndim;
        for (int k = 0; k < p->ndim; k++) t[i].shape[k] = p->shape[k];
        t[i].data = base + p->offset;
    }
    return t;
}

int main(int argc, char **argv) {
    char err[512];
    spmd_group *g = NULL;
    if (spmd_group_init(NULL, &g, err, sizeof err)) { fprintf(stderr, "%s\n", err); return 1; }
    int rank = spmd_group_rank(g);
    char path[512];
    if (argc > 1) snprintf(path, sizeof path, "%s", argv[1]);
    else {
        const char *tmp = getenv("TMPDIR");
        /* one file per job: rank 0's pid, shared with the others */
        int64_t id = rank == 0 ? (int64_t)getpid() : 0;
        spmd_broadcast(g, &id, 1, SPMD_I64, 0);
        snprintf(path, sizeof path, "%s/model.%lld.checkpoint", tmp && *tmp ? tmp : "/tmp", (long long)id);
    }
    spmd_model_opts mo = SPMD_MODEL_OPTS_DEFAULT;
    mo.arch = "mlp";
    spmd_model *model = NULL, *fresh = NULL;
    spmd_ddp *ddp = NULL;
    spmd_optim *opt = NULL;
    spmd_optim_opts oo = SPMD_OPTIM_OPTS_SGD;
    int rc = 1, n = 0, nf = 0;
    spmd_ckpt_tensor *sd = NULL, *sdf = NULL;
    if (spmd_model_create(&mo, &model, err, sizeof err) || spmd_model_create(&mo, &fresh, err, sizeof err)) goto out;
    size_t np = 0;
    float *params = spmd_model_params(model, &np), *grads = spmd_model_grads(model, NULL);
    if (spmd_ddp_create(g, NULL, &ddp)) goto out;
    for (int i = 0; i < spmd_model_num_params(model); i++) {
        const spmd_tensor_info *p = spmd_model_param(model, i);
        if (spmd_ddp_add_param(ddp, p->name, params + p->offset, grads + p->offset, p->count)) goto out;
    }
    if (spmd_ddp_finalize(ddp) || spmd_optim_create(&oo, np, &opt)) goto out;

    /* a few steps on this rank's synthetic batch */
    enum { B = 8 };
    float x[B * 784], dl[B * 10];
    int y[B];
    spmd_rng r;
    spmd_rng_seed(&r, 7, (uint64_t)rank);
    for (int step = 0; step < 5; step++) {
        for (int i = 0; i < B * 784; i++) x[i] = spmd_rng_uniform(&r);
        for (int i = 0; i < B; i++) y[i] = (int)(spmd_rng_next(&r) % 10);
        spmd_model_zero_grad(model);
        spmd_ddp_prepare(ddp);
        const float *out;
        spmd_model_forward(model, x, B, &out);
        spmd_cross_entropy(dl, out, y, B, 10, NULL);
        spmd_model_backward(model, dl, spmd_ddp_grad_ready_hook, ddp);
        if (spmd_ddp_finish(ddp)) { fprintf(stderr, "%s\n", spmd_ddp_errmsg(ddp)); goto out; }
        spmd_optim_step(opt, params, grads);
    }

    sd = state_dict(model, &n);
    if (!sd) goto out;
    spmd_status st = SPMD_OK;
    if (rank == 0) {
        st = spmd_ckpt_save(path, sd, (size_t)n, NULL, 0, err, sizeof err);
        if (st) fprintf(stderr, "rank 0: save: %s\n", err);
    }
    if (spmd_barrier(g)) { fprintf(stderr, "barrier: %s\n", spmd_group_errmsg(g)); goto out; }
    sdf = state_dict(fresh, &nf);
    if (!sdf) goto out;
    if ((st = spmd_ckpt_load(path, sdf, (size_t)nf, err, sizeof err))) {
        fprintf(stderr, "rank %d: load: %s\n", rank, err);
        goto out;
    }
    /* Every replica trained identically, so everyone's copy equals rank 0's. */
    float *fp = spmd_model_params(fresh, NULL);
    int same = memcmp(fp, params, np * sizeof(float)) == 0;
    printf("Rank %d loaded %s: %d tensors, %s the trained model\n", rank, path, nf,
           same ? "identical to" : "DIFFERENT from");
    spmd_barrier(g);
    if (rank == 0) unlink(path);
    rc = same ? 0 : 1;
out:
    free(sd);
    free(sdf);
    spmd_optim_free(opt);
    spmd_ddp_free(ddp);
    spmd_model_free(model);
    spmd_model_free(fresh);
    spmd_group_destroy(g);
    return rc;
}
