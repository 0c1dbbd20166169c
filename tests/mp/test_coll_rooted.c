/* Rooted collectives over real ranks: broadcast, reduce, gather, scatter —
 * every algorithm, several roots, counts 0, 1, w-1, w+1 and multi-segment,
 * in place and out of place, compared bit for bit.  reduce covers every
 * dtype × op at worlds up to 4 (a reduced set beyond).  Non-root ranks of an
 * in-place reduce must get their buffer back unchanged, and buffers a rank
 * does not need may be NULL.
 *
 * Usage: test_coll_rooted [world ...]  (default 1 2 3 4). */
#include "coll_common.h"

static const spmd_dtype MOVE_DT[] = {SPMD_U8, SPMD_BF16, SPMD_F64};

static spmd_status wait_free(spmd_work **wp, spmd_status st) {
    /* by address: the call that sets *wp is the other argument, and C leaves
     * the order in which arguments are evaluated unspecified */
    spmd_work *w = *wp;
    if (st != SPMD_OK) return st;
    st = spmd_work_wait(w, -1);
    spmd_work_free(w);
    return st;
}

static int bcast(spmd_group *g, int rank, const char *algo, spmd_dtype dt, size_t n, int root) {
    const size_t bytes = n * spmd_dtype_size(dt);
    unsigned char *buf = malloc(bytes + 1), *want = malloc(bytes + 1);
    RREQUIRE(buf && want);
    fill_data(want, bytes, root, 0);
    if (rank == root) memcpy(buf, want, bytes);
    else memset(buf, 0xEE, bytes);
    buf[bytes] = 0x5A;
    spmd_coll_opts o = {algo[0] ? algo : NULL};
    spmd_work *wk = NULL;
    spmd_status st = wait_free(&wk, spmd_broadcast_async(g, buf, n, dt, root, &o, &wk));
    RREQUIRE(st == SPMD_OK);
    long d = first_diff(buf, want, bytes);
    if (d >= 0) fprintf(stderr, "rank %d: broadcast '%s' count %zu root %d: byte %ld\n", rank, algo, n, root, d);
    RREQUIRE(d < 0 && buf[bytes] == 0x5A);
    free(buf);
    free(want);
    return 0;
}

static int reduce(spmd_group *g, int rank, int w, const char *algo, spmd_dtype dt, spmd_op op, size_t n,
                  int root, int inplace) {
    const size_t es = spmd_dtype_size(dt), bytes = n * es;
    unsigned char *in = malloc(bytes + 1), *out = malloc(bytes + 1), *ref = malloc(bytes + 1),
                  *orig = malloc(bytes + 1);
    RREQUIRE(in && out && ref && orig);
    fill_input(in, n, op, dt, rank, w, 0);
    memcpy(orig, in, bytes);
    fill_ref(ref, n, op, dt, w, 0);
    memset(out, 0xA5, bytes + 1);
    /* non-root ranks may pass NULL for the buffer they do not use */
    void *dst = inplace ? (void *)in : (rank == root || (n & 1)) ? (void *)out : NULL;
    spmd_coll_opts o = {algo[0] ? algo : NULL};
    spmd_status st;
    if (n & 2) {
        spmd_work *wk = NULL;
        st = wait_free(&wk, spmd_reduce_async(g, in, dst, n, dt, op, root, &o, &wk));
    } else {
        if (algo[0]) setenv("SPMD_ALGO_REDUCE", algo, 1);
        st = spmd_reduce(g, in, dst, n, dt, op, root);
        unsetenv("SPMD_ALGO_REDUCE");
    }
    RREQUIRE(st == SPMD_OK);
    if (rank == root) {
        long d = first_diff(dst, ref, bytes);
        if (d >= 0)
            fprintf(stderr, "rank %d: reduce '%s' %s %s count %zu root %d %s: element %ld\n", rank, algo,
                    spmd_dtype_name(dt), spmd_op_name(op), n, root, inplace ? "in place" : "out of place",
                    d / (long)es);
        RREQUIRE(d < 0);
    } else {
        RREQUIRE(first_diff(in, orig, bytes) < 0); /* non-root buffer untouched, even in place */
    }
    if (!inplace) {
        RREQUIRE(first_diff(in, orig, bytes) < 0);
        RREQUIRE(out[bytes] == 0xA5);
        if (rank != root) {
            for (size_t i = 0; i < bytes; i++) RREQUIRE(out[i] == 0xA5);
        }
    }
    free(in);
    free(out);
    free(ref);
    free(orig);
    return 0;
}

static int gather(spmd_group *g, int rank, int w, const char *algo, spmd_dtype dt, size_t n, int root,
                  int inplace) {
    const size_t blk = n * spmd_dtype_size(dt), all = blk * (size_t)w;
    unsigned char *mine = malloc(blk + 1), *out = malloc(all + 1), *want = malloc(all + 1);
    RREQUIRE(mine && out && want);
    fill_data(mine, blk, rank, 0);
    for (int r = 0; r < w; r++) fill_data(want + (size_t)r * blk, blk, r, 0);
    memset(out, 0xC3, all + 1);
    const void *src = mine;
    if (inplace && rank == root) {
        memcpy(out + (size_t)root * blk, mine, blk);
        src = out + (size_t)root * blk;
    }
    spmd_coll_opts o = {algo[0] ? algo : NULL};
    spmd_work *wk = NULL;
    spmd_status st = wait_free(&wk, spmd_gather_async(g, src, rank == root ? (void *)out : NULL, n, dt, root, &o, &wk));
    RREQUIRE(st == SPMD_OK);
    if (rank == root) {
        long d = first_diff(out, want, all);
        if (d >= 0) fprintf(stderr, "rank %d: gather '%s' count %zu root %d: byte %ld\n", rank, algo, n, root, d);
        RREQUIRE(d < 0 && out[all] == 0xC3);
    }
    free(mine);
    free(out);
    free(want);
    return 0;
}

static int scatter(spmd_group *g, int rank, int w, const char *algo, spmd_dtype dt, size_t n, int root,
                   int inplace) {
    const size_t blk = n * spmd_dtype_size(dt), all = blk * (size_t)w;
    unsigned char *in = malloc(all + 1), *out = malloc(blk + 1), *want = malloc(blk + 1);
    RREQUIRE(in && out && want);
    for (int r = 0; r < w; r++) fill_data(in + (size_t)r * blk, blk, r + 100, 0);
    fill_data(want, blk, rank + 100, 0);
    memset(out, 0x3C, blk + 1);
    void *dst = (inplace && rank == root) ? (void *)(in + (size_t)root * blk) : (void *)out;
    spmd_status st;
    if (algo[0]) setenv("SPMD_ALGO_SCATTER", algo, 1);
    st = spmd_scatter(g, rank == root ? in : NULL, dst, n, dt, root);
    unsetenv("SPMD_ALGO_SCATTER");
    RREQUIRE(st == SPMD_OK);
    long d = first_diff(dst, want, blk);
    if (d >= 0) fprintf(stderr, "rank %d: scatter '%s' count %zu root %d: byte %ld\n", rank, algo, n, root, d);
    RREQUIRE(d < 0);
    if (dst == out) RREQUIRE(out[blk] == 0x3C);
    free(in);
    free(out);
    free(want);
    return 0;
}

static int roots_of(int w, int *roots) {
    if (w <= 4) {
        for (int r = 0; r < w; r++) roots[r] = r;
        return w;
    }
    roots[0] = 0;
    roots[1] = w - 1;
    roots[2] = w / 2;
    return 3;
}

static int body(int rank, int w, void *arg) {
    (void)arg;
    spmd_group *g = join_group(rank);
    if (!g) return 1;
    int roots[8], rc = 0;
    const int nroots = roots_of(w, roots);
    static const char *bc_algos[] = {"", "tree", "scatter_ring", "shm", "mpi"};
    static const char *ga_algos[] = {"", "linear", "tree", "shm", "mpi"};
    static const char *re_algos[] = {"", "tree", "shm", "mpi"};
    for (int ri = 0; ri < nroots && !rc; ri++) {
        const int root = roots[ri];
        for (int di = 0; di < 3 && !rc; di++) {
            const spmd_dtype dt = MOVE_DT[di];
            size_t counts[8];
            const int nc = test_counts(w, spmd_dtype_size(dt), counts);
            for (int ci = 0; ci < nc && !rc; ci++) {
                for (int a = 0; a < NALGOS(bc_algos) && !rc; a++)
                    if (algo_usable(g, bc_algos[a])) rc |= bcast(g, rank, bc_algos[a], dt, counts[ci], root);
                for (int a = 0; a < NALGOS(ga_algos) && !rc; a++)
                    for (int ip = 0; ip < 2 && !rc && algo_usable(g, ga_algos[a]); ip++) {
                        rc |= gather(g, rank, w, ga_algos[a], dt, counts[ci], root, ip);
                        rc |= scatter(g, rank, w, ga_algos[a], dt, counts[ci], root, ip);
                    }
            }
        }
        /* reduce: every dtype x op (fewer beyond 4 ranks or past the first root) */
        const int full = w <= 4 && ri < 2;
        for (int di = 0; di < N_DTYPES && !rc; di++) {
            const spmd_dtype dt = ALL_DTYPES[di];
            if (!full && dt != SPMD_F32 && dt != SPMD_I8) continue;
            for (int op = 0; op < SPMD_OP_COUNT && !rc; op++) {
                if (!op_valid(dt, (spmd_op)op)) continue;
                if (!full && op != SPMD_SUM && op != SPMD_AVG && op != SPMD_BOR) continue;
                size_t counts[8];
                const int nc = test_counts(w, spmd_dtype_size(dt), counts);
                for (int ci = 0; ci < nc && !rc; ci++)
                    for (int a = 0; a < NALGOS(re_algos) && !rc; a++)
                        for (int ip = 0; ip < 2 && !rc && algo_usable(g, re_algos[a]); ip++)
                            rc |= reduce(g, rank, w, re_algos[a], dt, (spmd_op)op, counts[ci], root, ip);
            }
        }
    }
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
