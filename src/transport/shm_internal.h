/* src/transport/shm_internal.h — the layout of a rank's shared-memory
 * segment, shared by shm_link.c (set-up), shm_ring.c (rings) and shm_coll.c
 * (collective slots).
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

#define SPMD__SHM_SMALL_BYTES 24
#define SEG_MAGIC 0x73706d646c6e6b37ull /* "spmdlnk7" */
#define HDR_BYTES 4096u

/* A ring (shm_ring.c): records in `data`, each an 8-byte header (payload
 * length | stamp << 32) and the payload, 8-byte aligned; the counters and
 * each side's sleep flags on cache lines of their own, so the flags a writer
 * reads per message stay clean in its cache while nobody sleeps. */
typedef struct {
    _Alignas(64) _Atomic uint64_t tail;    /* bytes of records written (the producer alone stores it) */
    _Alignas(64) _Atomic uint64_t head;    /* bytes of records consumed (the consumer alone stores it) */
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
    /* a small step's data, on the flag's own cache line (one miss for both),
     * double-buffered like the slots (shm_coll.c) */
    unsigned char small[2][SPMD__SHM_SMALL_BYTES];
    _Alignas(64) _Atomic uint32_t sleepers; /* ranks waiting on our flag in futex */
    _Alignas(64) _Atomic int32_t cpu;       /* the CPU this rank last waited on (path.h) */
    /* heartbeats of this rank's progress thread, read by its peers (heartbeat.c) */
    _Alignas(64) _Atomic uint64_t beat;
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
    int asym;            /* both ranks registered for membarrier (shm_link.c: Dekker's fences) */
    /* reading `in` (by whoever holds the reader's lock) */
    uint64_t in_pos;     /* the current record's position (the ring's head follows) */
    uint32_t in_seq;     /* the stamp it must carry */
    uint32_t in_len, in_got; /* its payload's length and what was read of it, while in_open */
    int in_open;
    _Atomic uint64_t in_next; /* seq << 32 | offset of the record awaited: spinners look there */
    /* writing `out` */
    uint64_t out_pos;    /* where the next record goes (the ring's tail follows) */
    uint32_t out_seq;    /* its stamp */
    uint64_t out_head;   /* last head seen on `out` */
    uint64_t out_from;   /* where the bytes of the last write began ... */
    int out_cont;        /* ... which did not fit whole: the next write goes on with them */
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

/* ThreadSanitizer sees no synchronisation through another process's
 * memory.  For sockets it assumes that whatever one thread sent may be what
 * any thread receives (one sync object for every socket); the rings and the
 * collective flags are told the same: a write releases, a read acquires. */
#if defined(__SANITIZE_THREAD__)
#define SPMD__TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define SPMD__TSAN 1
#endif
#endif
#ifdef SPMD__TSAN
void __tsan_acquire(void *addr);
void __tsan_release(void *addr);
extern char spmd__tsan_ipc;
#define SPMD__IPC_RELEASE() __tsan_release(&spmd__tsan_ipc)
#define SPMD__IPC_ACQUIRE() __tsan_acquire(&spmd__tsan_ipc)
#else
#define SPMD__IPC_RELEASE() ((void)0)
#define SPMD__IPC_ACQUIRE() ((void)0)
#endif

/* Dekker's handshake between a side that publishes often (a ring's writer
 * and reader, a collective's poster) and a side that rarely goes to sleep:
 * each stores, fences, then loads the other's word.  With membarrier(2)
 * the frequent side needs only a compiler barrier and the sleeper issues a
 * barrier on every CPU running a registered process (asymmetric fences, as
 * userspace RCU); without it both use a full fence. */
extern const spmd__path_ops spmd__shm_ring_ops; /* shm_ring.c: the path over a pair of rings */
void spmd__shm_fence_fast(int asym);
void spmd__shm_fence_slow(int asym);
int spmd__shm_membarrier_register(void);
seg_header *spmd__shm_header(unsigned char *seg);

#endif
