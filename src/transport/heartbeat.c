/* heartbeat.c — who is still alive: the progress thread's periodic tick
 * (heartbeat.h has the scheme).
 *
 * Time line of a frozen rank f watched by rank w, interval I = timeout / 8:
 *
 *   f's last beat        w's tick sees it       w's tick finds no change for > timeout
 *   ----|--------------------|----- ... -----------------|----> detected
 *       (f frozen here)     (last_heard)
 *
 * so the group fails between timeout and timeout + 2 I after f froze.  A
 * watcher whose own progress thread did not run for a while (its process was
 * stopped, the machine starved it) cannot tell who was silent: it starts its
 * count again instead of blaming everyone else.
 */
#define _GNU_SOURCE
#include "heartbeat.h"
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include "path.h"
#include "shm_internal.h"

typedef struct {
    int shm;          /* watched through its segment's beat counter */
    int watched;      /* watched at the last tick */
    uint64_t seen;    /* beat or bytes received at the last tick */
    int64_t heard;    /* monotonic ms when `seen` last changed */
} hb_peer;

struct spmd__hb {
    spmd__mesh *m;
    spmd__hb_ops ops;
    int timeout_ms, interval_ms;
    int64_t next, last_tick;
    _Atomic uint64_t *own_beat;  /* in our segment, or NULL (no shared-memory peer) */
    hb_peer *peer;               /* [world] */
};

int spmd__hb_timeout_ms(void) {
    const char *s = getenv("SPMD_HEARTBEAT_TIMEOUT");
    long ms;
    if (!s || !*s) return SPMD__HEARTBEAT_DEFAULT_MS;
    if (spmd__parse_duration_ms(s, &ms) != SPMD_OK || ms > 24L * 3600 * 1000) {
        SPMD_LOGW("SPMD_HEARTBEAT_TIMEOUT='%s' is not a duration (e.g. 5, 2s, 500ms, 0 for off); using %d ms", s,
                  SPMD__HEARTBEAT_DEFAULT_MS);
        return SPMD__HEARTBEAT_DEFAULT_MS;
    }
    return (int)ms;
}

static int is_shm_peer(const spmd__mesh *m, int i) {
    const spmd__path *p = m->path[SPMD__CH_P2P][i];
    return m->shm && m->shm->peer[i] && p && spmd__path_is_shm(p);
}

/* The kernel ends a connection whose link stops answering: keepalive probes
 * on an idle connection, and TCP_USER_TIMEOUT for unacknowledged data (and
 * for the probes).  Best effort: a socket refusing an option keeps the ring's
 * heartbeats. */
static void keepalive(int fd, int timeout_ms) {
    int one = 1, idle = timeout_ms / 2000 > 0 ? timeout_ms / 2000 : 1, intvl = 1, cnt = 3;
    unsigned int user = (unsigned int)timeout_ms;
    setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof intvl);
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof cnt);
    setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &user, sizeof user);
}

spmd__hb *spmd__hb_start(spmd__mesh *m, const spmd__hb_ops *ops) {
    int timeout = spmd__hb_timeout_ms();
    if (timeout <= 0 || m->world < 2) return NULL;
    spmd__hb *h = calloc(1, sizeof *h);
    if (!h) return NULL;
    h->peer = calloc((size_t)m->world, sizeof *h->peer);
    if (!h->peer) {
        free(h);
        return NULL;
    }
    h->m = m;
    h->ops = *ops;
    h->timeout_ms = timeout;
    h->interval_ms = timeout / 8;
    if (h->interval_ms < 5) h->interval_ms = 5;
    if (h->interval_ms > 1000) h->interval_ms = 1000;
    int64_t now = spmd__now_ms();
    h->next = h->last_tick = now;
    for (int i = 0; i < m->world; i++) {
        if (i == m->rank) continue;
        h->peer[i].shm = is_shm_peer(m, i);
        if (!h->peer[i].shm && m->fd[SPMD__CH_P2P][i] >= 0) keepalive(m->fd[SPMD__CH_P2P][i], timeout);
        if (h->peer[i].shm && !h->own_beat) h->own_beat = &spmd__shm_header(m->shm->own)->beat;
    }
    return h;
}

void spmd__hb_free(spmd__hb *h) {
    if (!h) return;
    free(h->peer);
    free(h);
}

int64_t spmd__hb_due(const spmd__hb *h) { return h->next; }

/* The nearest rank after (step 1) or before (step -1) us that has not left. */
static int ring_neighbour(const spmd__hb *h, int step) {
    const spmd__mesh *m = h->m;
    for (int k = 1; k < m->world; k++) {
        int i = ((m->rank + step * k) % m->world + m->world) % m->world;
        if (!h->ops.gone(h->ops.arg, i)) return i;
    }
    return -1;
}

int spmd__hb_tick(spmd__hb *h, int64_t now, char *msg, size_t msglen) {
    if (now < h->next) return -1;
    const spmd__mesh *m = h->m;
    /* Did our own thread sleep through more than a few ticks?  Then nobody's
     * silence can be judged from here yet. */
    int stalled = now - h->last_tick > h->timeout_ms / 2;
    h->last_tick = now;
    h->next = now + h->interval_ms;
    if (h->own_beat) atomic_fetch_add_explicit(h->own_beat, 1, memory_order_relaxed);
    int succ = ring_neighbour(h, 1), pred = ring_neighbour(h, -1);
    if (succ >= 0 && !h->peer[succ].shm) h->ops.ping(h->ops.arg, succ);
    for (int i = 0; i < m->world; i++) {
        hb_peer *p = &h->peer[i];
        int watch = i != m->rank && !h->ops.gone(h->ops.arg, i) && (p->shm || i == pred);
        if (!watch) {
            p->watched = 0;
            continue;
        }
        uint64_t v = p->shm ? atomic_load_explicit(&spmd__shm_header(m->shm->peer[i])->beat, memory_order_relaxed)
                            : h->ops.rx(h->ops.arg, i);
        if (!p->watched || stalled || v != p->seen) {
            p->watched = 1;
            p->seen = v;
            p->heard = now;
            continue;
        }
        int64_t silent = now - p->heard;
        if (silent > h->timeout_ms) {
            snprintf(msg, msglen,
                     "rank %d has sent no heartbeat for %.1f s (stopped, frozen, or its link is down; "
                     "SPMD_HEARTBEAT_TIMEOUT is %.1f s)",
                     i, (double)silent / 1000.0, (double)h->timeout_ms / 1000.0);
            return i;
        }
    }
    return -1;
}
