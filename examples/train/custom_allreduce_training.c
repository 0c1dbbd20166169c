/* custom_allreduce_training — seed 000's "custom_allreduce_training.py": the
 * seed CNN on (Fashion-)MNIST, a DistributedSampler per rank, SGD lr 0.01
 * momentum 0.5, batch 16, and gradients averaged by hand after backward:
 *
 *   def average_gradients(model):
 *       size = float(dist.get_world_size())
 *       for param in model.parameters():
 *           dist.all_reduce(param.grad.data, op=dist.ReduceOp.SUM)
 *           param.grad.data /= size
 *
 * Run: spmdrun --nproc-per-node 2 custom_allreduce_training [--steps N] [--data DIR]
 * (the dataset defaults to Debian's Fashion-MNIST; the seed used MNIST). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "spmd/data.h"
#include "spmd/group.h"
#include "spmd/nn.h"

static spmd_status average_gradients(spmd_group *g, spmd_model *m) {
    float size = (float)spmd_group_size(g);
    float *grads = spmd_model_grads(m, NULL);
    for (int i = 0; i < spmd_model_num_params(m); i++) {
        const spmd_tensor_info *p = spmd_model_param(m, i);
        float *grad = grads + p->offset;
        spmd_status st = spmd_all_reduce(g, grad, grad, p->count, SPMD_F32, SPMD_SUM);
        if (st) return st;
        for (size_t k = 0; k < p->count; k++) grad[k] /= size;
    }
    return SPMD_OK;
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
    spmd_nn_set_threads(1); /* torch.set_num_threads(1) */

    spmd_dataset ds = SPMD_DATASET_INIT;
    if (spmd_dataset_load_dir(dir, SPMD_SPLIT_TRAIN, &ds, err, sizeof err)) {
        fprintf(stderr, "rank %d: %s\n", rank, err);
        spmd_group_destroy(g);
        return 77; /* no dataset here */
    }
    spmd_sampler_opts so = SPMD_SAMPLER_OPTS_DEFAULT; /* DistributedSampler(dataset, size, rank) */
    so.dataset_len = ds.n;
    so.num_replicas = size;
    so.rank = rank;
    spmd_sampler *sampler = NULL;
    spmd_model *model = NULL;
    spmd_optim *optimizer = NULL;
    spmd_model_opts mo = SPMD_MODEL_OPTS_DEFAULT; /* Net(), torch.manual_seed(1234) */
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
        spmd_model_zero_grad(model);                              /* optimizer.zero_grad() */
        const float *output;
        spmd_model_forward(model, x, (int)n, &output);            /* output = model(data) */
        float loss = spmd_cross_entropy(dlogits, output, target, (int)n, 10, NULL);
        epoch_loss += loss;
        spmd_model_backward(model, dlogits, NULL, NULL);          /* loss.backward() */
        if (average_gradients(g, model)) {                        /* average_gradients(model) */
            fprintf(stderr, "rank %d: %s\n", rank, spmd_group_errmsg(g));
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
    printf("Rank %d done: %ld steps\n", rank, steps);
    rc = 0;
out:
    spmd_prefetch_stop(loader);   /* also when the loop ended early */
    spmd_optim_free(optimizer);
    spmd_model_free(model);
    spmd_sampler_free(sampler);
    spmd_dataset_free(&ds);
    spmd_group_destroy(g);
    return rc;
}
