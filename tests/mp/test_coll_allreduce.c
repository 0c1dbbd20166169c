/* all_reduce over real ranks on loopback: every algorithm × dtype × op ×
 * count (0, 1, w-1, w+1, several 256-byte segments per chunk) × in place /
 * out of place, results compared bit for bit with a local reference.  Half
 * the calls choose the algorithm through SPMD_ALGO_ALL_REDUCE and the
 * blocking call, half through spmd_coll_opts and the async call.
 *
 * Usage: test_coll_allreduce [world ...]  (default 1 2 3 4).  World sizes
 * above 4 run a reduced dtype × op set, 16 a single dtype and op, to keep
 * the run short on 2 cores. */
#include "coll_common.h"

static const char *ALGOS[] = {"", "ring", "rhd", "rd", "naive", "butterfly", "oneshot", "shm", "cma", "mpi"};
#define N_ALGOS ((int)(sizeof ALGOS / sizeof ALGOS[0]))

static int one(spmd_group *g, int rank, int w, const char *algo, spmd_dtype dt, spmd_op op, size_t n,
               int inplace, int via_env) {
    const size_t es = spmd_dtype_size(dt), bytes = n * es;
    unsigned char *in = malloc(bytes + 1), *out = malloc(bytes + 1), *ref = malloc(bytes + 1),
                  *orig = malloc(bytes + 1);
    RREQUIRE(in && out && ref && orig);
    fill_input(in, n, op, dt, rank, w, 0);
    memcpy(orig, in, bytes);
    fill_ref(ref, n, op, dt, w, 0);
    memset(out, 0xA5, bytes + 1);
    void *dst = inplace ? (void *)in : (void *)out;
    spmd_status st;
    if (via_env) {
        if (algo[0]) setenv("SPMD_ALGO_ALL_REDUCE", algo, 1);
        st = spmd_all_reduce(g, in, dst, n, dt, op);
        unsetenv("SPMD_ALGO_ALL_REDUCE");
    } else {
        spmd_coll_opts o = {algo[0] ? algo : NULL};
        spmd_work *wk = NULL;
        st = spmd_all_reduce_async(g, in, dst, n, dt, op, &o, &wk);
        if (st == SPMD_OK) {
            st = spmd_work_wait(wk, -1);
            if (st) fprintf(stderr, "rank %d: work: %s\n", rank, spmd_work_errmsg(wk));
            spmd_work_free(wk);
        }
    }
    RREQUIRE(st == SPMD_OK);
    long d = first_diff(dst, ref, bytes);
    if (d >= 0)
        fprintf(stderr, "rank %d: all_reduce algo '%s' %s %s count %zu %s: element %ld differs\n", rank,
                algo, spmd_dtype_name(dt), spmd_op_name(op), n, inplace ? "in place" : "out of place",
                d / (long)es);
    RREQUIRE(d < 0);
    if (!inplace) {
        RREQUIRE(first_diff(in, orig, bytes) < 0); /* input untouched */
        RREQUIRE(out[bytes] == 0xA5);              /* nothing written past the end */
    }
    free(in);
    free(out);
    free(ref);
    free(orig);
    return 0;
}

static int body(int rank, int w, void *arg) {
    (void)arg;
    spmd_group *g = join_group(rank);
    if (!g) return 1;
    static const spmd_dtype few_dt[] = {SPMD_F32, SPMD_BF16, SPMD_I8, SPMD_I64};
    static const spmd_op few_op[] = {SPMD_SUM, SPMD_AVG, SPMD_MAX, SPMD_BXOR, SPMD_PROD};
    const int full = w <= 4, tiny = w > 8;
    int calls = 0;
    for (int di = 0; di < (full ? N_DTYPES : tiny ? 1 : 4); di++) {
        const spmd_dtype dt = full ? ALL_DTYPES[di] : few_dt[di];
        for (int oi = 0; oi < (full ? SPMD_OP_COUNT : tiny ? 1 : 5); oi++) {
            const spmd_op op = full ? (spmd_op)oi : few_op[oi];
            if (!op_valid(dt, op)) continue;
            size_t counts[8];
            const int nc = test_counts(w, spmd_dtype_size(dt), counts);
            for (int ci = 0; ci < nc; ci++)
                for (int ai = 0; ai < N_ALGOS; ai++)
                    for (int inplace = 0; inplace < 2; inplace++) {
                        if (!algo_usable(g, ALGOS[ai])) continue;
                        if (one(g, rank, w, ALGOS[ai], dt, op, counts[ci], inplace, calls & 1)) {
                            spmd_group_destroy(g);
                            return 1;
                        }
                        calls++;
                    }
        }
    }
    /* The automatic choice around the sizes where it changes over MPI
     * within one host (4040 and 8080 bytes, coll/select.c) */
    static const size_t edge[] = {1009, 1010, 1500, 2019, 2020};
    for (size_t i = 0; i < sizeof edge / sizeof edge[0]; i++)
        for (int inplace = 0; inplace < 2; inplace++)
            if (one(g, rank, w, "", SPMD_F32, SPMD_SUM, edge[i], inplace, (int)(i & 1))) {
                spmd_group_destroy(g);
                return 1;
            }
    /* The automatic choice at world 2 from 128 KiB, where the first calls of
     * each size class time cma against the slots, then keep the faster
     * (coll/trial.c): two classes interleaved, well past the trial */
    static const size_t big[] = {32768, 262144};
    for (int i = 0; i < 24; i++)
        if (one(g, rank, w, "", SPMD_F32, SPMD_SUM, big[i & 1], (i >> 1) & 1, (i >> 2) & 1)) {
            spmd_group_destroy(g);
            return 1;
        }
    spmd_group_destroy(g);
    return 0;
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
