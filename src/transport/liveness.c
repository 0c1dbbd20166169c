/* liveness.c — the local failure detector: which peers are gone, as far as
 * this rank can see by itself.  Every pair keeps its TCP p2p connection,
 * even when it talks through rings, so a peer's death always shows here as
 * its kernel closing that connection (POLLRDHUP), whatever still waits
 * unread in it.  A silent (stopped) peer is only known through the failure
 * the heartbeats recorded, which blames it. */
#define _GNU_SOURCE
#include <poll.h>
#include "liveness.h"

int spmd__mesh_peer_gone(spmd__mesh *m, int peer) {
    if (peer < 0 || peer >= m->world || peer == m->rank) return 0;
    if (m->peer_left && atomic_load(&m->peer_left[peer])) return 1;
    if (m->ext || !m->fd[SPMD__CH_P2P]) return 0;
    int fd = m->fd[SPMD__CH_P2P][peer];
    if (fd < 0) return 0;
    struct pollfd p = {.fd = fd, .events = POLLRDHUP};
    return poll(&p, 1, 0) == 1 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR));
}

int spmd__mesh_blamed_dead(spmd__mesh *m) {
    int st = atomic_load(&m->failed);
    if (st != SPMD_ERR_REMOTE && st != SPMD_ERR_TIMEOUT) return -1;
    pthread_mutex_lock(&m->fail_mu);
    int c = m->fail_culprit;
    pthread_mutex_unlock(&m->fail_mu);
    return c;
}

int spmd__mesh_failed_ranks(spmd__mesh *m, int *ranks, int max) {
    int blamed = spmd__mesh_blamed_dead(m), n = 0;
    for (int r = 0; r < m->world; r++) {
        if (r == m->rank || (r != blamed && !spmd__mesh_peer_gone(m, r))) continue;
        if (ranks && n < max) ranks[n] = r;
        n++;
    }
    return n;
}
