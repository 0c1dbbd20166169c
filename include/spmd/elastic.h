/* spmd/elastic.h — a training loop that survives lost ranks in place and
 * takes in new ones (docs/RELIABILITY.md, "Training on top"), over the
 * group layer's shrink and grow, in the manner of Horovod's elastic State.
 *
 * The caller registers the state that makes a replica — parameters,
 * optimizer state, buffers, counters (epoch, position, step) — and brackets
 * each step (plain SGD on one flat parameter array here):
 *   ```c
 *   static spmd_status train(spmd_group **g, float *params, float *grads, size_t n, int64_t *step,
 *                            int64_t steps, spmd_elastic_reset_fn on_reset, void *ctx) {
 *       char err[256];
 *       spmd_elastic *e;
 *       spmd_status st = spmd_elastic_create(*g, &e, err, sizeof err);
 *       if (st) return st;
 *       st = spmd_elastic_add_state(e, "params", params, n * sizeof(float), 0);
 *       if (!st) st = spmd_elastic_add_state(e, "step", step, sizeof *step, 0);
 *       spmd_elastic_set_reset(e, on_reset, ctx);  // rebuild what is bound to the group
 *       while (!st && *step < steps) {
 *           spmd_elastic_begin_step(e);
 *           // forward and backward into grads, then:
 *           spmd_group *cur = spmd_elastic_group(e);
 *           if (spmd_all_reduce(cur, grads, grads, n, SPMD_F32, SPMD_SUM) == SPMD_OK) {
 *               float lr = 0.1f / (float)spmd_group_size(cur);  // the average
 *               for (size_t i = 0; i < n; i++) params[i] -= lr * grads[i];
 *               ++*step;
 *               spmd_elastic_commit(e);
 *           } else {
 *               st = spmd_elastic_recover(e);  // the survivors agree and go on
 *           }
 *       }
 *       *g = spmd_elastic_group(e);  // the old one is destroyed
 *       spmd_elastic_free(e);
 *       return st;
 *   }
 *   ```
 * The commit rule.  A step commits on a rank when its gradient all_reduce
 * returned SPMD_OK there: every rank of the group contributed, so its result
 * is the step of the whole old world, and the rank applies it
 * (spmd_elastic_commit counts it).  A failure can end the all_reduce on some
 * ranks and not on others, so after a failure the survivors' committed
 * counts differ by at most one.  spmd_elastic_recover then agrees on the
 * highest: the lowest surviving rank that committed most sends every
 * registered state to all others, so the step in flight is committed
 * everywhere when any survivor committed it, and nowhere otherwise (then
 * every survivor holds the state from before it, and the step is redone on
 * the new group).  At most one step of work is lost, and every replica is
 * bit-identical afterwards.
 *
 * Threads: one thread (the training loop's) calls everything.
 * Ownership: registered memory stays the caller's, valid until
 * spmd_elastic_free; names are copied.  The current group
 * (spmd_elastic_group) is the caller's to destroy at the end; a group that a
 * recovery or a grow replaced is destroyed by e, after the reset callback. */
#ifndef SPMD_ELASTIC_H
#define SPMD_ELASTIC_H

#include <stddef.h>
#include <stdint.h>
#include "spmd/group.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct spmd_elastic spmd_elastic;

/* Horovod's on_state_reset: called on every rank of g once its state agrees
 * (after a shrink, a grow, or on a joiner; world_before is 0 there).  Free
 * whatever is bound to the previous group first (a DDP reducer), then build
 * it on g, re-deal the sampler (spmd_sampler_reshard), set the learning rate
 * and the averaging for world_after.  Collectives on g are allowed (every rank
 * calls it at the same point).  A non-OK return fails the recovery, unless g
 * itself failed meanwhile (a rank died): then the survivors shrink again and
 * the callback is called once more, with the next group. */
typedef spmd_status (*spmd_elastic_reset_fn)(void *ctx, spmd_group *g, int world_before, int world_after);

/* add_state flag: the memory changes before the step commits (BatchNorm's
 * running statistics in forward, a gradient accumulator): it is copied at
 * spmd_elastic_begin_step and restored when the step fails.  Without it the
 * memory must change only after the commit (parameters, optimizer state,
 * counters), which costs nothing per step. */
#define SPMD_ELASTIC_KEEP 1

/* Record of the last recovery or grow (spmd_elastic_last). */
typedef struct {
    int world_before, world_after;
    int epoch;              /* the new group's spmd_group_epoch */
    int64_t commits_here;   /* this rank's committed steps when the failure came */
    int64_t commits_agreed; /* the survivors' agreement (this rank's count afterwards) */
    int steps_lost;         /* 1 when no survivor had committed the step in flight, else 0 */
    int source_rank;        /* the new group's rank that sent the state */
    double seconds;         /* from the call's start until the state was agreed and reset returned */
} spmd_elastic_info;

/* g must be healthy; e borrows it (see Ownership above).  Counting starts at 0
 * committed steps. */
spmd_status spmd_elastic_create(spmd_group *g, spmd_elastic **out, char *err, size_t errlen);
/* Does not destroy the current group. */
void spmd_elastic_free(spmd_elastic *e);
const char *spmd_elastic_errmsg(const spmd_elastic *e);
/* The current group: the one to run the step's collectives on. */
spmd_group *spmd_elastic_group(const spmd_elastic *e);

/* Register `bytes` bytes at buf as part of the replica's state, on every rank
 * in the same order with the same names and sizes (checked at each recovery
 * and grow: a difference fails it naming the rank).  flags: 0 or
 * SPMD_ELASTIC_KEEP. */
spmd_status spmd_elastic_add_state(spmd_elastic *e, const char *name, void *buf, size_t bytes, int flags);
void spmd_elastic_set_reset(spmd_elastic *e, spmd_elastic_reset_fn fn, void *ctx);

/* Start of a step: copies the SPMD_ELASTIC_KEEP states. */
void spmd_elastic_begin_step(spmd_elastic *e);
/* The step's gradient all_reduce returned SPMD_OK here and its update is
 * applied (every registered state holds the step's result). */
void spmd_elastic_commit(spmd_elastic *e);
/* Steps committed so far (agreed ones after a recovery; a joiner gets the
 * group's). */
int64_t spmd_elastic_commits(const spmd_elastic *e);

/* Collective over the survivors, after a call on the group failed (any call:
 * the step's all_reduce, a broadcast, an evaluation's reduction): restore the
 * KEEP states if the step had not committed, shrink (spmd_group_shrink),
 * agree on the committed count as above, send the state from a rank that
 * has it, call the reset callback.  A rank dying meanwhile starts the next
 * round by itself.  On success spmd_elastic_group is the new group and the
 * next step can start; on failure (the deadline passed, this rank was
 * excluded, registrations differ) the error names the cause. */
spmd_status spmd_elastic_recover(spmd_elastic *e);

/* Grow, collective over the ranks of a healthy group at a step boundary:
 * admit njoin processes calling spmd_group_join (spmd_group_grow), send them
 * every registered state and the committed count from rank 0, call the reset
 * callback on every rank.  A joiner dying during the transfer fails it on
 * every rank, which then recover (shrink back) and go on. */
spmd_status spmd_elastic_grow(spmd_elastic *e, int njoin);
/* On a joiner: e made by spmd_elastic_create on the group spmd_group_join
 * returned, with the same registrations as the members; receives the state
 * and calls the reset callback (world_before 0). */
spmd_status spmd_elastic_join_sync(spmd_elastic *e);

/* Collective over a healthy group, at a step boundary: how many processes
 * wait in spmd_group_join for this group (read by rank 0 from the store,
 * then broadcast, so every rank gets the same answer).  Pass it to
 * spmd_elastic_grow when non-zero. */
spmd_status spmd_elastic_joiners_waiting(spmd_elastic *e, int *njoin);

/* The last recovery or grow (zeroes before any). */
spmd_elastic_info spmd_elastic_last(const spmd_elastic *e);

#ifdef __cplusplus
}
#endif
#endif
