/* Mesh formation against strangers.  Ranks 0 and 1 of a world of 3 listen
 * while rank 2 is held back; every rank's listening port then gets garbage,
 * truncated hellos, a hello without the secret, one with a wrong secret (each
 * claiming a real rank), and `silent` connections that never speak.  Then rank
 * 2 starts: the mesh must form with every rank connected to the real peers.
 *
 * The handshake deadline is set to 10 minutes here, far beyond the mesh's own
 * deadline: silent connections held up a listener judging one hello at a
 * time; formation only succeeds because pending connections are judged
 * concurrently.
 *   test_fault_mesh [silent]    (default 20) */
#define _GNU_SOURCE
#include <pthread.h>
#include <sys/socket.h>
#include <unistd.h>
#include "common/common.h"
#include "harness.h"
#include "spmd/store.h"
#include "transport/transport.h"

#define JOB 0x7a11ull
#define WORLD 3
#define NCHAN 2

typedef struct {
    int sport, rank;
    spmd_status st;
    int f0[WORLD], f1[WORLD];
    char err[512];
} side;

static void *build(void *arg) {
    side *s = arg;
    spmd_store *st = NULL;
    char err[256];
    if (spmd_store_connect("127.0.0.1", s->sport, 20000, &st, err, sizeof err)) {
        s->st = SPMD_ERR_REMOTE;
        snprintf(s->err, sizeof s->err, "%s", err);
        return NULL;
    }
    int *fds[NCHAN] = {s->f0, s->f1};
    s->st = spmd__mesh_build(st, s->rank, WORLD, JOB, NCHAN, "127.0.0.1", fds, NULL, NULL, spmd__deadline(30000),
                             s->err, sizeof s->err);
    spmd_store_close(st);
    return NULL;
}

static int port_of(spmd_store *st, int rank) {
    char key[16];
    snprintf(key, sizeof key, "addr/%d", rank);
    void *v = NULL;
    size_t n = 0;
    if (spmd_store_get(st, key, &v, &n)) return -1;
    int p = atoi((const char *)v);
    free(v);
    return p;
}

static int dial(int port) {
    char err[256];
    return spmd__connect("127.0.0.1", port, spmd__deadline(5000), err, sizeof err);
}

/* A full handshake claiming `rank` with key k (k->on = 0: no secret); the
 * verdict, or -1 when dropped. */
static long claim(int port, int rank, const spmd__auth *k) {
    int fd = dial(port);
    if (fd < 0) return -2;
    unsigned char first[SPMD__MESH_FIRST_LEN], reply[SPMD__MESH_REPLY_LEN], proof[32] = {0}, v[4];
    spmd__hello h = {JOB, (uint32_t)rank, WORLD, 0, k->on ? SPMD__MESH_FLAG_AUTH : 0u};
    spmd__hello_encode(&h, first);
    spmd__auth_random(first + SPMD__HELLO_LEN, 32);
    char err[256];
    int64_t d = spmd__deadline(5000);
    long verdict = -1;
    if (!spmd__write_full(fd, first, sizeof first, d, NULL, err, sizeof err) &&
        !spmd__read_full(fd, reply, sizeof reply, d, NULL, err, sizeof err)) {
        if (k->on) spmd__auth_mac(k, "spmd-mesh-connector", first, sizeof first, reply + 4, 32, NULL, 0, proof);
        if (!spmd__write_full(fd, proof, sizeof proof, d, NULL, err, sizeof err) &&
            !spmd__read_full(fd, v, 4, d, NULL, err, sizeof err))
            verdict = (long)spmd__get_u32(v);
    }
    close(fd);
    return verdict;
}

int main(int argc, char **argv) {
    int silent = argc > 1 ? atoi(argv[1]) : 20;
    setenv("SPMD_LOG_LEVEL", "error", 1);
    setenv("SPMD_HANDSHAKE_TIMEOUT_MS", "600000", 1);
    spmd_store_server *srv = NULL;
    char err[256];
    REQUIRE(spmd_store_server_start("127.0.0.1", 0, &srv, err, sizeof err) == SPMD_OK);
    int sport = spmd_store_server_port(srv);
    side s[WORLD];
    pthread_t th[WORLD];
    for (int r = 0; r < WORLD; r++) s[r] = (side){.sport = sport, .rank = r};
    for (int r = 0; r < WORLD - 1; r++) pthread_create(&th[r], NULL, build, &s[r]);

    spmd_store *st = NULL;
    REQUIRE(spmd_store_connect("127.0.0.1", sport, 20000, &st, err, sizeof err) == SPMD_OK);
    spmd__auth none = {0}, wrong;
    REQUIRE(spmd__auth_get(&wrong, err, sizeof err) == SPMD_OK && wrong.on);
    wrong.key[3] ^= 0x20;
    int *held = calloc((size_t)(silent * (WORLD - 1)), sizeof *held);
    REQUIRE(held);
    int nheld = 0;
    for (int r = 0; r < WORLD - 1; r++) {
        int port = port_of(st, r);
        REQUIRE(port > 0);
        /* silent strangers first: they stay open until the mesh is built */
        for (int i = 0; i < silent; i++) held[nheld++] = dial(port);
        int fd = dial(port); /* garbage */
        send(fd, "\x16\x03\x01\x02\x00garbage-garbage-garbage-garbage-garbage-garbage-garbage-garbage!", 68,
             MSG_NOSIGNAL);
        char b;
        CHECK_MSG(recv(fd, &b, 1, 0) <= 0, "rank %d answered garbage", r);
        close(fd);
        unsigned char first[SPMD__MESH_FIRST_LEN];
        spmd__hello h = {JOB, WORLD - 1, WORLD, 0, SPMD__MESH_FLAG_AUTH};
        spmd__hello_encode(&h, first);
        fd = dial(port); /* truncated, then closed */
        send(fd, first, 20, MSG_NOSIGNAL);
        close(fd);
        CHECK_MSG(claim(port, WORLD - 1, &none) == SPMD__HELLO_AUTH_REQUIRED, "rank %d", r);
        CHECK_MSG(claim(port, WORLD - 1, &wrong) == SPMD__HELLO_AUTH_FAILED, "rank %d", r);
        if (r == 0) CHECK(claim(port, 1, &wrong) == SPMD__HELLO_AUTH_FAILED);
    }
    pthread_create(&th[WORLD - 1], NULL, build, &s[WORLD - 1]);
    for (int r = 0; r < WORLD; r++) pthread_join(th[r], NULL);
    for (int r = 0; r < WORLD; r++) CHECK_MSG(s[r].st == SPMD_OK, "rank %d: %s", r, s[r].err);
    /* Every pair is joined to the real peer: a byte sent on (a -> b) arrives at b. */
    for (int a = 0; a < WORLD; a++)
        for (int b = 0; b < WORLD; b++) {
            if (a == b || s[a].st || s[b].st) continue;
            unsigned char x = (unsigned char)(16 * a + b), y = 0;
            CHECK(write(s[a].f0[b], &x, 1) == 1);
            CHECK(spmd__read_full(s[b].f0[a], &y, 1, spmd__deadline(5000), NULL, err, sizeof err) == SPMD_OK &&
                  y == x);
        }
    for (int i = 0; i < nheld; i++)
        if (held[i] >= 0) close(held[i]);
    free(held);
    for (int r = 0; r < WORLD; r++)
        for (int p = 0; p < WORLD; p++) {
            if (s[r].f0[p] >= 0) close(s[r].f0[p]);
            if (s[r].f1[p] >= 0) close(s[r].f1[p]);
        }
    spmd_store_close(st);
    spmd_store_server_stop(srv);
    TEST_MAIN_END();
}
