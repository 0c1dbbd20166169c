/* Pipeline parallelism over RPC (the seed tutorial): seed 000's CNN cut in
 * two stages (split_cnn.h), stage 1 on rank 1 and stage 2 on rank 2, driven
 * by rank 0 on Fashion-MNIST.  Each batch is cut into micro-batches: while
 * stage 2 works on micro-batch i, stage 1 already runs micro-batch i+1
 * (futures).  Backward goes through distributed autograd, one context per
 * step; the distributed optimizer steps both stages through their RRefs.
 *   spmdrun --standalone --nproc-per-node 3 rpc_pipeline [--steps N] [--micro M] [--data DIR]
 * Exits 77 without the dataset.  Checks that the training loss goes down. */
#include <stdio.h>
#include "spmd/data.h"
#include "split_cnn.h"

enum { BATCH = 32, MAXMICRO = 8 };

int main(int argc, char **argv) {
    int steps = 30, micro = 4;
    const char *dir = NULL;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--steps")) steps = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--micro")) micro = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--data")) dir = argv[i + 1];
    }
    if (micro < 1 || micro > MAXMICRO || BATCH % micro) {
        fprintf(stderr, "--micro must divide %d (at most %d)\n", BATCH, MAXMICRO);
        return 2;
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
    if (world != 3) {
        fprintf(stderr, "rpc_pipeline runs on 3 workers (driver, stage 1, stage 2), not %d\n", world);
        spmd_rpc_shutdown(r, 0);
        return 2;
    }
    spmd_dag *d = NULL;
    spmd_model *whole = NULL;
    static split_cnn sc;
    spmd_model_opts mo = SPMD_MODEL_OPTS_DEFAULT;
    mo.dropout = 0;
    if (spmd_dag_create(r, &d) != SPMD_OK || spmd_model_create(&mo, &whole, err, sizeof err) != SPMD_OK ||
        split_cnn_init(&sc, whole) != SPMD_OK)
        return 1;
    if (rank > 0) {
        spmd_dag_module m = split_cnn_stage(&sc, rank);
        if (spmd_dag_add_module(d, &m) != SPMD_OK) return 1;
    }
    spmd_barrier(spmd_rpc_group(r));
    if (rank == 0) {
        spmd_rref *s1 = NULL, *s2 = NULL;
        spmd_dist_optim *opt = NULL;
        spmd_optim_opts oo = SPMD_OPTIM_OPTS_SGD;
        oo.lr = 0.05f;
        oo.momentum = 0.5f;
        if (spmd_dag_module_rref(d, 1, "stage1", &s1) != SPMD_OK || spmd_dag_module_rref(d, 2, "stage2", &s2) != SPMD_OK)
            return 1;
        spmd_rref *mods[2] = {s1, s2};
        spmd_dist_optim_create(d, &oo, mods, 2, &opt);
        static float x[BATCH * 784];
        int y[BATCH], mb = BATCH / micro, window = steps / 4 > 0 ? steps / 4 : 1;
        size_t idx[BATCH];
        double first = 0, last = 0;
        for (int step = 0; step < steps && !rc; step++) {
            for (int i = 0; i < BATCH; i++) idx[i] = ((size_t)step * BATCH + (size_t)i) % ds.n;
            spmd_dataset_batch(&ds, idx, BATCH, 0.2860f, 0.3530f, x, y);
            int64_t ctx;
            spmd_dag_context_new(d, &ctx);
            spmd_rpc_msg *in[MAXMICRO], *h[MAXMICRO] = {0}, *out[MAXMICRO] = {0};
            spmd_rpc_future *f1[MAXMICRO] = {0}, *f2[MAXMICRO] = {0};
            int r1[MAXMICRO], r2[MAXMICRO];
            int64_t shape[4] = {mb, 1, 28, 28};
            /* all stage-1 forwards in flight; each stage-2 forward starts as its input arrives */
            for (int i = 0; i < micro; i++) {
                in[i] = spmd_rpc_msg_new();
                spmd_rpc_msg_add_tensor_ref(in[i], SPMD_F32, 4, shape, x + (size_t)i * mb * 784);
                if (spmd_dag_forward_async(d, ctx, s1, in[i], -1, &r1[i], &f1[i]) != SPMD_OK) rc = 1;
            }
            for (int i = 0; i < micro && !rc; i++) {
                if (spmd_rpc_future_wait(f1[i], -1) != SPMD_OK || spmd_rpc_future_take(f1[i], &h[i]) != SPMD_OK ||
                    spmd_dag_forward_async(d, ctx, s2, h[i], r1[i], &r2[i], &f2[i]) != SPMD_OK)
                    rc = 1;
            }
            double loss = 0;
            for (int i = 0; i < micro && !rc; i++) {
                if (spmd_rpc_future_wait(f2[i], -1) != SPMD_OK || spmd_rpc_future_take(f2[i], &out[i]) != SPMD_OK) {
                    rc = 1;
                    break;
                }
                float dl[BATCH * 10];
                loss += spmd_cross_entropy(dl, spmd_rpc_msg_tensor(out[i], 0)->data, y + i * mb, mb, 10, NULL) / micro;
                for (int k = 0; k < mb * 10; k++) dl[k] /= (float)micro;
                spmd_rpc_msg *dm = spmd_rpc_msg_new();
                int64_t ds2[2] = {mb, 10};
                spmd_rpc_msg_add_tensor_ref(dm, SPMD_F32, 2, ds2, dl);
                if (spmd_dag_backward(d, ctx, r2[i], dm, NULL) != SPMD_OK) rc = 1;
                spmd_rpc_msg_free(dm);
            }
            if (!rc && spmd_dist_optim_step(opt, ctx) != SPMD_OK) rc = 1;
            if (rc) fprintf(stderr, "step %d: %s\n", step, spmd_dag_errmsg(d));
            spmd_dag_context_release(d, ctx);
            for (int i = 0; i < micro; i++) {
                spmd_rpc_future_free(f1[i]);
                spmd_rpc_future_free(f2[i]);
                spmd_rpc_msg_free(in[i]);
                spmd_rpc_msg_free(h[i]);
                spmd_rpc_msg_free(out[i]);
            }
            if (step < window) first += loss / window;
            if (step >= steps - window) last += loss / window;
        }
        printf("pipeline (%d micro-batches of %d): loss %.3f over the first %d steps, %.3f over the last %d\n", micro, mb,
               first, window, last, window);
        if (!rc && !(last < first)) rc = 1;
        spmd_dist_optim_free(opt);
        spmd_rref_release(s1);
        spmd_rref_release(s2);
    }
    if (spmd_rpc_shutdown(r, 1) != SPMD_OK) rc = 1;
    spmd_dag_free(d);
    spmd_model_free(whole);
    free(sc.p2);
    spmd_dataset_free(&ds);
    return rc;
}
