/* cma_parallel.c — a large point-to-point message read from its sender's
 * memory by two threads of the receiver at once.
 *
 * One process_vm_readv moves 7–9 GB/s on one core; a blocking sender
 * meanwhile only waits for the FIN, so its core is idle (issue 28: both
 * one-host MPIs do one kernel copy, spmd can do two halves at once).  The
 * second copier is a thread of the receiver, not the sender writing into
 * the receiver's buffer: a read is checked after the fact (the seal, cma.c),
 * but a write that lands after the receiver gave its buffer back cannot be
 * undone, and a sender stopped between "may I write" and the write would
 * hold the receiver hostage.  A helper of our own dies with us and is
 * waited for in bounded time.
 *
 * The message is cut into chunks that the caller and the helper claim from
 * one counter: a helper that is late (asleep, or its core busy) costs
 * nothing but its help, the caller copies what is left; the caller then
 * waits only for a chunk the helper is copying.  The seal is read once,
 * after every chunk is in.  The engine asks for it only while no runnable
 * task waits for a core (common/idle_core.c): on a busy host the helper
 * would be preempted holding a chunk, and the caller would wait for it.  The helper is started at the first such read
 * and bound away from the caller's core when the caller is bound to one
 * (SPMD_BIND=core): on the core the waiting sender yields (group/work.c).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "cma_parallel.h"
#include "mesh.h"

#define CHUNK (256u * 1024u) /* ~35 µs of copying: what the caller may wait for at the end */

typedef struct job {
    spmd__mesh *m;
    int peer;
    unsigned char *dst;
    uint64_t addr;
    size_t len;
    atomic_size_t next;   /* offset of the next chunk to claim */
    atomic_int failed;    /* the first copier to fail sets it, then st and msg */
    spmd_status st;
    char msg[SPMD__ERRLEN];
    atomic_int finished;  /* the helper is done with this job: its last touch */
} job;

struct spmd__cma_parallel {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    job *posted;          /* under mu: a job the helper has not taken */
    int stop;             /* under mu */
    int state;            /* the caller's (one at a time): 0 no thread yet, 1 running, -1 none possible */
    pthread_t thread;
    int bound_cpu;        /* the starter's only core, or -1 */
    atomic_ulong jobs, helped; /* reads offered to the helper; chunks it copied */
};

/* Claim and copy chunks until none is left or one failed. */
static unsigned long copy_chunks(job *j) {
    unsigned long done = 0;
    for (;;) {
        size_t off = atomic_fetch_add_explicit(&j->next, CHUNK, memory_order_relaxed);
        if (off >= j->len || atomic_load_explicit(&j->failed, memory_order_acquire)) return done;
        size_t n = j->len - off < CHUNK ? j->len - off : CHUNK;
        char why[SPMD__ERRLEN];
        spmd_status st = spmd__cma_copy(j->m, j->peer, j->dst + off, j->addr + off, n, why, sizeof why);
        if (st) {
            int none = 0;
            if (atomic_compare_exchange_strong(&j->failed, &none, -1)) {
                j->st = st;
                snprintf(j->msg, sizeof j->msg, "%s", why);
                atomic_store_explicit(&j->failed, 1, memory_order_release);
            }
            return done;
        }
        done++;
    }
}

static void *helper_main(void *arg) {
    spmd__cma_parallel *s = arg;
    if (s->bound_cpu >= 0) {
        /* the caller's core is taken by the caller: any other may be idle */
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        cpu_set_t set;
        CPU_ZERO(&set);
        for (long c = 0; c < n && c < CPU_SETSIZE; c++)
            if (c != s->bound_cpu) CPU_SET((int)c, &set);
        (void)sched_setaffinity(0, sizeof set, &set); /* a cpuset may refuse: stay where we are */
    }
    spmd__wait_slice_thread();
    pthread_mutex_lock(&s->mu);
    for (;;) {
        while (!s->posted && !s->stop) pthread_cond_wait(&s->cv, &s->mu);
        if (s->stop) break;
        job *j = s->posted;
        s->posted = NULL;
        pthread_mutex_unlock(&s->mu);
        unsigned long n = copy_chunks(j);
        atomic_fetch_add_explicit(&s->helped, n, memory_order_relaxed);
        atomic_store_explicit(&j->finished, 1, memory_order_release); /* j may be gone after this */
        pthread_mutex_lock(&s->mu);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

spmd__cma_parallel *spmd__cma_parallel_new(void) {
    spmd__cma_parallel *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    if (sysconf(_SC_NPROCESSORS_ONLN) < 2) s->state = -1; /* no second core to copy on */
    return s;
}

void spmd__cma_parallel_free(spmd__cma_parallel *s) {
    if (!s) return;
    if (s->state == 1) {
        pthread_mutex_lock(&s->mu);
        s->stop = 1;
        pthread_cond_signal(&s->cv);
        pthread_mutex_unlock(&s->mu);
        pthread_join(s->thread, NULL);
    }
    pthread_cond_destroy(&s->cv);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

static int start(spmd__cma_parallel *s) {
    if (s->state) return s->state == 1;
    cpu_set_t mine;
    s->bound_cpu = -1;
    if (sched_getaffinity(0, sizeof mine, &mine) == 0 && CPU_COUNT(&mine) == 1)
        for (int c = 0; c < CPU_SETSIZE; c++)
            if (CPU_ISSET(c, &mine)) s->bound_cpu = c;
    int rc = spmd__thread_start(&s->thread, helper_main, s, "spmd-copy");
    s->state = rc == 0 ? 1 : -1;
    if (rc) spmd__log(SPMD__LOG_INFO, "large receives read by one thread: pthread_create: %s", strerror(rc));
    return rc == 0;
}

spmd_status spmd__cma_read_parallel(spmd__cma_parallel *s, spmd__mesh *m, int peer, void *dst, uint64_t addr,
                                    size_t len, uint64_t seal_addr, uint64_t seal, char *err, size_t errlen) {
    if (!s || len <= CHUNK || m->oversubscribed || !start(s))
        return spmd__cma_read_sealed(m, peer, dst, addr, len, seal_addr, seal, err, errlen);
    job j = {.m = m, .peer = peer, .dst = dst, .addr = addr, .len = len};
    atomic_init(&j.next, 0);
    atomic_init(&j.failed, 0);
    atomic_init(&j.finished, 0);
    pthread_mutex_lock(&s->mu);
    s->posted = &j;
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
    atomic_fetch_add_explicit(&s->jobs, 1, memory_order_relaxed);
    copy_chunks(&j);
    pthread_mutex_lock(&s->mu);
    int taken = s->posted != &j;
    s->posted = NULL;
    pthread_mutex_unlock(&s->mu);
    /* the helper holds at most one chunk now: a copy's time, unless it was
     * preempted; yield in case it waits for this core */
    if (taken)
        while (!atomic_load_explicit(&j.finished, memory_order_acquire)) sched_yield();
    if (atomic_load_explicit(&j.failed, memory_order_acquire))
        return spmd__fail(err, errlen, j.st, "%s", j.msg);
    /* every chunk is in: now the seal says whether it was the sender's buffer throughout */
    return spmd__cma_read_sealed(m, peer, dst, addr, 0, seal_addr, seal, err, errlen);
}

unsigned long spmd__cma_parallel_jobs(const spmd__cma_parallel *s) { return s ? atomic_load(&s->jobs) : 0; }
unsigned long spmd__cma_parallel_helped(const spmd__cma_parallel *s) { return s ? atomic_load(&s->helped) : 0; }
