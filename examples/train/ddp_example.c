/* ddp_example — seed 000's "ddp_example.py": the same training as
 * custom_allreduce_training, with DistributedDataParallel doing the gradient
 * averaging — here the spmd_ddp reducer.  Parameters are broadcast from rank 0
 * at construction, and each bucket of gradients is all-reduced while backward
 * is still computing the earlier layers (the grad_ready hook).
 *
 * Run: spmdrun --nproc-per-node 2 ddp_example [--steps N] [--data DIR] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "spmd/data.h"
#include "spmd/ddp.h"
#include "spmd/nn.h"

/* model = DistributedDataParallel(model) */
static spmd_status wrap_ddp(spmd_group *g, spmd_model *m, spmd_ddp **out) {
    spmd_status st = spmd_ddp_create(g, NULL, out);
    float *params = spmd_model_params(m, NULL), *grads = spmd_model_grads(m, NULL);
    for (int i = 0; !st && i < spmd_model_num_params(m); i++) {
        const spmd_tensor_info *p = spmd_model_param(m, i);
        st = spmd_ddp_add_param(*out, p->name, params + p->offset, grads + p->offset, p->count);
    }
    return st ? st : spmd_ddp_finalize(*out);
}

int main(int argc, char **argv) {
    long max_steps = -1;
    const char *dir = NULL;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--steps")) max_steps = atol(argv[i + 1]);
        else if (!strcmp(argv[i], "--data")) dir = argv[i + 1];
    }
    char err[512];
    spmd_group *g = NULL;
    if (spmd_group_init(NULL, &g, err, sizeof err)) { fprintf(stderr, "%s\n", err); return 1; }
    int rank = spmd_group_rank(g), size = spmd_group_size(g);
    spmd_nn_set_threads(1);

    spmd_dataset ds = SPMD_DATASET_INIT;
    if (spmd_dataset_load_dir(dir, SPMD_SPLIT_TRAIN, &ds, err, sizeof err)) {
        fprintf(stderr, "rank %d: %s\n", rank, err);
        spmd_group_destroy(g);
        return 77;
    }
    spmd_sampler_opts so = SPMD_SAMPLER_OPTS_DEFAULT;
    so.dataset_len = ds.n;
    so.num_replicas = size;
    so.rank = rank;
    spmd_sampler *sampler = NULL;
    spmd_model *model = NULL;
    spmd_ddp *ddp = NULL;
    spmd_optim *optimizer = NULL;
    spmd_model_opts mo = SPMD_MODEL_OPTS_DEFAULT;
    spmd_prefetch *loader = NULL;
    spmd_optim_opts oo = SPMD_OPTIM_OPTS_SGD;
    oo.lr = 0.01f;
    oo.momentum = 0.5f;
    int rc = 1;
    if (spmd_sampler_init(&so, &sampler, err, sizeof err) || spmd_model_create(&mo, &model, err, sizeof err)) {
        fprintf(stderr, "rank %d: %s\n", rank, err);
        goto out;
    }
    spmd_model_seed_dropout(model, 1234, (uint64_t)rank);
    if (wrap_ddp(g, model, &ddp)) {
        fprintf(stderr, "rank %d: DDP: %s\n", rank, ddp ? spmd_ddp_errmsg(ddp) : "out of memory");
        goto out;
    }
    size_t nparams = 0;
    spmd_model_params(model, &nparams);
    if (spmd_optim_create(&oo, nparams, &optimizer)) goto out;

    enum { BATCH = 16 };
    float dlogits[BATCH * 10];
    /* train_loader = DataLoader(..., num_workers=1, prefetch_factor=2): a
     * loader thread fills the next batches while this one trains */
    size_t num_samples = spmd_sampler_num_samples(sampler);
    if (spmd_prefetch_dataset(&ds, SPMD_FASHION_MNIST_MEAN, SPMD_FASHION_MNIST_STD, spmd_sampler_indices(sampler),
                              num_samples, BATCH, 2, &loader, err, sizeof err)) {
        fprintf(stderr, "rank %d: %s\n", rank, err);
        goto out;
    }
    size_t num_batches = (num_samples + BATCH - 1) / BATCH;
    const float *x;
    const int *target;
    size_t n;
    long steps = 0;
    double epoch_loss = 0;
    int got = 0;
    while (steps != max_steps && (got = spmd_prefetch_next(loader, &x, &target, NULL, &n)) == 1) {
        spmd_model_zero_grad(model);
        spmd_ddp_prepare(ddp);
        const float *output;
        spmd_model_forward(model, x, (int)n, &output);
        float loss = spmd_cross_entropy(dlogits, output, target, (int)n, 10, NULL);
        epoch_loss += loss;
        /* loss.backward(): DDP handles gradient synchronization */
        spmd_model_backward(model, dlogits, spmd_ddp_grad_ready_hook, ddp);
        if (spmd_ddp_finish(ddp)) {
            fprintf(stderr, "rank %d: %s\n", rank, spmd_ddp_errmsg(ddp));
            goto out;
        }
        spmd_optim_step(optimizer, spmd_model_params(model, NULL), spmd_model_grads(model, NULL));
        steps++;
        if (steps % 100 == 0) {
            printf("Rank %d, step %ld/%zu, loss: %.4f\n", rank, steps, num_batches, epoch_loss / 100);
            fflush(stdout);
            epoch_loss = 0;
        }
    }
    if (got < 0) {
        fprintf(stderr, "rank %d: %s\n", rank, spmd_prefetch_errmsg(loader));
        goto out;
    }
    printf("Rank %d done: %ld steps, %d buckets\n", rank, steps, spmd_ddp_num_buckets(ddp));
    rc = 0;
out:
    spmd_prefetch_stop(loader);   /* also when the loop ended early */
    spmd_optim_free(optimizer);
    spmd_ddp_free(ddp);
    spmd_model_free(model);
    spmd_sampler_free(sampler);
    spmd_dataset_free(&ds);
    spmd_group_destroy(g);
    return rc;
}
