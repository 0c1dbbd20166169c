/* mesh.c — every rank connects to every lower rank and accepts every higher
 * one; the store tells each rank where the others listen.  Dependencies only
 * point downwards (rank r waits for ranks < r to accept), so there is no cycle:
 * rank 0 only accepts. */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "transport.h"

/* How long an accepted connection may take to send its hello before we drop
 * it: a silent stray client must not stall the mesh. */
#define HELLO_GRACE_MS 2000

static const char *verdict_text(uint32_t v) {
    switch (v) {
    case SPMD__HELLO_OK: return "ok";
    case SPMD__HELLO_BAD_JOB: return "belongs to another job (job id differs)";
    case SPMD__HELLO_BAD_RANK: return "rank or channel out of range";
    case SPMD__HELLO_DUPLICATE: return "rank already connected (duplicate rank?)";
    case SPMD__HELLO_BAD_WORLD: return "world size differs";
    }
    return "unknown verdict";
}

static void close_all(int **fds, int nchan, int world) {
    for (int c = 0; c < nchan; c++)
        for (int p = 0; p < world; p++)
            if (fds[c][p] >= 0) { close(fds[c][p]); fds[c][p] = -1; }
}

static spmd_status connect_lower(spmd_store *store, int rank, int world, uint64_t job_id,
                                 int nchan, int peer, int **fds, int64_t deadline, char *err,
                                 size_t errlen) {
    char key[32];
    snprintf(key, sizeof key, "addr/%d", peer);
    void *val = NULL;
    size_t len = 0;
    spmd_status st = spmd_store_get(store, key, &val, &len);
    if (st)
        return spmd__fail(err, errlen, st, "waiting for rank %d's address in the store: %s", peer,
                          spmd_store_errmsg(store));
    int port = 0;
    char host[256];
    if (sscanf((const char *)val, "%d %255s", &port, host) != 2 || port <= 0 || port > 65535) {
        free(val);
        return spmd__fail(err, errlen, SPMD_ERR_PROTOCOL, "rank %d published a bad address", peer);
    }
    free(val);
    for (int c = 0; c < nchan; c++) {
        char cerr[SPMD__ERRLEN];
        int fd = spmd__connect(host, port, deadline, cerr, sizeof cerr);
        if (fd < 0) return spmd__fail(err, errlen, SPMD_ERR_REMOTE, "rank %d: %s", peer, cerr);
        unsigned char hello[SPMD__HELLO_LEN], verdict[4];
        spmd__hello h = {job_id, (uint32_t)rank, (uint32_t)world, (uint32_t)c};
        spmd__hello_encode(&h, hello);
        st = spmd__write_full(fd, hello, sizeof hello, deadline, NULL, cerr, sizeof cerr);
        if (!st) st = spmd__read_full(fd, verdict, sizeof verdict, deadline, NULL, cerr, sizeof cerr);
        if (st) {
            close(fd);
            return spmd__fail(err, errlen, st, "handshake with rank %d at %s:%d: %s", peer, host, port,
                              cerr);
        }
        uint32_t v = spmd__get_u32(verdict);
        if (v != SPMD__HELLO_OK) {
            close(fd);
            return spmd__fail(err, errlen, v == SPMD__HELLO_DUPLICATE ? SPMD_ERR_INVALID : SPMD_ERR_MISMATCH,
                              "rank %d refused rank %d's connection: %s", peer, rank, verdict_text(v));
        }
        fds[c][peer] = fd;
    }
    return SPMD_OK;
}

/* Read and judge one hello; returns 1 if the connection was kept. */
static int accept_one(int lfd, int rank, int world, uint64_t job_id, int nchan, int **fds,
                      int64_t deadline) {
    int fd = spmd__accept(lfd);
    if (fd < 0) return 0;
    char cerr[SPMD__ERRLEN], who[80];
    spmd__sock_name(fd, 1, who, sizeof who);
    unsigned char buf[SPMD__HELLO_LEN];
    int64_t d = spmd__now_ms() + HELLO_GRACE_MS;
    if (d > deadline) d = deadline;
    spmd__hello h;
    spmd_status st = spmd__read_full(fd, buf, sizeof buf, d, NULL, cerr, sizeof cerr);
    if (!st) st = spmd__hello_decode(buf, &h, cerr, sizeof cerr);
    if (st) {
        SPMD_LOGW("rank %d: dropped a connection from %s: %s", rank, who, cerr);
        close(fd);
        return 0;
    }
    uint32_t verdict = SPMD__HELLO_OK;
    if (h.job_id != job_id) verdict = SPMD__HELLO_BAD_JOB;
    else if (h.world != (uint32_t)world) verdict = SPMD__HELLO_BAD_WORLD;
    else if (h.rank <= (uint32_t)rank || h.rank >= (uint32_t)world || h.channel >= (uint32_t)nchan)
        verdict = SPMD__HELLO_BAD_RANK;
    else if (fds[h.channel][h.rank] >= 0) verdict = SPMD__HELLO_DUPLICATE;
    unsigned char v[4];
    spmd__put_u32(v, verdict);
    st = spmd__write_full(fd, v, sizeof v, d, NULL, cerr, sizeof cerr);
    if (verdict != SPMD__HELLO_OK || st) {
        SPMD_LOGW("rank %d: refused a connection from %s claiming rank %u: %s", rank, who, h.rank,
                  verdict != SPMD__HELLO_OK ? verdict_text(verdict) : cerr);
        close(fd);
        return 0;
    }
    fds[h.channel][h.rank] = fd;
    return 1;
}

spmd_status spmd__mesh_build(spmd_store *store, int rank, int world, uint64_t job_id, int nchan,
                             const char *bind_host, int **fds, int64_t deadline, char *err,
                             size_t errlen) {
    for (int c = 0; c < nchan; c++)
        for (int p = 0; p < world; p++) fds[c][p] = -1;
    if (world <= 1) return SPMD_OK;
    int port = 0;
    int lfd = spmd__listen(bind_host, 0, 512, &port, err, errlen);
    if (lfd < 0) return SPMD_ERR_SYSTEM;
    char key[32], val[300];
    snprintf(key, sizeof key, "addr/%d", rank);
    snprintf(val, sizeof val, "%d %s", port, bind_host);
    spmd_status st = spmd_store_set(store, key, val, strlen(val));
    if (st) {
        close(lfd);
        return spmd__fail(err, errlen, st, "publishing rank %d's address: %s", rank,
                          spmd_store_errmsg(store));
    }
    for (int p = 0; p < rank && !st; p++)
        st = connect_lower(store, rank, world, job_id, nchan, p, fds, deadline, err, errlen);
    int expected = (world - 1 - rank) * nchan, got = 0;
    while (!st && got < expected) {
        struct pollfd pfd = {.fd = lfd, .events = POLLIN, .revents = 0};
        int left = spmd__remaining_ms(deadline);
        int r = left == 0 ? 0 : poll(&pfd, 1, left);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            char missing[200] = "";
            size_t used = 0;
            for (int p = rank + 1; p < world && used + 12 < sizeof missing; p++)
                if (fds[0][p] < 0) used += (size_t)snprintf(missing + used, sizeof missing - used, " %d", p);
            st = spmd__fail(err, errlen, SPMD_ERR_TIMEOUT,
                            "rank %d: timed out waiting for rank(s)%s to connect", rank, missing);
            break;
        }
        got += accept_one(lfd, rank, world, job_id, nchan, fds, deadline);
    }
    close(lfd);
    if (st) close_all(fds, nchan, world);
    return st;
}
