/* Unit test of the measured choice between two algorithms (src/coll/trial.h):
 * the size classes, the order of the trial's calls, when the ranks settle,
 * and that the settled winner is the faster one by its median call (a tie
 * keeps the table's). */
#include "coll/trial.h"
#include "harness.h"

#define KiB ((size_t)1024)

static void test_classes(void) {
    CHECK(spmd__trial_class(128 * KiB) == 0);
    CHECK(spmd__trial_class(256 * KiB - 1) == 0);
    CHECK(spmd__trial_class(256 * KiB) == 1);
    CHECK(spmd__trial_class(1024 * KiB) == 3);
    CHECK(spmd__trial_class(16384 * KiB - 1) == 6);
    CHECK(spmd__trial_class(16384 * KiB) == SPMD__TRIAL_CLASSES - 1);
    CHECK(spmd__trial_class((size_t)1 << 40) == SPMD__TRIAL_CLASSES - 1);
}

/* Runs a trial where candidate `fast` takes 1 ns per byte and the other 2;
 * returns the number of calls before the ranks had to settle. */
static int run_trial(spmd__coll_trial *t, int fast) {
    int calls = 0;
    for (;;) {
        int pick = spmd__trial_pick(t);
        if (pick == SPMD__TRIAL_DECIDE) break;
        CHECK_MSG(pick == calls / (1 + SPMD__TRIAL_TIMED), "call %d runs candidate %d", calls, pick);
        spmd__trial_record(t, pick, pick == fast ? 1000 : 2000, 1000);
        calls++;
        CHECK(calls < 100);
        if (calls >= 100) break;
    }
    return calls;
}

static void test_order_and_winner(void) {
    for (int fast = 0; fast < 2; fast++) {
        spmd__coll_trial t = {0};
        int calls = run_trial(&t, fast);
        CHECK(calls >= 4 && calls % 2 == 0); /* as many timed calls of each */
        double rate[2], two_ranks[2];
        spmd__trial_rates(&t, rate);
        CHECK(rate[fast] > 0 && rate[1 - fast] == 2 * rate[fast]);
        two_ranks[0] = 2 * rate[0];
        two_ranks[1] = 2 * rate[1];
        spmd__trial_settle(&t, two_ranks);
        CHECK(t.decided && t.winner == fast);
        for (int i = 0; i < 5; i++) CHECK(spmd__trial_pick(&t) == fast); /* for good */
        spmd__trial_record(&t, 1 - fast, 1, 1000000);                     /* no longer counted */
        spmd__trial_rates(&t, rate);
        CHECK(rate[1 - fast] == 2 * rate[fast]);
    }
}

/* One call of the faster candidate interrupted (a busy machine) does not
 * hand the choice to the slower one. */
static void test_interrupted_call(void) {
    spmd__coll_trial t = {0};
    int calls = 0, pick;
    while ((pick = spmd__trial_pick(&t)) != SPMD__TRIAL_DECIDE && calls < 100) {
        uint64_t ns = pick ? 1500 : calls == 4 ? 50000 : 1000;
        spmd__trial_record(&t, pick, ns, 1024);
        calls++;
    }
    double rate[2];
    spmd__trial_rates(&t, rate);
    CHECK(rate[0] == 1000 && rate[1] == 1500);
    spmd__trial_settle(&t, rate);
    CHECK(t.winner == 0);
}

static void test_tie_keeps_the_table(void) {
    spmd__coll_trial t = {0};
    const double same[2] = {5.0, 5.0};
    spmd__trial_settle(&t, same);
    CHECK(t.decided && t.winner == 0);
}

int main(void) {
    test_classes();
    test_order_and_winner();
    test_interrupted_call();
    test_tie_keeps_the_table();
    TEST_MAIN_END();
}
