/* shm_ring.c — one direction of a shared-memory path: a single-producer /
 * single-consumer ring of records in the consumer's segment (shm_link.c
 * builds and maps them), with no system call and no fence on the fast path.
 *
 *     data      records: an 8-byte header (payload length | stamp << 32),
 *               then the payload, 8-byte aligned; a record never wraps (a
 *               "skip" record ends a lap early)
 *     tail      bytes of records written (the producer alone stores it)
 *     head      bytes of records consumed (the consumer alone stores it)
 *     c_sleep   the consumer may be asleep: the producer, after publishing,
 *               clears it and rings the doorbell (one byte on the pair's TCP
 *               connection, which the sleeper polls)
 *     c_idle    the consumer sleeps but waits for nothing from us: the
 *               producer rings only once the ring is more than half full,
 *               so unexpected messages are drained without a system call
 *               per message
 *     p_sleep   the producer waits for space: the consumer, after reading,
 *               clears it and rings the doorbell the other way
 *
 * A writer copies the bytes, clears the header after its record (stale bytes
 * of an earlier lap must never look like a record), then stores its header;
 * a reader polls the header of the record it awaits, whose stamp tells a new
 * record from an old one.  That header shares its cache line with a small
 * message, so a message costs the reader one miss; `tail` is only for the
 * half-full test and never polled.
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
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/membarrier.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>
#include "mesh.h"
#include "path.h"
#include "shm_internal.h"

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

/* Write one record of as many of the iov's bytes as fit (whole: all of them
 * or none). */
static ssize_t write_record(spmd__path *pp, const struct iovec *iov, int n, int whole) {
    shm_path *p = (shm_path *)pp;
    ring *r = p->out;
    size_t total = 0;
    for (int i = 0; i < n; i++) total += iov[i].iov_len;
    if (!total) { /* nothing asked */
        errno = EAGAIN;
        return -1;
    }
    /* where the writer's bytes began: a write that did not fit whole is
     * continued by the next (the stream's bytes in order) */
    const uint64_t start = p->out_cont ? p->out_from : p->out_pos;
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
    if (room <= REC_HDR || (whole && room < rec_bytes(total))) {
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
    p->out_cont = len < total;
    p->out_from = start;
    atomic_store_explicit(&r->tail, p->out_pos, memory_order_release);
    spmd__shm_fence_fast(p->asym);
    if (atomic_load_explicit(&r->c_sleep, memory_order_relaxed)) {
        if (atomic_exchange_explicit(&r->c_sleep, 0, memory_order_relaxed)) doorbell(pp->fd);
    } else if (atomic_load_explicit(&r->c_idle, memory_order_relaxed) && p->out_pos - p->out_head > p->size / 2) {
        /* our idea of the reader's progress only lags: look before ringing.
         * A reader that had read every earlier record keeps up (a receive
         * spins on this ring): one large record alone wakes nobody.  Waking
         * the reader's progress thread for each 64 KiB message of a
         * ping-pong through a 128 KiB ring (two records: the first up to
         * the ring's end) took the spinning ranks' cores and doubled its
         * time (issue 28).  A writer that finds no room rings in shm_arm,
         * so an idle reader still drains a full ring. */
        p->out_head = atomic_load_explicit(&r->head, memory_order_acquire);
        if (p->out_head != start && p->out_pos - p->out_head > p->size / 2 &&
            atomic_exchange_explicit(&r->c_idle, 0, memory_order_relaxed))
            doorbell(pp->fd);
    }
    return (ssize_t)len;
}

static ssize_t shm_writev(spmd__path *pp, const struct iovec *iov, int n) { return write_record(pp, iov, n, 0); }

ssize_t spmd__shm_write_whole(spmd__path *pp, const struct iovec *iov, int n) { return write_record(pp, iov, n, 1); }

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

/* The reader moved on: tell spinners where to look next, hand the space
 * back to the writer, and wake it if it waits for room. */
static void consumed(shm_path *p) {
    ring *r = p->in;
    atomic_store_explicit(&p->in_next, (uint64_t)p->in_seq << 32 | (p->in_pos & (p->size - 1)), memory_order_relaxed);
    atomic_store_explicit(&r->head, p->in_pos, memory_order_release);
    spmd__shm_fence_fast(p->asym);
    if (atomic_load_explicit(&r->p_sleep, memory_order_relaxed) &&
        atomic_exchange_explicit(&r->p_sleep, 0, memory_order_relaxed))
        doorbell(p->base.fd);
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
    if (moved) consumed(p);
    if (!got) {
        errno = EAGAIN;
        return -1;
    }
    SPMD__IPC_ACQUIRE();
    return (ssize_t)got;
}

const unsigned char *spmd__shm_record(spmd__path *pp, size_t *len) {
    shm_path *p = (shm_path *)pp;
    int moved = 0;
    if (p->in_open && p->in_got) return NULL; /* partly read already */
    int open = open_record(p, &moved);
    if (moved) consumed(p); /* past skip records */
    if (!open) return NULL;
    SPMD__IPC_ACQUIRE();
    *len = p->in_len;
    return p->in->data + (p->in_pos & (p->size - 1)) + REC_HDR;
}

void spmd__shm_record_done(spmd__path *pp) {
    shm_path *p = (shm_path *)pp;
    p->in_pos += rec_bytes(p->in_len);
    p->in_open = 0;
    consumed(p);
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
    spmd__shm_fence_slow(p->asym && !pp->nap);
    if (reading && has_bytes(p)) return 1;
    if (writing && p->size - (p->out_pos - atomic_load_explicit(&p->out->head, memory_order_acquire)) >= need) return 1;
    /* no room: a reader that sleeps wanting nothing from us must drain the
     * ring all the same (write_record leaves it asleep while it keeps up) */
    if (writing && atomic_load_explicit(&p->out->c_idle, memory_order_relaxed) &&
        atomic_exchange_explicit(&p->out->c_idle, 0, memory_order_relaxed))
        doorbell(pp->fd);
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
    spmd__shm_fence_slow(p->asym && !pp->nap);
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

const spmd__path_ops spmd__shm_ring_ops = {"shm",     shm_writev, shm_read,    shm_arm,  shm_disarm,
                                       shm_lower, shm_idle,   shm_pending, shm_kick, shm_free,
                                       NULL /* no peek: desync.c reads a ring peer's announcement instead */};

