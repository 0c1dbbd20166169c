/* step.c — the data-parallel trainer's two units of work, below both loops
 * (loop.c's epochs and elastic.c's): one optimizer step on a batch, and the
 * sharded evaluation of the test set. */
#include "dp.h"

/* Test accuracy, sharded: each rank evaluates its DistributedSampler share
 * (no shuffle; padded like torch's), then (correct, total) are summed. */
spmd_status train_evaluate(trainer *t, double *acc) {
    spmd_model_train(t->model, 0);
    const size_t *idx = spmd_sampler_indices(t->test_sampler);
    size_t n = spmd_sampler_num_samples(t->test_sampler);
    int64_t counts[2] = {0, 0};
    spmd_status st = SPMD_OK;
    for (size_t i = 0; i < n && st == SPMD_OK; i += (size_t)t->o.batch) {
        size_t b = n - i < (size_t)t->o.batch ? n - i : (size_t)t->o.batch;
        st = train_data_fill(&t->test, idx + i, b, 0, 0, 0, t->x, t->y);
        const float *logits;
        if (st == SPMD_OK) st = spmd_model_forward(t->model, t->x, (int)b, &logits);
        if (st == SPMD_OK) {
            int correct;
            spmd_cross_entropy(NULL, logits, t->y, (int)b, spmd_model_num_outputs(t->model), &correct);
            counts[0] += correct;
            counts[1] += (int64_t)b;
        }
    }
    spmd_model_train(t->model, 1);
    if (st != SPMD_OK) return st;
    if (t->g && (st = spmd_all_reduce(t->g, counts, counts, 2, SPMD_I64, SPMD_SUM)) != SPMD_OK) {
        sync_set_err_group(t);
        return st;
    }
    *acc = counts[1] ? (double)counts[0] / (double)counts[1] : 0.0;
    report_eval(&t->rep, t->epoch, t->global_step, *acc, (long long)counts[0], (long long)counts[1]);
    return SPMD_OK;
}

/* One optimizer step on the batch (x, y) of b examples: forward, loss,
 * backward, gradient sync, update.  Returns the rank-local loss in *loss. */
spmd_status train_one_step(trainer *t, const float *x, const int *y, size_t b, float *loss) {
    double t1 = report_now();
    spmd_status st;
    if ((st = sync_prepare(t)) != SPMD_OK) return st;
    double t1b = report_now();
    spmd_model_zero_grad_lazy(t->model);
    const float *logits;
    st = spmd_model_forward(t->model, x, (int)b, &logits);
    if (st != SPMD_OK) {   /* SyncBatchNorm's all_reduce is the only way forward fails mid-way */
        if (t->g && spmd_model_is_syncbn(t->model)) sync_set_err_group(t);
        return st;
    }
    *loss = spmd_cross_entropy(t->dlogits, logits, y, (int)b, spmd_model_num_outputs(t->model), NULL);
    checkpoint_staged(t);   /* a deferred save's copy is done before any parameter changes */
    double t2 = report_now();
    st = spmd_model_backward(t->model, t->dlogits, sync_hook, t);
    if (st != SPMD_OK) {
        if (t->g && spmd_model_is_syncbn(t->model)) sync_set_err_group(t);
        return st;
    }
    double t3 = report_now();
    if ((st = sync_finish(t)) != SPMD_OK) return st;
    double t4 = report_now();
    if (t->ddp && spmd_ddp_stepped(t->ddp)) spmd_optim_step_done(t->optim);   /* the reducer did it */
    else if (t->ez) {   /* --elastic --zero: the shards' step, the parameters all-gathered */
        if ((st = ezero_step(t)) != SPMD_OK) return st;
        spmd_optim_step_done(t->optim);
    } else spmd_optim_step(t->optim, t->params, t->grads);
    double t5 = report_now();
    t->t.prep += t1b - t1;
    t->t.fwd += t2 - t1b;
    t->t.bwd += t3 - t2;
    t->t.comm += t4 - t3;
    t->t.opt += t5 - t4;
    t->t.steps++;
    return SPMD_OK;
}
