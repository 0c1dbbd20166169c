/* net.c — socket setup: listen, connect with a deadline, accept, addresses.
 * Every socket is non-blocking, close-on-exec and TCP_NODELAY. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include "common.h"

int spmd__set_sock_opts(int fd) {
    int one = 1;
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0) return -1;
    if (fcntl(fd, F_SETFD, FD_CLOEXEC) < 0) return -1;
    (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one); /* not TCP: ignore */
    return 0;
}

static int resolve(const char *host, int port, int passive, struct addrinfo **res, char *err,
                   size_t errlen) {
    struct addrinfo hints;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = passive ? AI_PASSIVE : 0;
    char portstr[16];
    snprintf(portstr, sizeof portstr, "%d", port);
    int rc = getaddrinfo(host && *host ? host : NULL, portstr, &hints, res);
    if (rc != 0) {
        spmd__fail(err, errlen, SPMD_ERR_INVALID, "cannot resolve '%s': %s", host ? host : "*",
                   gai_strerror(rc));
        return -1;
    }
    return 0;
}

int spmd__listen(const char *host, int port, int backlog, int *bound_port, char *err,
                 size_t errlen) {
    if (port < 0 || port > 65535) {
        spmd__fail(err, errlen, SPMD_ERR_INVALID, "port %d out of range 0..65535", port);
        return -1;
    }
    struct addrinfo *res = NULL;
    if (resolve(host, port, 1, &res, err, errlen)) return -1;
    int fd = -1, saved = 0;
    /* Prefer IPv4 when listening on any address: most peers will dial 127.0.0.1. */
    for (int pass = 0; pass < 2 && fd < 0; pass++) {
        for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
            if ((pass == 0) != (ai->ai_family == AF_INET)) continue;
            fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
            if (fd < 0) { saved = errno; continue; }
            int one = 1;
            setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
            if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && listen(fd, backlog) == 0) break;
            saved = errno;
            close(fd);
            fd = -1;
        }
    }
    freeaddrinfo(res);
    if (fd < 0) {
        spmd__fail_errno(err, errlen, SPMD_ERR_SYSTEM, saved, "listen on %s:%d",
                         host && *host ? host : "*", port);
        return -1;
    }
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    getsockname(fd, (struct sockaddr *)&ss, &sl);
    if (bound_port)
        *bound_port = ss.ss_family == AF_INET6 ? ntohs(((struct sockaddr_in6 *)&ss)->sin6_port)
                                               : ntohs(((struct sockaddr_in *)&ss)->sin_port);
    return fd;
}

static int connect_once(struct addrinfo *ai, int64_t deadline, int *err_out) {
    int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) { *err_out = errno; return -1; }
    int rc = connect(fd, ai->ai_addr, ai->ai_addrlen);
    if (rc < 0 && errno != EINPROGRESS && errno != EINTR) {
        *err_out = errno;
        close(fd);
        return -1;
    }
    if (rc < 0) {
        for (;;) {
            struct pollfd p = {.fd = fd, .events = POLLOUT, .revents = 0};
            int left = spmd__remaining_ms(deadline);
            int r = poll(&p, 1, left);
            if (r < 0 && errno == EINTR) continue;
            if (r <= 0) { *err_out = r == 0 ? ETIMEDOUT : errno; close(fd); return -1; }
            break;
        }
        int soerr = 0;
        socklen_t sl = sizeof soerr;
        getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl);
        if (soerr) { *err_out = soerr; close(fd); return -1; }
    }
    spmd__set_sock_opts(fd);
    return fd;
}

static int connect_until(const char *host, int port, int64_t deadline, int refusal_final, char *err,
                         size_t errlen) {
    struct addrinfo *res = NULL;
    if (resolve(host, port, 0, &res, err, errlen)) return -1;
    int last = ECONNREFUSED;
    long backoff_us = 1000;
    for (;;) {
        for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
            int fd = connect_once(ai, deadline, &last);
            if (fd >= 0) { freeaddrinfo(res); return fd; }
        }
        /* The server may simply not be up yet: retry refused/unreachable until the deadline. */
        if (spmd__remaining_ms(deadline) == 0 || (refusal_final && last == ECONNREFUSED) ||
            !(last == ECONNREFUSED || last == ENETUNREACH || last == EHOSTUNREACH ||
              last == ETIMEDOUT || last == ECONNRESET || last == EAGAIN))
            break;
        struct timespec ts = {0, backoff_us * 1000};
        nanosleep(&ts, NULL);
        if (backoff_us < 100000) backoff_us *= 2;
    }
    freeaddrinfo(res);
    spmd__fail_errno(err, errlen, last == ETIMEDOUT ? SPMD_ERR_TIMEOUT : SPMD_ERR_SYSTEM, last,
                     "connect to %s:%d", host, port);
    return -1;
}

int spmd__connect(const char *host, int port, int64_t deadline, char *err, size_t errlen) {
    return connect_until(host, port, deadline, 0, err, errlen);
}

int spmd__connect_up(const char *host, int port, int64_t deadline, char *err, size_t errlen) {
    return connect_until(host, port, deadline, 1, err, errlen);
}

int spmd__accept(int listen_fd) {
    for (;;) {
        int fd = accept4(listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0 && errno == EINTR) continue;
        if (fd >= 0) spmd__set_sock_opts(fd);
        return fd;
    }
}

spmd_status spmd__local_addr_towards(const char *remote, char *out, size_t outlen) {
    struct addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_DGRAM;
    if (!remote || !*remote || getaddrinfo(remote, "9", &hints, &res) != 0) {
        snprintf(out, outlen, "127.0.0.1");
        return SPMD_OK;
    }
    int ok = 0;
    for (struct addrinfo *ai = res; ai && !ok; ai = ai->ai_next) {
        int fd = socket(ai->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        if (fd < 0) continue;
        /* A UDP connect only picks a route; nothing is sent. */
        if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0) {
            struct sockaddr_storage ss;
            socklen_t sl = sizeof ss;
            if (getsockname(fd, (struct sockaddr *)&ss, &sl) == 0) {
                const void *a = ss.ss_family == AF_INET6
                                    ? (const void *)&((struct sockaddr_in6 *)&ss)->sin6_addr
                                    : (const void *)&((struct sockaddr_in *)&ss)->sin_addr;
                ok = inet_ntop(ss.ss_family, a, out, (socklen_t)outlen) != NULL;
            }
        }
        close(fd);
    }
    freeaddrinfo(res);
    if (!ok) snprintf(out, outlen, "127.0.0.1");
    return SPMD_OK;
}

void spmd__sock_name(int fd, int peer, char *out, size_t outlen) {
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    int rc = peer ? getpeername(fd, (struct sockaddr *)&ss, &sl)
                  : getsockname(fd, (struct sockaddr *)&ss, &sl);
    char ip[INET6_ADDRSTRLEN] = "?";
    int port = 0;
    if (rc == 0 && ss.ss_family == AF_INET) {
        inet_ntop(AF_INET, &((struct sockaddr_in *)&ss)->sin_addr, ip, sizeof ip);
        port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
    } else if (rc == 0 && ss.ss_family == AF_INET6) {
        inet_ntop(AF_INET6, &((struct sockaddr_in6 *)&ss)->sin6_addr, ip, sizeof ip);
        port = ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
    }
    snprintf(out, outlen, "%s:%d", ip, port);
}
