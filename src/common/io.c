/* io.c — read/write exactly len bytes on a non-blocking socket with a
 * deadline and an abort flag (the shape of git's read_in_full, with poll). */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>
#include "common.h"

/* Wait for `events` on fd; wakes at least every 100 ms to look at the abort flag. */
static spmd_status wait_fd(int fd, short events, int64_t deadline, const atomic_int *abort_flag,
                           const char *what, char *err, size_t errlen) {
    for (;;) {
        if (abort_flag && atomic_load(abort_flag))
            return spmd__fail(err, errlen, SPMD_ERR_ABORTED, "%s aborted", what);
        int left = spmd__remaining_ms(deadline);
        if (left == 0) return spmd__fail(err, errlen, SPMD_ERR_TIMEOUT, "%s: deadline passed", what);
        int slice = abort_flag ? 100 : left;
        if (left >= 0 && left < slice) slice = left;
        struct pollfd p = {.fd = fd, .events = events, .revents = 0};
        int r = poll(&p, 1, slice);
        if (r < 0) {
            if (errno == EINTR) continue;
            return spmd__fail_errno(err, errlen, SPMD_ERR_SYSTEM, errno, "%s: poll", what);
        }
        if (r > 0) return SPMD_OK; /* readiness or error: the next syscall tells */
    }
}

spmd_status spmd__write_full(int fd, const void *buf, size_t len, int64_t deadline,
                             const atomic_int *abort_flag, char *err, size_t errlen) {
    const char *p = buf;
    while (len > 0) {
        ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
        if (n > 0) {
            p += n;
            len -= (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            spmd_status st = wait_fd(fd, POLLOUT, deadline, abort_flag, "send", err, errlen);
            if (st) return st;
            continue;
        }
        if (n < 0 && (errno == EPIPE || errno == ECONNRESET))
            return spmd__fail_errno(err, errlen, SPMD_ERR_REMOTE, errno, "send");
        return spmd__fail_errno(err, errlen, SPMD_ERR_SYSTEM, errno, "send");
    }
    return SPMD_OK;
}

spmd_status spmd__read_full(int fd, void *buf, size_t len, int64_t deadline,
                            const atomic_int *abort_flag, char *err, size_t errlen) {
    char *p = buf;
    while (len > 0) {
        ssize_t n = recv(fd, p, len, 0);
        if (n > 0) {
            p += n;
            len -= (size_t)n;
            continue;
        }
        if (n == 0) return spmd__fail(err, errlen, SPMD_ERR_REMOTE, "recv: connection closed by peer");
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) {
            spmd_status st = wait_fd(fd, POLLIN, deadline, abort_flag, "recv", err, errlen);
            if (st) return st;
            continue;
        }
        if (errno == ECONNRESET)
            return spmd__fail_errno(err, errlen, SPMD_ERR_REMOTE, errno, "recv");
        return spmd__fail_errno(err, errlen, SPMD_ERR_SYSTEM, errno, "recv");
    }
    return SPMD_OK;
}
