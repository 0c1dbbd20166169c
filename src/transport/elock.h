/* src/transport/elock.h — the p2p engine's lock: a mutex whose release is a
 * plain store.
 *
 * pthread_mutex_unlock is a locked instruction (it must see whether anyone
 * sleeps), and a locked instruction waits until every earlier store has
 * reached the other cores.  The engine's last stores before it lets go are
 * a message in a shared-memory ring whose line the peer is polling, so each
 * send stalled there for a cross-core round trip, and again on the receive
 * side: a 4-byte ping-pong's half round trip went 0.37 -> 0.34 µs without
 * those two unlocks.
 *
 * Here the release stores 0, then looks at a sleeper count without a fence.
 * A sleeper that counts itself in just as the holder leaves can miss that
 * wake-up; it sleeps at most SLEEP_NS before it looks again, so the rare
 * loss costs that much, never a hang.  A taker spins briefly first: the
 * engine's holders keep it for microseconds (copies run outside it).
 */
#ifndef SPMD_TRANSPORT_ELOCK_H
#define SPMD_TRANSPORT_ELOCK_H

#include <linux/futex.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

typedef struct {
    _Atomic uint32_t held;     /* 1 while someone holds it */
    _Atomic uint32_t sleepers; /* takers asleep on `held` (or about to be) */
} spmd__elock;

#define SPMD__ELOCK_SPINS 128
#define SPMD__ELOCK_SLEEP_NS 200000L

static inline int spmd__elock_try(spmd__elock *l) {
    uint32_t free_ = 0;
    return atomic_compare_exchange_strong_explicit(&l->held, &free_, 1, memory_order_acquire, memory_order_relaxed);
}

static inline void spmd__elock_lock(spmd__elock *l) {
    if (spmd__elock_try(l)) return;
    for (unsigned i = 0;; i++) {
        if (!atomic_load_explicit(&l->held, memory_order_relaxed) && spmd__elock_try(l)) return;
        if (i < SPMD__ELOCK_SPINS) {
#if defined(__x86_64__) || defined(__i386__)
            __builtin_ia32_pause();
#endif
            if ((i & 31) == 31) sched_yield(); /* the holder may wait for our core */
            continue;
        }
        atomic_fetch_add_explicit(&l->sleepers, 1, memory_order_seq_cst);
        if (atomic_load_explicit(&l->held, memory_order_seq_cst)) {
            struct timespec ts = {0, SPMD__ELOCK_SLEEP_NS};
            syscall(SYS_futex, (uint32_t *)(void *)&l->held, FUTEX_WAIT_PRIVATE, 1u, &ts, NULL, 0);
        }
        atomic_fetch_sub_explicit(&l->sleepers, 1, memory_order_relaxed);
    }
}

static inline void spmd__elock_unlock(spmd__elock *l) {
    atomic_store_explicit(&l->held, 0, memory_order_release);
    atomic_signal_fence(memory_order_seq_cst); /* the compiler keeps the look after the store */
    if (atomic_load_explicit(&l->sleepers, memory_order_relaxed))
        syscall(SYS_futex, (uint32_t *)(void *)&l->held, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
}

#endif
