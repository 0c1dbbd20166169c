/* src/transport/path.h — how one channel to one peer moves bytes.
 *
 * A path is a non-blocking byte stream in each direction with the calling
 * conventions of send/recv, so the framing above it (p2p_engine.c, xfer.c)
 * does not care which kind it drives:
 *   writev  bytes written (> 0), or -1 with errno (EAGAIN: nothing fits now)
 *   read    bytes read (> 0), 0 when the peer closed, or -1 with errno
 *           (EAGAIN: nothing there now)
 *
 * Kinds: "tcp" (path_tcp.c, the connection itself), "tcp+aes-gcm"
 * (path_sealed.c, the connection encrypted, SPMD_ENCRYPT=1) and "shm"
 * (shm_ring.c, a pair of single-producer/single-consumer rings in shared
 * memory; no system call on the fast path).  Every path keeps its TCP
 * connection: it is what a waiter sleeps on (poll/epoll) and how a dead
 * peer is noticed (the kernel closes it).  A shared-memory writer whose
 * reader went to sleep wakes it with one byte on that connection (a
 * doorbell).
 *
 * Sleeping on a path, for a thread that found nothing to do:
 *   spmd__path_arm(p, reading, writing)
 *                        announce the sleep (waiting for bytes, for room to
 *                        write); returns 1 when there is something to do after
 *                        all (do not sleep)
 *   poll/epoll on p->fd for POLLIN (a TCP path writing: POLLOUT too)
 *   spmd__path_disarm(p) after waking: stand down, drain doorbells; 0 when
 *                        the peer closed its connection, else 1
 *   spmd__path_lower(p)  stand down as reader without sleeping (a thread
 *                        that polls the path itself needs no doorbell)
 *   spmd__path_idle(p)   a sleeper that waits for nothing on this path: the
 *                        writer rings only once the ring is half full (so
 *                        unexpected messages get drained); returns 1 when it
 *                        already is
 *   spmd__path_pending(p) bytes may be there to read (no system call; a TCP
 *                        path cannot tell and says 1)
 *   spmd__path_kick(p)   ring the doorbell whatever the flags say (an abort
 *                        notice must wake a reader that waits for nothing)
 *
 * After writev says EAGAIN (or writes less than offered), the caller offers
 * the bytes it has not written again, first: it may not put other bytes
 * before them (an encrypted path has sealed them already).
 */
#ifndef SPMD_TRANSPORT_PATH_H
#define SPMD_TRANSPORT_PATH_H

#include <errno.h>
#include <stddef.h>
#include <string.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>
#include "spmd/status.h"

typedef struct spmd__path spmd__path;
typedef struct spmd__shm_link spmd__shm_link;
struct spmd__mesh;

typedef struct {
    const char *name;
    ssize_t (*writev)(spmd__path *p, const struct iovec *iov, int iovcnt);
    ssize_t (*read)(spmd__path *p, void *buf, size_t len);
    int (*arm)(spmd__path *p, int reading, int writing);
    int (*disarm)(spmd__path *p);
    void (*lower)(spmd__path *p);
    int (*idle)(spmd__path *p);
    int (*pending)(spmd__path *p);
    void (*kick)(spmd__path *p);
    void (*free)(spmd__path *p);
    /* Copy up to len bytes that read would return, without consuming them:
     * bytes copied, 0 when the peer closed, -1 with errno (EAGAIN: none).
     * Optional (NULL: never any); desync.c peeks at waiting headers. */
    ssize_t (*peek)(spmd__path *p, void *buf, size_t len);
} spmd__path_ops;

struct spmd__path {
    const spmd__path_ops *ops;
    int fd;      /* the TCP connection (not owned: the mesh closes it) */
    int peer;
    /* Set by the p2p engine around arm/idle while its progress thread naps
     * (it looks at every ring again within a nap, 1-8 ms, p2p_progress.c): a
     * wake-up lost to the plain fence then costs that nap at worst, so an arm
     * need not pay the slow fence (shm_ring.c). */
    int nap;
};

static inline ssize_t spmd__path_writev(spmd__path *p, const struct iovec *iov, int n) {
    return p->ops->writev(p, iov, n);
}
static inline ssize_t spmd__path_read(spmd__path *p, void *buf, size_t len) { return p->ops->read(p, buf, len); }
static inline int spmd__path_arm(spmd__path *p, int reading, int writing) {
    return p->ops->arm(p, reading, writing);
}
static inline void spmd__path_lower(spmd__path *p) { p->ops->lower(p); }
static inline int spmd__path_disarm(spmd__path *p) { return p->ops->disarm(p); }
static inline int spmd__path_idle(spmd__path *p) { return p->ops->idle(p); }
static inline int spmd__path_pending(spmd__path *p) { return p->ops->pending(p); }
static inline void spmd__path_kick(spmd__path *p) { p->ops->kick(p); }
static inline void spmd__path_free(spmd__path *p) { p->ops->free(p); }
static inline ssize_t spmd__path_peek(spmd__path *p, void *buf, size_t len) {
    if (p->ops->peek) return p->ops->peek(p, buf, len);
    errno = EAGAIN;
    return -1;
}

/* A TCP path over connection fd (path_tcp.c); NULL when out of memory. */
spmd__path *spmd__path_tcp(int fd, int peer);
extern const spmd__path_ops spmd__path_tcp_ops;
/* An encrypted TCP path (path_sealed.c) with this side's sending and
 * receiving keys (auth/seal.h); NULL when out of memory. */
#define SPMD__SEAL_MAX (32u * 1024u) /* plaintext bytes per record */
spmd__path *spmd__path_sealed(int fd, int peer, const unsigned char tx_key[32], const unsigned char rx_key[32]);
extern const spmd__path_ops spmd__path_sealed_ops;
static inline int spmd__path_is_shm(const spmd__path *p) {
    return p->ops != &spmd__path_tcp_ops && p->ops != &spmd__path_sealed_ops;
}
/* strerror for what a path's calls report (EBADMSG: an encrypted record
 * failed its check). */
static inline const char *spmd__path_strerror(int err) {
    return err == EBADMSG ? "an encrypted record failed authentication (tampered with, replayed, reordered "
                            "or truncated on the way)"
                          : strerror(err);
}

/* ---- shared-memory rings (shm_link.c) ----------------------------------
 * Collective over the mesh's idle collective channel, after CMA's
 * negotiation (which tells which peers run under this kernel): every rank
 * creates its inbound rings in one memfd, hands it to its same-kernel peers
 * over abstract Unix sockets (fdpass.h), maps theirs, and each pair agrees
 * whether both directions work.  Then every channel of such a pair moves to
 * rings; the others keep TCP.  mode: 0 TCP only, 1 shared memory where
 * possible, 2 shared memory required for every same-kernel pair (an error
 * otherwise). */
spmd_status spmd__shm_link_setup(struct spmd__mesh *m, int mode, int64_t deadline, char *err, size_t errlen);
void spmd__shm_link_free(spmd__shm_link *l);
/* Peers reached by shared memory (0 when none). */
int spmd__shm_link_peers(const spmd__shm_link *l);
/* Bytes of each ring (0 when none). */
size_t spmd__shm_ring_bytes(const spmd__shm_link *l);
/* A waiter about to spin on `peer` (-1: any peer): 1 when that peer last
 * waited on the CPU we run on now, so spinning would keep it off the core it
 * needs (the scheduler put both ranks on one core; spin yielding then).  Also
 * publishes our own CPU for the peers' waits.  No system call. */
int spmd__shm_shares_cpu(spmd__shm_link *l, int peer);
/* A shm path's records, for a reader that handles a whole frame in place
 * (p2p_quick.c), under the reader's lock: spmd__shm_record gives the
 * unread record at the reader's position (its bytes, *len of them) or NULL
 * (none, or one partly read); spmd__shm_record_done consumes it.  A writer's
 * spmd__shm_write_whole writes the iov's bytes as one record, or nothing
 * (-1, EAGAIN) when they do not fit now. */
const unsigned char *spmd__shm_record(spmd__path *p, size_t *len);
void spmd__shm_record_done(spmd__path *p);
ssize_t spmd__shm_write_whole(spmd__path *p, const struct iovec *iov, int n);

#endif
