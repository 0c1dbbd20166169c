/* Multi-process point-to-point tests over loopback at several world sizes:
 * ring exchanges of many sizes (eager and rendezvous, multi-MiB), any-source
 * receives, tag matching out of order, per-(source, tag) ordering, size
 * mismatches, isend/irecv with test and wait. */
#include <stdint.h>
#include "harness.h"
#include "mpi_job.h"
#include "spmd/group.h"

#define RREQUIRE(cond)                                                                   \
    do {                                                                                 \
        if (!(cond)) {                                                                   \
            fprintf(stderr, "rank %d: %s:%d: failed: %s (%s)\n", rank, __FILE__, __LINE__, #cond, \
                    g ? spmd_group_errmsg(g) : "");                                       \
            return 1;                                                                    \
        }                                                                                \
    } while (0)

static unsigned char pattern(int src, size_t i) { return (unsigned char)(src * 31 + i * 7 + (i >> 8)); }

static int ring_sizes(spmd_group *g, int rank, int world) {
    static const size_t sizes[] = {0, 1, 3, 1000, 65536, 65537, 3u << 20};
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        size_t n = sizes[k];
        unsigned char *out = malloc(n + 1), *in = malloc(n + 1);
        for (size_t i = 0; i < n; i++) out[i] = pattern(rank, i);
        int right = (rank + 1) % world, left = (rank - 1 + world) % world;
        spmd_work *ws = NULL, *wr = NULL;
        /* Everyone sends first: must not deadlock even for large messages. */
        RREQUIRE(spmd_isend(g, out, n, SPMD_U8, right, 7, &ws) == SPMD_OK);
        RREQUIRE(spmd_irecv(g, in, n, SPMD_U8, left, 7, &wr) == SPMD_OK);
        RREQUIRE(spmd_work_wait(wr, -1) == SPMD_OK);
        RREQUIRE(spmd_work_wait(ws, -1) == SPMD_OK);
        RREQUIRE(spmd_work_source(wr) == left);
        spmd_work_free(ws);
        spmd_work_free(wr);
        for (size_t i = 0; i < n; i++) RREQUIRE(in[i] == pattern(left, i));
        free(out);
        free(in);
    }
    return 0;
}

static int any_source(spmd_group *g, int rank, int world) {
    if (rank == 0) {
        int seen[64] = {0};
        for (int k = 1; k < world; k++) {
            int32_t v = -1;
            int src = -1;
            RREQUIRE(spmd_recv(g, &v, 1, SPMD_I32, SPMD_ANY_SOURCE, 3, &src) == SPMD_OK);
            RREQUIRE(src >= 1 && src < world && v == src * 100 && !seen[src]);
            seen[src] = 1;
        }
    } else {
        int32_t v = rank * 100;
        RREQUIRE(spmd_send(g, &v, 1, SPMD_I32, 0, 3) == SPMD_OK);
    }
    return 0;
}

static int tags_and_order(spmd_group *g, int rank, int world) {
    if (world < 2 || rank > 1) return 0;
    if (rank == 1) {
        for (int i = 0; i < 50; i++) {
            int64_t v = i;
            RREQUIRE(spmd_send(g, &v, 1, SPMD_I64, 0, 5) == SPMD_OK);
        }
        double d = 2.5;
        RREQUIRE(spmd_send(g, &d, 1, SPMD_F64, 0, 6) == SPMD_OK);
    } else {
        /* Take tag 6 first although it was sent last; then tag 5 in order. */
        double d = 0;
        RREQUIRE(spmd_recv(g, &d, 1, SPMD_F64, 1, 6, NULL) == SPMD_OK && d == 2.5);
        for (int i = 0; i < 50; i++) {
            int64_t v = -1;
            spmd_work *w = NULL;
            RREQUIRE(spmd_irecv(g, &v, 1, SPMD_I64, 1, SPMD_ANY_TAG, &w) == SPMD_OK);
            RREQUIRE(spmd_work_wait(w, -1) == SPMD_OK && v == i && spmd_work_tag(w) == 5);
            spmd_work_free(w);
        }
    }
    return 0;
}

/* A mismatch fails exactly the operations involved and leaves the pair
 * usable: a small (eager) send has completed when the receiver refuses it,
 * so only the receive fails and the next send on the pair is delivered; a
 * large (rendezvous) one fails on both sides.  Sizes and dtypes are both
 * checked, and both sides named. */
static int mismatch(spmd_group *g, int rank, int world) {
    if (world < 2 || rank > 1) return 0;
    float f[11] = {0};
    int32_t ack = 1;
    if (rank == 1) {
        RREQUIRE(spmd_send(g, f, 10, SPMD_F32, 0, 9) == SPMD_OK);
        RREQUIRE(spmd_recv(g, &ack, 1, SPMD_I32, 0, 12, NULL) == SPMD_OK);
        /* the next send on the pair is delivered */
        for (int i = 0; i < 10; i++) f[i] = (float)i;
        RREQUIRE(spmd_send(g, f, 10, SPMD_F32, 0, 9) == SPMD_OK);
        /* 2 x int32 into 1 x float64: same bytes, another type */
        int32_t two[2] = {7, 8};
        RREQUIRE(spmd_send(g, two, 2, SPMD_I32, 0, 13) == SPMD_OK);
        RREQUIRE(spmd_send(g, two, 2, SPMD_I32, 0, 13) == SPMD_OK);
    } else {
        spmd_status st = spmd_recv(g, f, 11, SPMD_F32, 1, 9, NULL);
        RREQUIRE(st == SPMD_ERR_MISMATCH);
        RREQUIRE(strstr(spmd_group_errmsg(g), "rank 1 sent 10 x float32 (40 bytes)") != NULL);
        RREQUIRE(strstr(spmd_group_errmsg(g), "expects 11 x float32 (44 bytes)") != NULL);
        RREQUIRE(spmd_send(g, &ack, 1, SPMD_I32, 1, 12) == SPMD_OK);
        RREQUIRE(spmd_recv(g, f, 10, SPMD_F32, 1, 9, NULL) == SPMD_OK && f[9] == 9.0f);
        double d = 0;
        st = spmd_recv(g, &d, 1, SPMD_F64, 1, 13, NULL);
        RREQUIRE(st == SPMD_ERR_MISMATCH);
        RREQUIRE(strstr(spmd_group_errmsg(g), "type mismatch: rank 1 sent 2 x int32 (8 bytes)") != NULL);
        RREQUIRE(strstr(spmd_group_errmsg(g), "expects 1 x float64 (8 bytes)") != NULL);
        int32_t two[2] = {0, 0};
        RREQUIRE(spmd_recv(g, two, 2, SPMD_I32, 1, 13, NULL) == SPMD_OK && two[1] == 8);
    }
    /* Large (rendezvous): both sides fail, naming both sizes.  (Over MPI the
     * message is delivered whole before it is refused: only the receive fails.) */
    size_t n = 1 << 18;
    float *big = calloc(n + 1, sizeof *big);
    spmd_status st = rank == 1 ? spmd_send(g, big, n, SPMD_F32, 0, 10) : spmd_recv(g, big, n + 1, SPMD_F32, 1, 10, NULL);
    if (rank == 1 && group_on_mpi(g)) RREQUIRE(st == SPMD_OK);
    else RREQUIRE(st == SPMD_ERR_MISMATCH);
    if (rank == 1 && !group_on_mpi(g))
        RREQUIRE(strstr(spmd_group_errmsg(g), "refused by rank 0, whose receive expects 262145 x float32") != NULL);
    if (rank == 0) RREQUIRE(strstr(spmd_group_errmsg(g), "rank 1 sent 262144 x float32") != NULL);
    free(big);
    /* The pair still works afterwards. */
    int32_t v = 42;
    if (rank == 1) RREQUIRE(spmd_send(g, &v, 1, SPMD_I32, 0, 11) == SPMD_OK);
    else RREQUIRE(spmd_recv(g, &v, 1, SPMD_I32, 1, 11, NULL) == SPMD_OK && v == 42);
    return 0;
}

static int bad_args(spmd_group *g, int rank, int world) {
    int32_t v = 0;
    RREQUIRE(spmd_send(g, &v, 1, SPMD_I32, world, 0) == SPMD_ERR_INVALID);
    RREQUIRE(strstr(spmd_group_errmsg(g), "out of range") != NULL);
    RREQUIRE(spmd_send(g, &v, 1, SPMD_I32, rank, 0) == SPMD_ERR_INVALID);
    RREQUIRE(spmd_send(g, NULL, 1, SPMD_I32, (rank + 1) % world, 0) == SPMD_ERR_INVALID);
    RREQUIRE(spmd_send(g, &v, 1, (spmd_dtype)99, (rank + 1) % world, 0) == SPMD_ERR_INVALID);
    RREQUIRE(spmd_send(g, &v, 1, SPMD_I32, (rank + 1) % world, -5) == SPMD_ERR_INVALID);
    return 0;
}

static int body(int rank, int world, void *arg) {
    (void)arg;
    spmd_group *g = NULL;
    char err[512];
    spmd_status st = spmd_group_init(NULL, &g, err, sizeof err);
    if (st) { fprintf(stderr, "rank %d: init: %s\n", rank, err); return 1; }
    RREQUIRE(spmd_group_rank(g) == rank && spmd_group_size(g) == world);
    /* one host: shared memory unless TCP is forced (or nobody to share with) */
    const char *tr = getenv("SPMD_TRANSPORT");
    int tcp = world == 1 || (tr && !strcmp(tr, "tcp"));
    /* "tcp+aes-gcm" under SPMD_ENCRYPT=1; "mpi" over MPI */
    RREQUIRE(group_on_mpi(g) ||
             (tcp ? !strncmp(spmd_group_backend(g), "tcp", 3) : !strcmp(spmd_group_backend(g), "shm")));
    int rc = 0;
    if (world > 1) {
        rc |= bad_args(g, rank, world);
        rc |= ring_sizes(g, rank, world);
        rc |= any_source(g, rank, world);
        rc |= tags_and_order(g, rank, world);
        rc |= mismatch(g, rank, world);
    }
    spmd_group_destroy(g);
    return rc;
}

int main(int argc, char **argv) {
    int worlds[] = {1, 2, 3, 4, 8};
    for (size_t i = 0; i < sizeof worlds / sizeof worlds[0]; i++) {
        if (argc > 1 && atoi(argv[1]) != worlds[i]) continue;
        char report[512];
        spmd_status st = test_spawn(worlds[i], body, NULL, 120000, report, sizeof report);
        CHECK_MSG(st == SPMD_OK, "world %d: %s", worlds[i], report);
    }
    TEST_MAIN_END();
}
