/* Parameter server (the seed tutorial): rank 0 holds the MLP's parameters
 * and an SGD optimizer; every other rank is a trainer on its own shard of
 * Fashion-MNIST that, each step, fetches the current parameters, computes a
 * gradient on a batch and sends it back; the server applies each gradient
 * as it arrives (HogWild: trainers never wait for each other).
 *   spmdrun --standalone --nproc-per-node 3 rpc_param_server [--steps N] [--data DIR]
 * Exits 77 without the dataset.  Checks that the training loss goes down. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "spmd/data.h"
#include "spmd/nn.h"
#include "spmd/rpc.h"

typedef struct {
    pthread_mutex_t mu;
    spmd_model *model;
    spmd_optim *opt;
    float *params;
    size_t n;
    long updates;
} server;

static spmd_status get_params(spmd_rpc_call *c, void *ctx) {
    server *s = ctx;
    int64_t n = (int64_t)s->n;
    pthread_mutex_lock(&s->mu);
    spmd_status st = spmd_rpc_msg_add_tensor(spmd_rpc_call_result(c), SPMD_F32, 1, &n, s->params);
    pthread_mutex_unlock(&s->mu);
    return st;
}

static spmd_status apply_grads(spmd_rpc_call *c, void *ctx) {
    server *s = ctx;
    const spmd_rpc_tensor *g = spmd_rpc_msg_tensor(spmd_rpc_call_args(c), 0);
    pthread_mutex_lock(&s->mu);
    spmd_optim_step(s->opt, s->params, g->data);
    s->updates++;
    pthread_mutex_unlock(&s->mu);
    return SPMD_OK;
}

int main(int argc, char **argv) {
    int steps = 60;
    const char *dir = NULL;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--steps")) steps = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--data")) dir = argv[i + 1];
    }
    char err[512];
    spmd_nn_set_threads(1);
    spmd_dataset ds = SPMD_DATASET_INIT;
    if (spmd_dataset_load_dir(dir, SPMD_SPLIT_TRAIN, &ds, err, sizeof err) != SPMD_OK) {
        fprintf(stderr, "%s (skipped)\n", err);
        return 77;
    }
    spmd_rpc *r = NULL;
    if (spmd_rpc_init_env(NULL, NULL, &r, err, sizeof err) != SPMD_OK) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    int rank = spmd_rpc_rank(r), world = spmd_rpc_world_size(r), rc = 0;
    spmd_model_opts mo = SPMD_MODEL_OPTS_DEFAULT;
    mo.arch = "mlp";
    mo.dropout = 0;
    spmd_model *model = NULL;
    if (spmd_model_create(&mo, &model, err, sizeof err) != SPMD_OK) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    size_t n = 0;
    float *params = spmd_model_params(model, &n);
    static server srv = {PTHREAD_MUTEX_INITIALIZER, NULL, NULL, NULL, 0, 0};
    if (rank == 0) {
        spmd_optim_opts oo = SPMD_OPTIM_OPTS_SGD;
        oo.lr = 0.05f;
        srv.model = model;
        srv.params = params;
        srv.n = n;
        if (spmd_optim_create(&oo, n, &srv.opt) != SPMD_OK) return 1;
        spmd_rpc_register(r, "get_params", get_params, &srv, NULL);
        spmd_rpc_shape gs = {SPMD_F32, 1, {(int64_t)n}};
        spmd_rpc_sig sig = {1, &gs, 0, 0};
        spmd_rpc_register(r, "apply_grads", apply_grads, &srv, &sig);
    }
    spmd_barrier(spmd_rpc_group(r));
    if (rank > 0) {
        enum { B = 32 };
        float x[B * 28 * 28], dlogits[B * 10];
        int y[B];
        size_t idx[B];
        double first = 0, last = 0;
        int window = steps / 4 > 0 ? steps / 4 : 1;
        for (int step = 0; step < steps && !rc; step++) {
            spmd_rpc_msg *res = NULL;
            if (spmd_rpc_sync(r, 0, "get_params", NULL, -1, &res) != SPMD_OK) {
                fprintf(stderr, "rank %d: %s\n", rank, spmd_rpc_errmsg(r));
                rc = 1;
                break;
            }
            memcpy(params, spmd_rpc_msg_tensor(res, 0)->data, sizeof(float) * n);
            spmd_rpc_msg_free(res);
            /* this trainer's shard: every (world-1)-th batch */
            for (int i = 0; i < B; i++) idx[i] = ((size_t)(step * (world - 1) + rank - 1) * B + (size_t)i) % ds.n;
            spmd_dataset_batch(&ds, idx, B, 0.2860f, 0.3530f, x, y);
            const float *logits = NULL;
            spmd_model_zero_grad(model);
            spmd_model_forward(model, x, B, &logits);
            float loss = spmd_cross_entropy(dlogits, logits, y, B, 10, NULL);
            spmd_model_backward(model, dlogits, NULL, NULL);
            size_t gn = 0;
            float *grads = spmd_model_grads(model, &gn);
            spmd_rpc_msg *m = spmd_rpc_msg_new();
            int64_t shape = (int64_t)gn;
            spmd_rpc_msg_add_tensor_ref(m, SPMD_F32, 1, &shape, grads);
            if (spmd_rpc_sync(r, 0, "apply_grads", m, -1, NULL) != SPMD_OK) {
                fprintf(stderr, "rank %d: %s\n", rank, spmd_rpc_errmsg(r));
                rc = 1;
            }
            spmd_rpc_msg_free(m);
            if (step < window) first += loss / window;
            if (step >= steps - window) last += loss / window;
        }
        printf("trainer %d: loss %.3f over the first %d steps, %.3f over the last %d\n", rank, first, window, last,
               window);
        if (!rc && !(last < first)) rc = 1;
    }
    if (spmd_rpc_shutdown(r, 1) != SPMD_OK) rc = 1;
    if (rank == 0) {
        printf("server: %ld updates from %d trainers\n", srv.updates, world - 1);
        if (srv.updates != (long)steps * (world - 1)) rc = 1;
        spmd_optim_free(srv.opt);
    }
    spmd_model_free(model);
    spmd_dataset_free(&ds);
    return rc;
}
