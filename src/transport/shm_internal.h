/* src/transport/shm_internal.h — the layout of a rank's shared-memory
 * segment, shared by shm_link.c (rings) and shm_coll.c (collective slots).
 *
 *   page 0      seg_header, then the collective flag (its own cache lines)
 *   rings       [world][NCHAN] inbound rings, ring_stride bytes each
 *   slots       2 collective slots of slot_bytes (double-buffered by step)
 */
#ifndef SPMD_TRANSPORT_SHM_INTERNAL_H
#define SPMD_TRANSPORT_SHM_INTERNAL_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include "mesh.h"
#include "path.h"

#define SEG_MAGIC 0x73706d646c6e6b32ull /* "spmdlnk2" */
#define HDR_BYTES 4096u

typedef struct {
    _Alignas(64) _Atomic uint64_t tail;
    _Alignas(64) _Atomic uint64_t head;
    _Alignas(64) _Atomic uint32_t c_sleep;
    _Alignas(64) _Atomic uint32_t p_sleep;
    _Alignas(64) unsigned char data[];
} ring;

typedef struct {
    uint64_t magic;
    uint32_t rank, world, ring_bytes, nchan;
    uint64_t slot_bytes;
    /* the collective flag: step (high half, the futex word) and a hash of the
     * collective (low half), written together so a reader never sees one
     * step's number with another's hash */
    _Alignas(64) _Atomic uint64_t flag;
    _Alignas(64) _Atomic uint32_t sleepers; /* ranks waiting on our flag in futex */
    /* the collective this rank runs (desync.c): sequence number << 32 |
     * descriptor, and what a mismatch message names (algorithm, segment size,
     * in the agreement step); written when a collective starts */
    _Alignas(64) _Atomic uint64_t coll_id;
    _Atomic uint64_t coll_info;
} seg_header;

typedef struct {
    spmd__path base;
    ring *in, *out;
    uint32_t size;       /* ring_bytes (a power of two) */
    uint64_t in_tail;    /* last tail seen on `in` */
    uint64_t out_head;   /* last head seen on `out` */
} shm_path;

struct spmd__shm_link {
    int world, rank;
    size_t ring_stride, seg_len;
    uint32_t ring_bytes;
    unsigned char *own;      /* our segment (inbound rings) */
    unsigned char **peer;    /* [world] peers' segments (NULL: not shared) */
    shm_path **paths[SPMD__NCHAN]; /* [world] our shm paths, to wake sleepers on failure */
    int npeers;
    size_t slot_bytes, slots_off;
    int all_shm;             /* every rank of the mesh reaches every other by rings (agreed by all) */
    uint32_t step;           /* collective steps synced so far (shm_coll.c) */
};

ring *spmd__shm_ring_at(const spmd__shm_link *l, unsigned char *seg, int from, int chan);
seg_header *spmd__shm_header(unsigned char *seg);

#endif
