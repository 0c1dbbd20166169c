/* Batch RPC processing with asynchronous execution (the seed tutorial's
 * @rpc.functions.async_execution): rank 0 holds a linear policy; every other
 * rank is an observer that asks it for an action each step.  The policy's
 * handler DEFERS each call and answers a whole batch — one from every
 * observer — with one matrix product, then finishes every deferred call.
 *   spmdrun --standalone --nproc-per-node 4 rpc_batch [--steps N]
 * Each observer checks its answers against the product computed locally. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "spmd/rpc.h"

enum { STATE = 4, ACTIONS = 2 };

typedef struct {
    pthread_mutex_t mu;
    spmd_rpc_call *pending[64];
    int n, expected, batches;
    float w[ACTIONS * STATE];
} policy;

static void act(const float *w, const float *s, float *a) {
    for (int i = 0; i < ACTIONS; i++) {
        a[i] = 0;
        for (int j = 0; j < STATE; j++) a[i] += w[i * STATE + j] * s[j];
    }
}

static spmd_status select_action(spmd_rpc_call *c, void *ctx) {
    policy *p = ctx;
    spmd_rpc_call_defer(c);
    pthread_mutex_lock(&p->mu);
    p->pending[p->n++] = c;
    if (p->n == p->expected) {
        /* one (batch, STATE) x (STATE, ACTIONS) product for the whole batch */
        int b = p->n;
        float *states = malloc(sizeof(float) * (size_t)b * STATE), *acts = malloc(sizeof(float) * (size_t)b * ACTIONS);
        for (int i = 0; i < b; i++)
            memcpy(states + i * STATE, spmd_rpc_msg_tensor(spmd_rpc_call_args(p->pending[i]), 0)->data, sizeof(float) * STATE);
        for (int i = 0; i < b; i++) act(p->w, states + i * STATE, acts + i * ACTIONS);
        int64_t shape = ACTIONS;
        for (int i = 0; i < b; i++) {
            spmd_status st = spmd_rpc_msg_add_tensor(spmd_rpc_call_result(p->pending[i]), SPMD_F32, 1, &shape, acts + i * ACTIONS);
            spmd_rpc_call_finish(p->pending[i], st);
        }
        free(states);
        free(acts);
        p->n = 0;
        p->batches++;
    }
    pthread_mutex_unlock(&p->mu);
    return SPMD_OK;
}

int main(int argc, char **argv) {
    int steps = 20;
    for (int i = 1; i + 1 < argc; i += 2)
        if (!strcmp(argv[i], "--steps")) steps = atoi(argv[i + 1]);
    char err[512];
    spmd_rpc *r = NULL;
    if (spmd_rpc_init_env(NULL, NULL, &r, err, sizeof err) != SPMD_OK) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    int rank = spmd_rpc_rank(r), world = spmd_rpc_world_size(r);
    static policy pol = {PTHREAD_MUTEX_INITIALIZER, {0}, 0, 0, 0, {0}};
    pol.expected = world - 1;
    for (int i = 0; i < ACTIONS * STATE; i++) pol.w[i] = (float)(i % 5) * 0.25f - 0.5f;
    if (rank == 0) spmd_rpc_register(r, "select_action", select_action, &pol, NULL);
    spmd_barrier(spmd_rpc_group(r));   /* the handler exists before anyone calls */
    int rc = 0;
    if (rank > 0) {
        for (int step = 0; step < steps && !rc; step++) {
            float s[STATE], want[ACTIONS];
            for (int j = 0; j < STATE; j++) s[j] = (float)(rank * 10 + step + j);
            act(pol.w, s, want);
            spmd_rpc_msg *m = spmd_rpc_msg_new(), *res = NULL;
            int64_t shape = STATE;
            spmd_rpc_msg_add_tensor(m, SPMD_F32, 1, &shape, s);
            if (spmd_rpc_sync(r, 0, "select_action", m, -1, &res) != SPMD_OK) {
                fprintf(stderr, "rank %d: %s\n", rank, spmd_rpc_errmsg(r));
                rc = 1;
            } else if (memcmp(spmd_rpc_msg_tensor(res, 0)->data, want, sizeof want) != 0) {
                fprintf(stderr, "rank %d: step %d: wrong action\n", rank, step);
                rc = 1;
            }
            spmd_rpc_msg_free(m);
            spmd_rpc_msg_free(res);
        }
    }
    if (spmd_rpc_shutdown(r, 1) != SPMD_OK) rc = 1;   /* graceful: every call answered */
    int batches = pol.batches;
    if (rank == 0) {
        printf("rpc_batch: %d observers x %d steps answered in %d batches\n", world - 1, steps, batches);
        if (batches != steps) rc = 1;
    }
    return rc;
}
