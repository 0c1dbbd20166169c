/* src/coll/algos.h — the algorithm functions select.c can choose from, and
 * the few helpers they share.  Each algorithm lives in its own file whose
 * opening comment draws its steps and gives its α-β cost (α = per-message
 * latency, β = time per byte, γ = reduction time per byte, n = bytes of the
 * buffer, w = world size).
 *
 * What select.c guarantees before an algorithm runs (so algorithms need not):
 *   - w >= 2 (world size 1 is a local copy, done in select.c);
 *   - AVG is reduced as SUM by the algorithm and divided afterwards;
 *   - all_reduce: out of place only reaches algorithms marked SPMD__A_OOP
 *     (the others see sendbuf == recvbuf after a copy);
 *   - all_gather: this rank's own block is already in place in the output;
 *   - all_to_all: sendbuf does not overlap recvbuf (copied to scratch slot 3
 *     first when it did).
 * Scratch slots: algorithms use 0..2; select.c uses 3.
 */
#ifndef SPMD_COLL_ALGOS_H
#define SPMD_COLL_ALGOS_H

#include <string.h>
#include "coll/coll.h"
#include "coll/pattern.h"
#include "coll/reduce.h"

#define SPMD__MAX_WORLD_LOG 31

/* Elements per pipelining segment (>= 1). */
static inline size_t spmd__seg_elems(spmd__coll_ctx *c, size_t es) {
    size_t s = spmd__ctx_segment_bytes(c) / es;
    return s ? s : 1;
}

/* Pieces of the reducing pipelines (ring, rhd, reduce_scatter ring) are
 * capped at 256 KiB: measured best on the 2-core development machine (1 MiB
 * of L2 per core) — the received piece, its reduction and the socket
 * buffers stay in cache; 1 MiB pieces ran at half the bandwidth from 4 MiB
 * up (bench/coll_sweep, docs in select.c).  A smaller SPMD_SEGMENT_BYTES
 * still applies. */
#define SPMD__PIPE_CAP_BYTES ((size_t)256 * 1024)
static inline size_t spmd__pipe_elems(spmd__coll_ctx *c, size_t es) {
    size_t b = spmd__ctx_segment_bytes(c);
    if (b > SPMD__PIPE_CAP_BYTES) b = SPMD__PIPE_CAP_BYTES;
    return b / es ? b / es : 1;
}

/* Pointer to block i of `count` elements in a flat buffer, or the i-th list entry. */
static inline char *spmd__block(const spmd__coll_args *a, void *flat, int i, size_t es) {
    if (a->recvbufs) return (char *)a->recvbufs[i];
    return (char *)flat + (size_t)i * a->count * es;
}

/* memmove that tolerates len 0 with NULL pointers. */
static inline void spmd__copy(void *dst, const void *src, size_t len) {
    if (len && dst != src) memmove(dst, src, len);
}

/* Send one piece and receive one piece where either may be absent (peer < 0). */
static inline spmd_status spmd__xpair(spmd__coll_ctx *c, int speer, const void *sbuf,
                                      size_t slen, int rpeer, void *rbuf, size_t rlen) {
    spmd__xfer_op s = {speer, (void *)(uintptr_t)sbuf, slen}, r = {rpeer, rbuf, rlen};
    return spmd__xfer(c, &s, speer >= 0 ? 1 : 0, &r, rpeer >= 0 ? 1 : 0);
}

/* Scratch slot of at least `bytes` (never asks for 0 bytes). */
static inline void *spmd__tmp(spmd__coll_ctx *c, int slot, size_t bytes) {
    return spmd__scratch(c, slot, bytes ? bytes : 64);
}
#define SPMD__NOMEM(c, what, bytes)                                                       \
    spmd__coll_fail((c), SPMD_ERR_NOMEM, "out of memory for %zu bytes of %s scratch",     \
                    (size_t)(bytes), (what))

/* Number of pipelining pieces for a message of at most maxlen elements:
 * >= 1, so an empty message still travels (ranks stay in step). */
static inline size_t spmd__npieces(size_t maxlen, size_t seg) {
    size_t s = spmd__nsegs(maxlen, seg);
    return s ? s : 1;
}

/* ---- selection (select.c) ---- */
/* SPMD_OK if `name` is an algorithm of collective k, else SPMD_ERR_INVALID
 * with a message listing the valid names in err. */
spmd_status spmd__coll_algo_check(spmd__coll_kind k, const char *name, char *err, size_t errlen);
/* "ring, rhd, rd, naive, butterfly" for all_reduce, etc. */
void spmd__coll_algo_names(spmd__coll_kind k, char *out, size_t outlen);
/* The algorithm the table picks for this call at world size w; shm: 1 every
 * pair shares memory, 2 hosts of equal size do, 3 a group over MPI, 0 none
 * of these (NULL if none). */
const char *spmd__coll_select_name(const spmd__coll_args *a, int w, int shm);

/* ---- all_reduce ---- */
spmd_status spmd__allreduce_ring(spmd__coll_ctx *c, const spmd__coll_args *a);
spmd_status spmd__allreduce_rhd(spmd__coll_ctx *c, const spmd__coll_args *a);
spmd_status spmd__allreduce_rd(spmd__coll_ctx *c, const spmd__coll_args *a);
spmd_status spmd__allreduce_naive(spmd__coll_ctx *c, const spmd__coll_args *a);
spmd_status spmd__allreduce_butterfly(spmd__coll_ctx *c, const spmd__coll_args *a);
spmd_status spmd__allreduce_shm_oneshot(spmd__coll_ctx *c, const spmd__coll_args *a);
spmd_status spmd__allreduce_shm(spmd__coll_ctx *c, const spmd__coll_args *a);
spmd_status spmd__allreduce_cma(spmd__coll_ctx *c, const spmd__coll_args *a);
spmd_status spmd__allreduce_hier(spmd__coll_ctx *c, const spmd__coll_args *a);
/* ---- broadcast ---- */
spmd_status spmd__bcast_tree(spmd__coll_ctx *c, const spmd__coll_args *a);
spmd_status spmd__bcast_scatter_ring(spmd__coll_ctx *c, const spmd__coll_args *a);
spmd_status spmd__bcast_shm(spmd__coll_ctx *c, const spmd__coll_args *a);
/* ---- reduce ---- */
spmd_status spmd__reduce_tree(spmd__coll_ctx *c, const spmd__coll_args *a);
spmd_status spmd__reduce_shm(spmd__coll_ctx *c, const spmd__coll_args *a);
/* ---- gather / scatter ---- */
spmd_status spmd__gather_linear(spmd__coll_ctx *c, const spmd__coll_args *a);
spmd_status spmd__gather_tree(spmd__coll_ctx *c, const spmd__coll_args *a);
spmd_status spmd__scatter_linear(spmd__coll_ctx *c, const spmd__coll_args *a);
spmd_status spmd__scatter_tree(spmd__coll_ctx *c, const spmd__coll_args *a);
spmd_status spmd__gather_shm(spmd__coll_ctx *c, const spmd__coll_args *a);
spmd_status spmd__scatter_shm(spmd__coll_ctx *c, const spmd__coll_args *a);
/* ---- all_gather ---- */
spmd_status spmd__allgather_ring(spmd__coll_ctx *c, const spmd__coll_args *a);
spmd_status spmd__allgather_bruck(spmd__coll_ctx *c, const spmd__coll_args *a);
spmd_status spmd__allgather_shm(spmd__coll_ctx *c, const spmd__coll_args *a);
/* ---- reduce_scatter ---- */
spmd_status spmd__reduce_scatter_ring(spmd__coll_ctx *c, const spmd__coll_args *a);
spmd_status spmd__reduce_scatter_direct(spmd__coll_ctx *c, const spmd__coll_args *a);
spmd_status spmd__reduce_scatter_shm(spmd__coll_ctx *c, const spmd__coll_args *a);
/* ---- all_to_all ---- */
/* Byte offset and length of block i of the send (recv = 0) or receive buffer. */
void spmd__a2a_block(const spmd__coll_args *a, int i, int recv, size_t *off, size_t *len);
/* Rank r's block to itself (a copy; a mismatch of its two counts is an error). */
spmd_status spmd__a2a_self(spmd__coll_ctx *c, const spmd__coll_args *a, int r);
spmd_status spmd__alltoall_pairwise(spmd__coll_ctx *c, const spmd__coll_args *a);
spmd_status spmd__alltoall_linear(spmd__coll_ctx *c, const spmd__coll_args *a);
spmd_status spmd__alltoall_shm(spmd__coll_ctx *c, const spmd__coll_args *a);
/* ---- barrier ---- */
spmd_status spmd__barrier_dissemination(spmd__coll_ctx *c, const spmd__coll_args *a);
spmd_status spmd__barrier_shm(spmd__coll_ctx *c, const spmd__coll_args *a);
/* ---- MPI's own implementation of every collective (mpi_native.c, built
 * with SPMD_WITH_MPI; a group over MPI only) ---- */
#ifdef SPMD_HAVE_MPI
spmd_status spmd__coll_mpi(spmd__coll_ctx *c, const spmd__coll_args *a);
#define SPMD__COLL_MPI spmd__coll_mpi
#else
#define SPMD__COLL_MPI NULL /* the rows naming it do not exist */
#endif

#endif
