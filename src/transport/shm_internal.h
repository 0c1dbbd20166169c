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

#define SEG_MAGIC 0x73706d646c6e6b34ull /* "spmdlnk4" */
#define HDR_BYTES 4096u

/* A ring (shm_link.c): the counters and each side's sleep flags on cache
 * lines of their own, so the flags a writer reads per message stay clean in
 * its cache while nobody sleeps. */
typedef struct {
    _Alignas(64) _Atomic uint64_t tail;    /* bytes written (the producer alone stores it) */
    _Alignas(64) _Atomic uint64_t head;    /* bytes read (the consumer alone stores it) */
    _Alignas(64) _Atomic uint32_t c_sleep; /* the consumer sleeps and wants every message */
    _Atomic uint32_t c_idle;               /* ... sleeps, wants a doorbell once the ring is half full */
    _Alignas(64) _Atomic uint32_t p_sleep; /* the producer sleeps until there is room */
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
    _Alignas(64) _Atomic int32_t cpu;       /* the CPU this rank last waited on (path.h) */
} seg_header;

typedef struct {
    spmd__path base;
    ring *in, *out;
    uint32_t size;       /* ring_bytes (a power of two) */
    int asym;            /* both ranks registered for membarrier (shm_link.c: Dekker's fences) */
    uint64_t in_tail;    /* last tail count seen on `in` */
    uint64_t in_head;    /* bytes read from `in` (ours: the counter in shared memory follows) */
    uint64_t out_tail;   /* bytes written to `out` (likewise) */
    uint64_t out_head;   /* last head count seen on `out` */
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
    int asym;                /* every linked rank registered for membarrier: fast sides need no fence */
    uint32_t step;           /* collective steps synced so far (shm_coll.c) */
};

ring *spmd__shm_ring_at(const spmd__shm_link *l, unsigned char *seg, int from, int chan);

/* Dekker's handshake between a side that publishes often (a ring's writer
 * and reader, a collective's poster) and a side that rarely goes to sleep:
 * each stores, fences, then loads the other's word.  With membarrier(2)
 * the frequent side needs only a compiler barrier and the sleeper issues a
 * barrier on every CPU running a registered process (asymmetric fences, as
 * userspace RCU); without it both use a full fence. */
void spmd__shm_fence_fast(int asym);
void spmd__shm_fence_slow(int asym);
int spmd__shm_membarrier_register(void);
seg_header *spmd__shm_header(unsigned char *seg);

#endif
