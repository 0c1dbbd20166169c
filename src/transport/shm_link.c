/* shm_link.c — shared-memory paths between ranks under one kernel.
 *
 * Every rank owns one memfd holding its *inbound* rings: for each peer p and
 * channel c, a single-producer/single-consumer byte ring that p writes and
 * this rank reads.  Peers under the same kernel (cma.c's probe: same boot id
 * and pid namespace) hand each other these memfds over abstract Unix sockets
 * (fdpass.h: only the peers' pids are served), map them, and close the fd:
 * the memory lives exactly as long as the mappings, so a killed job leaves
 * nothing in /dev/shm or anywhere else.
 *
 * A ring (counters and flags on cache lines of their own, no system call on
 * the fast path):
 *
 *     tail      bytes the producer has written (it alone stores it)
 *     head      bytes the consumer has read    (it alone stores it)
 *     c_sleep   the consumer may be asleep: the producer, after publishing,
 *               clears it and rings the doorbell (one byte on the pair's TCP
 *               connection, which the sleeper polls)
 *     c_idle    the consumer sleeps but waits for nothing from us: the
 *               producer rings only once the ring is more than half full,
 *               so unexpected messages are drained without a system call
 *               per message
 *     p_sleep   the producer waits for space: the consumer, after reading,
 *               clears it and rings the doorbell the other way
 *     data      ring_bytes of payload
 *
 * Sleeping is Dekker's handshake: the sleeper stores its flag, fences and
 * looks again; the other side publishes, fences and reads the flag — at
 * least one of them sees the other, so no wake-up is lost.  The fences are
 * asymmetric where membarrier(2) allows (shm_internal.h): the side that
 * publishes every message pays a compiler barrier, the sleeper a barrier
 * on every CPU.  A full fence per message stalled the writer until the line
 * the reader polls came back (~40% of a small message's cost).  The doorbell
 * byte costs a system call only when the other side actually sleeps.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/membarrier.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>
#include "fdpass.h"
#include "mesh.h"
#include "path.h"
#include "shm_internal.h"

#define XCHG_MAGIC 0x4c4e4b31u          /* "LNK1" */
#define DEFAULT_RING_BYTES (128u * 1024u)
#define DEFAULT_SLOT_BYTES (256u * 1024u)

ring *spmd__shm_ring_at(const spmd__shm_link *l, unsigned char *seg, int from, int chan) {
    return (ring *)(void *)(seg + HDR_BYTES + ((size_t)from * SPMD__NCHAN + (size_t)chan) * l->ring_stride);
}

seg_header *spmd__shm_header(unsigned char *seg) { return (seg_header *)(void *)seg; }

static void doorbell(int fd) {
    char b = 1;
    ssize_t r = send(fd, &b, 1, MSG_NOSIGNAL | MSG_DONTWAIT);
    (void)r; /* a full socket already holds a doorbell; a dead one is noticed by the poller */
}

/* ---- fences ---------------------------------------------------------------- */

static long membarrier(int cmd) { return syscall(__NR_membarrier, cmd, 0, 0); }

#ifdef SPMD__TSAN
char spmd__tsan_ipc;
#endif

int spmd__shm_membarrier_register(void) {
    long q = membarrier(MEMBARRIER_CMD_QUERY);
    return q > 0 && (q & MEMBARRIER_CMD_GLOBAL_EXPEDITED) &&
           membarrier(MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED) == 0;
}

void spmd__shm_fence_fast(int asym) {
    if (asym) atomic_signal_fence(memory_order_seq_cst);
    else atomic_thread_fence(memory_order_seq_cst);
}

void spmd__shm_fence_slow(int asym) {
    atomic_thread_fence(memory_order_seq_cst);
    if (asym) membarrier(MEMBARRIER_CMD_GLOBAL_EXPEDITED); /* registered, so it does not fail */
}

/* ---- the path -------------------------------------------------------------- */

#define REC_HDR 8u
#define REC_SKIP 0xffffffffu /* a header's length: the rest of this lap is unused */
#define REC_MIN 64u          /* less room than this before the end of the ring: skip to its start */

static uint32_t next_stamp(uint32_t s) { return s + 1 ? s + 1 : 1; } /* 0: never written */
static uint64_t rec_bytes(uint64_t len) { return (REC_HDR + len + 7) & ~(uint64_t)7; }
static _Atomic uint64_t *hdr_at(ring *r, uint64_t off) { return (_Atomic uint64_t *)(void *)(r->data + off); }

/* Room the writer may use from out_pos (keeping 8 bytes to clear the next
 * header), after looking at the reader's progress again if needed. */
static uint64_t room_for(shm_path *p, uint64_t need) {
    uint64_t room = p->size - (p->out_pos - p->out_head);
    if (room < need + REC_HDR) {
        p->out_head = atomic_load_explicit(&p->out->head, memory_order_acquire);
        room = p->size - (p->out_pos - p->out_head);
    }
    return room >= REC_HDR ? room - REC_HDR : 0;
}

/* Publish a record whose payload is in place: clear the next header first
 * (stale bytes of an earlier lap must never look like a record), then store
 * this header, which is what the reader polls. */
static void publish(shm_path *p, uint64_t off, uint64_t rec, uint32_t len) {
    ring *r = p->out;
    atomic_store_explicit(hdr_at(r, (off + rec) & (p->size - 1)), 0, memory_order_relaxed);
    atomic_store_explicit(hdr_at(r, off), (uint64_t)len | (uint64_t)p->out_seq << 32, memory_order_release);
    p->out_seq = next_stamp(p->out_seq);
    p->out_pos += rec;
}

static ssize_t shm_writev(spmd__path *pp, const struct iovec *iov, int n) {
    shm_path *p = (shm_path *)pp;
    ring *r = p->out;
    size_t total = 0;
    for (int i = 0; i < n; i++) total += iov[i].iov_len;
    if (!total) { /* nothing asked */
        errno = EAGAIN;
        return -1;
    }
    uint64_t off = p->out_pos & (p->size - 1), to_end = p->size - off;
    if (to_end < REC_MIN) { /* too little before the end: a skip record, then from the start */
        if (room_for(p, to_end + REC_MIN) < to_end) {
            errno = EAGAIN;
            return -1;
        }
        publish(p, off, to_end, REC_SKIP);
        off = 0;
        to_end = p->size;
    }
    uint64_t room = room_for(p, rec_bytes(total));
    if (room > to_end) room = to_end;
    if (room <= REC_HDR) {
        errno = EAGAIN;
        return -1;
    }
    size_t len = total < room - REC_HDR ? total : (size_t)(room - REC_HDR);
    unsigned char *dst = r->data + off + REC_HDR;
    size_t left = len;
    for (int i = 0; i < n && left; i++) {
        size_t take = iov[i].iov_len < left ? iov[i].iov_len : left;
        memcpy(dst, iov[i].iov_base, take);
        dst += take;
        left -= take;
    }
    SPMD__IPC_RELEASE();
    publish(p, off, rec_bytes(len), (uint32_t)len);
    atomic_store_explicit(&r->tail, p->out_pos, memory_order_release);
    spmd__shm_fence_fast(p->asym);
    if (atomic_load_explicit(&r->c_sleep, memory_order_relaxed)) {
        if (atomic_exchange_explicit(&r->c_sleep, 0, memory_order_relaxed)) doorbell(pp->fd);
    } else if (atomic_load_explicit(&r->c_idle, memory_order_relaxed) && p->out_pos - p->out_head > p->size / 2) {
        /* our idea of the reader's progress only lags: look before ringing */
        p->out_head = atomic_load_explicit(&r->head, memory_order_acquire);
        if (p->out_pos - p->out_head > p->size / 2 && atomic_exchange_explicit(&r->c_idle, 0, memory_order_relaxed))
            doorbell(pp->fd);
    }
    return (ssize_t)len;
}

/* Open the record at in_pos if it is there (skipping skip records): 1 when
 * there are payload bytes to read. */
static int open_record(shm_path *p, int *moved) {
    while (!p->in_open) {
        uint64_t off = p->in_pos & (p->size - 1);
        uint64_t h = atomic_load_explicit(hdr_at(p->in, off), memory_order_acquire);
        if ((uint32_t)(h >> 32) != p->in_seq) return 0;
        p->in_seq = next_stamp(p->in_seq);
        if ((uint32_t)h == REC_SKIP) {
            p->in_pos += p->size - off;
            *moved = 1;
            continue;
        }
        p->in_len = (uint32_t)h;
        p->in_got = 0;
        p->in_open = 1;
    }
    return 1;
}

static ssize_t shm_read(spmd__path *pp, void *buf, size_t want) {
    shm_path *p = (shm_path *)pp;
    ring *r = p->in;
    size_t got = 0;
    int moved = 0;
    while (got < want && open_record(p, &moved)) {
        size_t take = p->in_len - p->in_got;
        if (take > want - got) take = want - got;
        memcpy((unsigned char *)buf + got, r->data + (p->in_pos & (p->size - 1)) + REC_HDR + p->in_got, take);
        got += take;
        p->in_got += (uint32_t)take;
        if (p->in_got == p->in_len) {
            p->in_pos += rec_bytes(p->in_len);
            p->in_open = 0;
            moved = 1;
        }
    }
    if (moved) {
        atomic_store_explicit(&p->in_next, (uint64_t)p->in_seq << 32 | (p->in_pos & (p->size - 1)), memory_order_relaxed);
        atomic_store_explicit(&r->head, p->in_pos, memory_order_release);
        spmd__shm_fence_fast(p->asym);
        if (atomic_load_explicit(&r->p_sleep, memory_order_relaxed) &&
            atomic_exchange_explicit(&r->p_sleep, 0, memory_order_relaxed))
            doorbell(pp->fd);
    }
    if (!got) {
        errno = EAGAIN;
        return -1;
    }
    SPMD__IPC_ACQUIRE();
    return (ssize_t)got;
}

/* Bytes to read at the reader's position (under the reader's lock; looks
 * past a skip record without consuming it). */
static int has_bytes(shm_path *p) {
    if (p->in_open) return 1;
    uint64_t off = p->in_pos & (p->size - 1);
    uint32_t seq = p->in_seq;
    for (int i = 0; i < 2; i++) {
        uint64_t h = atomic_load_explicit(hdr_at(p->in, off), memory_order_acquire);
        if ((uint32_t)(h >> 32) != seq) return 0;
        if ((uint32_t)h != REC_SKIP) return 1;
        off = 0;
        seq = next_stamp(seq);
    }
    return 0;
}

/* Announce a sleep as reader and/or as a writer with bytes queued.  1 when
 * there is something to do after all: bytes to read, or room to write. */
static int shm_arm(spmd__path *pp, int reading, int writing) {
    shm_path *p = (shm_path *)pp;
    /* room: a record of REC_MIN can be written (a skip record first at worst) */
    const uint64_t need = 2 * REC_MIN + REC_HDR;
    if (writing && p->size - (p->out_pos - atomic_load_explicit(&p->out->head, memory_order_acquire)) >= need) return 1;
    if (writing) atomic_store_explicit(&p->out->p_sleep, 1, memory_order_relaxed);
    if (reading) atomic_store_explicit(&p->in->c_sleep, 1, memory_order_relaxed);
    spmd__shm_fence_slow(p->asym);
    if (reading && has_bytes(p)) return 1;
    if (writing && p->size - (p->out_pos - atomic_load_explicit(&p->out->head, memory_order_acquire)) >= need) return 1;
    return 0;
}

static void shm_lower(spmd__path *pp) {
    ring *r = ((shm_path *)pp)->in;
    /* look first: the writer reads this line on every message */
    if (atomic_load_explicit(&r->c_sleep, memory_order_relaxed)) atomic_store_explicit(&r->c_sleep, 0, memory_order_relaxed);
}

/* Sleep waiting for nothing from this peer: 1 when the ring is already past
 * half full (drain it before sleeping). */
static int shm_idle(spmd__path *pp) {
    shm_path *p = (shm_path *)pp;
    ring *r = p->in;
    /* Already up: every write since it went up has looked at it (and the
     * writer's line stays where it is: no store, no read of its tail).  Else
     * raise it, then look once whether the ring is past half already. */
    if (atomic_load_explicit(&r->c_idle, memory_order_relaxed)) return 0;
    atomic_store_explicit(&r->c_idle, 1, memory_order_relaxed);
    spmd__shm_fence_slow(p->asym);
    return atomic_load_explicit(&r->tail, memory_order_acquire) - p->in_pos > p->size / 2;
}

/* Without the reader's lock: look at the header of the record awaited (one
 * cache line, which also holds a small message's bytes).  A stale view
 * answers 1 at worst (the record it names was consumed, not cleared). */
static int shm_pending(spmd__path *pp) {
    shm_path *p = (shm_path *)pp;
    uint64_t next = atomic_load_explicit(&p->in_next, memory_order_relaxed);
    uint64_t h = atomic_load_explicit(hdr_at(p->in, (uint32_t)next), memory_order_acquire);
    return (uint32_t)(h >> 32) == (uint32_t)(next >> 32);
}

static void shm_kick(spmd__path *pp) { doorbell(pp->fd); }

/* After a sleep: stand down and drain doorbells.  0 when the peer closed. */
static int shm_disarm(spmd__path *pp) {
    shm_path *p = (shm_path *)pp;
    if (atomic_load_explicit(&p->in->c_sleep, memory_order_relaxed)) atomic_store(&p->in->c_sleep, 0);
    if (atomic_load_explicit(&p->in->c_idle, memory_order_relaxed)) atomic_store(&p->in->c_idle, 0);
    if (atomic_load_explicit(&p->out->p_sleep, memory_order_relaxed)) atomic_store(&p->out->p_sleep, 0);
    char sink[64];
    for (;;) {
        ssize_t n = recv(pp->fd, sink, sizeof sink, MSG_DONTWAIT);
        if (n > 0) continue;
        if (n == 0) return 0;
        if (errno == EINTR) continue;
        return errno == EAGAIN || errno == EWOULDBLOCK ? 1 : 0;
    }
}

static void shm_free(spmd__path *pp) { free(pp); }

static const spmd__path_ops shm_ops = {"shm",     shm_writev, shm_read,    shm_arm,  shm_disarm,
                                       shm_lower, shm_idle,   shm_pending, shm_kick, shm_free};

/* ---- set-up ---------------------------------------------------------------- */

static size_t slot_bytes_wanted(void) {
    long v = DEFAULT_SLOT_BYTES;
    if (spmd__env_int("SPMD_SHM_SLOT_BYTES", 4096, 1L << 30, &v) != SPMD_OK) v = DEFAULT_SLOT_BYTES;
    return ((size_t)v + 4095) & ~(size_t)4095;
}

static uint32_t ring_bytes_wanted(void) {
    long v = DEFAULT_RING_BYTES;
    if (spmd__env_int("SPMD_SHM_RING_BYTES", 4096, 64L << 20, &v) != SPMD_OK) v = DEFAULT_RING_BYTES;
    uint32_t p = 4096;
    while (p < (uint64_t)v) p <<= 1; /* a power of two: offsets are masks */
    return p;
}

void spmd__shm_link_free(spmd__shm_link *l) {
    if (!l) return;
    for (int r = 0; l->peer && r < l->world; r++)
        if (l->peer[r]) munmap(l->peer[r], l->seg_len);
    if (l->own) munmap(l->own, l->seg_len);
    for (int c = 0; c < SPMD__NCHAN; c++) free(l->paths[c]);
    free(l->peer);
    free(l);
}

int spmd__shm_link_peers(const spmd__shm_link *l) { return l ? l->npeers : 0; }

int spmd__shm_shares_cpu(spmd__shm_link *l, int peer) {
    if (!l) return 0;
    int me = sched_getcpu(); /* a read of the rseq area with glibc >= 2.35 */
    if (me < 0) return 0;
    seg_header *own = spmd__shm_header(l->own);
    if (atomic_load_explicit(&own->cpu, memory_order_relaxed) != me)
        atomic_store_explicit(&own->cpu, me, memory_order_relaxed);
    for (int r = 0; r < l->world; r++) {
        if (r == l->rank || !l->peer[r] || (peer >= 0 && r != peer)) continue;
        if (atomic_load_explicit(&spmd__shm_header(l->peer[r])->cpu, memory_order_relaxed) == me) return 1;
    }
    return 0;
}

/* Write then read `len` bytes with each listed peer over its idle
 * collective connection (everything fits any socket buffer). */
static spmd_status swap_all(spmd__mesh *m, const char *want, unsigned char (*out)[16], unsigned char (*in)[16],
                            int64_t deadline, char *err, size_t errlen) {
    char why[SPMD__ERRLEN];
    spmd_status st;
    for (int p = 0; p < m->world; p++)
        if (want[p] && (st = spmd__write_full(m->fd[SPMD__CH_COLL][p], out[p], 16, deadline, NULL, why, sizeof why)))
            return spmd__fail(err, errlen, st, "rank %d: shared-memory set-up with rank %d: %s", m->rank, p, why);
    for (int p = 0; p < m->world; p++)
        if (want[p] && (st = spmd__read_full(m->fd[SPMD__CH_COLL][p], in[p], 16, deadline, NULL, why, sizeof why)))
            return spmd__fail(err, errlen, st, "rank %d: shared-memory set-up with rank %d: %s", m->rank, p, why);
    for (int p = 0; p < m->world; p++)
        if (want[p] && spmd__get_u32(in[p]) != XCHG_MAGIC)
            return spmd__fail(err, errlen, SPMD_ERR_PROTOCOL, "rank %d: garbled shared-memory set-up from rank %d",
                              m->rank, p);
    return SPMD_OK;
}

static int map_peer_seg(spmd__shm_link *l, int r, int fd) {
    struct stat st;
    void *p = MAP_FAILED;
    if (fstat(fd, &st) == 0 && (size_t)st.st_size == l->seg_len)
        p = mmap(NULL, l->seg_len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) return 0;
    const seg_header *h = p;
    if (h->magic != SEG_MAGIC || h->rank != (uint32_t)r || h->world != (uint32_t)l->world ||
        h->ring_bytes != l->ring_bytes || h->slot_bytes != l->slot_bytes) {
        munmap(p, l->seg_len);
        return 0;
    }
    l->peer[r] = p;
    return 1;
}

static spmd_status link_pairs(spmd__mesh *m, int mode, int64_t deadline, char *err, size_t errlen) {
    if (mode == 0 || m->world == 1 || !m->cma) return SPMD_OK;
    int world = m->world;
    char *local = calloc((size_t)world, 1);
    unsigned char(*out)[16] = calloc((size_t)world, 16);
    unsigned char(*in)[16] = calloc((size_t)world, 16);
    int *conn = malloc(sizeof(int) * (size_t)world);
    int *pids = malloc(sizeof(int) * (size_t)world);
    spmd__shm_link *l = calloc(1, sizeof *l);
    int lfd = -1, segfd = -1;
    char *asym = NULL; /* [world] the pair's fences may be asymmetric */
    spmd_status st = SPMD_OK;
    if (!local || !out || !in || !conn || !pids || !l) {
        st = spmd__fail(err, errlen, SPMD_ERR_NOMEM, "out of memory");
        goto done;
    }
    for (int p = 0; p < world; p++) conn[p] = -1;
    int nlocal = 0;
    for (int p = 0; p < world; p++)
        if (p != m->rank && m->cma[p].local) local[p] = 1, nlocal++;
    if (!nlocal) goto done;

    l->world = world;
    l->rank = m->rank;
    l->ring_bytes = ring_bytes_wanted();
    l->ring_stride = ((sizeof(ring) + l->ring_bytes + 4095) / 4096) * 4096;
    l->slot_bytes = slot_bytes_wanted();
    l->slots_off = HDR_BYTES + (size_t)world * SPMD__NCHAN * l->ring_stride;
    l->seg_len = l->slots_off + 2 * l->slot_bytes;
    l->peer = calloc((size_t)world, sizeof *l->peer);
    for (int c = 0; c < SPMD__NCHAN; c++) l->paths[c] = calloc((size_t)world, sizeof(shm_path *));
    if (!l->peer || !l->paths[0] || !l->paths[1]) {
        st = spmd__fail(err, errlen, SPMD_ERR_NOMEM, "out of memory");
        goto done;
    }
    /* our segment: header + inbound rings (pages touched only for local peers) */
    int ready = 0;
    uint64_t nonce = 0;
    segfd = memfd_create("spmd-link", MFD_CLOEXEC);
    if (segfd >= 0 && ftruncate(segfd, (off_t)l->seg_len) == 0) {
        void *p = mmap(NULL, l->seg_len, PROT_READ | PROT_WRITE, MAP_SHARED, segfd, 0);
        if (p != MAP_FAILED) {
            l->own = p;
            seg_header *h = p;
            h->magic = SEG_MAGIC;
            h->rank = (uint32_t)m->rank;
            h->world = (uint32_t)world;
            h->ring_bytes = l->ring_bytes;
            h->nchan = SPMD__NCHAN;
            h->slot_bytes = l->slot_bytes;
            atomic_store_explicit(&h->cpu, -1, memory_order_relaxed);
            if (getrandom(&nonce, sizeof nonce, 0) != (ssize_t)sizeof nonce) nonce = spmd__now_ns() ^ (uint64_t)getpid();
            lfd = spmd__fdpass_listen(nonce, world);
            ready = lfd >= 0 ? 1 | (spmd__shm_membarrier_register() ? 2 : 0) : 0;
        }
    }
    /* 1: listening?  2: connected to your listener?  3: mapped your segment? */
    for (int p = 0; p < world; p++) {
        spmd__put_u32(out[p], XCHG_MAGIC);
        spmd__put_u32(out[p] + 4, (uint32_t)ready);
        spmd__put_u64(out[p] + 8, nonce);
    }
    if ((st = swap_all(m, local, out, in, deadline, err, errlen))) goto done;
    int npids = 0;
    /* asymmetric fences between two ranks need both registered; the
     * collective slots need every rank under this kernel registered (the same
     * answer on every rank that shares memory with all the others) */
    asym = calloc((size_t)world, 1);
    if (!asym) {
        st = spmd__fail(err, errlen, SPMD_ERR_NOMEM, "out of memory");
        goto done;
    }
    l->asym = (ready & 2) != 0;
    for (int p = 0; p < world; p++) {
        if (!local[p]) continue;
        uint32_t theirs = spmd__get_u32(in[p] + 4);
        asym[p] = (ready & 2) && (theirs & 2);
        if (!asym[p]) l->asym = 0;
        int ok = ready && (theirs & 1);
        if (ok) conn[p] = spmd__fdpass_connect(m->cma[p].pid, spmd__get_u64(in[p] + 8));
        spmd__put_u32(out[p] + 4, (uint32_t)(conn[p] >= 0));
    }
    if ((st = swap_all(m, local, out, in, deadline, err, errlen))) goto done;
    for (int p = 0; p < world; p++)
        if (local[p] && spmd__get_u32(in[p] + 4) == 1) pids[npids++] = m->cma[p].pid;
    if (npids && !spmd__fdpass_serve(lfd, segfd, (uint32_t)m->rank, pids, npids, deadline)) {
        st = spmd__fail(err, errlen, SPMD_ERR_TIMEOUT, "rank %d: handing shared memory to its peers failed", m->rank);
        goto done;
    }
    for (int p = 0; p < world; p++) {
        int mapped = 0;
        if (local[p] && conn[p] >= 0) {
            uint32_t tag = 0;
            int fd = spmd__fdpass_receive(conn[p], &tag, deadline);
            mapped = fd >= 0 && tag == (uint32_t)p && map_peer_seg(l, p, fd);
            if (fd >= 0) close(fd);
        }
        spmd__put_u32(out[p] + 4, (uint32_t)mapped);
    }
    if ((st = swap_all(m, local, out, in, deadline, err, errlen))) goto done;
    for (int p = 0; p < world; p++) {
        if (!local[p]) continue;
        int both = l->peer[p] && spmd__get_u32(in[p] + 4) == 1;
        if (!both) {
            if (mode == 2) {
                st = spmd__fail(err, errlen, SPMD_ERR_SYSTEM,
                                "rank %d: SPMD_TRANSPORT=shm but no shared memory with rank %d (same host)", m->rank, p);
                goto done;
            }
            SPMD_LOGI("rank %d: rank %d runs under this kernel but shares no memory: TCP", m->rank, p);
            continue;
        }
        for (int c = 0; c < SPMD__NCHAN; c++) {
            shm_path *sp = calloc(1, sizeof *sp);
            if (!sp) {
                st = spmd__fail(err, errlen, SPMD_ERR_NOMEM, "out of memory");
                goto done;
            }
            sp->base.ops = &shm_ops;
            sp->base.fd = m->fd[c][p];
            sp->base.peer = p;
            sp->size = l->ring_bytes;
            sp->asym = asym[p];
            sp->in_seq = sp->out_seq = 1; /* stamps start at 1: fresh memory reads 0 */
            atomic_init(&sp->in_next, (uint64_t)1 << 32);
            sp->in = spmd__shm_ring_at(l, l->own, p, c);
            sp->out = spmd__shm_ring_at(l, l->peer[p], m->rank, c);
            l->paths[c][p] = sp;
        }
        l->npeers++;
    }
    /* every pair has settled: switch the channels (nothing is in flight) */
    for (int p = 0; p < world; p++)
        for (int c = 0; c < SPMD__NCHAN; c++)
            if (l->paths[c][p]) {
                spmd__path_free(m->path[c][p]);
                m->path[c][p] = &l->paths[c][p]->base;
            }
done:
    for (int p = 0; p < world && conn; p++)
        if (conn[p] >= 0) close(conn[p]);
    if (lfd >= 0) close(lfd);
    if (segfd >= 0) close(segfd);
    if (l && (st || !l->npeers)) { /* nothing was handed to the mesh */
        for (int c = 0; c < SPMD__NCHAN; c++)
            for (int p = 0; p < world && l->paths[c]; p++) free(l->paths[c][p]);
        spmd__shm_link_free(l);
        l = NULL;
    }
    if (l) m->shm = l;
    free(local);
    free(out);
    free(in);
    free(conn);
    free(pids);
    free(asym);
    return st;
}

/* Hosts as every rank sees them: rank r's host is the smallest rank it
 * shares rings with (or itself).  Usable for hierarchical collectives when
 * every rank's view is the same partition into equal hosts, 2 or more. */
static void make_topology(spmd__mesh *m, const int32_t *host_of, int all_consistent) {
    int world = m->world, hosts = 0, per = 0;
    for (int r = 0; r < world; r++)
        if (host_of[r] == r) hosts++;
    if (!all_consistent || hosts < 2 || world % hosts) return;
    per = world / hosts;
    int *member = malloc(sizeof(int) * (size_t)world);
    int *fill = calloc((size_t)hosts, sizeof(int));
    if (!member || !fill) {
        free(member);
        free(fill);
        return;
    }
    int h = 0, ok = 1;
    for (int root = 0; root < world && ok; root++) {
        if (host_of[root] != root) continue;
        for (int r = 0; r < world; r++)
            if (host_of[r] == root) {
                if (fill[h] == per) { ok = 0; break; }
                if (r == m->rank) {
                    m->topo.my_host = h;
                    m->topo.my_index = fill[h];
                }
                member[h * per + fill[h]++] = r;
            }
        ok = ok && fill[h] == per;
        h++;
    }
    free(fill);
    if (!ok) {
        free(member);
        return;
    }
    m->topo.hosts = hosts;
    m->topo.per_host = per;
    m->topo.member = member;
}

spmd_status spmd__shm_link_setup(spmd__mesh *m, int mode, int64_t deadline, char *err, size_t errlen) {
    spmd_status st = link_pairs(m, mode, deadline, err, errlen);
    if (st || m->world == 1) return st;
    /* Collectives over shared slots need every pair of the mesh on rings, and
     * every rank must know it alike (they choose algorithms by it): two more
     * words to every peer over the collective connections, still idle —
     * "I share with everybody" and my host (the smallest rank I share with);
     * then "your hosts agree with mine" for the hierarchical algorithms. */
    int world = m->world, mine = m->shm && m->shm->npeers == world - 1;
    int32_t my_host = m->rank;
    for (int p = 0; p < m->rank; p++)
        if (m->path[SPMD__CH_COLL][p] && spmd__path_is_shm(m->path[SPMD__CH_COLL][p])) {
            my_host = p;
            break;
        }
    int32_t *host_of = calloc((size_t)world, sizeof *host_of);
    char *all = calloc((size_t)world, 1);
    unsigned char(*out)[16] = calloc((size_t)world, 16);
    unsigned char(*in)[16] = calloc((size_t)world, 16);
    if (!all || !out || !in || !host_of) {
        st = spmd__fail(err, errlen, SPMD_ERR_NOMEM, "out of memory");
    } else {
        for (int p = 0; p < world; p++) {
            all[p] = p != m->rank;
            spmd__put_u32(out[p], XCHG_MAGIC);
            spmd__put_u32(out[p] + 4, (uint32_t)mine);
            spmd__put_u32(out[p] + 8, (uint32_t)my_host);
        }
        st = swap_all(m, all, out, in, deadline, err, errlen);
        host_of[m->rank] = my_host;
        for (int p = 0; p < world && !st; p++) {
            if (!all[p]) continue;
            if (spmd__get_u32(in[p] + 4) != 1) mine = 0;
            host_of[p] = (int32_t)spmd__get_u32(in[p] + 8);
        }
        if (!st && m->shm) m->shm->all_shm = mine;
        /* my view is consistent when my ring peers are exactly the ranks
         * that named my host */
        int consistent = 1;
        for (int p = 0; p < world && !st; p++) {
            if (p == m->rank) continue;
            if (host_of[p] < 0 || host_of[p] >= world) {
                consistent = 0;
                continue;
            }
            int ringed = m->path[SPMD__CH_COLL][p] && spmd__path_is_shm(m->path[SPMD__CH_COLL][p]);
            if (ringed != (host_of[p] == my_host)) consistent = 0;
        }
        if (!st) {
            for (int p = 0; p < world; p++) spmd__put_u32(out[p] + 4, (uint32_t)consistent);
            st = swap_all(m, all, out, in, deadline, err, errlen);
            for (int p = 0; p < world && !st; p++)
                if (all[p] && spmd__get_u32(in[p] + 4) != 1) consistent = 0;
        }
        if (!st) make_topology(m, host_of, consistent);
    }
    free(host_of);
    free(all);
    free(out);
    free(in);
    return st;
}
