/* src/coll/trial.h — choosing between two algorithms by timing them on the
 * machine at hand (trial.c). */
#ifndef SPMD_COLL_TRIAL_H
#define SPMD_COLL_TRIAL_H

#include <stddef.h>
#include <stdint.h>
#include "transport/xfer.h"

#define SPMD__TRIAL_DECIDE (-1)

/* The size class (0 .. SPMD__TRIAL_CLASSES-1) of a call of `bytes`, from 128 KiB. */
int spmd__trial_class(size_t bytes);

/* Which candidate (0 or 1) this call runs, or SPMD__TRIAL_DECIDE: the ranks
 * settle now (spmd__trial_settle) before it runs.  The same on every rank
 * for the same sequence of calls. */
int spmd__trial_pick(spmd__coll_trial *t);
/* A trial call took ns for bytes with candidate `which`: counted once warm. */
void spmd__trial_record(spmd__coll_trial *t, int which, uint64_t ns, size_t bytes);
/* This rank's median timed call of each candidate in ns per KiB, to be summed over the ranks. */
void spmd__trial_rates(const spmd__coll_trial *t, double rate[2]);
/* With every rank's rates summed: the winner, the same on every rank. */
void spmd__trial_settle(spmd__coll_trial *t, const double summed[2]);

#endif
