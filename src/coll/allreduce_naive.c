/* src/coll/allreduce_naive.c — the seeds' teaching all-reduce (seed 004,
 * "reduce to rank 0, then broadcast from rank 0"), kept as a reference and a
 * correctness baseline:
 *
 *       r1 ─┐                      ┌─> r1
 *       r2 ─┼─> r0 (sum, one by one) ─┼─> r2
 *       r3 ─┘                      └─> r3
 *
 * Rank 0 receives every other rank's buffer in turn and reduces it in, then
 * sends the result to every rank in turn — exactly the seed's loops.  Large
 * buffers travel in SPMD_SEGMENT_BYTES pieces so rank 0's scratch stays small.
 *
 * Cost: 2(w-1)(α + nβ) + (w-1)nγ, all of it on rank 0: the bottleneck the
 * seed's "bonus: ring" section sets out to remove.  Never chosen by default.
 */
#include "coll/algos.h"

spmd_status spmd__allreduce_naive(spmd__coll_ctx *c, const spmd__coll_args *a) {
    const int w = spmd__ctx_world(c), r = spmd__ctx_rank(c);
    const size_t es = spmd_dtype_size(a->dt), n = a->count;
    const size_t pieces = spmd__npieces(n, spmd__seg_elems(c, es));
    const char *src = a->sendbuf;
    char *dst = a->recvbuf;
    spmd_status st;

    if (r != 0) {
        for (size_t j = 0; j < pieces; j++) {
            st = spmd__xsend(c, 0, src + spmd__chunk_off(n, pieces, j) * es,
                             spmd__chunk_len(n, pieces, j) * es);
            if (st != SPMD_OK) return st;
        }
        return spmd__xrecv(c, 0, dst, n * es);
    }
    const size_t tmp_bytes = spmd__chunk_len(n, pieces, 0) * es;
    char *tmp = spmd__tmp(c, 0, tmp_bytes);
    if (!tmp) return SPMD__NOMEM(c, "naive all_reduce", tmp_bytes);
    spmd__copy(dst, src, n * es);
    for (int i = 1; i < w; i++) {
        for (size_t j = 0; j < pieces; j++) {
            const size_t o = spmd__chunk_off(n, pieces, j) * es, l = spmd__chunk_len(n, pieces, j);
            if ((st = spmd__xrecv(c, i, tmp, l * es)) != SPMD_OK) return st;
            spmd__reduce(dst + o, tmp, l, a->dt, a->op);
        }
    }
    for (int i = 1; i < w; i++)
        if ((st = spmd__xsend(c, i, dst, n * es)) != SPMD_OK) return st;
    return SPMD_OK;
}
