/* server.c — the store server: one thread, one epoll set, many clients.
 *
 * This file is the loop and the server's life cycle; the key table is
 * table.c, the operations on it ops.c, the clients conn.c (see
 * server_internal.h).  The loop sleeps in epoll_wait until a client is
 * readable or writable, or until the earliest deadline (a parked request's,
 * a handshake's, a paused accept's); then it serves the clients the events
 * name and the work queue (connections woken by a key they waited for).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>
#include "store/server_internal.h"

#define MAX_EVENTS 64

/* ---- fork safety ------------------------------------------------------------
 * spmd_store_server_forget() frees the server in a forked child, where the
 * serving thread no longer exists.  If fork() happened while that thread was in
 * the middle of an update, the child's copy would be half-updated; so
 * pthread_atfork takes every live server's mutex before fork() (the serving
 * thread only holds it between epoll_wait calls, never while blocked). */
static pthread_mutex_t reg_mu = PTHREAD_MUTEX_INITIALIZER;
static spmd_store_server *reg_head;
static pthread_once_t reg_once = PTHREAD_ONCE_INIT;

static void fork_prepare(void) {
    pthread_mutex_lock(&reg_mu);
    for (spmd_store_server *s = reg_head; s; s = s->reg_next) pthread_mutex_lock(&s->mu);
}
static void fork_release(void) {
    for (spmd_store_server *s = reg_head; s; s = s->reg_next) pthread_mutex_unlock(&s->mu);
    pthread_mutex_unlock(&reg_mu);
}
static void reg_init(void) { pthread_atfork(fork_prepare, fork_release, fork_release); }

static void reg_add(spmd_store_server *s) {
    pthread_once(&reg_once, reg_init);
    pthread_mutex_lock(&reg_mu);
    s->reg_next = reg_head;
    reg_head = s;
    pthread_mutex_unlock(&reg_mu);
}
static void reg_remove(spmd_store_server *s) {
    pthread_mutex_lock(&reg_mu);
    for (spmd_store_server **pp = &reg_head; *pp; pp = &(*pp)->reg_next)
        if (*pp == s) {
            *pp = s->reg_next;
            break;
        }
    pthread_mutex_unlock(&reg_mu);
}

/* epoll_wait timeout: until the earliest parked deadline or accept resume. */
static int next_timeout_ms(spmd_store_server *s, uint64_t now) {
    uint64_t best = UINT64_MAX;
    for (conn *c = s->parked; c; c = c->pnext)
        if (c->park_deadline_ns < best) best = c->park_deadline_ns;
    if (s->accept_paused && s->accept_resume_ns < best) best = s->accept_resume_ns;
    if (s->npending > 0)
        for (conn *c = s->conns; c; c = c->next)
            if (!c->hello_done && c->hs_deadline_ns < best) best = c->hs_deadline_ns;
    if (best == UINT64_MAX) return -1;
    if (best <= now) return 0;
    uint64_t ms = (best - now + 999999ull) / 1000000ull; /* round up: never early */
    return ms > INT_MAX ? INT_MAX : (int)ms;
}

spmd_status spmd_store_server_run(spmd_store_server *s) {
    if (!s) return SPMD_ERR_INVALID;
    struct epoll_event evs[MAX_EVENTS];
    spmd_status st = SPMD_OK;
    while (!atomic_load(&s->stop)) {
        int timeout = next_timeout_ms(s, spmd__now_ns());
        int n = epoll_wait(s->epfd, evs, MAX_EVENTS, timeout);
        if (n < 0) {
            if (errno == EINTR) continue;
            SPMD_LOGW("store server: epoll_wait: %s", strerror(errno));
            st = SPMD_ERR_SYSTEM;
            break;
        }
        pthread_mutex_lock(&s->mu);
        for (int i = 0; i < n; i++) {
            void *tag = evs[i].data.ptr;
            if (tag == &s->wakefd) {
                uint64_t v;
                ssize_t r = read(s->wakefd, &v, sizeof v);
                (void)r;
                continue;
            }
            if (tag == &s->lfd) {
                spmd__store_accept_all(s);
                continue;
            }
            conn *c = tag;
            if (c->dead) continue;
            if (evs[i].events & EPOLLOUT) {
                if (spmd__store_flush(s, c)) spmd__store_enqueue(s, c);
            }
            if (!c->dead && c->mem_wait && (evs[i].events & (EPOLLHUP | EPOLLERR))) {
                spmd__store_drop(s, c, 0, "it hung up with a reply waiting for memory");
                continue;
            }
            if (!c->dead && !c->mem_wait &&
                (evs[i].events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)))
                spmd__store_on_readable(s, c);
        }
        uint64_t now = spmd__now_ns();
        spmd__store_expire_parked(s, now);
        if (s->npending > 0) spmd__store_expire_handshakes(s, now);
        if (s->accept_paused && now >= s->accept_resume_ns) {
            struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &s->lfd};
            if (epoll_ctl(s->epfd, EPOLL_CTL_ADD, s->lfd, &ev) == 0) s->accept_paused = 0;
            else s->accept_resume_ns = now + ACCEPT_PAUSE_NS;
        }
        /* Woken and timed-out connections: re-check, flush, read on. */
        for (;;) {
            if (!s->qhead && s->memory_freed && s->waiters) spmd__store_wake_waiters(s);
            if (!s->qhead) break;
            conn *c = s->qhead;
            s->qhead = c->qnext;
            if (!s->qhead) s->qtail = NULL;
            c->queued = 0;
            if (c->dead) continue;
            if (c->parked && c->missing == 0) spmd__store_evaluate_park(s, c);
            if (!c->dead && !c->queued && spmd__store_flush(s, c)) spmd__store_process(s, c);
        }
        while (s->graveyard) {
            conn *c = s->graveyard;
            s->graveyard = c->gnext;
            spmd__store_free_conn(c);
        }
        pthread_mutex_unlock(&s->mu);
    }
    return st;
}

static void *server_main(void *arg) {
    spmd_store_server_run(arg);
    return NULL;
}

void spmd_store_server_interrupt(spmd_store_server *s) {
    if (!s) return;
    atomic_store(&s->stop, 1);
    uint64_t one = 1;
    ssize_t r = write(s->wakefd, &one, sizeof one); /* async-signal-safe */
    (void)r;
}

/* Close every descriptor and free everything; no thread may be running. */
static void destroy(spmd_store_server *s) {
    while (s->conns) {
        conn *c = s->conns;
        s->conns = c->next;
        spmd__store_unpark(s, c);
        close(c->fd);
        spmd__store_free_conn(c);
    }
    while (s->graveyard) {
        conn *c = s->graveyard;
        s->graveyard = c->gnext;
        spmd__store_free_conn(c);
    }
    spmd__store_table_clear(&s->table);
    memset(&s->auth, 0, sizeof s->auth);
    if (s->lfd >= 0) close(s->lfd);
    if (s->epfd >= 0) close(s->epfd);
    if (s->wakefd >= 0) close(s->wakefd);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

spmd_status spmd_store_server_open(const char *host, int port, spmd_store_server **out,
                                   char *err, size_t errlen) {
    if (!out) return spmd__fail(err, errlen, SPMD_ERR_INVALID, "store server: out is NULL");
    spmd_store_server *s = calloc(1, sizeof *s);
    if (!s) return spmd__fail(err, errlen, SPMD_ERR_NOMEM, "store server: out of memory");
    s->lfd = s->epfd = s->wakefd = -1;
    pthread_mutex_init(&s->mu, NULL);
    s->table.seed = spmd__now_ns() ^ (uint64_t)(uintptr_t)s ^ ((uint64_t)getpid() << 32);
    char e2[SPMD__ERRLEN];
    spmd_status st = spmd__store_limits_from_env(&s->lim, e2, sizeof e2);
    if (!st) st = spmd__auth_get(&s->auth, e2, sizeof e2);
    if (st) {
        destroy(s);
        return spmd__fail(err, errlen, st, "store server: %s", e2);
    }
    s->lfd = spmd__listen(host, port, SOMAXCONN, &s->port, e2, sizeof e2);
    if (s->lfd < 0) {
        destroy(s);
        return spmd__fail(err, errlen, SPMD_ERR_SYSTEM, "store server: %s", e2);
    }
    s->epfd = epoll_create1(EPOLL_CLOEXEC);
    s->wakefd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    struct epoll_event el = {.events = EPOLLIN, .data.ptr = &s->lfd};
    struct epoll_event ew = {.events = EPOLLIN, .data.ptr = &s->wakefd};
    if (s->epfd < 0 || s->wakefd < 0 || epoll_ctl(s->epfd, EPOLL_CTL_ADD, s->lfd, &el) ||
        epoll_ctl(s->epfd, EPOLL_CTL_ADD, s->wakefd, &ew)) {
        int e = errno;
        destroy(s);
        return spmd__fail_errno(err, errlen, SPMD_ERR_SYSTEM, e, "store server: epoll setup");
    }
    reg_add(s);
    SPMD_LOGD("store server listening on %s:%d", host && *host ? host : "*", s->port);
    *out = s;
    return SPMD_OK;
}

spmd_status spmd_store_server_start(const char *host, int port, spmd_store_server **out,
                                    char *err, size_t errlen) {
    spmd_store_server *s = NULL;
    spmd_status st = spmd_store_server_open(host, port, &s, err, errlen);
    if (st) return st;
    int rc = pthread_create(&s->thread, NULL, server_main, s);
    if (!rc) pthread_setname_np(s->thread, "spmd-store"); /* top -H, perf, gdb */
    if (rc) {
        reg_remove(s);
        destroy(s);
        return spmd__fail_errno(err, errlen, SPMD_ERR_SYSTEM, rc, "store server: pthread_create");
    }
    s->has_thread = 1;
    *out = s;
    return SPMD_OK;
}

int spmd_store_server_port(const spmd_store_server *s) { return s ? s->port : -1; }

void spmd_store_server_stop(spmd_store_server *s) {
    if (!s) return;
    reg_remove(s);
    spmd_store_server_interrupt(s);
    if (s->has_thread) pthread_join(s->thread, NULL);
    destroy(s);
}

void spmd_store_server_forget(spmd_store_server *s) {
    if (!s) return;
    reg_remove(s);
    destroy(s);
}

void spmd__store_server_stats(const spmd_store_server *s, int *conns, int *parked) {
    if (conns) *conns = atomic_load(&s->nconns);
    if (parked) *parked = atomic_load(&s->nparked);
}

void spmd__store_server_memory(spmd_store_server *s, size_t *peak_bytes, int *replying,
                               int *waiting) {
    pthread_mutex_lock(&s->mu);
    int n = 0;
    for (conn *c = s->conns; c; c = c->next) n += c->out_len > c->out_off;
    *replying = n;
    *waiting = atomic_load(&s->nwaiting);
    *peak_bytes = atomic_load(&s->peak_bytes);
    pthread_mutex_unlock(&s->mu);
}

unsigned spmd__store_server_refusals(spmd_store_server *s, uint64_t *at_ns, char *last, size_t len) {
    pthread_mutex_lock(&s->mu);
    unsigned n = s->nrefused;
    *at_ns = s->refused_ns;
    if (len) snprintf(last, len, "%s", s->refused_last);
    pthread_mutex_unlock(&s->mu);
    return n;
}
