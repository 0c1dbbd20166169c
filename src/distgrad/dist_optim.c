/* dist_optim.c — the distributed optimizer (torch's DistributedOptimizer):
 * one spmd_optim per module, on the module's owner, stepped through the
 * module's RRef with a context's gradients. */
#include <stdlib.h>
#include <string.h>
#include "distgrad/dist_internal.h"

struct spmd_dist_optim {
    spmd_dag *d;
    spmd_optim_opts opts;
    spmd_rref **mods;
    int n;
};

spmd_status spmd_dist_optim_create(spmd_dag *d, const spmd_optim_opts *o, spmd_rref *const *modules,
                                   int n, spmd_dist_optim **out) {
    if (!d || !o || !out || n < 0 || (n && !modules)) return SPMD_ERR_INVALID;
    spmd_dist_optim *x = calloc(1, sizeof *x);
    if (!x) return SPMD_ERR_NOMEM;
    x->mods = calloc((size_t)(n ? n : 1), sizeof *x->mods);
    if (!x->mods) {
        free(x);
        return SPMD_ERR_NOMEM;
    }
    memcpy(x->mods, modules, sizeof *x->mods * (size_t)n);
    x->d = d;
    x->opts = *o;
    x->n = n;
    *out = x;
    return SPMD_OK;
}

spmd_status spmd_dist_optim_step(spmd_dist_optim *o, int64_t ctx) {
    if (!o) return SPMD_ERR_INVALID;
    dag_hdr h;
    memset(&h, 0, sizeof h);
    h.ctx = ctx;
    h.optim = o->opts;
    spmd_rpc_msg *m = spmd_rpc_msg_new();
    if (!m) return SPMD_ERR_NOMEM;
    spmd_rpc_msg_set_payload(m, &h, sizeof h);
    spmd_status st = SPMD_OK;
    spmd_rpc_future **fs = calloc((size_t)(o->n ? o->n : 1), sizeof *fs);
    if (!fs) st = SPMD_ERR_NOMEM;
    for (int i = 0; i < o->n && st == SPMD_OK; i++) st = spmd_rref_call_async(o->mods[i], "__dag_step", m, -1, &fs[i]);
    for (int i = 0; fs && i < o->n; i++)
        if (fs[i]) {
            spmd_status s2 = spmd__dag_finish(o->d, fs[i], NULL, "optimizer step");
            if (st == SPMD_OK) st = s2;
        }
    free(fs);
    spmd_rpc_msg_free(m);
    return st;
}

void spmd_dist_optim_free(spmd_dist_optim *o) {
    if (!o) return;
    free(o->mods);
    free(o);
}
