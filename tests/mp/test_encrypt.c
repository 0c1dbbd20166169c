/* SPMD_ENCRYPT=1 end to end (issue 13 point 2): two ranks over TCP on
 * loopback (SPMD_TRANSPORT=tcp), rank 1's connections to rank 0 passing
 * through a forwarder in rank 1's process — before joining, rank 1 points
 * rank 0's published address in the store at the forwarder, which relays
 * both directions and keeps a copy of every byte.
 *
 *   clean, encrypted   broadcast of text from rank 1, p2p text both ways
 *                      (eager and rendezvous), an exact all_reduce: all
 *                      correct, and the text appears nowhere in what
 *                      crossed the sockets;
 *   clean, plaintext   the same with encryption off: the text does appear
 *                      (so the capture above would have seen it);
 *   tampered           one bit flipped in rank 1's next record to rank 0,
 *                      on the collective channel during an all_reduce, or
 *                      on the p2p channel during a send: rank 0's call
 *                      fails naming rank 1 and the failed authentication,
 *                      and rank 1's fails too — no wrong result, no hang. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/socket.h>
#include "common/common.h"
#include "harness.h"
#include "mp_fork.h"
#include "spmd/group.h"

enum { CLEAN_PLAIN, CLEAN_SEALED, TAMPER_COLL, TAMPER_P2P, NMODES };
static const char *MODE[] = {"clean, plaintext", "clean, encrypted", "tampered collective", "tampered p2p"};

#define CANARY "spmd-canary-TEXT-must-not-leak."
#define CAPTURE (8u << 20)

/* ---- the forwarder ------------------------------------------------------------ */
typedef struct {
    int in, out;         /* read from, write to */
    unsigned char buf[65536];
    size_t len, off;
    int chan;            /* the mesh channel (from the hello), -1 until known */
    size_t seen;         /* bytes relayed */
    int to_rank0;        /* rank 1 -> rank 0 */
} dir;

typedef struct {
    int lfd, port, rank0_port;
    pthread_t thread;
    atomic_int stop;
    atomic_int tamper;   /* channel whose next rank-1 byte to flip, -1: none */
    atomic_int tampered;
    unsigned char *cap;  /* every byte relayed, both directions */
    size_t caplen;
} tap;

static int pump(tap *t, dir *d, dir *back) {
    if (d->len == d->off && d->in >= 0) {
        ssize_t n = recv(d->in, d->buf, sizeof d->buf, MSG_DONTWAIT);
        if (n == 0) {
            shutdown(d->out, SHUT_WR);
            d->in = -1;
        }
        if (n <= 0) return 0;
        if (d->to_rank0 && d->chan < 0 && d->seen == 0 && n >= 28) d->chan = (int)spmd__get_u32(d->buf + 24);
        if (d->chan >= 0 && back->chan < 0) back->chan = d->chan;
        if (d->to_rank0 && d->chan >= 0 && atomic_load(&t->tamper) == d->chan && d->seen >= 200) {
            d->buf[n / 2] ^= 0x10; /* inside the record's ciphertext */
            atomic_store(&t->tamper, -1);
            atomic_store(&t->tampered, 1);
        }
        if (t->caplen + (size_t)n <= CAPTURE) memcpy(t->cap + t->caplen, d->buf, (size_t)n), t->caplen += (size_t)n;
        d->seen += (size_t)n;
        d->len = (size_t)n;
        d->off = 0;
    }
    if (d->off < d->len) {
        ssize_t n = send(d->out, d->buf + d->off, d->len - d->off, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (n > 0) d->off += (size_t)n;
        return n > 0;
    }
    return 0;
}

static void *tap_main(void *arg) {
    tap *t = arg;
    dir d[4]; /* two connections, two directions each */
    int nconn = 0;
    while (!atomic_load(&t->stop)) {
        struct pollfd p[5];
        int np = 0;
        p[np++] = (struct pollfd){.fd = t->lfd, .events = POLLIN};
        for (int i = 0; i < 2 * nconn; i++)
            p[np++] = (struct pollfd){.fd = d[i].in, .events = (short)(d[i].off < d[i].len ? 0 : POLLIN)};
        poll(p, (nfds_t)np, 5);
        if ((p[0].revents & POLLIN) && nconn < 2) {
            int a = accept(t->lfd, NULL, NULL);
            char err[128];
            int b = a < 0 ? -1 : spmd__connect("127.0.0.1", t->rank0_port, spmd__deadline(5000), err, sizeof err);
            if (a >= 0 && b >= 0) {
                fcntl(a, F_SETFL, O_NONBLOCK);
                fcntl(b, F_SETFL, O_NONBLOCK);
                dir *up = &d[2 * nconn], *down = &d[2 * nconn + 1];
                *up = (dir){.in = a, .out = b, .chan = -1, .to_rank0 = 1};
                *down = (dir){.in = b, .out = a, .chan = -1, .to_rank0 = 0};
                nconn++;
            }
        }
        for (int i = 0; i < 2 * nconn; i++) pump(t, &d[i], &d[i ^ 1]);
    }
    for (int i = 0; i < 2 * nconn; i++)
        if (d[i].to_rank0) close(d[i].out), close(d[i ^ 1].out);
    return NULL;
}

/* Put the forwarder between rank 1 and rank 0: wait for rank 0's address in
 * the store, publish ours instead. */
static int tap_start(tap *t) {
    const char *host = getenv("MASTER_ADDR");
    int port = atoi(getenv("MASTER_PORT"));
    spmd_store *s = NULL;
    char err[256];
    if (spmd_store_connect(host, port, 20000, &s, err, sizeof err)) {
        fprintf(stderr, "rank 1: store: %s\n", err);
        return -1;
    }
    static const char key[] = "spmd/enc/0/default//addr/0"; /* the group's prefix, then "/" */
    void *val = NULL;
    size_t len = 0;
    if (spmd_store_get(s, key, &val, &len)) {
        fprintf(stderr, "rank 1: %s: %s\n", key, spmd_store_errmsg(s));
        return -1;
    }
    t->rank0_port = atoi(val);
    free(val);
    t->lfd = spmd__listen("127.0.0.1", 0, 8, &t->port, err, sizeof err);
    if (t->lfd < 0) return -1;
    t->cap = malloc(CAPTURE);
    atomic_store(&t->tamper, -1);
    char v[64];
    snprintf(v, sizeof v, "%d 127.0.0.1", t->port);
    if (!t->cap || spmd_store_set(s, key, v, strlen(v))) return -1;
    spmd_store_close(s);
    return pthread_create(&t->thread, NULL, tap_main, t) ? -1 : 0;
}

static void tap_stop(tap *t) {
    atomic_store(&t->stop, 1);
    pthread_join(t->thread, NULL);
    close(t->lfd);
}

/* ---- the ranks ---------------------------------------------------------------- */
#define FAIL(...)                                                          \
    do {                                                                   \
        fprintf(stderr, "rank %d (%s): ", rank, MODE[mode]);               \
        fprintf(stderr, __VA_ARGS__);                                      \
        fprintf(stderr, " [%s]\n", g ? spmd_group_errmsg(g) : "");         \
        return 1;                                                          \
    } while (0)

static void text(char *b, size_t n) {
    for (size_t i = 0; i < n; i++) b[i] = CANARY[i % (sizeof CANARY - 1)];
}

static int rank_main(int rank, void *arg) {
    const int mode = *(const int *)arg;
    setenv("SPMD_TRANSPORT", "tcp", 1);
    setenv("SPMD_ENCRYPT", mode == CLEAN_PLAIN ? "0" : "1", 1);
    tap t;
    memset(&t, 0, sizeof t);
    spmd_group *g = NULL;
    if (rank == 1 && tap_start(&t)) FAIL("cannot start the forwarder");
    char err[512];
    if (spmd_group_init(NULL, &g, err, sizeof err)) FAIL("group init: %s", err);
    if (strcmp(spmd_group_backend(g), mode == CLEAN_PLAIN ? "tcp" : "tcp+aes-gcm"))
        FAIL("backend %s", spmd_group_backend(g));
    enum { BIG = 256 * 1024, P2P = 100 * 1000, SMALL = 100 };
    char *big = malloc(BIG), *want = malloc(BIG);
    if (!big || !want) FAIL("out of memory");
    text(want, BIG);
    /* broadcast from rank 1, p2p both ways (rendezvous and eager), all_reduce */
    if (rank == 1) memcpy(big, want, BIG);
    else memset(big, 0, BIG);
    if (spmd_broadcast(g, big, BIG, SPMD_U8, 1) || memcmp(big, want, BIG)) FAIL("broadcast");
    for (int sz = P2P; sz >= SMALL; sz /= 1000) {
        if (rank == 1) {
            if (spmd_send(g, want, (size_t)sz, SPMD_U8, 0, 5) || spmd_recv(g, big, (size_t)sz, SPMD_U8, 0, 6, NULL))
                FAIL("p2p %d bytes", sz);
        } else {
            memset(big, 0, (size_t)sz);
            if (spmd_recv(g, big, (size_t)sz, SPMD_U8, 1, 5, NULL) || memcmp(big, want, (size_t)sz) ||
                spmd_send(g, want, (size_t)sz, SPMD_U8, 1, 6))
                FAIL("p2p %d bytes", sz);
        }
        if (rank == 1 && memcmp(big, want, (size_t)sz)) FAIL("p2p %d bytes back", sz);
    }
    float v[4096];
    for (int i = 0; i < 4096; i++) v[i] = (float)(rank + i);
    if (spmd_all_reduce(g, v, v, 4096, SPMD_F32, SPMD_SUM)) FAIL("all_reduce");
    for (int i = 0; i < 4096; i++)
        if (v[i] != (float)(1 + 2 * i)) FAIL("all_reduce: v[%d] = %g", i, (double)v[i]);
    if (spmd_barrier(g)) FAIL("barrier");
    /* Past the barrier rank 0 has read every byte rank 1 sent; rank 1 may
     * return from it while its last record is still in the forwarder, so it
     * waits for rank 0 to say so before arming the forwarder below (else the
     * flip can land in the barrier's record). */
    char ack = 1;
    if (rank == 0 ? spmd_send(g, &ack, 1, SPMD_U8, 1, 7) : spmd_recv(g, &ack, 1, SPMD_U8, 0, 7, NULL))
        FAIL("ack after the barrier");

    int rc = 0;
    if (mode == TAMPER_COLL) {
        if (rank == 1) atomic_store(&t.tamper, 1);
        spmd_status st = spmd_all_reduce(g, v, v, 4096, SPMD_F32, SPMD_SUM);
        /* rank 1 received rank 0's authentic half: it may finish, and learns
         * of the failure at its next call */
        if (rank == 1 && st == SPMD_OK) st = spmd_barrier(g);
        const char *m = spmd_group_errmsg(g);
        if (st == SPMD_OK) FAIL("a tampered all_reduce succeeded");
        if (getenv("TEST_VERBOSE")) fprintf(stderr, "rank %d: %s\n", rank, m);
        if (rank == 0 && (!strstr(m, "rank 1") || !strstr(m, "authentication"))) FAIL("message does not name rank 1's link");
        if (rank == 1 && !atomic_load(&t.tampered)) FAIL("the forwarder flipped nothing");
    } else if (mode == TAMPER_P2P) {
        if (rank == 1) {
            atomic_store(&t.tamper, 0);
            spmd_send(g, want, SMALL, SPMD_U8, 0, 7); /* may succeed: it is eager */
            /* the send returned once the kernel had the bytes: let the forwarder relay them */
            for (int64_t until = spmd__now_ms() + 10000; !atomic_load(&t.tampered) && spmd__now_ms() < until;)
                sched_yield();
            if (!atomic_load(&t.tampered)) FAIL("the forwarder flipped nothing");
            if (spmd_barrier(g) == SPMD_OK) FAIL("the group survived a tampered record");
        } else {
            spmd_status st = spmd_recv(g, big, SMALL, SPMD_U8, 1, 7, NULL);
            const char *m = spmd_group_errmsg(g);
            if (st == SPMD_OK) FAIL("a tampered message was received");
            if (getenv("TEST_VERBOSE")) fprintf(stderr, "rank %d: %s\n", rank, m);
            if (!strstr(m, "rank 1") || !strstr(m, "authentication")) FAIL("message does not name rank 1's link");
        }
    }
    spmd_group_destroy(g);
    if (rank == 1) {
        tap_stop(&t);
        if (mode == CLEAN_PLAIN || mode == CLEAN_SEALED) {
            int seen = t.caplen && memmem(t.cap, t.caplen, CANARY, sizeof CANARY - 1) != NULL;
            if (mode == CLEAN_PLAIN && !seen) rc = fprintf(stderr, "rank 1: plaintext not seen in the capture\n") > 0;
            if (mode == CLEAN_SEALED && seen) rc = fprintf(stderr, "rank 1: plaintext crossed an encrypted link\n") > 0;
        }
        free(t.cap);
    }
    free(big);
    free(want);
    return rc;
}

int main(void) {
    setenv("SPMD_RUN_ID", "enc", 1);
    setenv("SPMD_TIMEOUT", "20", 0);
    setenv("SPMD_LOG_LEVEL", "error", 0);
    for (int mode = 0; mode < NMODES; mode++) {
        int status[2];
        CHECK(mp_fork_run(2, NULL, 2, NULL, rank_main, &mode, 60, status) == 0);
        CHECK_MSG(mp_exited_ok(status[0]) && mp_exited_ok(status[1]), "%s: status %d, %d", MODE[mode], status[0],
                  status[1]);
    }
    TEST_MAIN_END();
}
