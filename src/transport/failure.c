/* failure.c — a mesh's life cycle and its failure state.
 *
 * A mesh fails as a whole, once: the first failure is recorded with its
 * message, the CMA token changes (so a peer reading our memory after this
 * can tell, cma.c), the failure eventfd becomes readable (every waiter
 * polls it), an abort notice goes to every live peer when asked, and every
 * pending point-to-point operation fails.  Later calls see the same message. */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <unistd.h>
#include "mesh.h"
#include "path.h"

spmd_status spmd__mesh_init(spmd__mesh *m, int rank, int world) {
    m->rank = rank;
    m->world = world;
    m->local_world = 1;
    m->fail_eventfd = -1;
    m->fail_culprit = -1;
    atomic_store(&m->clock_ms, spmd__now_ms());
    pthread_mutex_init(&m->fail_mu, NULL);
    for (int c = 0; c < SPMD__NCHAN; c++) {
        m->fd[c] = malloc(sizeof(int) * (size_t)world);
        m->path[c] = calloc((size_t)world, sizeof(spmd__path *));
        if (!m->fd[c] || !m->path[c]) goto fail;
        for (int i = 0; i < world; i++) m->fd[c][i] = -1;
    }
    m->peer_left = calloc((size_t)world, sizeof(atomic_int));
    m->fail_eventfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (!m->peer_left || m->fail_eventfd < 0) goto fail;
    return SPMD_OK;
fail:
    spmd__mesh_close(m);
    return SPMD_ERR_NOMEM;
}

void spmd__mesh_close(spmd__mesh *m) {
    for (int c = 0; c < SPMD__NCHAN; c++) {
        for (int i = 0; m->path[c] && i < m->world; i++) {
            if (m->path[c][i]) spmd__path_free(m->path[c][i]);
            m->path[c][i] = NULL;
        }
        for (int i = 0; m->fd[c] && i < m->world; i++)
            if (m->fd[c][i] >= 0) close(m->fd[c][i]);
        free(m->fd[c]);
        free(m->path[c]);
        m->fd[c] = NULL;
        m->path[c] = NULL;
    }
    spmd__shm_link_free(m->shm);
    m->shm = NULL;
    free(m->topo.member);
    m->topo.member = NULL;
    if (m->fail_eventfd >= 0) close(m->fail_eventfd);
    m->fail_eventfd = -1;
    free(m->peer_left);
    free(m->cma);
    m->peer_left = NULL;
    m->cma = NULL;
    pthread_mutex_destroy(&m->fail_mu);
}

int64_t spmd__mesh_deadline(const spmd__mesh *m) { return spmd__deadline(m->timeout_ms); }

int spmd__mesh_mark_failed(spmd__mesh *m, spmd_status st, const char *msg) {
    return spmd__mesh_mark_failed_by(m, st, -1, msg);
}

int spmd__mesh_mark_failed_by(spmd__mesh *m, spmd_status st, int culprit, const char *msg) {
    pthread_mutex_lock(&m->fail_mu);
    int first = atomic_load(&m->failed) == 0;
    if (first) {
        snprintf(m->fail_msg, sizeof m->fail_msg, "%s", msg);
        m->fail_culprit = culprit >= 0 && culprit < m->world ? culprit : -1;
        /* the flight record is written before anyone sees the failure */
        if (m->on_fail) m->on_fail(m->hook_arg, st, m->fail_culprit, msg);
        /* peers reading our buffers by CMA must not trust them any more (cma.c) */
        __atomic_store_n(&m->cma_token, ~m->cma_token, __ATOMIC_SEQ_CST);
        atomic_store(&m->failed, (int)st);
        uint64_t one = 1;
        ssize_t r = write(m->fail_eventfd, &one, sizeof one);
        (void)r;
    }
    pthread_mutex_unlock(&m->fail_mu);
    if (first) SPMD_LOGI("group %s failed on rank %d: %s", m->name, m->rank, msg);
    return first;
}

static void fail_v(spmd__mesh *m, spmd_status st, int culprit, int tell_peers, const char *fmt, va_list ap) {
    char buf[SPMD__ERRLEN];
    vsnprintf(buf, sizeof buf, fmt, ap);
    if (!spmd__mesh_mark_failed_by(m, st, culprit, buf)) return;
    if (tell_peers && m->tell_peers) m->tell_peers(m, st, buf);
    if (m->fail_pending) m->fail_pending(m, st, buf);
}

void spmd__mesh_fail(spmd__mesh *m, spmd_status st, int tell_peers, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fail_v(m, st, -1, tell_peers, fmt, ap);
    va_end(ap);
}

void spmd__mesh_fail_by(spmd__mesh *m, spmd_status st, int culprit, int tell_peers, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fail_v(m, st, culprit, tell_peers, fmt, ap);
    va_end(ap);
}

spmd_status spmd__mesh_check(spmd__mesh *m, char *msg, size_t msglen) {
    int f = atomic_load(&m->failed);
    if (!f) return SPMD_OK;
    pthread_mutex_lock(&m->fail_mu);
    snprintf(msg, msglen, "group is broken: %s", m->fail_msg);
    pthread_mutex_unlock(&m->fail_mu);
    return (spmd_status)f;
}
