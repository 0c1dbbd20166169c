/* path_tcp.c — a path that is the TCP connection itself (see path.h). */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include "common/common.h"
#include "path.h"

static ssize_t tcp_writev(spmd__path *p, const struct iovec *iov, int n) {
    struct msghdr mh;
    memset(&mh, 0, sizeof mh);
    mh.msg_iov = (struct iovec *)(uintptr_t)iov;
    mh.msg_iovlen = (size_t)n;
    return sendmsg(p->fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
}

static ssize_t tcp_read(spmd__path *p, void *buf, size_t len) { return recv(p->fd, buf, len, MSG_DONTWAIT); }

/* A socket needs no announcement: poll sees its bytes. */
static int tcp_arm(spmd__path *p, int reading, int writing) {
    (void)p, (void)reading, (void)writing;
    return 0;
}
static int tcp_disarm(spmd__path *p) { (void)p; return 1; }
static void tcp_lower(spmd__path *p) { (void)p; }
static int tcp_idle(spmd__path *p) { (void)p; return 0; }
static int tcp_pending(spmd__path *p) { (void)p; return 1; }
static void tcp_kick(spmd__path *p) { (void)p; }
static void tcp_free(spmd__path *p) { free(p); }

const spmd__path_ops spmd__path_tcp_ops = {"tcp",    tcp_writev,  tcp_read, tcp_arm,  tcp_disarm,
                                           tcp_lower, tcp_idle, tcp_pending, tcp_kick, tcp_free};

spmd__path *spmd__path_tcp(int fd, int peer) {
    spmd__path *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->ops = &spmd__path_tcp_ops;
    p->fd = fd;
    p->peer = peer;
    return p;
}
