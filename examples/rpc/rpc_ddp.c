/* DDP combined with RPC (seed 001's "DDP + RPC"): a parameter server (rank 0)
 * holds a remote layer — Linear 784->64 + ReLU, like the tutorial's remote
 * EmbeddingBag — as a dist-autograd module; the trainers (ranks 1..N-1) run
 * it through its RRef, then a local Linear 64->10 wrapped in DDP among the
 * trainers only.  Each step: remote forward, local forward/backward (DDP
 * averages the local gradients), dist-autograd backward into the remote
 * layer, distributed optimizer step of the remote layer, local SGD step.
 *   spmdrun --standalone --nproc-per-node 3 rpc_ddp [--steps N] [--data DIR]
 * Exits 77 without the dataset.  Checks: the loss goes down, and the DDP
 * layer is bit-identical on every trainer. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "spmd/data.h"
#include "spmd/ddp.h"
#include "spmd/dist_autograd.h"

enum { IN = 784, HID = 64, OUT = 10, B = 32 };

/* ---- the remote layer (on the parameter server) ---- */
typedef struct {
    float p[HID * IN + HID];
} remote_layer;

typedef struct {
    int n;
    float *x, *h;
} saved_t;

static void rl_free(void *self, void *s) {
    (void)self;
    saved_t *v = s;
    if (v) free(v->x), free(v->h), free(v);
}

static spmd_status rl_forward(void *self, const spmd_rpc_msg *in, spmd_rpc_msg *out, void **saved) {
    remote_layer *L = self;
    const spmd_rpc_tensor *x = spmd_rpc_msg_tensor(in, 0);
    if (!x || x->dtype != SPMD_F32 || x->ndim != 2 || x->shape[1] != IN) return SPMD_ERR_INVALID;
    int n = (int)x->shape[0];
    saved_t *s = calloc(1, sizeof *s);
    int64_t shape[2] = {n, HID};
    if (!s || spmd_rpc_msg_add_tensor(out, SPMD_F32, 2, shape, NULL) != SPMD_OK) {
        free(s);
        return SPMD_ERR_NOMEM;
    }
    s->n = n;
    s->x = malloc(sizeof(float) * (size_t)n * IN);
    s->h = spmd_rpc_msg_tensor(out, 0)->data;
    memcpy(s->x, x->data, sizeof(float) * (size_t)n * IN);
    spmd_linear_forward(s->h, s->x, L->p, L->p + HID * IN, n, IN, HID);
    spmd_relu_forward(s->h, s->h, (size_t)n * HID);
    float *keep = malloc(sizeof(float) * (size_t)n * HID);
    memcpy(keep, s->h, sizeof(float) * (size_t)n * HID);
    s->h = keep;
    *saved = s;
    return SPMD_OK;
}

static spmd_status rl_backward(void *self, void *saved, const spmd_rpc_msg *dout, spmd_rpc_msg *din, float *g) {
    (void)din;
    remote_layer *L = self;
    saved_t *s = saved;
    const spmd_rpc_tensor *d = spmd_rpc_msg_tensor(dout, 0);
    if (!d || d->shape[0] != s->n || d->shape[1] != HID) return SPMD_ERR_INVALID;
    float *dz = malloc(sizeof(float) * (size_t)s->n * HID);
    if (!dz) return SPMD_ERR_NOMEM;
    spmd_relu_backward(dz, d->data, s->h, (size_t)s->n * HID, 0);
    spmd_linear_backward(NULL, g, g + HID * IN, dz, s->x, L->p, s->n, IN, HID, 0);
    free(dz);
    return SPMD_OK;
}

int main(int argc, char **argv) {
    int steps = 40;
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
    spmd_group *g = NULL;
    spmd_rpc *r = NULL;
    spmd_dag *d = NULL;
    if (spmd_group_init(NULL, &g, err, sizeof err) != SPMD_OK || spmd_rpc_init(g, NULL, &r, err, sizeof err) != SPMD_OK ||
        spmd_dag_create(r, &d) != SPMD_OK) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    int rank = spmd_group_rank(g), world = spmd_group_size(g), rc = 0;
    if (world < 3) {
        fprintf(stderr, "rpc_ddp needs a parameter server and at least 2 trainers\n");
        return 2;
    }
    /* the trainers' own group, for DDP (collective over g) */
    int trainers[64];
    for (int i = 1; i < world; i++) trainers[i - 1] = i;
    spmd_group *tg = NULL;
    if (spmd_group_new_subgroup(g, trainers, world - 1, &tg) != SPMD_OK) return 1;
    static remote_layer L;
    spmd_rng rng;
    spmd_rng_seed(&rng, 42, 0);
    for (int i = 0; i < HID * IN + HID; i++) L.p[i] = (spmd_rng_uniform(&rng) * 2 - 1) / 28.0f;
    if (rank == 0) {
        spmd_dag_module m = {"remote_layer", L.p, HID * IN + HID, rl_forward, rl_backward, rl_free, &L};
        if (spmd_dag_add_module(d, &m) != SPMD_OK) return 1;
    }
    spmd_barrier(g);
    if (rank > 0) {
        /* local part: Linear HID -> OUT, one flat array [w | b], under DDP */
        float p[OUT * HID + OUT], gr[OUT * HID + OUT];
        spmd_rng_seed(&rng, 43, (uint64_t)rank);   /* DDP's finalize broadcasts trainer 0's */
        for (int i = 0; i < OUT * HID + OUT; i++) p[i] = (spmd_rng_uniform(&rng) * 2 - 1) / 8.0f;
        spmd_ddp *ddp = NULL;
        spmd_ddp_opts dopts = SPMD_DDP_OPTS_DEFAULT;
        if (spmd_ddp_create(tg, &dopts, &ddp) != SPMD_OK || spmd_ddp_add_param(ddp, "fc.weight", p, gr, OUT * HID) ||
            spmd_ddp_add_param(ddp, "fc.bias", p + OUT * HID, gr + OUT * HID, OUT) || spmd_ddp_finalize(ddp))
            return 1;
        spmd_optim_opts oo = SPMD_OPTIM_OPTS_SGD;
        oo.lr = 0.1f;
        spmd_optim *lopt = NULL;
        spmd_optim_create(&oo, OUT * HID + OUT, &lopt);
        spmd_rref *remote = NULL;
        spmd_dist_optim *dopt = NULL;
        if (spmd_dag_module_rref(d, 0, "remote_layer", &remote) != SPMD_OK) return 1;
        spmd_dist_optim_create(d, &oo, &remote, 1, &dopt);
        static float x[B * IN];
        float logits[B * OUT], dl[B * OUT], dh[B * HID];
        int y[B];
        size_t idx[B];
        double first = 0, last = 0;
        int window = steps / 4 > 0 ? steps / 4 : 1;
        for (int step = 0; step < steps && !rc; step++) {
            for (int i = 0; i < B; i++) idx[i] = ((size_t)(step * (world - 1) + rank - 1) * B + (size_t)i) % ds.n;
            spmd_dataset_batch(&ds, idx, B, 0.2860f, 0.3530f, x, y);
            int64_t ctx;
            spmd_dag_context_new(d, &ctx);
            spmd_rpc_msg *in = spmd_rpc_msg_new(), *hm = NULL;
            int64_t shape[2] = {B, IN};
            spmd_rpc_msg_add_tensor_ref(in, SPMD_F32, 2, shape, x);
            int rec = -1;
            if (spmd_dag_forward(d, ctx, remote, in, -1, &rec, &hm) != SPMD_OK) {
                fprintf(stderr, "trainer %d: %s\n", rank, spmd_dag_errmsg(d));
                rc = 1;
                spmd_rpc_msg_free(in);
                break;
            }
            const float *h = spmd_rpc_msg_tensor(hm, 0)->data;
            spmd_ddp_prepare(ddp);
            memset(gr, 0, sizeof gr);
            spmd_linear_forward(logits, h, p, p + OUT * HID, B, HID, OUT);
            float loss = spmd_cross_entropy(dl, logits, y, B, OUT, NULL);
            spmd_linear_backward(dh, gr, gr + OUT * HID, dl, h, p, B, HID, OUT, 0);
            spmd_ddp_grad_ready(ddp, 1);
            spmd_ddp_grad_ready(ddp, 0);
            if (spmd_ddp_finish(ddp) != SPMD_OK) rc = 1;
            spmd_optim_step(lopt, p, gr);
            spmd_rpc_msg *dm = spmd_rpc_msg_new();
            int64_t hs[2] = {B, HID};
            spmd_rpc_msg_add_tensor_ref(dm, SPMD_F32, 2, hs, dh);
            if (spmd_dag_backward(d, ctx, rec, dm, NULL) != SPMD_OK || spmd_dist_optim_step(dopt, ctx) != SPMD_OK) {
                fprintf(stderr, "trainer %d: %s\n", rank, spmd_dag_errmsg(d));
                rc = 1;
            }
            spmd_dag_context_release(d, ctx);
            spmd_rpc_msg_free(dm);
            spmd_rpc_msg_free(in);
            spmd_rpc_msg_free(hm);
            if (step < window) first += loss / window;
            if (step >= steps - window) last += loss / window;
        }
        /* DDP keeps the local layer identical on every trainer */
        float mx[OUT * HID + OUT];
        spmd_all_reduce(tg, p, mx, OUT * HID + OUT, SPMD_F32, SPMD_MAX);
        int same = memcmp(mx, p, sizeof p) == 0, all_same = 0;
        spmd_all_reduce(tg, &same, &all_same, 1, SPMD_I32, SPMD_MIN);
        printf("trainer %d: loss %.3f over the first %d steps, %.3f over the last %d; DDP layer %s\n", rank, first,
               window, last, window, all_same ? "identical on every trainer" : "DIFFERS");
        if (!rc && (!(last < first) || !all_same)) rc = 1;
        spmd_dist_optim_free(dopt);
        spmd_rref_release(remote);
        spmd_optim_free(lopt);
        spmd_ddp_free(ddp);
    }
    if (spmd_rpc_shutdown(r, 1) != SPMD_OK) rc = 1;
    spmd_dag_free(d);
    spmd_group_destroy(tg);
    spmd_group_destroy(g);
    spmd_dataset_free(&ds);
    return rc;
}
