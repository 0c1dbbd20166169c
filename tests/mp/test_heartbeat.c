/* Heartbeats (issue 13): a rank that is frozen (SIGSTOP) is reported by every
 * other rank within seconds, naming it, whether they wait on it or not, over
 * TCP and over shared memory; a rank computing for several timeouts between
 * collectives (its progress thread still answering) is not.
 *   test_heartbeat            every case at worlds 2 and 4, tcp and shm
 *   test_heartbeat N          N rounds of random victims and points (the fault
 *                             suite's long mode; prints detection times) */
#include <signal.h>
#include <time.h>
#include "harness.h"
#include "mp/mp_fork.h"
#include "common/common.h"
#include "spmd/group.h"

#define HB_MS 1000 /* SPMD_HEARTBEAT_TIMEOUT of these tests */

enum { WAIT_COLLECTIVE, WAIT_ELSEWHERE, COMPUTE };

typedef struct {
    int world, victim, scenario;
    const char *transport;
} hb_case;

#define CHILD_REQUIRE(cond, ...)                                                              \
    do {                                                                                      \
        if (!(cond)) {                                                                        \
            fprintf(stderr, "rank %d: %s:%d: %s: ", rank, __FILE__, __LINE__, #cond);         \
            fprintf(stderr, __VA_ARGS__);                                                     \
            fputc('\n', stderr);                                                              \
            return 1;                                                                         \
        }                                                                                     \
    } while (0)

/* One rank.  Prints "detected <ms>" when it saw the victim's silence. */
static int rank_main(const hb_case *c, int rank) {
    spmd_group *g = NULL;
    char err[512];
    CHILD_REQUIRE(spmd_group_init(NULL, &g, err, sizeof err) == SPMD_OK, "%s", err);
    CHILD_REQUIRE(spmd_barrier(g) == SPMD_OK, "%s", spmd_group_errmsg(g));
    if (c->scenario == COMPUTE) {
        /* Rank 1 computes for three timeouts without calling the library;
         * its progress thread keeps answering, so nothing fails. */
        if (rank == 1) {
            volatile uint64_t x = 0;
            int64_t until = spmd__now_ms() + 3 * HB_MS;
            while (spmd__now_ms() < until) x += 1;
            (void)x;
        }
        int32_t v = rank + 1;
        CHILD_REQUIRE(spmd_all_reduce(g, &v, &v, 1, SPMD_I32, SPMD_SUM) == SPMD_OK, "%s", spmd_group_errmsg(g));
        CHILD_REQUIRE(v == c->world * (c->world + 1) / 2, "sum %d", v);
        spmd_group_destroy(g);
        return 0;
    }
    if (rank == c->victim) {
        raise(SIGSTOP); /* frozen until the test kills it */
        return 1;
    }
    int64_t t0 = spmd__now_ms();
    spmd_status st;
    if (c->scenario == WAIT_COLLECTIVE) {
        int32_t v = 1;
        st = spmd_all_reduce(g, &v, &v, 1, SPMD_I32, SPMD_SUM);
    } else {
        /* Nobody waits on the victim: every survivor waits for a message no
         * one sends. */
        int32_t v = 0;
        st = spmd_recv(g, &v, 1, SPMD_I32, SPMD_ANY_SOURCE, 77, NULL);
    }
    int64_t took = spmd__now_ms() - t0;
    const char *msg = spmd_group_errmsg(g);
    char want[64];
    snprintf(want, sizeof want, "rank %d has sent no heartbeat", c->victim);
    CHILD_REQUIRE(st == SPMD_ERR_REMOTE, "status %s: %s", spmd_status_str(st), msg);
    CHILD_REQUIRE(strstr(msg, want) != NULL, "message does not blame rank %d: %s", c->victim, msg);
    /* The timeout plus two ticks, and slack for a loaded machine. */
    CHILD_REQUIRE(took < HB_MS * 4 + 2000, "detected after %lld ms", (long long)took);
    printf("detected %lld\n", (long long)took);
    fflush(stdout);
    spmd_group_destroy(g);
    return 0;
}

static int rank_entry(int idx, void *arg) {
    const hb_case *c = arg;
    setenv("SPMD_TRANSPORT", c->transport, 1);
    setenv("SPMD_HEARTBEAT_TIMEOUT", "1", 1);
    setenv("SPMD_LOG_LEVEL", "error", 1);
    return rank_main(c, idx);
}

/* Survivors must exit 0; the frozen victim is killed once they are done.
 * Returns the number of failed ranks. */
static int run_case(const hb_case *c) {
    int status[16];
    int frozen = c->scenario == COMPUTE ? -1 : c->victim;
    if (mp_fork_run_frozen(c->world, NULL, c->world, NULL, rank_entry, (void *)c, 60, frozen, status)) return 1;
    int failed = 0;
    for (int r = 0; r < c->world; r++) {
        if (r == frozen || mp_exited_ok(status[r])) continue;
        fprintf(stderr, "world %d %s victim %d scenario %d: rank %d failed (status 0x%x)\n", c->world, c->transport,
                c->victim, c->scenario, r, status[r]);
        failed++;
    }
    return failed;
}

int main(int argc, char **argv) {
    static const char *const transports[] = {"tcp", "shm"};
    static const int worlds[] = {2, 4};
    int rounds = argc > 1 ? atoi(argv[1]) : 0;
    if (rounds > 0) {
        /* Long mode: random victims, both scenarios, both transports. */
        srand((unsigned)time(NULL));
        int bad = 0;
        for (int k = 0; k < rounds; k++) {
            hb_case c = {.world = 2 + rand() % 3, .scenario = rand() % 2, .transport = transports[k % 2]};
            c.victim = rand() % c.world;
            bad += run_case(&c) != 0;
        }
        printf("heartbeat trials: %d rounds, %d failed\n", rounds, bad);
        return bad != 0;
    }
    for (int t = 0; t < 2; t++)
        for (int w = 0; w < 2; w++) {
            hb_case c = {.world = worlds[w], .victim = worlds[w] - 1, .scenario = WAIT_COLLECTIVE,
                         .transport = transports[t]};
            CHECK_MSG(run_case(&c) == 0, "frozen rank in a collective, world %d, %s", c.world, c.transport);
            c.victim = 1;
            c.scenario = WAIT_ELSEWHERE;
            CHECK_MSG(run_case(&c) == 0, "frozen rank nobody waits on, world %d, %s", c.world, c.transport);
        }
    for (int t = 0; t < 2; t++) {
        hb_case c = {.world = 2, .victim = -1, .scenario = COMPUTE, .transport = transports[t]};
        CHECK_MSG(run_case(&c) == 0, "long computation, %s", c.transport);
    }
    TEST_MAIN_END();
}
