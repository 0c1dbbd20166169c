/* The mesh handshake: while rank 0 waits for rank 1 of a group of 2, strangers
 * connect to its port — garbage bytes, a silent client, another job's hello,
 * a rank out of range, a wrong world size.  Each is refused with the right
 * verdict (or dropped), and the real rank 1 still gets in. */
#include <pthread.h>
#include <unistd.h>
#include <string.h>
#include "common/common.h"
#include "harness.h"
#include "spmd/store.h"
#include "transport/transport.h"

#define JOB 0x1234abcd5678ef01ull

typedef struct {
    int port;
    int rank;
    spmd_status st;
    int fds0[2], fds1[2];
    char err[512];
} side;

static void *build(void *arg) {
    side *s = arg;
    spmd_store *st = NULL;
    char err[256];
    if (spmd_store_connect("127.0.0.1", s->port, 10000, &st, err, sizeof err)) {
        s->st = SPMD_ERR_REMOTE;
        return NULL;
    }
    int *fds[2] = {s->fds0, s->fds1};
    s->st = spmd__mesh_build(st, s->rank, 2, JOB, 2, "127.0.0.1", fds, NULL, NULL, spmd__deadline(20000), s->err, sizeof s->err);
    spmd_store_close(st);
    return NULL;
}

/* Connect to rank 0's published port and send `hello` (len bytes); return the
 * verdict read back, or -1 if the connection was dropped without one. */
static long knock(int port, const void *hello, size_t len) {
    char err[256];
    int fd = spmd__connect("127.0.0.1", port, spmd__deadline(5000), err, sizeof err);
    if (fd < 0) return -2;
    unsigned char v[4];
    long verdict = -1;
    if (spmd__write_full(fd, hello, len, spmd__deadline(5000), NULL, err, sizeof err) == SPMD_OK &&
        spmd__read_full(fd, v, 4, spmd__deadline(5000), NULL, err, sizeof err) == SPMD_OK)
        verdict = (long)spmd__get_u32(v);
    close(fd);
    return verdict;
}

enum { SECRET_RIGHT, SECRET_NONE, SECRET_WRONG };

/* A whole handshake claiming (job, rank, world, chan), proving the right
 * secret, none, or a wrong one; returns the verdict or -1. */
static long knock_hello_as(int port, uint64_t job, uint32_t rank, uint32_t world, uint32_t chan,
                           int secret) {
    spmd__auth a;
    char err[256];
    if (spmd__auth_get(&a, err, sizeof err)) return -3;
    if (secret == SECRET_NONE) a.on = 0;
    if (secret == SECRET_WRONG) a.key[0] ^= 1;
    int fd = spmd__connect("127.0.0.1", port, spmd__deadline(5000), err, sizeof err);
    if (fd < 0) return -2;
    unsigned char first[SPMD__MESH_FIRST_LEN], reply[SPMD__MESH_REPLY_LEN], proof[32], v[4];
    spmd__hello hello = {job, rank, world, chan, a.on ? SPMD__MESH_FLAG_AUTH : 0u};
    spmd__hello_encode(&hello, first);
    memset(first + SPMD__HELLO_LEN, 7, SPMD__AUTH_NONCE);
    long verdict = -1;
    int64_t d = spmd__deadline(5000);
    if (spmd__write_full(fd, first, sizeof first, d, NULL, err, sizeof err) == SPMD_OK &&
        spmd__read_full(fd, reply, sizeof reply, d, NULL, err, sizeof err) == SPMD_OK) {
        /* With a wrong key our check of the acceptor fails: prove anyway. */
        spmd__mesh_hs_prove(&a, first, reply, proof, err, sizeof err);
        if (secret == SECRET_WRONG) {
            spmd__auth_mac(&a, "spmd-mesh-connector", first, sizeof first, reply + 4, 32, NULL, 0,
                           proof);
        }
        if (spmd__write_full(fd, proof, sizeof proof, d, NULL, err, sizeof err) == SPMD_OK &&
            spmd__read_full(fd, v, 4, d, NULL, err, sizeof err) == SPMD_OK)
            verdict = (long)spmd__get_u32(v);
    }
    close(fd);
    return verdict;
}

static long knock_hello(int port, uint64_t job, uint32_t rank, uint32_t world, uint32_t chan) {
    return knock_hello_as(port, job, rank, world, chan, SECRET_RIGHT);
}

int main(void) {
    setenv("SPMD_LOG_LEVEL", "error", 1); /* the refusals are logged as warnings */
    setenv("SPMD_HANDSHAKE_TIMEOUT_MS", "1000", 1); /* the silent stranger goes sooner */
    spmd_store_server *srv = NULL;
    char err[256];
    REQUIRE(spmd_store_server_start("127.0.0.1", 0, &srv, err, sizeof err) == SPMD_OK);
    int sport = spmd_store_server_port(srv);

    side r0 = {.port = sport, .rank = 0};
    pthread_t t0;
    pthread_create(&t0, NULL, build, &r0);

    /* Where does rank 0 listen? */
    spmd_store *st = NULL;
    REQUIRE(spmd_store_connect("127.0.0.1", sport, 10000, &st, err, sizeof err) == SPMD_OK);
    void *val = NULL;
    size_t vl = 0;
    REQUIRE(spmd_store_get(st, "addr/0", &val, &vl) == SPMD_OK);
    int port = atoi((const char *)val);
    free(val);
    REQUIRE(port > 0);

    /* decode rejects garbage */
    unsigned char junk[SPMD__HELLO_LEN];
    for (size_t i = 0; i < sizeof junk; i++) junk[i] = (unsigned char)(i * 37 + 11);
    spmd__hello h;
    CHECK(spmd__hello_decode(junk, &h, err, sizeof err) == SPMD_ERR_PROTOCOL);
    CHECK(strstr(err, "magic") != NULL);

    unsigned char junk64[SPMD__MESH_FIRST_LEN];
    for (size_t i = 0; i < sizeof junk64; i++) junk64[i] = (unsigned char)(i * 37 + 11);
    CHECK(knock(port, junk64, sizeof junk64) == -1);                 /* garbage: dropped */
    CHECK(knock(port, "SPMD", 4) == -1);                             /* truncated, then silent */
    CHECK(knock_hello(port, JOB + 1, 1, 2, 0) == SPMD__HELLO_BAD_JOB); /* another job */
    CHECK(knock_hello(port, JOB, 7, 2, 0) == SPMD__HELLO_BAD_RANK);    /* rank out of range */
    CHECK(knock_hello(port, JOB, 0, 2, 0) == SPMD__HELLO_BAD_RANK);    /* claims rank 0 itself */
    CHECK(knock_hello(port, JOB, 1, 3, 0) == SPMD__HELLO_BAD_WORLD);   /* wrong world size */
    CHECK(knock_hello(port, JOB, 1, 2, 5) == SPMD__HELLO_BAD_RANK);    /* no such channel */
    /* Without the job secret, or with a wrong one, even a valid claim of rank 1
     * is refused — and does not take rank 1's place. */
    CHECK(knock_hello_as(port, JOB, 1, 2, 0, SECRET_NONE) == SPMD__HELLO_AUTH_REQUIRED);
    CHECK(knock_hello_as(port, JOB, 1, 2, 0, SECRET_WRONG) == SPMD__HELLO_AUTH_FAILED);
    CHECK(knock_hello_as(port, JOB, 1, 2, 1, SECRET_WRONG) == SPMD__HELLO_AUTH_FAILED);

    /* The real rank 1 still gets in. */
    side r1 = {.port = sport, .rank = 1};
    build(&r1);
    pthread_join(t0, NULL);
    CHECK_MSG(r0.st == SPMD_OK, "rank 0: %s", r0.err);
    CHECK_MSG(r1.st == SPMD_OK, "rank 1: %s", r1.err);
    CHECK(r0.fds0[1] >= 0 && r0.fds1[1] >= 0 && r1.fds0[0] >= 0 && r1.fds1[0] >= 0);
    CHECK(r0.fds0[0] == -1 && r1.fds1[1] == -1);

    for (int i = 0; i < 2; i++) {
        if (r0.fds0[i] >= 0) close(r0.fds0[i]);
        if (r0.fds1[i] >= 0) close(r0.fds1[i]);
        if (r1.fds0[i] >= 0) close(r1.fds0[i]);
        if (r1.fds1[i] >= 0) close(r1.fds1[i]);
    }
    spmd_store_close(st);
    spmd_store_server_stop(srv);
    TEST_MAIN_END();
}
