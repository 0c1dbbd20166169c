/* The MPI backend's waiting step (transport/mpi_watch.c): a waiter gives
 * its core away between calls into MPI only when ranks outnumber cores.
 * Yielding with a core of its own made a group over MPI 3-12x slower than
 * MPI_Allreduce beside busy processes (issue 28): every yield handed a
 * scheduler slice to a busy process while the peer ranks waited for this
 * one's next call.  sched_yield is counted by defining it here (the test
 * links the static library, so the library's calls come here); no MPI is
 * initialised, the step only reads the clock and the mesh. */
#define _GNU_SOURCE
#include <sched.h>
#include <string.h>
#include "harness.h"
#include "transport/mpi_internal.h"

static int yields;
int sched_yield(void) {
    yields++;
    return 0;
}

/* Steps of one waiting stretch until `late` of them came past its first
 * millisecond (the old policy yielded from 200 us on). */
static int yields_in(int oversubscribed, int late) {
    spmd__mesh m;
    memset(&m, 0, sizeof m);
    m.oversubscribed = oversubscribed;
    spmd__mpi_idle s;
    spmd__mpi_idle_init(&s, &m);
    yields = 0;
    uint64_t start = spmd__now_ns();
    for (int n = 0; n < late;) {
        int past = spmd__now_ns() - start >= 1000000;
        spmd__mpi_idle_step(&s, &m);
        n += past;
    }
    return yields;
}

int main(void) {
    /* A core of its own: never yields (past its polling stretch it sleeps,
     * however long the scheduler kept this thread away). */
    CHECK_MSG(yields_in(0, 50) == 0, "yielded %d times with a core of its own", yields);
    /* Ranks outnumber cores: it yields from the first step on, so a peer
     * on this core can send. */
    CHECK_MSG(yields_in(1, 1) >= 1, "%d yields when oversubscribed", yields);
    TEST_MAIN_END();
}
