/* src/coll/trial.c — choosing between two algorithms by timing them on the
 * machine at hand.
 *
 * Where the table cannot know which of two rows is faster — w = 2 from
 * 128 KiB, single copies out of the peer's buffer (cma) against the shared
 * slots: on this project's guests either one won by 1.15-1.5x, depending on
 * the day's CPU — the first calls of each size class run the one, then the
 * other, timed; then the ranks add up their median nanoseconds per KiB (one
 * 16-byte all_reduce) and every rank keeps the faster for the rest of the
 * group's life.  The calls of the trial are real work, not extra: each is
 * the caller's own collective.
 *
 * Every rank counts the same calls, so all pick alike without a message;
 * the one settling all_reduce sums in the same order everywhere, so all
 * decide alike. */
#include "coll/trial.h"

/* Each candidate runs a block of calls, its first untimed (page faults,
 * first touches): alternating call by call measured each in the other's
 * wake — cma after the slots looked faster at 512 KiB-4 MiB than either
 * ran alone, where the slots won by 1.2x. */
#define BLOCK (1 + SPMD__TRIAL_TIMED)

int spmd__trial_class(size_t bytes) {
    int k = 0;
    for (size_t b = bytes >> 18; b && k < SPMD__TRIAL_CLASSES - 1; b >>= 1) k++;
    return k;
}

int spmd__trial_pick(spmd__coll_trial *t) {
    if (t->decided) return t->winner;
    if (t->calls >= 2 * BLOCK) return SPMD__TRIAL_DECIDE;
    return (int)(t->calls / BLOCK);
}

void spmd__trial_record(spmd__coll_trial *t, int which, uint64_t ns, size_t bytes) {
    if (t->decided || which < 0 || which > 1) return;
    if (t->calls++ % BLOCK == 0 || !bytes || t->n[which] >= SPMD__TRIAL_TIMED) return;
    t->rate[which][t->n[which]++] = (double)ns * 1024.0 / (double)bytes;
}

/* The median: on a busy machine a call the scheduler interrupts only gets
 * slower (one slice away from the core outlasts a whole call of many
 * sizes), and the fastest call favours the candidate whose time varies
 * most (cma's fastest matched the slots' at 1 MiB while its mean was 1.2x). */
static double median(const double *v, int n) {
    double s[SPMD__TRIAL_TIMED];
    for (int i = 0; i < n; i++) { /* insertion sort: five values */
        int j = i;
        while (j > 0 && s[j - 1] > v[i]) {
            s[j] = s[j - 1];
            j--;
        }
        s[j] = v[i];
    }
    return n ? (n & 1 ? s[n / 2] : (s[n / 2 - 1] + s[n / 2]) / 2) : 0.0;
}

void spmd__trial_rates(const spmd__coll_trial *t, double rate[2]) {
    rate[0] = median(t->rate[0], t->n[0]);
    rate[1] = median(t->rate[1], t->n[1]);
}

void spmd__trial_settle(spmd__coll_trial *t, const double summed[2]) {
    /* a tie (or nothing timed) keeps the table's own row, candidate 0 */
    t->winner = summed[1] < summed[0] ? 1 : 0;
    t->decided = 1;
}
