/* all_gather (flat and list), reduce_scatter, all_to_all (equal and uneven)
 * and barrier over real ranks: every algorithm, counts 0, 1, w-1, w+1 and
 * multi-segment, in place and out of place, bit for bit.  reduce_scatter
 * covers every dtype × op at worlds up to 4.  The barrier is checked through
 * the store (a group over MPI: a file): a counter every rank bumps before the
 * barrier must read w for every rank after it.
 *
 * Usage: test_coll_gather [world ...]  (default 1 2 3 4). */
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include "coll_common.h"

static spmd_status wait_free(spmd_work **wp, spmd_status st) {
    /* by address: the call that sets *wp is the other argument, and C leaves
     * the order in which arguments are evaluated unspecified */
    spmd_work *w = *wp;
    if (st != SPMD_OK) return st;
    st = spmd_work_wait(w, -1);
    spmd_work_free(w);
    return st;
}

/* mode 0: flat out of place, 1: flat in place, 2: list */
static int all_gather(spmd_group *g, int rank, int w, const char *algo, spmd_dtype dt, size_t n, int mode) {
    const size_t blk = n * spmd_dtype_size(dt), all = blk * (size_t)w;
    unsigned char *mine = malloc(blk + 1), *out = malloc(all + 1), *want = malloc(all + 1);
    RREQUIRE(mine && out && want);
    fill_data(mine, blk, rank, 0);
    for (int r = 0; r < w; r++) fill_data(want + (size_t)r * blk, blk, r, 0);
    memset(out, 0x77, all + 1);
    spmd_coll_opts o = {algo[0] ? algo : NULL};
    spmd_work *wk = NULL;
    spmd_status st;
    if (mode == 2) {
        /* list: separate buffers in reverse order in memory */
        void **list = malloc((size_t)w * sizeof *list);
        unsigned char **bufs = malloc((size_t)w * sizeof *bufs);
        RREQUIRE(list && bufs);
        for (int r = 0; r < w; r++) {
            bufs[r] = malloc(blk + 1);
            memset(bufs[r], 0x77, blk + 1);
            list[r] = bufs[r];
        }
        st = wait_free(&wk, spmd_all_gather_list_async(g, mine, list, n, dt, &o, &wk));
        for (int r = 0; r < w; r++) list[r] = NULL; /* the call copied the array */
        RREQUIRE(st == SPMD_OK);
        for (int r = 0; r < w; r++) {
            RREQUIRE(first_diff(bufs[r], want + (size_t)r * blk, blk) < 0 && bufs[r][blk] == 0x77);
            free(bufs[r]);
        }
        free(list);
        free(bufs);
    } else {
        const void *src = mine;
        if (mode == 1) {
            memcpy(out + (size_t)rank * blk, mine, blk);
            src = out + (size_t)rank * blk;
        }
        if (algo[0]) setenv("SPMD_ALGO_ALL_GATHER", algo, 1);
        st = spmd_all_gather(g, src, out, n, dt);
        unsetenv("SPMD_ALGO_ALL_GATHER");
        RREQUIRE(st == SPMD_OK);
        long d = first_diff(out, want, all);
        if (d >= 0) fprintf(stderr, "rank %d: all_gather '%s' count %zu mode %d: byte %ld\n", rank, algo, n, mode, d);
        RREQUIRE(d < 0 && out[all] == 0x77);
    }
    free(mine);
    free(out);
    free(want);
    return 0;
}

static int reduce_scatter(spmd_group *g, int rank, int w, const char *algo, spmd_dtype dt, spmd_op op,
                          size_t n, int inplace) {
    const size_t es = spmd_dtype_size(dt), blk = n * es, all = blk * (size_t)w;
    unsigned char *in = malloc(all + 1), *out = malloc(blk + 1), *ref = malloc(blk + 1), *orig = malloc(all + 1);
    RREQUIRE(in && out && ref && orig);
    fill_input(in, n * (size_t)w, op, dt, rank, w, 0);
    memcpy(orig, in, all);
    fill_ref(ref, n, op, dt, w, (size_t)rank * n);
    memset(out, 0x99, blk + 1);
    void *dst = inplace ? (void *)in : (void *)out;
    spmd_coll_opts o = {algo[0] ? algo : NULL};
    spmd_work *wk = NULL;
    spmd_status st = wait_free(&wk, spmd_reduce_scatter_async(g, in, dst, n, dt, op, &o, &wk));
    RREQUIRE(st == SPMD_OK);
    long d = first_diff(dst, ref, blk);
    if (d >= 0)
        fprintf(stderr, "rank %d: reduce_scatter '%s' %s %s count %zu %s: element %ld\n", rank, algo,
                spmd_dtype_name(dt), spmd_op_name(op), n, inplace ? "in place" : "out of place", d / (long)es);
    RREQUIRE(d < 0);
    if (!inplace) RREQUIRE(first_diff(in, orig, all) < 0 && out[blk] == 0x99);
    free(in);
    free(out);
    free(ref);
    free(orig);
    return 0;
}

static int all_to_all(spmd_group *g, int rank, int w, const char *algo, size_t n, int inplace) {
    const spmd_dtype dt = SPMD_I32;
    const size_t blk = n * 4, all = blk * (size_t)w;
    unsigned char *in = malloc(all + 1), *out = malloc(all + 1), *want = malloc(all + 1);
    RREQUIRE(in && out && want);
    /* block j of rank r's input is "from r to j" */
    for (int j = 0; j < w; j++) fill_data(in + (size_t)j * blk, blk, rank * 64 + j, 0);
    for (int i = 0; i < w; i++) fill_data(want + (size_t)i * blk, blk, i * 64 + rank, 0);
    memset(out, 0x11, all + 1);
    void *dst = inplace ? (void *)in : (void *)out;
    spmd_coll_opts o = {algo[0] ? algo : NULL};
    spmd_work *wk = NULL;
    spmd_status st = wait_free(&wk, spmd_all_to_all_async(g, in, dst, n, dt, &o, &wk));
    RREQUIRE(st == SPMD_OK);
    long d = first_diff(dst, want, all);
    if (d >= 0) fprintf(stderr, "rank %d: all_to_all '%s' count %zu %s: byte %ld\n", rank, algo, n,
                        inplace ? "in place" : "out of place", d);
    RREQUIRE(d < 0);
    if (!inplace) RREQUIRE(out[all] == 0x11);
    free(in);
    free(out);
    free(want);
    return 0;
}

/* Elements rank src sends rank dst in the uneven test (may be 0). */
static size_t vcount(int src, int dst, size_t scale) { return ((size_t)(src * 3 + dst * 5) % 7) * scale; }

static int all_to_all_v(spmd_group *g, int rank, int w, const char *algo, size_t scale) {
    const size_t es = 8;
    size_t sc[64], sd[64], rcnt[64], rd[64], stot = 0, rtot = 0;
    for (int j = 0; j < w; j++) {
        sc[j] = vcount(rank, j, scale);
        sd[j] = stot;
        stot += sc[j] + 1; /* a gap between blocks */
        rcnt[j] = vcount(j, rank, scale);
        rd[j] = rtot;
        rtot += rcnt[j] + 2;
    }
    unsigned char *in = malloc(stot * es + 1), *out = malloc(rtot * es + 1), *want = malloc(rtot * es + 1);
    RREQUIRE(in && out && want);
    memset(in, 0, stot * es);
    memset(out, 0x42, rtot * es + 1);
    memset(want, 0x42, rtot * es + 1);
    for (int j = 0; j < w; j++) fill_data(in + sd[j] * es, sc[j] * es, rank * 64 + j, 0);
    for (int i = 0; i < w; i++) fill_data(want + rd[i] * es, rcnt[i] * es, i * 64 + rank, 0);
    spmd_status st;
    if (algo[0]) setenv("SPMD_ALGO_ALL_TO_ALL", algo, 1);
    st = spmd_all_to_all_v(g, in, sc, sd, out, rcnt, rd, SPMD_F64);
    unsetenv("SPMD_ALGO_ALL_TO_ALL");
    RREQUIRE(st == SPMD_OK);
    long d = first_diff(out, want, rtot * es + 1); /* gaps stay untouched too */
    if (d >= 0) fprintf(stderr, "rank %d: all_to_all_v '%s' scale %zu: byte %ld\n", rank, algo, scale, d);
    RREQUIRE(d < 0);
    free(in);
    free(out);
    free(want);
    return 0;
}

/* Nobody leaves a barrier before everyone arrived: each rank counts itself
 * in before the barrier and checks the count after it — in the group's store,
 * or (a group over MPI has none) in a file every rank appends a byte to.
 * Every third round runs MPI's own barrier on a group over MPI. */
static char barrier_file[64];

static int barrier(spmd_group *g, int rank, int w, int round) {
    spmd_store *s = spmd_group_store(g);
    char key[64];
    snprintf(key, sizeof key, "coll_test_barrier_%d", round);
    int64_t v = 0;
    if (!s && w == 1) return spmd_barrier(g) == SPMD_OK ? 0 : 1; /* world 1 has no store */
    if (!s && !barrier_file[0]) { /* rank 0 names the file */
        if (rank == 0) {
            snprintf(barrier_file, sizeof barrier_file, "/tmp/spmd-barrier-XXXXXX");
            int fd = mkstemp(barrier_file);
            RREQUIRE(fd >= 0);
            close(fd);
        }
        RREQUIRE(spmd_broadcast(g, barrier_file, sizeof barrier_file, SPMD_U8, 0) == SPMD_OK);
    }
    if (s) {
        spmd_status st0 = spmd_store_add(s, key, 1, &v);
        if (st0) fprintf(stderr, "rank %d: store add: %s (%s)\n", rank, spmd_status_name(st0), spmd_store_errmsg(s));
        RREQUIRE(st0 == SPMD_OK);
    } else {
        int fd = open(barrier_file, O_WRONLY | O_APPEND);
        RREQUIRE(fd >= 0 && write(fd, "x", 1) == 1);
        close(fd);
    }
    spmd_coll_opts o = {round % 3 == 2 && algo_usable(g, "mpi") ? "mpi" : NULL};
    spmd_status st;
    if ((round & 1) || o.algo) {
        spmd_work *wk = NULL;
        st = wait_free(&wk, spmd_barrier_async(g, &o, &wk));
    } else {
        st = spmd_barrier(g);
    }
    RREQUIRE(st == SPMD_OK);
    if (s) {
        RREQUIRE(spmd_store_add(s, key, 0, &v) == SPMD_OK);
        RREQUIRE(v == w); /* nobody leaves before everyone arrived */
    } else {
        struct stat sb;
        RREQUIRE(stat(barrier_file, &sb) == 0 && sb.st_size >= (off_t)w * (round + 1));
    }
    return 0;
}

static int body(int rank, int w, void *arg) {
    (void)arg;
    spmd_group *g = join_group(rank);
    if (!g) return 1;
    int rc = 0;
    static const char *ag_algos[] = {"", "ring", "bruck", "shm", "mpi"};
    static const char *rs_algos[] = {"", "ring", "direct", "shm", "mpi"};
    static const char *aa_algos[] = {"", "pairwise", "linear", "shm", "mpi"};
    static const spmd_dtype move_dt[] = {SPMD_U8, SPMD_F16, SPMD_I64};
    for (int round = 0; round < 4 && !rc; round++) rc |= barrier(g, rank, w, round);
    for (int di = 0; di < 3 && !rc; di++) {
        size_t counts[8];
        const int nc = test_counts(w, spmd_dtype_size(move_dt[di]), counts);
        for (int ci = 0; ci < nc && !rc; ci++)
            for (int a = 0; a < NALGOS(ag_algos) && !rc; a++)
                for (int mode = 0; mode < 3 && !rc && algo_usable(g, ag_algos[a]); mode++)
                    rc |= all_gather(g, rank, w, ag_algos[a], move_dt[di], counts[ci], mode);
    }
    {
        size_t counts[8];
        const int nc = test_counts(w, 4, counts);
        for (int ci = 0; ci < nc && !rc; ci++)
            for (int a = 0; a < NALGOS(aa_algos) && !rc; a++)
                for (int ip = 0; ip < 2 && !rc && algo_usable(g, aa_algos[a]); ip++)
                    rc |= all_to_all(g, rank, w, aa_algos[a], counts[ci], ip);
        static const size_t scales[] = {0, 1, 3, 40};
        for (int si = 0; si < 4 && !rc; si++)
            for (int a = 0; a < NALGOS(aa_algos) && !rc; a++)
                if (algo_usable(g, aa_algos[a])) rc |= all_to_all_v(g, rank, w, aa_algos[a], scales[si]);
    }
    const int full = w <= 4;
    for (int di = 0; di < N_DTYPES && !rc; di++) {
        const spmd_dtype dt = ALL_DTYPES[di];
        if (!full && dt != SPMD_F32 && dt != SPMD_U8) continue;
        for (int op = 0; op < SPMD_OP_COUNT && !rc; op++) {
            if (!op_valid(dt, (spmd_op)op)) continue;
            if (!full && op != SPMD_SUM && op != SPMD_AVG && op != SPMD_MIN) continue;
            size_t counts[8];
            const int nc = test_counts(w, spmd_dtype_size(dt), counts);
            for (int ci = 0; ci < nc && !rc; ci++)
                for (int a = 0; a < NALGOS(rs_algos) && !rc; a++)
                    for (int ip = 0; ip < 2 && !rc && algo_usable(g, rs_algos[a]); ip++)
                        rc |= reduce_scatter(g, rank, w, rs_algos[a], dt, (spmd_op)op, counts[ci], ip);
        }
    }
    for (int round = 4; round < 6 && !rc; round++) rc |= barrier(g, rank, w, round);
    if (barrier_file[0] && !rc && spmd_barrier(g) == SPMD_OK && rank == 0) unlink(barrier_file);
    barrier_file[0] = 0;
    spmd_group_destroy(g);
    return rc;
}

int main(int argc, char **argv) {
    use_test_slots();
    int worlds[16], nw = 0;
    for (int i = 1; i < argc && nw < 16; i++) worlds[nw++] = atoi(argv[i]);
    if (nw == 0) {
        for (int w = 1; w <= 4; w++) worlds[nw++] = w;
    }
    for (int i = 0; i < nw; i++) CHECK_MSG(run_world(worlds[i], body, NULL, 100) == 0, "world %d", worlds[i]);
    TEST_MAIN_END();
}
