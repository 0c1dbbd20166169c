/* fdpass.c — hand a file descriptor to the other ranks of this host.
 *
 * Each rank listens on an abstract Unix socket named after its pid and a
 * random nonce (nothing in the file system, gone with the process); a peer
 * that connects is served only if the kernel's SO_PEERCRED says it is one of
 * the processes it expects, and gets the descriptor by SCM_RIGHTS with a
 * 32-bit tag (the sender's rank).  Unlike opening /proc/<pid>/fd/<n>, this
 * needs no ptrace permission, so it works under Yama's ptrace_scope=1 and in
 * containers that forbid cross-memory attach.  Abstract sockets belong to a
 * network namespace: ranks in different ones cannot reach each other, and
 * the caller falls back.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>
#include "fdpass.h"
#include "common/common.h"

static socklen_t abstract_addr(struct sockaddr_un *a, int pid, uint64_t nonce) {
    memset(a, 0, sizeof *a);
    a->sun_family = AF_UNIX;
    /* sun_path[0] = 0: the abstract namespace; the name is the bytes after it */
    int n = snprintf(a->sun_path + 1, sizeof a->sun_path - 1, "spmd-fd-%d-%016llx", pid, (unsigned long long)nonce);
    return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
}

int spmd__fdpass_listen(uint64_t nonce, int backlog) {
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    struct sockaddr_un a;
    socklen_t len = abstract_addr(&a, (int)getpid(), nonce);
    if (bind(fd, (struct sockaddr *)&a, len) != 0 || listen(fd, backlog) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

int spmd__fdpass_connect(int pid, uint64_t nonce) {
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    struct sockaddr_un a;
    socklen_t len = abstract_addr(&a, pid, nonce);
    if (connect(fd, (struct sockaddr *)&a, len) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* Wait until fd is readable or the deadline passes; 1 when readable. */
static int wait_readable(int fd, int64_t deadline) {
    for (;;) {
        struct pollfd p = {fd, POLLIN, 0};
        int r = poll(&p, 1, spmd__remaining_ms(deadline));
        if (r > 0) return 1;
        if (r == 0 || errno != EINTR) return 0;
    }
}

int spmd__fdpass_serve(int lfd, int fd, uint32_t tag, const int *pids, int npids, int64_t deadline) {
    int served = 0;
    char done[256] = {0};
    if (npids > (int)sizeof done) return 0;
    while (served < npids) {
        if (!wait_readable(lfd, deadline)) return 0;
        int c = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
        if (c < 0) {
            if (errno == EINTR || errno == EAGAIN || errno == ECONNABORTED) continue;
            return 0;
        }
        struct ucred cred;
        socklen_t cl = sizeof cred;
        int who = -1;
        if (getsockopt(c, SOL_SOCKET, SO_PEERCRED, &cred, &cl) == 0)
            for (int i = 0; i < npids; i++)
                if (pids[i] == (int)cred.pid && !done[i]) who = i;
        if (who < 0) { /* not a process we expect: it gets nothing */
            close(c);
            continue;
        }
        union {
            char buf[CMSG_SPACE(sizeof(int))];
            struct cmsghdr align;
        } ctl;
        memset(&ctl, 0, sizeof ctl);
        struct iovec iov = {&tag, sizeof tag};
        struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf, .msg_controllen = sizeof ctl.buf};
        struct cmsghdr *h = CMSG_FIRSTHDR(&m);
        h->cmsg_level = SOL_SOCKET;
        h->cmsg_type = SCM_RIGHTS;
        h->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(h), &fd, sizeof(int));
        ssize_t n = sendmsg(c, &m, MSG_NOSIGNAL);
        close(c);
        if (n != (ssize_t)sizeof tag) return 0;
        done[who] = 1;
        served++;
    }
    return 1;
}

int spmd__fdpass_receive(int cfd, uint32_t *tag, int64_t deadline) {
    if (!wait_readable(cfd, deadline)) return -1;
    union {
        char buf[CMSG_SPACE(sizeof(int))];
        struct cmsghdr align;
    } ctl;
    uint32_t t = 0;
    struct iovec iov = {&t, sizeof t};
    struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf, .msg_controllen = sizeof ctl.buf};
    ssize_t n;
    do n = recvmsg(cfd, &m, MSG_CMSG_CLOEXEC);
    while (n < 0 && errno == EINTR);
    int fd = -1;
    for (struct cmsghdr *h = CMSG_FIRSTHDR(&m); h; h = CMSG_NXTHDR(&m, h))
        if (h->cmsg_level == SOL_SOCKET && h->cmsg_type == SCM_RIGHTS && h->cmsg_len == CMSG_LEN(sizeof(int)))
            memcpy(&fd, CMSG_DATA(h), sizeof(int));
    if (n != (ssize_t)sizeof t || (m.msg_flags & MSG_CTRUNC)) {
        if (fd >= 0) close(fd);
        return -1;
    }
    *tag = t;
    return fd;
}
