/* src/coll/allreduce_cma.c — all_reduce on one host by single copies out of
 * the other ranks' own buffers (cross-memory attach, transport/xfer.h).
 *
 *     every rank puts its buffers' addresses in its slot ──sync──>
 *     rank r reduces part r: its own input, then each peer's part r in rank
 *     order, read block by block into a cache-sized scratch ──sync──>
 *     rank r copies every other part q straight out of rank q's output ──sync──>
 *
 *   Cost: 3 flag exchanges; each rank reads (w-1)/w·n bytes of its peers'
 *   inputs, n/w of its own, and (w-1)/w·n of their outputs, writes n: no
 *   copy into or out of shared slots (the slot algorithm moves every byte
 *   through them, 2.2× the memory traffic), and with ranks on fewer cores
 *   than themselves only the three syncs wait for a descheduled peer.
 *   Each part is reduced by one rank and copied to the others, so every
 *   rank gets the same bits.  In place works: a rank writes only its own
 *   part of its buffer until the second sync, and peers read only theirs.
 */
#include <stdlib.h>
#include "coll/algos.h"

#define BLOCK_BYTES ((size_t)128 * 1024) /* a peer's block and ours stay in L2 while reduced */

spmd_status spmd__allreduce_cma(spmd__coll_ctx *c, const spmd__coll_args *a) {
    const int w = spmd__ctx_world(c), me = spmd__ctx_rank(c);
    const size_t es = spmd_dtype_size(a->dt), n = a->count;
    if (!spmd__shm_coll_cma_usable(c)) return spmd__allreduce_shm(c, a); /* no single copy here */
    uint64_t *addr = spmd__tmp(c, 0, 2 * sizeof(uint64_t) * (size_t)w);
    const uint64_t **slot = spmd__tmp(c, 2, sizeof(uint64_t *) * (size_t)w);
    char *tmp = spmd__tmp(c, 1, BLOCK_BYTES);
    if (!addr || !slot || !tmp) return SPMD__NOMEM(c, "cma all_reduce", BLOCK_BYTES);
    for (int q = 0; q < w; q++) slot[q] = spmd__shm_coll_slot(c, q); /* this step's, taken before the sync */
    uint64_t *mine = (uint64_t *)(uintptr_t)slot[me];
    mine[0] = (uint64_t)(uintptr_t)a->sendbuf;
    mine[1] = (uint64_t)(uintptr_t)a->recvbuf;
    spmd_status st = spmd__shm_coll_sync(c);
    if (st) return st;
    for (int q = 0; q < w; q++) {
        addr[2 * q] = slot[q][0];
        addr[2 * q + 1] = slot[q][1];
    }
    /* my part, a block at a time: own input, then every peer's in rank order */
    const size_t po = spmd__chunk_off(n, (size_t)w, (size_t)me), pl = spmd__chunk_len(n, (size_t)w, (size_t)me);
    const size_t seg = spmd__ctx_segment_bytes(c) < BLOCK_BYTES ? spmd__ctx_segment_bytes(c) : BLOCK_BYTES;
    const size_t blk = seg / es ? seg / es : 1;
    char *out = (char *)a->recvbuf + po * es;
    const char *own = (const char *)a->sendbuf + po * es;
    for (size_t o = 0; o < pl; o += blk) {
        const size_t len = pl - o < blk ? pl - o : blk;
        int first = 1;
        for (int q = 0; q < w; q++) {
            if (q == me) continue;
            if ((st = spmd__shm_coll_read(c, q, tmp, addr[2 * q] + (po + o) * es, len * es))) return st;
            /* the first peer's block meets our own on the way into the output (no copy pass) */
            if (first) spmd__reduce3(out + o * es, own + o * es, tmp, len, a->dt, a->op);
            else spmd__reduce(out + o * es, tmp, len, a->dt, a->op);
            first = 0;
        }
    }
    if ((st = spmd__shm_coll_sync(c))) return st;
    /* everyone's part, straight from its owner's output */
    for (int q = 0; q < w; q++) {
        if (q == me) continue;
        const size_t qo = spmd__chunk_off(n, (size_t)w, (size_t)q), ql = spmd__chunk_len(n, (size_t)w, (size_t)q);
        if (!ql) continue;
        if ((st = spmd__shm_coll_read(c, q, (char *)a->recvbuf + qo * es, addr[2 * q + 1] + qo * es, ql * es)))
            return st;
    }
    /* nobody reads my buffers any more once everyone is here */
    return spmd__shm_coll_sync(c);
}
