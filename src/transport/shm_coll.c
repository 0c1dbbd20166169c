/* shm_coll.c — collectives' shared slots: when every pair of a mesh is on
 * shared-memory rings, each rank's segment also holds two collective slots
 * (double-buffered) and a flag, mapped by every rank.  An algorithm writes
 * its slot of the current step, calls spmd__shm_coll_sync (post my flag,
 * wait for everyone's), and reads any rank's slot of that step.
 *
 * Why two slots suffice: a rank posts step k only after it has finished
 * reading the data of step k-1, so once a rank has seen everyone at step k,
 * the slots of step k-1 (the other parity) are free for step k+1.
 *
 * The flag carries a hash of the collective (kind, sequence number,
 * descriptor) with the step number, so ranks in different collectives, or
 * with different arguments or algorithms, fail with SPMD_ERR_MISMATCH
 * instead of mixing data.  A peer
 * running a collective over the wire instead shows up as bytes on its
 * collective ring, or in its announcement (desync.c), which is a mismatch
 * too.
 *
 * Waiting: spin (yielding when ranks outnumber cores), then sleep on the
 * peer's flag as a futex in slices, checking the group's failure and the
 * deadline; a poster wakes sleepers only when the flag's sleeper count says
 * there are some, so the fast path has no system call (and, with membarrier,
 * no fence: shm_internal.h).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stddef.h>
#include <limits.h>
#include <linux/futex.h>
#include <sched.h>
#include <stdio.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#include "shm_internal.h"
#include "xfer.h"

#define SLICE_MS 10

int spmd__shm_coll_usable(const spmd__coll_ctx *c) { return c->m->shm && c->m->shm->all_shm; }

size_t spmd__shm_coll_slot_bytes(const spmd__coll_ctx *c) { return c->m->shm ? c->m->shm->slot_bytes : 0; }

void *spmd__shm_coll_slot(spmd__coll_ctx *c, int r) {
    spmd__shm_link *l = c->m->shm;
    unsigned char *seg = r == c->m->rank ? l->own : l->peer[r];
    return seg + l->slots_off + (size_t)((l->step + 1) & 1) * l->slot_bytes;
}

_Static_assert(offsetof(seg_header, small) + sizeof(((seg_header *)0)->small) <= offsetof(seg_header, flag) + 64,
               "a small step's data shares the flag's cache line");

void *spmd__shm_coll_small(spmd__coll_ctx *c, int r, size_t bytes) {
    if (bytes > SPMD__SHM_SMALL_BYTES) return spmd__shm_coll_slot(c, r);
    spmd__shm_link *l = c->m->shm;
    seg_header *h = spmd__shm_header(r == c->m->rank ? l->own : l->peer[r]);
    return h->small[(l->step + 1) & 1];
}

static _Atomic uint32_t *step_word(seg_header *h) {
    /* the high half of the 64-bit flag on a little-endian machine */
    return (_Atomic uint32_t *)(void *)((char *)&h->flag + 4);
}

static long futex(_Atomic uint32_t *addr, int op, uint32_t val, const struct timespec *ts) {
    return syscall(SYS_futex, (uint32_t *)(void *)addr, op, val, ts, NULL, 0);
}

static uint32_t coll_hash(const spmd__coll_ctx *c) {
    const uint64_t v[2] = {(uint64_t)c->kind << 32 | c->seq, c->desc};
    return spmd__hash_words(v, 2);
}

/* Wait until rank r has posted step k.  The slow path checks the group,
 * the deadline, and r's collective ring. */
static spmd_status wait_peer(spmd__coll_ctx *c, int r, uint32_t k, uint32_t hash) {
    spmd__mesh *m = c->m;
    seg_header *h = spmd__shm_header(m->shm->peer[r]);
    const char *kind = spmd__coll_kind_name(c->kind);
    uint64_t spin_until = 0;
    int64_t next_watch = 0; /* set in the slow path: the fast one reads no clock */
    const int oversubscribed = m->oversubscribed;
    const unsigned look_mask = oversubscribed ? 7 : 63; /* looks between reads of the clock */
    for (unsigned i = 0;; i++) {
        uint64_t f = atomic_load_explicit(&h->flag, memory_order_acquire);
        uint32_t step = (uint32_t)(f >> 32);
        if ((int32_t)(step - k) >= 0) {
            if (step == k && (uint32_t)f != hash) return spmd__desync_peer(c, r, 1);
            return SPMD_OK;
        }
        if ((i & look_mask) != look_mask) {
            /* Oversubscribed: a few looks, then the core to whoever has
             * work.  64 pauses are 1-3 µs of a core another rank needs, and
             * the scheduler (EEVDF) lets a rank that spun that long wait its
             * turn: 8 ranks on 2 cores ran 8-byte all_reduces at 10 or at
             * 25 µs by how they first fell; a yield every 4 looks makes it
             * 7-12 (every look: 12-15 unbound, 4 ranks 3.7 against 2.6). */
            if (oversubscribed && (i & 3) == 0) sched_yield();
#if defined(__x86_64__) || defined(__i386__)
            else __builtin_ia32_pause();
#endif
            continue;
        }
        uint64_t now = spmd__now_ns();
        if (!spin_until) {
            spin_until = now + c->spin_ns;
            spmd__wait_slice_thread(); /* a thread that waits on peers (common.h) */
        }
        if (now < spin_until) {
            if (c->yield_in_spin || spmd__shm_shares_cpu(m->shm, r)) sched_yield();
            continue;
        }
        char msg[SPMD__ERRLEN];
        spmd_status st = spmd__mesh_check(m, msg, sizeof msg);
        if (st) return spmd__coll_fail(c, st, "%s", msg);
        int left = spmd__ctx_left_ms(c);
        if (left == 0)
            return spmd__coll_fail(c, SPMD_ERR_TIMEOUT, "%s #%u timed out on rank %d waiting for rank %d", kind,
                                   c->seq, m->rank, r);
        int64_t now_ms = spmd__now_ms();
        if (!next_watch) {
            next_watch = now_ms + SPMD__DESYNC_WATCH_MS;
        } else if (now_ms >= next_watch) { /* stuck: does every peer run what we run? */
            if ((st = spmd__desync_watch(c, NULL))) return st;
            next_watch = now_ms + SPMD__DESYNC_WATCH_MS;
        }
        spmd__path *cp = m->path[SPMD__CH_COLL][r];
        if (spmd__path_arm(cp, 1, 0)) {
            spmd__path_disarm(cp);
            /* r posts its flag before it sends anything after this step, so
             * bytes from a peer that has meanwhile reached step k belong to
             * its next collective: only a peer still short of k is out of
             * order */
            if ((int32_t)(atomic_load_explicit(step_word(h), memory_order_acquire) - k) >= 0) continue;
            if ((st = spmd__desync_peer(c, r, 0))) return st; /* says what differs, if it can */
            return spmd__coll_fail(c, SPMD_ERR_MISMATCH,
                                   "collective mismatch: rank %d sent a message over the wire while rank %d waits "
                                   "in %s #%u (collectives called in a different order on different ranks?)",
                                   r, m->rank, kind, c->seq);
        }
        atomic_fetch_add(&h->sleepers, 1);
        spmd__shm_fence_slow(m->shm->asym); /* the poster's side of it is a compiler barrier */
        uint32_t seen = atomic_load_explicit(step_word(h), memory_order_acquire);
        if ((int32_t)(seen - k) < 0) {
            int ms = left < 0 || left > SLICE_MS ? SLICE_MS : left;
            struct timespec ts = {0, (long)ms * 1000000L};
            futex(step_word(h), FUTEX_WAIT, seen, &ts);
        }
        atomic_fetch_sub(&h->sleepers, 1);
        int closed = !spmd__path_disarm(cp);
        if (closed && (int32_t)(atomic_load(step_word(h)) - k) < 0) {
            /* its connection ended: dead, or its group failed; the abort
             * notice names the cause, give it a moment */
            for (int t = 0; t < 100 && !atomic_load(&m->failed); t++) {
                struct timespec ts = {0, 10 * 1000000L};
                nanosleep(&ts, NULL);
            }
            st = spmd__mesh_check(m, msg, sizeof msg);
            if (st) return spmd__coll_fail(c, st, "%s", msg);
            return spmd__coll_fail(c, SPMD_ERR_REMOTE, "%s #%u: rank %d closed its connection (died?)", kind, c->seq, r);
        }
        spin_until = 0;
    }
}

/* Post the next step; wait for the n ranks listed (NULL: every rank). */
static spmd_status sync_with(spmd__coll_ctx *c, const int *ranks, int n) {
    spmd__mesh *m = c->m;
    spmd__shm_link *l = m->shm;
    uint32_t k = ++l->step, hash = coll_hash(c);
    seg_header *me = spmd__shm_header(l->own);
    SPMD__IPC_RELEASE();
    atomic_store_explicit(&me->flag, (uint64_t)k << 32 | hash, memory_order_release);
    spmd__shm_fence_fast(l->asym);
    if (atomic_load_explicit(&me->sleepers, memory_order_relaxed)) futex(step_word(me), FUTEX_WAKE, INT_MAX, NULL);
    for (int i = 0; i < n; i++) {
        int r = ranks ? ranks[i] : i;
        if (r == m->rank) continue;
        spmd_status st = wait_peer(c, r, k, hash);
        if (st) return st;
    }
    SPMD__IPC_ACQUIRE();
    return SPMD_OK;
}

spmd_status spmd__shm_coll_sync(spmd__coll_ctx *c) { return sync_with(c, NULL, c->m->world); }

int spmd__shm_coll_hier_usable(const spmd__coll_ctx *c) { return c->m->shm && c->m->topo.hosts > 1; }

spmd_status spmd__shm_coll_sync_host(spmd__coll_ctx *c) {
    const spmd__topology *t = &c->m->topo;
    return sync_with(c, t->member + (size_t)t->my_host * (size_t)t->per_host, t->per_host);
}

int spmd__shm_coll_cma_usable(const spmd__coll_ctx *c) {
    const spmd__mesh *m = c->m;
    if (!spmd__shm_coll_usable(c) || !m->cma) return 0;
    for (int r = 0; r < m->world; r++)
        if (r != m->rank && !m->cma[r].ok) return 0;
    return 1;
}

spmd_status spmd__shm_coll_read(spmd__coll_ctx *c, int peer, void *dst, uint64_t addr, size_t len) {
    char why[SPMD__ERRLEN];
    spmd_status st = spmd__cma_read(c->m, peer, dst, addr, len, why, sizeof why);
    if (st) return spmd__coll_fail(c, st, "%s #%u: %s", spmd__coll_kind_name(c->kind), c->seq, why);
    return SPMD_OK;
}
