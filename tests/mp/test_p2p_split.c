/* A message split across the end of a shared-memory ring reaches a receiver
 * that is not polling (transport/p2p_engine.c's ring flags).
 *
 * With 4 KiB rings a 4196-byte message does not fit: the writer puts what
 * fits, waits for room, and adds the last 124 bytes once the reader's
 * progress thread has read the first part.  Meanwhile the receive that part
 * matched is being filled, in no list of awaited things; if the reader then
 * sleeps "waiting for nothing" from that peer, the rest (far below half a
 * ring) rings no doorbell, and the receive completes only when the progress
 * thread's 1 s poll timeout comes round.  Nobody spins (SPMD_SPIN_US=0), so
 * the progress thread is the one that reads.  The check: no receive of 20
 * waits anywhere near that timeout (each takes well under a millisecond). */
#include "coll_common.h" /* RREQUIRE, harness */
#include "common/common.h"

#define ROUNDS 20

static int body(int rank, int world, void *arg) {
    (void)world, (void)arg;
    spmd_group *g = join_group(rank);
    if (!g) return 1;
    RREQUIRE(!strcmp(spmd_group_backend(g), "shm"));
    const size_t n = 4096 + 100;
    unsigned char *buf = malloc(n);
    RREQUIRE(buf != NULL);
    int64_t worst = 0;
    for (int i = 0; i < ROUNDS; i++) {
        for (size_t k = 0; k < n; k++) buf[k] = rank == 0 ? (unsigned char)(k * 7 + i) : 0;
        RREQUIRE(spmd_barrier(g) == SPMD_OK);
        int64_t t0 = spmd__now_ms();
        if (rank == 0) {
            RREQUIRE(spmd_send(g, buf, n, SPMD_U8, 1, 5) == SPMD_OK);
        } else {
            spmd_work *w = NULL;
            RREQUIRE(spmd_irecv(g, buf, n, SPMD_U8, 0, 5, &w) == SPMD_OK);
            RREQUIRE(spmd_work_wait(w, -1) == SPMD_OK);
            spmd_work_free(w);
            for (size_t k = 0; k < n; k++) RREQUIRE(buf[k] == (unsigned char)(k * 7 + i));
        }
        int64_t t = spmd__now_ms() - t0;
        if (t > worst) worst = t;
    }
    if (rank == 1 && worst >= 600) {
        fprintf(stderr, "rank 1: a split message took %lld ms to arrive (the progress thread's timeout)\n",
                (long long)worst);
        free(buf);
        spmd_group_destroy(g);
        return 1;
    }
    free(buf);
    spmd_group_destroy(g);
    return 0;
}

int main(void) {
    setenv("SPMD_TRANSPORT", "shm", 1);
    setenv("SPMD_SHM_RING_BYTES", "4096", 1);
    setenv("SPMD_SPIN_US", "0", 1);
    char report[512];
    spmd_status st = spmd_spawn_timeout(2, body, NULL, 60000, report, sizeof report);
    CHECK_MSG(st == SPMD_OK, "%s", report);
    TEST_MAIN_END();
}
