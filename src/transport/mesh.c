/* mesh.c — every rank connects to every lower rank and accepts every higher
 * one; the store tells each rank where the others listen.  Dependencies only
 * point downwards (rank r waits for ranks < r to accept), so there is no cycle:
 * rank 0 only accepts.  Handshake and its rules: transport.h. */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include "auth/ratelimit.h"
#include "auth/seal.h"
#include "mesh.h"
#include "transport.h"

/* Connections judged at once; past this the oldest pending one is dropped. */
#define MAX_PENDING 64
#define DEFAULT_HANDSHAKE_MS 3000

static const char *verdict_text(uint32_t v) {
    switch (v) {
    case SPMD__HELLO_OK: return "ok";
    case SPMD__HELLO_BAD_JOB: return "belongs to another job (job id differs)";
    case SPMD__HELLO_BAD_RANK: return "rank or channel out of range";
    case SPMD__HELLO_DUPLICATE: return "rank already connected (duplicate rank?)";
    case SPMD__HELLO_BAD_WORLD: return "world size differs";
    case SPMD__HELLO_AUTH_REQUIRED:
        return "no job secret (the job authenticates; set SPMD_AUTH_TOKEN or SPMD_AUTH_FILE)";
    case SPMD__HELLO_AUTH_FAILED: return "wrong job secret";
    case SPMD__HELLO_NO_ENCRYPTION: return "encryption (SPMD_ENCRYPT=1) wanted on one side, impossible on the other";
    }
    return "unknown verdict";
}

static int handshake_ms(void) {
    long v = DEFAULT_HANDSHAKE_MS;
    spmd__env_int("SPMD_HANDSHAKE_TIMEOUT_MS", 50, 600000, &v);
    return (int)v;
}

static void close_all(int **fds, int nchan, int world) {
    for (int c = 0; c < nchan; c++)
        for (int p = 0; p < world; p++)
            if (fds[c][p] >= 0) { close(fds[c][p]); fds[c][p] = -1; }
}

/* One connection to a lower rank: SPMD_ERR_REMOTE when the acceptor closed
 * before its verdict (it may have shed us under a flood: worth a retry). */
/* This side's keys of a connection: the connector sends with the
 * connector-to-acceptor key.  first = hello | nonce_c. */
static spmd_status link_keys(const spmd__auth *a, const unsigned char *first, const unsigned char *nonce_s,
                             int connector, spmd__link_keys *k) {
    unsigned char c2a[32], a2c[32];
    spmd_status st = spmd__auth_link_keys(a, first + SPMD__HELLO_LEN, nonce_s, first, SPMD__HELLO_LEN, c2a, a2c);
    if (st) return st;
    k->on = 1;
    memcpy(k->tx, connector ? c2a : a2c, 32);
    memcpy(k->rx, connector ? a2c : c2a, 32);
    spmd__auth_wipe(c2a, sizeof c2a);
    spmd__auth_wipe(a2c, sizeof a2c);
    return SPMD_OK;
}

static spmd_status connect_once(const spmd__auth *a, const char *host, int port, int rank,
                                int world, uint64_t job_id, int c, int peer, int *out,
                                spmd__link_keys *keys, int64_t deadline, char *err, size_t errlen) {
    char cerr[SPMD__ERRLEN];
    int fd = spmd__connect(host, port, deadline, cerr, sizeof cerr);
    if (fd < 0) return spmd__fail(err, errlen, SPMD_ERR_TIMEOUT, "rank %d: %s", peer, cerr);
    unsigned char first[SPMD__MESH_FIRST_LEN], reply[SPMD__MESH_REPLY_LEN];
    unsigned char proof[SPMD__MESH_PROOF_LEN], verdict[4];
    const int want = keys && keys->on; /* keys->on on entry: this side wants encryption */
    spmd__hello h = {job_id, (uint32_t)rank, (uint32_t)world, (uint32_t)c,
                     (a->on ? SPMD__MESH_FLAG_AUTH : 0u) | (want ? SPMD__MESH_FLAG_ENCRYPT : 0u)};
    spmd__hello_encode(&h, first);
    spmd_status st = spmd__auth_random(first + SPMD__HELLO_LEN, SPMD__AUTH_NONCE);
    if (st) snprintf(cerr, sizeof cerr, "no randomness for a nonce");
    if (!st) st = spmd__write_full(fd, first, sizeof first, deadline, NULL, cerr, sizeof cerr);
    if (!st) st = spmd__read_full(fd, reply, sizeof reply, deadline, NULL, cerr, sizeof cerr);
    if (!st) st = spmd__mesh_hs_prove(a, first, reply, proof, cerr, sizeof cerr);
    if (!st) st = spmd__write_full(fd, proof, sizeof proof, deadline, NULL, cerr, sizeof cerr);
    if (!st) st = spmd__read_full(fd, verdict, sizeof verdict, deadline, NULL, cerr, sizeof cerr);
    if (st) {
        close(fd);
        return spmd__fail(err, errlen, st, "handshake with rank %d at %s:%d: %s", peer, host, port,
                          cerr);
    }
    uint32_t v = spmd__get_u32(verdict);
    if (v != SPMD__HELLO_OK) {
        close(fd);
        return spmd__fail(err, errlen,
                          v == SPMD__HELLO_DUPLICATE ? SPMD_ERR_INVALID
                          : v >= SPMD__HELLO_AUTH_REQUIRED ? SPMD_ERR_PROTOCOL
                                                           : SPMD_ERR_MISMATCH,
                          "rank %d refused rank %d's connection: %s", peer, rank, verdict_text(v));
    }
    if (want || (spmd__get_u32(reply) & SPMD__MESH_FLAG_ENCRYPT)) {
        if (!keys || link_keys(a, first, reply + 4, 1, keys)) {
            close(fd);
            return spmd__fail(err, errlen, SPMD_ERR_PROTOCOL, "rank %d wants an encrypted link with rank %d, %s",
                              peer, rank, keys ? "but no keys could be derived" : "which this side cannot provide");
        }
    }
    *out = fd;
    return SPMD_OK;
}

static spmd_status connect_lower(const spmd__auth *a, spmd_store *store, int rank, int world,
                                 uint64_t job_id, int nchan, int peer, int **fds, spmd__link_keys *keys,
                                 int64_t deadline, char *err, size_t errlen) {
    char key[32];
    snprintf(key, sizeof key, "addr/%d", peer);
    void *val = NULL;
    size_t len = 0;
    spmd_status st = spmd_store_get(store, key, &val, &len);
    if (st)
        return spmd__fail(err, errlen, st, "waiting for rank %d's address in the store: %s", peer,
                          spmd_store_errmsg(store));
    if (len && ((const char *)val)[0] == '!') { /* the rendezvous was called off: "!why" */
        st = spmd__fail(err, errlen, SPMD_ERR_ABORTED, "rank %d: the rendezvous failed: %.*s", rank,
                        (int)(len - 1), (const char *)val + 1);
        free(val);
        return st;
    }
    int port = 0;
    char host[256];
    if (sscanf((const char *)val, "%d %255s", &port, host) != 2 || port <= 0 || port > 65535) {
        free(val);
        return spmd__fail(err, errlen, SPMD_ERR_PROTOCOL, "rank %d published a bad address", peer);
    }
    free(val);
    for (int c = 0; c < nchan; c++) {
        for (;;) {
            st = connect_once(a, host, port, rank, world, job_id, c, peer, &fds[c][peer],
                              keys ? &keys[c * world + peer] : NULL, deadline, err, errlen);
            if (st != SPMD_ERR_REMOTE || spmd__remaining_ms(deadline) == 0) break;
            struct timespec ts = {0, 20 * 1000 * 1000};
            nanosleep(&ts, NULL);
        }
        if (st == SPMD_ERR_TIMEOUT && spmd__remaining_ms(deadline) != 0) st = SPMD_ERR_REMOTE;
        if (st) return st;
    }
    return SPMD_OK;
}

/* ---- the acceptor: every pending connection judged at once ------------------ */
typedef struct {
    int fd;
    int stage; /* 0: reading the first 64 bytes; 1: reading the proof */
    size_t got;
    int64_t deadline;
    unsigned char first[SPMD__MESH_FIRST_LEN];
    unsigned char proof[SPMD__MESH_PROOF_LEN];
    unsigned char nonce_s[32];
    char who[80];
} pending;

typedef struct {
    const spmd__auth *a;
    int rank, world, nchan;
    uint64_t job_id;
    int **fds;
    spmd__link_keys *keys; /* NULL: no encryption possible */
    int want_encrypt;
    pending p[MAX_PENDING];
    int n;
    spmd__ratelimit refusals;
} acceptor;

static void forget(acceptor *ac, int i, const char *why, const char *detail) {
    if (why && spmd__ratelimit_ok(&ac->refusals, "mesh listener")) SPMD_LOGW("rank %d: dropped a connection from %s: %s%s", ac->rank, ac->p[i].who, why,
                       detail ? detail : "");
    close(ac->p[i].fd);
    ac->p[i] = ac->p[--ac->n];
}

static void send_verdict(acceptor *ac, int i, uint32_t verdict, const spmd__hello *h) {
    pending *p = &ac->p[i];
    unsigned char v[4];
    spmd__put_u32(v, verdict);
    char cerr[SPMD__ERRLEN];
    spmd_status st = spmd__write_full(p->fd, v, sizeof v, p->deadline, NULL, cerr, sizeof cerr);
    if (verdict != SPMD__HELLO_OK || st) {
        if (spmd__ratelimit_ok(&ac->refusals, "mesh listener"))
            SPMD_LOGW("rank %d: refused a connection from %s claiming rank %u: %s", ac->rank,
                      p->who, h->rank, verdict != SPMD__HELLO_OK ? verdict_text(verdict) : cerr);
        forget(ac, i, NULL, NULL);
        return;
    }
    ac->fds[h->channel][h->rank] = p->fd;
    ac->p[i] = ac->p[--ac->n];
}

/* Read what arrived on pending connection i and move it on; returns 1 when a
 * connection joined the mesh. */
static int advance(acceptor *ac, int i) {
    pending *p = &ac->p[i];
    unsigned char *buf = p->stage == 0 ? p->first : p->proof;
    size_t want = p->stage == 0 ? SPMD__MESH_FIRST_LEN : SPMD__MESH_PROOF_LEN;
    ssize_t r = recv(p->fd, buf + p->got, want - p->got, MSG_DONTWAIT);
    if (r == 0) {
        forget(ac, i, "closed during the handshake", NULL);
        return 0;
    }
    if (r < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return 0;
        forget(ac, i, "recv: ", strerror(errno));
        return 0;
    }
    p->got += (size_t)r;
    if (p->got < want) return 0;
    char cerr[SPMD__ERRLEN];
    spmd__hello h;
    if (spmd__hello_decode(p->first, &h, cerr, sizeof cerr)) {
        forget(ac, i, cerr, NULL);
        return 0;
    }
    if (p->stage == 0) {
        unsigned char reply[SPMD__MESH_REPLY_LEN];
        int hs = spmd__mesh_hs_reply(ac->a, p->first, p->nonce_s, reply);
        if (!hs && ac->want_encrypt) spmd__put_u32(reply, spmd__get_u32(reply) | SPMD__MESH_FLAG_ENCRYPT);
        if (hs ||
            spmd__write_full(p->fd, reply, sizeof reply, p->deadline, NULL, cerr, sizeof cerr)) {
            forget(ac, i, "could not send the challenge", NULL);
            return 0;
        }
        p->stage = 1;
        p->got = 0;
        return 0;
    }
    uint32_t verdict = spmd__mesh_hs_check(ac->a, p->first, p->nonce_s, p->proof);
    if (verdict == SPMD__HELLO_OK) {
        if (h.job_id != ac->job_id) verdict = SPMD__HELLO_BAD_JOB;
        else if (h.world != (uint32_t)ac->world) verdict = SPMD__HELLO_BAD_WORLD;
        else if (h.rank <= (uint32_t)ac->rank || h.rank >= (uint32_t)ac->world ||
                 h.channel >= (uint32_t)ac->nchan)
            verdict = SPMD__HELLO_BAD_RANK;
        else if (ac->fds[h.channel][h.rank] >= 0) verdict = SPMD__HELLO_DUPLICATE;
    }
    if (verdict == SPMD__HELLO_OK && (ac->want_encrypt || (h.flags & SPMD__MESH_FLAG_ENCRYPT))) {
        if (!ac->keys) verdict = SPMD__HELLO_NO_ENCRYPTION;
        else if (link_keys(ac->a, p->first, p->nonce_s, 0, &ac->keys[h.channel * ac->world + h.rank])) {
            forget(ac, i, "could not derive the link's keys", NULL);
            return 0;
        }
    }
    send_verdict(ac, i, verdict, &h);
    return verdict == SPMD__HELLO_OK;
}

static void take_new(acceptor *ac, int lfd, int hs_ms) {
    for (;;) {
        int fd = spmd__accept(lfd);
        if (fd < 0) return;
        if (ac->n == MAX_PENDING) { /* the oldest has had the longest to speak */
            int old = 0;
            for (int i = 1; i < ac->n; i++)
                if (ac->p[i].deadline < ac->p[old].deadline) old = i;
            forget(ac, old, "too many connections in their handshake", NULL);
        }
        pending *p = &ac->p[ac->n++];
        memset(p, 0, sizeof *p);
        p->fd = fd;
        p->deadline = spmd__now_ms() + hs_ms;
        spmd__sock_name(fd, 1, p->who, sizeof p->who);
    }
}

spmd_status spmd__mesh_build(spmd_store *store, int rank, int world, uint64_t job_id, int nchan,
                             const char *bind_host, int **fds, spmd__link_keys *keys,
                             const struct spmd__rdzv_watch *watch, int64_t deadline, char *err,
                             size_t errlen) {
    for (int c = 0; c < nchan; c++)
        for (int p = 0; p < world; p++) fds[c][p] = -1;
    const int want_encrypt = keys && spmd__transport_wants_encrypt();
    if (keys)
        for (int k = 0; k < nchan * world; k++) keys[k] = (spmd__link_keys){.on = want_encrypt};
    if (world <= 1) return SPMD_OK;
    static spmd__auth zero_auth;
    spmd__auth *a = malloc(sizeof *a);
    acceptor *ac = calloc(1, sizeof *ac);
    if (!a || !ac) {
        free(a);
        free(ac);
        return spmd__fail(err, errlen, SPMD_ERR_NOMEM, "rank %d: out of memory", rank);
    }
    char aerr[SPMD__ERRLEN];
    spmd_status st = spmd__auth_get(a, aerr, sizeof aerr);
    if (st) {
        free(a);
        free(ac);
        return spmd__fail(err, errlen, st, "rank %d: %s", rank, aerr);
    }
    if (want_encrypt && !a->on) {
        *a = zero_auth;
        free(a);
        free(ac);
        return spmd__fail(err, errlen, SPMD_ERR_INVALID,
                          "rank %d: SPMD_ENCRYPT=1 needs the job secret, and this process has none (%s)", rank,
                          spmd__auth_disabled() ? "SPMD_AUTH=off" : "set SPMD_AUTH_TOKEN or SPMD_AUTH_FILE");
    }
    int port = 0;
    int lfd = spmd__listen(bind_host, 0, 512, &port, err, errlen);
    if (lfd < 0) {
        *a = zero_auth;
        free(a);
        free(ac);
        return SPMD_ERR_SYSTEM;
    }
    char key[32], val[300];
    snprintf(key, sizeof key, "addr/%d", rank);
    snprintf(val, sizeof val, "%d %s", port, bind_host);
    st = spmd_store_set(store, key, val, strlen(val));
    if (st)
        st = spmd__fail(err, errlen, st, "publishing rank %d's address: %s", rank,
                        spmd_store_errmsg(store));
    for (int p = 0; p < rank && !st; p++)
        st = connect_lower(a, store, rank, world, job_id, nchan, p, fds, keys, deadline, err, errlen);
    *ac = (acceptor){.a = a, .rank = rank, .world = world, .nchan = nchan, .job_id = job_id,
                     .fds = fds, .keys = keys, .want_encrypt = want_encrypt};
    int expected = (world - 1 - rank) * nchan, got = 0, hs_ms = handshake_ms();
    struct pollfd pfd[MAX_PENDING + 1];
    int64_t next_check = spmd__now_ms() + 1000;
    while (!st && got < expected) {
        int64_t now = spmd__now_ms(), wake = deadline;
        if (watch && watch->check && now >= next_check) {
            int missing[256], nm = 0;
            for (int p = rank + 1; p < world && nm < 256; p++)
                if (fds[0][p] < 0) missing[nm++] = p;
            char why[SPMD__ERRLEN / 2] = "";
            if (nm && watch->check(watch->arg, missing, nm, why, sizeof why)) {
                st = spmd__fail(err, errlen, SPMD_ERR_ABORTED, "rank %d: %s", rank, why);
                break;
            }
            next_check = now + 1000;
        }
        if (watch && watch->check && next_check < wake) wake = next_check;
        for (int i = 0; i < ac->n;) {
            if (ac->p[i].deadline <= now) {
                char d[64];
                snprintf(d, sizeof d, "%d ms (SPMD_HANDSHAKE_TIMEOUT_MS)", hs_ms);
                forget(ac, i, "no complete handshake within ", d);
                continue;
            }
            if (ac->p[i].deadline < wake) wake = ac->p[i].deadline;
            i++;
        }
        pfd[0] = (struct pollfd){.fd = lfd, .events = POLLIN};
        for (int i = 0; i < ac->n; i++) pfd[i + 1] = (struct pollfd){.fd = ac->p[i].fd, .events = POLLIN};
        int left = spmd__remaining_ms(deadline);
        int until = wake == deadline ? left : (int)(wake - now);
        if (left >= 0 && until > left) until = left;
        int r = left == 0 ? 0 : poll(pfd, (nfds_t)ac->n + 1, until);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0 || (r == 0 && spmd__remaining_ms(deadline) == 0)) {
            char missing[200] = "";
            size_t used = 0;
            for (int p = rank + 1; p < world && used + 12 < sizeof missing; p++)
                if (fds[0][p] < 0) used += (size_t)snprintf(missing + used, sizeof missing - used, " %d", p);
            st = spmd__fail(err, errlen, SPMD_ERR_TIMEOUT,
                            "rank %d: timed out waiting for rank(s)%s to connect", rank, missing);
            break;
        }
        /* Walk backwards: advance() may move the last entry into slot i. */
        int n = ac->n;
        for (int i = n - 1; i >= 0; i--)
            if (pfd[i + 1].revents) got += advance(ac, i);
        if (pfd[0].revents & POLLIN) take_new(ac, lfd, hs_ms);
    }
    while (ac->n) forget(ac, 0, NULL, NULL);
    close(lfd);
    *a = zero_auth; /* wipe the secret's copy */
    free(a);
    free(ac);
    if (st) {
        close_all(fds, nchan, world);
        if (keys) spmd__auth_wipe(keys, sizeof *keys * (size_t)nchan * (size_t)world);
    }
    return st;
}
