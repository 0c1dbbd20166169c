/* Groups over an application's MPI communicators (spmd/mpi.h), under mpirun
 * at any world size: the application initializes MPI itself and splits
 * MPI_COMM_WORLD into two halves; each half becomes an spmd group
 * (spmd_group_from_mpi_comm) next to one over all of MPI_COMM_WORLD
 * (backend "mpi" through spmd_group_init).  Checked: ranks and sizes are the
 * communicators', results equal MPI's own on the same communicator, p2p and
 * collectives of the two groups interleave without mixing, the application's
 * communicator keeps working, the thread level is reported, subgroups of a
 * group over MPI work, bad arguments are refused, and groups can be made and
 * destroyed many times.
 * Usage (tests/mpi.cmake): run.sh N <btl> test_mpi_comm [SERIALIZED]
 * With SERIALIZED the application asks MPI for MPI_THREAD_SERIALIZED: spmd
 * then runs no thread of its own (async collectives run when waited for or
 * tested). */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "spmd/mpi.h"

static int rank = -1;
#define REQ(cond)                                                                                            \
    do {                                                                                                     \
        if (!(cond)) {                                                                                       \
            fprintf(stderr, "world rank %d: %s:%d: failed: %s\n", rank, __FILE__, __LINE__, #cond);        \
            return 1;                                                                                        \
        }                                                                                                    \
    } while (0)
#define REQ_OK(g, call)                                                                                      \
    do {                                                                                                     \
        spmd_status st_ = (call);                                                                            \
        if (st_ != SPMD_OK) {                                                                                \
            fprintf(stderr, "world rank %d: %s:%d: %s: %s (%s)\n", rank, __FILE__, __LINE__, #call,        \
                    spmd_status_name(st_), spmd_group_errmsg(g));                                            \
            return 1;                                                                                        \
        }                                                                                                    \
    } while (0)

/* spmd's executor threads in this process, by the name they give
 * themselves (Open MPI starts and ends threads of its own meanwhile), as a
 * set of thread ids.  A set, not a count: a thread the last round joined can
 * stay listed in /proc/self/task for a moment after pthread_join returns (the
 * kernel clears the joined tid before it reaps the task), so counts taken a
 * moment apart can see an old thread leave while a new one starts. */
enum { MAX_EXEC = 64 };
static int executors_now(long *tids) {
    DIR *d = opendir("/proc/self/task");
    int n = 0;
    if (!d) return -1;
    for (struct dirent *e; (e = readdir(d));) {
        if (e->d_name[0] == '.') continue;
        char path[64], comm[32] = "";
        snprintf(path, sizeof path, "/proc/self/task/%s/comm", e->d_name);
        FILE *f = fopen(path, "r");
        if (!f) continue;
        if (fgets(comm, sizeof comm, f) && !strcmp(comm, "spmd-exec\n") && n < MAX_EXEC) tids[n++] = atol(e->d_name);
        fclose(f);
    }
    closedir(d);
    return n;
}

/* Executor threads in `now` that were not in `before`. */
static int new_executors(const long *before, int nb, const long *now, int nn) {
    int fresh = 0;
    for (int i = 0; i < nn; i++) {
        int seen = 0;
        for (int j = 0; j < nb && !seen; j++) seen = now[i] == before[j];
        fresh += !seen;
    }
    return fresh;
}

/* The halves and the whole world at once, interleaved.  check_threads: an
 * async collective in flight has its executor thread (MPI_THREAD_MULTIPLE)
 * or none (below). */
static int two_groups(MPI_Comm half, int world, int check_threads) {
    long before[MAX_EXEC], now[MAX_EXEC];
    const int t0 = executors_now(before);
    int hr, hs;
    MPI_Comm_rank(half, &hr);
    MPI_Comm_size(half, &hs);
    spmd_group *h = NULL, *all = NULL;
    char err[512];
    spmd_group_opts o = SPMD_GROUP_OPTS_DEFAULT;
    o.name = "half";
    if (spmd_group_from_mpi_comm(half, &o, &h, err, sizeof err)) {
        fprintf(stderr, "rank %d: %s\n", rank, err);
        return 1;
    }
    spmd_group_opts wo = SPMD_GROUP_OPTS_DEFAULT;
    wo.backend = "mpi";
    if (spmd_group_init(&wo, &all, err, sizeof err)) {
        fprintf(stderr, "rank %d: %s\n", rank, err);
        return 1;
    }
    REQ(spmd_group_rank(h) == hr && spmd_group_size(h) == hs);
    REQ(spmd_group_rank(all) == rank && spmd_group_size(all) == world);
    REQ(!strcmp(spmd_group_backend(h), "mpi") && !strcmp(spmd_group_backend(all), "mpi"));
    int provided = -1;
    MPI_Query_thread(&provided);
    REQ(spmd_group_mpi_thread_level(h) == provided && spmd_group_mpi_thread_level(all) == provided);

    /* async on one group, blocking on the other, then MPI's own on `half` */
    enum { N = 1000 };
    static double a[N], b[N], ref[N];
    for (int i = 0; i < N; i++) a[i] = b[i] = rank * 1000 + i;
    spmd_work *w = NULL;
    REQ_OK(h, spmd_all_reduce_async(h, a, a, N, SPMD_F64, SPMD_SUM, NULL, &w));
    if (check_threads) {
        const int t1 = executors_now(now), spmds = provided == MPI_THREAD_MULTIPLE ? 1 : 0;
        const int fresh = t0 < 0 || t1 < 0 ? -1 : new_executors(before, t0, now, t1);
        if (fresh != spmds)
            fprintf(stderr, "rank %d: %d executor threads before, %d with the async collective, %d of them new\n", rank, t0,
                    t1, fresh);
        REQ(fresh == spmds);
    }
    REQ_OK(all, spmd_all_reduce(all, b, b, N, SPMD_F64, SPMD_MAX));
    if (provided == MPI_THREAD_SERIALIZED) REQ(spmd_work_test(w) != SPMD_ERR_AGAIN); /* test runs it */
    REQ_OK(h, spmd_work_wait(w, -1));
    spmd_work_free(w);
    for (int i = 0; i < N; i++) ref[i] = rank * 1000 + i;
    MPI_Allreduce(MPI_IN_PLACE, ref, N, MPI_DOUBLE, MPI_SUM, half); /* the application's communicator still works */
    for (int i = 0; i < N; i++) REQ(a[i] == ref[i] && b[i] == (world - 1) * 1000 + i);

    /* p2p in both groups with the same tag: each stays in its group */
    if (hs > 1) {
        int32_t x = 100 + rank, y = -1, src = -1;
        spmd_work *s = NULL;
        REQ_OK(h, spmd_isend(h, &x, 1, SPMD_I32, (hr + 1) % hs, 7, &s));
        REQ_OK(h, spmd_recv(h, &y, 1, SPMD_I32, SPMD_ANY_SOURCE, 7, &src));
        REQ(src == (hr - 1 + hs) % hs);
        REQ_OK(h, spmd_work_wait(s, -1));
        spmd_work_free(s);
        int sender_world;
        int hsrc = src;
        MPI_Group hg, wg;
        MPI_Comm_group(half, &hg);
        MPI_Comm_group(MPI_COMM_WORLD, &wg);
        MPI_Group_translate_ranks(hg, 1, &hsrc, wg, &sender_world);
        MPI_Group_free(&hg);
        MPI_Group_free(&wg);
        REQ(y == 100 + sender_world);
    }
    /* an async collective freed without a wait still runs before the free
     * returns (below MPI_THREAD_MULTIPLE on the freeing thread: nobody else would) */
    {
        int32_t one = 1, sum = 0;
        spmd_work *f = NULL;
        REQ_OK(all, spmd_all_reduce_async(all, &one, &sum, 1, SPMD_I32, SPMD_SUM, NULL, &f));
        spmd_work_free(f);
        REQ(sum == world);
    }
    /* a receive nobody sends: the wait times out, freeing cancels it, the group goes on */
    if (world > 1) {
        int32_t never = 0;
        spmd_work *r = NULL;
        REQ_OK(all, spmd_irecv(all, &never, 1, SPMD_I32, (rank + 1) % world, 999, &r));
        REQ(spmd_work_wait(r, 50) == SPMD_ERR_TIMEOUT && spmd_work_test(r) == SPMD_ERR_AGAIN);
        spmd_work_free(r);
        REQ_OK(all, spmd_barrier(all));
    }
    /* a subgroup of the world group (MPI_Comm_create_group): the even ranks */
    int evens[64], ne = 0;
    for (int r = 0; r < world && ne < 64; r += 2) evens[ne++] = r;
    spmd_group *ev = NULL;
    REQ_OK(all, spmd_group_new_subgroup(all, evens, ne, &ev));
    REQ((ev != NULL) == (rank % 2 == 0));
    if (ev) {
        int32_t one = 1, n = 0;
        REQ_OK(ev, spmd_all_reduce(ev, &one, &n, 1, SPMD_I32, SPMD_SUM));
        REQ(n == ne && spmd_group_parent_rank(ev, spmd_group_rank(ev)) == rank);
        spmd_group_destroy(ev);
    }
    /* ranks that pass different lists are told so (and the group stays usable) */
    int mine[1] = {rank};
    spmd_group *x = NULL;
    if (world > 1) {
        REQ(spmd_group_new_subgroup(all, mine, 1, &x) == SPMD_ERR_MISMATCH);
        REQ_OK(all, spmd_barrier(all));
    }
    spmd_group_destroy(h);
    spmd_group_destroy(all);
    return 0;
}

static int bad_args(void) {
    spmd_group *g = NULL;
    char err[256] = "";
    REQ(spmd_group_from_mpi_comm(MPI_COMM_NULL, NULL, &g, err, sizeof err) == SPMD_ERR_INVALID && !g);
    REQ(strstr(err, "MPI_COMM_NULL"));
    spmd_group_opts o = SPMD_GROUP_OPTS_DEFAULT;
    o.rank = rank + 1;
    REQ(spmd_group_from_mpi_comm(MPI_COMM_WORLD, &o, &g, err, sizeof err) == SPMD_ERR_INVALID && !g);
    REQ(strstr(err, "MPI communicator"));
    o = (spmd_group_opts)SPMD_GROUP_OPTS_DEFAULT;
    o.init_method = "tcp://127.0.0.1:1";
    REQ(spmd_group_from_mpi_comm(MPI_COMM_WORLD, &o, &g, err, sizeof err) == SPMD_ERR_INVALID && !g);
    return 0;
}

int main(int argc, char **argv) {
    const int want = argc > 1 && !strcmp(argv[1], "SERIALIZED") ? MPI_THREAD_SERIALIZED : MPI_THREAD_MULTIPLE;
    int provided = -1;
    MPI_Init_thread(&argc, &argv, want, &provided);
    int world;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    MPI_Comm half;
    MPI_Comm_split(MPI_COMM_WORLD, rank < (world + 1) / 2, rank, &half);
    int rc = bad_args();
    /* many groups in a row (each keeps its communicators, see mpi_link.c);
     * threads are counted once MPI has started its own */
    for (int round = 0; round < 20 && !rc; round++) rc |= two_groups(half, world, round > 0);
    MPI_Comm_free(&half);
    int all_ok = 0;
    MPI_Allreduce(&rc, &all_ok, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (rank == 0) printf("test_mpi_comm (%s, %d ranks): %s\n", want == MPI_THREAD_SERIALIZED ? "serialized" : "multiple",
                          world, all_ok ? "FAILED" : "ok");
    MPI_Finalize();
    return rc;
}
