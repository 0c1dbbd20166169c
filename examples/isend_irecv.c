/* isend_irecv — seed 000's non-blocking point-to-point with an artificial
 * delay: rank 0 sleeps before isend; rank 1's irecv returns at once and rank
 * 1 prints its (still zero) data before waiting — the call is asynchronous.
 * After wait() both ranks hold 1.
 *
 *   torch:  req = dist.isend(tensor=tensor, dst=1)   /  dist.irecv(tensor, src=0)
 *           print(...); req.wait(); print(...)
 *
 * Run: ./isend_irecv [delay_ms]  (default 500) */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include "spmd/group.h"

static int delay_ms = 500;

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static int run(int rank, int size, void *arg) {
    (void)arg;
    (void)size;
    spmd_group *g = NULL;
    char err[256];
    if (spmd_group_init(NULL, &g, err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    rank = spmd_group_rank(g);
    float tensor = 0.0f;
    spmd_work *req = NULL;
    spmd_status st;
    double t0 = now_ms();
    if (rank == 0) {
        tensor += 1;
        struct timespec d = {delay_ms / 1000, (long)(delay_ms % 1000) * 1000000L};
        nanosleep(&d, NULL); /* the artificial delay of the seed */
        st = spmd_isend(g, &tensor, 1, SPMD_F32, 1, 0, &req);
        printf("Rank 0 started sending\n");
    } else {
        st = spmd_irecv(g, &tensor, 1, SPMD_F32, 0, 0, &req);
        printf("Rank 1 started receiving (irecv returned after %.1f ms)\n", now_ms() - t0);
    }
    if (st) {
        fprintf(stderr, "rank %d: %s\n", rank, spmd_group_errmsg(g));
        spmd_group_destroy(g);
        return 1;
    }
    printf("Rank %d has data %g\n", rank, tensor);
    fflush(stdout);
    st = spmd_work_wait(req, -1);
    printf("Rank %d has data %g (after wait, %.1f ms)\n", rank, tensor, now_ms() - t0);
    spmd_work_free(req);
    spmd_group_destroy(g);
    return st || tensor != 1.0f;
}

int main(int argc, char **argv) {
    if (argc > 1) delay_ms = atoi(argv[1]);
    if (getenv("WORLD_SIZE")) return run(-1, -1, NULL);
    char report[256];
    if (spmd_spawn(2, run, NULL, report, sizeof report)) {
        fprintf(stderr, "isend_irecv: %s\n", report);
        return 1;
    }
    return 0;
}
