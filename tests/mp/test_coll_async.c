/* Async collectives interleaved with point-to-point traffic: receives
 * posted before collectives are issued, sends issued between them, a dozen
 * collectives of different kinds in flight at once and waited in reverse
 * order (or polled with spmd_work_test), a blocking collective issued while
 * async ones are queued, and handles freed without an explicit wait.
 * Every result is checked bit for bit.
 *
 * Usage: test_coll_async [world ...]  (default 1 2 3 4 7). */
#include "coll_common.h"

#define NAR 6

static int body(int rank, int w, void *arg) {
    (void)arg;
    spmd_group *g = join_group(rank);
    if (!g) return 1;
    const int right = (rank + 1) % w, left = (rank + w - 1) % w;
    const size_t n = 1000 + (size_t)w; /* several segments at 256 B */

    for (int iter = 0; iter < 3; iter++) {
        /* p2p receive posted first, completed only after the collectives */
        int64_t token_in = -1, token_out = rank * 1000 + iter;
        spmd_work *rx = NULL, *tx = NULL;
        if (w > 1) RREQUIRE(spmd_irecv(g, &token_in, 1, SPMD_I64, left, 40 + iter, &rx) == SPMD_OK);

        float *ar_in[NAR], *ar_out[NAR], *ar_ref = malloc(n * sizeof(float));
        spmd_work *ar_w[NAR];
        static const char *algos[NAR] = {"ring", "rhd", "rd", "naive", "butterfly", NULL};
        fill_ref(ar_ref, n, SPMD_SUM, SPMD_F32, w, 0);
        for (int k = 0; k < NAR; k++) {
            ar_in[k] = malloc(n * sizeof(float));
            ar_out[k] = malloc(n * sizeof(float));
            fill_input(ar_in[k], n, SPMD_SUM, SPMD_F32, rank, w, 0);
            spmd_coll_opts o = {algos[k]};
            /* alternate in place and out of place */
            RREQUIRE(spmd_all_reduce_async(g, ar_in[k], k & 1 ? ar_out[k] : ar_in[k], n, SPMD_F32, SPMD_SUM, &o,
                                           &ar_w[k]) == SPMD_OK);
            if (k == 2 && w > 1) /* a send issued between collectives */
                RREQUIRE(spmd_isend(g, &token_out, 1, SPMD_I64, right, 40 + iter, &tx) == SPMD_OK);
        }
        /* a broadcast and an all_gather queued behind them */
        int32_t bc[17], ag_in[5], *ag_out = malloc(5 * sizeof(int32_t) * (size_t)w);
        for (int i = 0; i < 17; i++) bc[i] = rank == w - 1 ? i * 3 + iter : -1;
        for (int i = 0; i < 5; i++) ag_in[i] = rank * 10 + i;
        spmd_work *bw = NULL, *gw = NULL;
        RREQUIRE(spmd_broadcast_async(g, bc, 17, SPMD_I32, w - 1, NULL, &bw) == SPMD_OK);
        RREQUIRE(spmd_all_gather_async(g, ag_in, ag_out, 5, SPMD_I32, NULL, &gw) == SPMD_OK);

        /* a blocking collective while async ones are queued: runs after them */
        int64_t one = 1, count = 0;
        RREQUIRE(spmd_all_reduce(g, &one, &count, 1, SPMD_I64, SPMD_SUM) == SPMD_OK);
        RREQUIRE(count == w);
        /* it ran after everything issued before it */
        RREQUIRE(spmd_work_test(bw) == SPMD_OK && spmd_work_test(gw) == SPMD_OK);

        /* wait in reverse order; poll one with spmd_work_test */
        RREQUIRE(spmd_work_wait(gw, -1) == SPMD_OK);
        spmd_work_free(gw);
        for (int r = 0; r < w; r++)
            for (int i = 0; i < 5; i++) RREQUIRE(ag_out[r * 5 + i] == r * 10 + i);
        while (spmd_work_test(bw) == SPMD_ERR_AGAIN) {
        }
        RREQUIRE(spmd_work_test(bw) == SPMD_OK);
        spmd_work_free(bw);
        for (int i = 0; i < 17; i++) RREQUIRE(bc[i] == i * 3 + iter);
        for (int k = NAR - 1; k >= 0; k--) {
            if (k == 3) { /* freeing without a wait still waits */
                spmd_work_free(ar_w[k]);
            } else {
                RREQUIRE(spmd_work_wait(ar_w[k], -1) == SPMD_OK);
                spmd_work_free(ar_w[k]);
            }
            const float *res = k & 1 ? ar_out[k] : ar_in[k];
            RREQUIRE(first_diff(res, ar_ref, n * sizeof(float)) < 0);
            free(ar_in[k]);
            free(ar_out[k]);
        }
        free(ar_ref);
        free(ag_out);
        if (w > 1) {
            RREQUIRE(spmd_work_wait(tx, -1) == SPMD_OK);
            RREQUIRE(spmd_work_wait(rx, -1) == SPMD_OK);
            RREQUIRE(token_in == left * 1000 + iter);
            spmd_work_free(tx);
            spmd_work_free(rx);
        }
    }

    /* A collective in flight while a large p2p message flows the other way round the ring. */
    if (w > 1) {
        int32_t big[4096];
        for (int i = 0; i < 4096; i++) big[i] = rank * 4096 + i;
        int32_t got[4096];
        spmd_work *rx = NULL, *tx = NULL, *c1 = NULL;
        RREQUIRE(spmd_irecv(g, got, 4096, SPMD_I32, right, 99, &rx) == SPMD_OK);
        uint8_t flags[3] = {(uint8_t)(1u << (rank % 8)), 0xF0, (uint8_t)rank};
        uint8_t orflags[3];
        RREQUIRE(spmd_all_reduce_async(g, flags, orflags, 3, SPMD_U8, SPMD_BOR, NULL, &c1) == SPMD_OK);
        RREQUIRE(spmd_isend(g, big, 4096, SPMD_I32, left, 99, &tx) == SPMD_OK);
        RREQUIRE(spmd_barrier(g) == SPMD_OK);
        RREQUIRE(spmd_work_wait(c1, -1) == SPMD_OK);
        uint8_t want0 = 0, want2 = 0;
        for (int r = 0; r < w; r++) {
            want0 |= (uint8_t)(1u << (r % 8));
            want2 |= (uint8_t)r;
        }
        RREQUIRE(orflags[0] == want0 && orflags[1] == 0xF0 && orflags[2] == want2);
        RREQUIRE(spmd_work_wait(rx, -1) == SPMD_OK && spmd_work_wait(tx, -1) == SPMD_OK);
        for (int i = 0; i < 4096; i++) RREQUIRE(got[i] == right * 4096 + i);
        spmd_work_free(c1);
        spmd_work_free(rx);
        spmd_work_free(tx);
    }
    spmd_group_destroy(g);
    return 0;
}

int main(int argc, char **argv) {
    int worlds[16], nw = 0;
    for (int i = 1; i < argc && nw < 16; i++) worlds[nw++] = atoi(argv[i]);
    if (nw == 0) {
        static const int dflt[] = {1, 2, 3, 4, 7};
        for (int i = 0; i < 5; i++) worlds[nw++] = dflt[i];
    }
    for (int i = 0; i < nw; i++) CHECK_MSG(run_world(worlds[i], body, NULL, 100) == 0, "world %d", worlds[i]);
    TEST_MAIN_END();
}
