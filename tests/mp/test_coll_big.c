/* Large buffers with the default segment size (the small-segment tests reach
 * the multi-piece paths with tiny counts; this one checks the real piece
 * sizes): all_reduce with every algorithm, reduce_scatter, all_gather,
 * broadcast and reduce on a few MiB with odd counts, bit for bit.
 *
 * Usage: test_coll_big [world ...]  (default 2 3 5). */
#include "coll_common.h"

static int check_all_reduce(spmd_group *g, int rank, int w, const char *algo, size_t n, int inplace) {
    const spmd_dtype dt = SPMD_F32;
    float *in = malloc(n * 4), *out = malloc(n * 4), *ref = malloc(n * 4);
    RREQUIRE(in && out && ref);
    fill_input(in, n, SPMD_SUM, dt, rank, w, 0);
    fill_ref(ref, n, SPMD_SUM, dt, w, 0);
    spmd_coll_opts o = {algo};
    spmd_work *wk = NULL;
    float *dst = inplace ? in : out;
    RREQUIRE(spmd_all_reduce_async(g, in, dst, n, dt, SPMD_SUM, &o, &wk) == SPMD_OK);
    RREQUIRE(spmd_work_wait(wk, -1) == SPMD_OK);
    spmd_work_free(wk);
    long d = first_diff(dst, ref, n * 4);
    if (d >= 0) fprintf(stderr, "rank %d: all_reduce '%s' count %zu: element %ld\n", rank, algo ? algo : "auto", n, d / 4);
    RREQUIRE(d < 0);
    free(in);
    free(out);
    free(ref);
    return 0;
}

static int body(int rank, int w, void *arg) {
    (void)arg;
    spmd_group *g = join_group(rank);
    if (!g) return 1;
    const size_t n = (3u << 20) / 4 * 3 + 7; /* ~9 MiB of float32, odd */
    static const char *algos[] = {NULL, "ring", "rhd", "rd", "butterfly", "naive"};
    for (int a = 0; a < 6; a++)
        if (check_all_reduce(g, rank, w, algos[a], a < 2 ? n : n / 3, a & 1)) return 1;

    /* reduce_scatter (ring) and all_gather (ring) on ~1.5 MiB blocks of int32 */
    const size_t blk = (3u << 19) / 4 + 3;
    const size_t cap = blk * 4 * (size_t)(w > 3 ? w : 3);
    int32_t *in = malloc(cap), *out = malloc(cap), *ref = malloc(cap);
    RREQUIRE(in && out && ref);
    fill_input(in, blk * (size_t)w, SPMD_SUM, SPMD_I32, rank, w, 0);
    fill_ref(ref, blk, SPMD_SUM, SPMD_I32, w, (size_t)rank * blk);
    RREQUIRE(spmd_reduce_scatter(g, in, out, blk, SPMD_I32, SPMD_SUM) == SPMD_OK);
    RREQUIRE(first_diff(out, ref, blk * 4) < 0);
    fill_data(in, blk * 4, rank, 0);
    for (int r = 0; r < w; r++) fill_data(ref + (size_t)r * blk, blk * 4, r, 0);
    RREQUIRE(spmd_all_gather(g, in, out, blk, SPMD_I32) == SPMD_OK);
    RREQUIRE(first_diff(out, ref, blk * 4 * (size_t)w) < 0);

    /* broadcast (both algorithms) and reduce of ~4.5 MiB from the last rank */
    const size_t bn = blk * 3;
    static const char *bc[] = {"tree", "scatter_ring"};
    for (int a = 0; a < 2; a++) {
        spmd_coll_opts o = {bc[a]};
        spmd_work *wk = NULL;
        fill_data(out, bn * 4, rank == w - 1 ? 77 : rank, 0);
        fill_data(ref, bn * 4, 77, 0);
        RREQUIRE(spmd_broadcast_async(g, out, bn, SPMD_I32, w - 1, &o, &wk) == SPMD_OK);
        RREQUIRE(spmd_work_wait(wk, -1) == SPMD_OK);
        spmd_work_free(wk);
        RREQUIRE(first_diff(out, ref, bn * 4) < 0);
    }
    fill_input(in, bn, SPMD_MAX, SPMD_I32, rank, w, 0);
    fill_ref(ref, bn, SPMD_MAX, SPMD_I32, w, 0);
    RREQUIRE(spmd_reduce(g, in, out, bn, SPMD_I32, SPMD_MAX, w - 1) == SPMD_OK);
    if (rank == w - 1) RREQUIRE(first_diff(out, ref, bn * 4) < 0);
    free(in);
    free(out);
    free(ref);
    spmd_group_destroy(g);
    return 0;
}

int main(int argc, char **argv) {
    int worlds[16], nw = 0;
    for (int i = 1; i < argc && nw < 16; i++) worlds[nw++] = atoi(argv[i]);
    if (nw == 0) {
        static const int dflt[] = {2, 3, 5};
        for (int i = 0; i < 3; i++) worlds[nw++] = dflt[i];
    }
    unsetenv("SPMD_SEGMENT_BYTES"); /* the library's default pieces */
    setenv("SPMD_SEGMENT_BYTES", "", 0);
    for (int i = 0; i < nw; i++) CHECK_MSG(run_world(worlds[i], body, NULL, 120) == 0, "world %d", worlds[i]);
    TEST_MAIN_END();
}
