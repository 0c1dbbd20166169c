/* endpoint.c — "host[:port]" endpoints and whether an address is this machine's. */
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "spmdrun.h"

int sr_split_endpoint(const char *ep, char *host, size_t hostlen, int *port, char *err,
                      size_t errlen) {
    const char *h = ep, *p = NULL;
    size_t hl;
    if (ep[0] == '[') { /* [v6]:port */
        const char *close = strchr(ep, ']');
        if (!close) {
            snprintf(err, errlen, "endpoint '%s': missing ']'", ep);
            return -1;
        }
        h = ep + 1;
        hl = (size_t)(close - h);
        if (close[1] == ':') p = close + 2;
        else if (close[1]) {
            snprintf(err, errlen, "endpoint '%s': junk after ']'", ep);
            return -1;
        }
    } else {
        const char *colon = strchr(ep, ':');
        if (colon && strchr(colon + 1, ':')) colon = NULL; /* a bare IPv6 address */
        hl = colon ? (size_t)(colon - ep) : strlen(ep);
        if (colon) p = colon + 1;
    }
    if (hl == 0 || hl >= hostlen) {
        snprintf(err, errlen, "endpoint '%s': empty or overlong host", ep);
        return -1;
    }
    if (p) {
        char *end = NULL;
        long v = strtol(p, &end, 10);
        if (!*p || *end || v < 0 || v > 65535) {
            snprintf(err, errlen, "endpoint '%s': '%s' is not a port number 0..65535", ep, p);
            return -1;
        }
        *port = (int)v;
    }
    memcpy(host, h, hl);
    host[hl] = 0;
    return 0;
}

/* An address is ours when a socket can be bound to it (port 0: nothing is
 * reserved, nothing is sent). */
int sr_is_local_address(const char *host) {
    struct addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    if (getaddrinfo(host, "0", &hints, &res) != 0) return 0;
    int local = 0;
    for (struct addrinfo *ai = res; ai && !local; ai = ai->ai_next) {
        int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0) continue;
        local = bind(fd, ai->ai_addr, ai->ai_addrlen) == 0;
        close(fd);
    }
    freeaddrinfo(res);
    return local;
}
