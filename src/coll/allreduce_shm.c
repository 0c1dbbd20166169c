/* src/coll/allreduce_shm.c — all_reduce through the shared slots of one host
 * (transport/xfer.h: write your slot, sync, read anyone's).
 *
 * oneshot (buffers that fit a slot; larger ones go the two-step way): one step.
 *     every rank copies its input into its slot ──sync──> every rank reduces
 *     all slots, in rank order, into its output
 *   Cost: one flag exchange; each rank reads w·n bytes.  The same order on
 *   every rank gives every rank the same bits.
 *
 * shm (any size): per slot-sized chunk, two steps.
 *     every rank copies the chunk, but for its own part, into its slot
 *     ──sync──> rank r reduces part r: its own input's, then the others'
 *     slots in rank order, into its next slot ──sync──> every rank copies
 *     every part from its owner
 *   Cost: 2 flag exchanges per chunk; each rank writes 2n bytes and reads
 *   2n — a reduce-scatter and an all-gather with no copy through the kernel
 *   and no message headers; a chunk (256 KiB) stays in cache between the
 *   steps, so the memory itself sees the input read and the output written.
 */
#include "coll/algos.h"

spmd_status spmd__allreduce_shm_oneshot(spmd__coll_ctx *c, const spmd__coll_args *a) {
    const int w = spmd__ctx_world(c), me = spmd__ctx_rank(c);
    const size_t es = spmd_dtype_size(a->dt), bytes = a->count * es;
    if (!spmd__shm_coll_usable(c))
        return spmd__coll_fail(c, SPMD_ERR_INVALID, "all_reduce oneshot: needs shared memory with every rank");
    if (bytes > spmd__shm_coll_slot_bytes(c)) return spmd__allreduce_shm(c, a); /* one step cannot hold it */
    const char *slot[64];
    const char **slots = w <= 64 ? slot : spmd__tmp(c, 0, sizeof(char *) * (size_t)w);
    if (!slots) return SPMD__NOMEM(c, "oneshot all_reduce", sizeof(char *) * (size_t)w);
    for (int r = 0; r < w; r++) slots[r] = spmd__shm_coll_small(c, r, bytes);
    memcpy((void *)(uintptr_t)slots[me], a->sendbuf, bytes);
    spmd_status st = spmd__shm_coll_sync(c);
    if (st) return st;
    spmd__reduce3(a->recvbuf, slots[0], slots[1], a->count, a->dt, a->op);
    for (int r = 2; r < w; r++) spmd__reduce(a->recvbuf, slots[r], a->count, a->dt, a->op);
    return SPMD_OK;
}

spmd_status spmd__allreduce_shm(spmd__coll_ctx *c, const spmd__coll_args *a) {
    const int w = spmd__ctx_world(c), me = spmd__ctx_rank(c);
    const size_t es = spmd_dtype_size(a->dt), n = a->count;
    const size_t chunk = spmd__shm_coll_slot_bytes(c) / es;
    if (!spmd__shm_coll_usable(c) || chunk < (size_t)w)
        return spmd__coll_fail(c, SPMD_ERR_INVALID, "all_reduce shm: needs shared memory with every rank");
    char **in = spmd__tmp(c, 0, 2 * sizeof(char *) * (size_t)w);
    if (!in) return SPMD__NOMEM(c, "shm all_reduce", 2 * sizeof(char *) * (size_t)w);
    char **out = in + w;
    const char *src = a->sendbuf;
    char *dst = a->recvbuf;
    for (size_t o = 0; o < n; o += chunk) {
        const size_t cn = n - o < chunk ? n - o : chunk;
        for (int r = 0; r < w; r++) in[r] = spmd__shm_coll_slot(c, r);
        /* the others' parts of my chunk (mine I read from the input itself) */
        const size_t po = spmd__chunk_off(cn, (size_t)w, (size_t)me), pl = spmd__chunk_len(cn, (size_t)w, (size_t)me);
        memcpy(in[me], src + o * es, po * es);
        memcpy(in[me] + (po + pl) * es, src + (o + po + pl) * es, (cn - po - pl) * es);
        spmd_status st = spmd__shm_coll_sync(c);
        if (st) return st;
        /* my part: my input's, then every other rank's in rank order, into my
         * slot of the next step (the first meets mine in one pass) */
        for (int r = 0; r < w; r++) out[r] = spmd__shm_coll_slot(c, r);
        const char *mine = src + (o + po) * es;
        for (int r = 0, first = 1; r < w; r++) {
            if (r == me) continue;
            if (first) spmd__reduce3(out[me], mine, in[r] + po * es, pl, a->dt, a->op);
            else spmd__reduce(out[me], in[r] + po * es, pl, a->dt, a->op);
            first = 0;
        }
        if ((st = spmd__shm_coll_sync(c))) return st;
        for (int r = 0; r < w; r++) {
            const size_t ro = spmd__chunk_off(cn, (size_t)w, (size_t)r), rl = spmd__chunk_len(cn, (size_t)w, (size_t)r);
            memcpy(dst + (o + ro) * es, out[r], rl * es);
        }
    }
    return SPMD_OK;
}
