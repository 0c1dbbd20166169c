/* src/coll/trial.c — choosing between two algorithms by timing them on the
 * machine at hand.
 *
 * Where the table cannot know which of two rows is faster — w = 2 from
 * 128 KiB, single copies out of the peer's buffer (cma) against the shared
 * slots: on this project's guests either one won by 1.15-1.5x, depending on
 * the day's CPU — the first calls in that band alternate between the two,
 * each timed; after a warm-up pair and TIMED calls the ranks add up their
 * nanoseconds per KiB (one 16-byte all_reduce) and every rank keeps the
 * faster for the rest of the group's life.  The calls of the trial are real
 * work, not extra: each is the caller's own collective.
 *
 * Every rank counts the same calls, so all pick alike without a message;
 * the one settling all_reduce sums in the same order everywhere, so all
 * decide alike. */
#include "coll/trial.h"

#define WARM 2   /* one call of each first: page faults, first touches */
#define TIMED 6  /* then three timed calls of each */

int spmd__trial_class(size_t bytes) {
    int k = 0;
    for (size_t b = bytes >> 18; b && k < SPMD__TRIAL_CLASSES - 1; b >>= 1) k++;
    return k;
}

int spmd__trial_pick(spmd__coll_trial *t) {
    if (t->decided) return t->winner;
    if (t->calls == WARM + TIMED) return SPMD__TRIAL_DECIDE;
    return (int)(t->calls & 1);
}

void spmd__trial_record(spmd__coll_trial *t, int which, uint64_t ns, size_t bytes) {
    if (t->decided || which < 0 || which > 1) return;
    if (t->calls++ < WARM) return;
    t->ns[which] += ns;
    t->bytes[which] += bytes;
}

void spmd__trial_rates(const spmd__coll_trial *t, double rate[2]) {
    for (int i = 0; i < 2; i++)
        rate[i] = t->bytes[i] ? (double)t->ns[i] * 1024.0 / (double)t->bytes[i] : 0.0;
}

void spmd__trial_settle(spmd__coll_trial *t, const double summed[2]) {
    /* a tie (or nothing timed) keeps the table's own row, candidate 0 */
    t->winner = summed[1] < summed[0] ? 1 : 0;
    t->decided = 1;
}
