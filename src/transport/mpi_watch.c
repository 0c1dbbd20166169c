/* mpi_watch.c — what every part of a mesh over MPI waits with: the
 * process's MPI (thread level, the lock below MPI_THREAD_MULTIPLE, error
 * text), waiting without blocking in MPI (poll, then sleep), and the
 * group's failure state: notices between the ranks and the pidfd watch of
 * the peers under this kernel (why, at the top of mpi_link.c).  It calls
 * nothing of mpi_link.c, mpi_p2p.c or mpi_xfer.c. */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#include "common/fnv.h"
#include "mpi_internal.h"

#define NOTICE_MAGIC 0x4e4d5053u /* "SPMN" */
#define NOTICE_HDR 24
enum { N_ABORT = 1, N_LOST = 2 }; /* N_LOST: an abort of a process that knows a rank died */
#define CHECK_EVERY_NS 1000000ull   /* notices: every millisecond of waiting */
#define LIVE_GRACE_MS 200           /* a dying peer's own notice (the cause) may trail its exit */
/* How long a waiter keeps calling MPI before it sleeps (in slices growing
 * to a millisecond): a straggling peer is seen by then, and MPI moves bytes
 * only while someone calls it (Open MPI has no progress thread). */
#define POLL_NS 20000000ull

/* ---- the process's MPI ------------------------------------------------------- */

static atomic_int level_ = -1;
static atomic_int rank_lost_; /* a rank of the job died (seen by any group, or told) */

int spmd__mpi_rank_lost(void) { return atomic_load(&rank_lost_); }
static pthread_mutex_t big_lock = PTHREAD_MUTEX_INITIALIZER;

void spmd__mpi_set_level(int provided) { atomic_store(&level_, provided); }
int spmd__mpi_level(void) { return atomic_load(&level_); }

const char *spmd__mpi_level_name(int level) {
    if (level == MPI_THREAD_MULTIPLE) return "MPI_THREAD_MULTIPLE";
    if (level == MPI_THREAD_SERIALIZED) return "MPI_THREAD_SERIALIZED";
    if (level == MPI_THREAD_FUNNELED) return "MPI_THREAD_FUNNELED";
    if (level == MPI_THREAD_SINGLE) return "MPI_THREAD_SINGLE";
    return "unknown";
}

void spmd__mpi_lock(void) {
    if (atomic_load_explicit(&level_, memory_order_relaxed) != MPI_THREAD_MULTIPLE) pthread_mutex_lock(&big_lock);
}
void spmd__mpi_unlock(void) {
    if (atomic_load_explicit(&level_, memory_order_relaxed) != MPI_THREAD_MULTIPLE) pthread_mutex_unlock(&big_lock);
}

void spmd__mpi_errstr(int rc, char *out, size_t len) {
    char s[MPI_MAX_ERROR_STRING];
    int n = 0;
    if (MPI_Error_string(rc, s, &n) != MPI_SUCCESS) n = snprintf(s, sizeof s, "MPI error %d", rc);
    snprintf(out, len, "%.*s", n, s);
}

/* ---- waiting ---------------------------------------------------------------------- */

void spmd__mpi_idle_init(spmd__mpi_idle *s, const spmd__mesh *m) {
    s->since = 0;
    s->polls = 0;
    s->sleep_ns = 0;
    s->yield = m->oversubscribed;
}

/* A waiter keeps calling MPI for POLL_NS, then sleeps in slices that grow to
 * a millisecond.  It yields between calls only when ranks outnumber cores
 * (a peer may need this core to send what we wait for).  Otherwise a yield
 * helps nothing we wait for and costs a scheduler slice whenever another
 * process wants the core (a busy machine): the peer ranks then wait for
 * this one's next call into MPI (yielding after 200 us, a group over MPI
 * took 5.4 ms for a 256 KiB all_reduce that MPI_Allreduce did in 0.86 ms
 * on a loaded machine: issue 28).
 * The scheduler still shares the core fairly; sleeping bounds what a long
 * wait takes from the others. */
void spmd__mpi_idle_step(spmd__mpi_idle *s, const spmd__mesh *m) {
    (void)m;
    /* spinning: the clock now and then, first at the 16th poll (most waits
     * of a small collective end before it) */
    if (!s->sleep_ns && ++s->polls % SPMD__MPI_CLOCK_EVERY) {
        if (s->yield) sched_yield();
        return;
    }
    uint64_t now = spmd__now_ns();
    if (!s->since) s->since = now;
    if (now - s->since < POLL_NS) {
        if (s->yield) sched_yield();
        return;
    }
    s->sleep_ns = s->sleep_ns ? s->sleep_ns * 2 : 50000;
    if (s->sleep_ns > 1000000) s->sleep_ns = 1000000;
    struct timespec ts = {0, s->sleep_ns};
    nanosleep(&ts, NULL);
}

void spmd__mpi_abandon(MPI_Request *reqs, int n) {
    if (n <= 0) return;
    int fin = 0;
    MPI_Finalized(&fin);
    if (fin) return;
    spmd__mpi_lock();
    for (int i = 0; i < n; i++)
        if (reqs[i] != MPI_REQUEST_NULL) MPI_Cancel(&reqs[i]);
    spmd__mpi_unlock();
    int64_t until = spmd__now_ms() + 100;
    for (;;) {
        int done = 0;
        spmd__mpi_lock();
        MPI_Testall(n, reqs, &done, MPI_STATUSES_IGNORE);
        spmd__mpi_unlock();
        if (done || spmd__now_ms() >= until) break;
        sched_yield();
    }
    spmd__mpi_lock();
    for (int i = 0; i < n; i++)
        if (reqs[i] != MPI_REQUEST_NULL) MPI_Request_free(&reqs[i]);
    spmd__mpi_unlock();
}

spmd_status spmd__mpi_wait_coll(spmd__coll_ctx *c, MPI_Request *reqs, int n, const char *what) {
    spmd__mpi_link *l = spmd__mpi_of(c->m);
    spmd__mpi_idle idle;
    spmd__mpi_idle_init(&idle, c->m);
    char msg[SPMD__ERRLEN];
    for (unsigned it = 0;; it++) {
        int done = 0;
        spmd__mpi_lock();
        int rc = MPI_Testall(n, reqs, &done, MPI_STATUSES_IGNORE);
        spmd__mpi_unlock();
        if (rc != MPI_SUCCESS) {
            spmd__mpi_errstr(rc, msg, sizeof msg);
            /* a failed collective's requests are not ours to cancel (MPI forbids it) */
            return spmd__coll_fail(c, SPMD_ERR_REMOTE, "%s #%u on rank %d: MPI reports: %s", what, c->seq,
                                   c->m->rank, msg);
        }
        if (done) return SPMD_OK;
        spmd_status st = spmd__mpi_check(l, 0, msg, sizeof msg);
        if (st) return spmd__coll_fail(c, st, "%s", msg);
        if ((it & 63) == 63 && spmd__ctx_left_ms(c) == 0)
            return spmd__coll_fail(c, SPMD_ERR_TIMEOUT,
                                   "%s #%u timed out on rank %d (MPI's collective did not complete: a rank "
                                   "is missing, frozen or dead)",
                                   what, c->seq, c->m->rank);
        spmd__mpi_idle_step(&idle, c->m);
    }
}

/* ---- notices --------------------------------------------------------------------- */

/* Queue a notice to `peer` (ctrl_mu held). */
static void send_notice(spmd__mpi_link *l, int peer, int kind, spmd_status st, const char *text) {
    if (l->nout == l->capout) {
        int cap = l->capout ? 2 * l->capout : 8;
        spmd__mpi_out *o = realloc(l->out, sizeof *o * (size_t)cap);
        if (!o) return;
        l->out = o;
        l->capout = cap;
    }
    char *buf = calloc(1, SPMD__MPI_NOTICE_BYTES);
    if (!buf) return;
    unsigned char *h = (unsigned char *)buf;
    spmd__put_u32(h, NOTICE_MAGIC);
    spmd__put_u32(h + 4, (uint32_t)kind);
    spmd__put_u32(h + 8, (uint32_t)(int32_t)st);
    spmd__put_u32(h + 12, (uint32_t)l->m->rank);
    spmd__put_u64(h + 16, l->instance);
    snprintf(buf + NOTICE_HDR, SPMD__MPI_NOTICE_BYTES - NOTICE_HDR, "%s", text ? text : "");
    int len = NOTICE_HDR + (int)strlen(buf + NOTICE_HDR) + 1;
    spmd__mpi_out *o = &l->out[l->nout];
    spmd__mpi_lock();
    int rc = MPI_Isend(buf, len, MPI_BYTE, peer, SPMD__MPI_NOTICE_TAG, l->ctrl, &o->req);
    spmd__mpi_unlock();
    if (rc != MPI_SUCCESS) {
        free(buf);
        return;
    }
    o->buf = buf;
    l->nout++;
}

/* Forget our notices that have gone out (ctrl_mu held). */
void spmd__mpi_reap_notices(spmd__mpi_link *l) {
    int k = 0;
    for (int i = 0; i < l->nout; i++) {
        int done = 0;
        spmd__mpi_lock();
        MPI_Test(&l->out[i].req, &done, MPI_STATUS_IGNORE);
        spmd__mpi_unlock();
        if (done) free(l->out[i].buf);
        else l->out[k++] = l->out[i];
    }
    l->nout = k;
}

/* Ranks seen dead get no notice: Open MPI's TCP transport would try to
 * reach them, warn, and could hold MPI_Finalize on the attempt.  A process
 * that knows a rank died says so (N_LOST), so every rank knows MPI_Finalize
 * would wait for it (spmd__mpi_rank_lost). */
void spmd__mpi_tell_peers(spmd__mesh *m, spmd_status st, const char *msg) {
    spmd__mpi_link *l = spmd__mpi_of(m);
    if (!l) return;
    const int kind = atomic_load(&rank_lost_) ? N_LOST : N_ABORT;
    pthread_mutex_lock(&l->ctrl_mu);
    for (int r = 0; r < m->world; r++)
        if (r != m->rank && !l->exit_seen_ms[r]) send_notice(l, r, kind, st, msg);
    pthread_mutex_unlock(&l->ctrl_mu);
}

/* One notice arrived (ctrl_mu held): an abort of this group is returned
 * (status, text in why) for the caller to fail the group with. */
static spmd_status take_notice(spmd__mpi_link *l, const MPI_Status *s, char *why, size_t whylen) {
    int n = 0;
    MPI_Get_count(s, MPI_BYTE, &n);
    const unsigned char *h = (const unsigned char *)l->ctrl_in;
    if (n < NOTICE_HDR || spmd__get_u32(h) != NOTICE_MAGIC || spmd__get_u64(h + 16) != l->instance) return SPMD_OK;
    int kind = (int)spmd__get_u32(h + 4), from = s->MPI_SOURCE;
    if (from < 0 || from >= l->m->world) return SPMD_OK;
    if (kind != N_ABORT && kind != N_LOST) return SPMD_OK;
    l->ctrl_in[SPMD__MPI_NOTICE_BYTES - 1] = 0;
    int code = (int32_t)spmd__get_u32(h + 8);
    if (kind == N_LOST) atomic_store(&rank_lost_, 1);
    snprintf(why, whylen, "rank %d reported: %s", from, l->ctrl_in + NOTICE_HDR);
    return code < 0 && code > -100 ? (spmd_status)code : SPMD_ERR_ABORTED;
}

int spmd__mpi_post_notice_recv(spmd__mpi_link *l) {
    spmd__mpi_lock();
    int rc = MPI_Irecv(l->ctrl_in, SPMD__MPI_NOTICE_BYTES, MPI_BYTE, MPI_ANY_SOURCE, SPMD__MPI_NOTICE_TAG, l->ctrl,
                       &l->ctrl_req);
    spmd__mpi_unlock();
    return rc;
}

/* ---- liveness of the peers under this kernel ---------------------------------------- */

/* 1 when local peer r's process has exited. */
static int peer_exited(spmd__mpi_link *l, int r) {
    if (l->pidfd[r] >= 0) {
        struct pollfd p = {.fd = l->pidfd[r], .events = POLLIN, .revents = 0};
        return poll(&p, 1, 0) == 1;
    }
    return kill(l->pid[r], 0) != 0 && errno == ESRCH;
}

/* A watched peer's process is gone: the message, or 0 (ctrl_mu held). */
static int find_dead(spmd__mpi_link *l, char *why, size_t whylen) {
    int64_t now = spmd__now_ms();
    for (int r = 0; r < l->m->world; r++) {
        if (!l->pid[r] || r == l->m->rank || !peer_exited(l, r)) continue;
        if (!l->exit_seen_ms[r]) {
            l->exit_seen_ms[r] = now; /* a notice naming the cause may still come */
            continue;
        }
        if (now - l->exit_seen_ms[r] < LIVE_GRACE_MS) continue;
        snprintf(why, whylen, "rank %d died (its process %d on this host is gone)", r, l->pid[r]);
        atomic_store(&rank_lost_, 1);
        return 1;
    }
    return 0;
}

spmd_status spmd__mpi_check(spmd__mpi_link *l, int force, char *msg, size_t msglen) {
    spmd__mesh *m = l->m;
    spmd_status st = spmd__mesh_check(m, msg, msglen);
    if (st) return st;
    static _Thread_local unsigned polls; /* the clock below once in SPMD__MPI_CLOCK_EVERY calls */
    if (!force && polls++ % SPMD__MPI_CLOCK_EVERY) return SPMD_OK;
    uint64_t now = spmd__now_ns();
    if (!force && now < __atomic_load_n(&l->next_check_ns, __ATOMIC_RELAXED)) return SPMD_OK;
    if (pthread_mutex_trylock(&l->ctrl_mu)) return SPMD_OK; /* another thread is looking */
    __atomic_store_n(&l->next_check_ns, now + CHECK_EVERY_NS, __ATOMIC_RELAXED);
    char why[SPMD__ERRLEN];
    spmd_status fail = SPMD_OK;
    int tell = 0;
    while (l->ctrl_req != MPI_REQUEST_NULL) {
        int got = 0;
        MPI_Status s;
        spmd__mpi_lock();
        int rc = MPI_Test(&l->ctrl_req, &got, &s);
        spmd__mpi_unlock();
        if (rc != MPI_SUCCESS) {
            char e[256];
            spmd__mpi_errstr(rc, e, sizeof e);
            snprintf(why, sizeof why, "rank %d: MPI failed on the group's notices: %s", m->rank, e);
            fail = SPMD_ERR_SYSTEM;
            tell = 1;
            break;
        }
        if (!got) break;
        fail = take_notice(l, &s, why, sizeof why);
        if (spmd__mpi_post_notice_recv(l) != MPI_SUCCESS) l->ctrl_req = MPI_REQUEST_NULL;
        if (fail) break;
    }
    if (l->nout) spmd__mpi_reap_notices(l);
    if (!fail && find_dead(l, why, sizeof why)) {
        fail = SPMD_ERR_REMOTE;
        tell = 1;
    }
    pthread_mutex_unlock(&l->ctrl_mu);
    if (fail) spmd__mesh_fail(m, fail, tell, "%s", why);
    return spmd__mesh_check(m, msg, msglen);
}
