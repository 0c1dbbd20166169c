/* The store against strangers: a process without the job secret, one with a
 * wrong secret, garbage, truncated frames and 500 simultaneous silent
 * connections.  None of them can read, write or delete a key, and the job's
 * own client keeps working throughout; the store's limits (value size, key
 * count, bytes per client) refuse a flood with a clear error.
 *   test_fault_store [connections]    (default 500) */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include "../unit/test_store_util.h"
#include "spmd/auth.h"

static int port;

static int raw_connect(void) {
    char err[256];
    return spmd__connect("127.0.0.1", port, spmd__deadline(5000), err, sizeof err);
}

/* Wait (bounded) until the server closes fd; 1 when it did. */
static int closed_by_server(int fd, int ms) {
    int64_t dl = spmd__deadline(ms);
    char b[256];
    for (;;) {
        ssize_t n = recv(fd, b, sizeof b, MSG_DONTWAIT);
        if (n == 0 || (n < 0 && (errno == ECONNRESET || errno == EPIPE))) return 1;
        if (n > 0) continue;
        struct pollfd p = {.fd = fd, .events = POLLIN, .revents = 0};
        int left = spmd__remaining_ms(dl);
        if (left == 0 || poll(&p, 1, left) < 0) return 0;
    }
}

/* In a child process with its own idea of the secret, try to read, write and
 * delete; exit 0 when every attempt was refused at the handshake. */
static int intruder(const char *how) {
    if (!strcmp(how, "none")) setenv("SPMD_AUTH", "off", 1);
    else setenv("SPMD_AUTH_TOKEN", "0123456789abcdef0123456789abcdef-not-the-secret", 1);
    setenv("SPMD_LOG_LEVEL", "error", 1);
    spmd_store *c = NULL;
    char err[512];
    spmd_status st = spmd_store_connect("127.0.0.1", port, 3000, &c, err, sizeof err);
    if (st == SPMD_OK) {
        /* Should never get here; show the damage it could do. */
        spmd_store_set(c, "secret", "stolen", 6);
        spmd_store_close(c);
        return 1;
    }
    int named = !strcmp(how, "none") ? strstr(err, "requires the job secret") != NULL
                                     : strstr(err, "failed to prove") != NULL ||
                                           strstr(err, "wrong job secret") != NULL;
    if (!named) fprintf(stderr, "intruder (%s): unclear error: %s\n", how, err);
    return named ? 0 : 2;
}

/* fork + exec of ourselves: the test process has the server's thread. */
static int run_child(const char *how) {
    fflush(NULL);
    char p[16];
    snprintf(p, sizeof p, "%d", port);
    pid_t pid = fork();
    if (pid == 0) {
        execl("/proc/self/exe", "test_fault_store", "intrude", how, p, (char *)NULL);
        _exit(99);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 100;
}

static int key_is(spmd_store *c, const char *k, const char *want) {
    void *v = NULL;
    size_t n = 0;
    int ok = spmd_store_try_get(c, k, &v, &n) == SPMD_OK && n == strlen(want) && !memcmp(v, want, n);
    free(v);
    return ok;
}

int main(int argc, char **argv) {
    if (argc == 4 && !strcmp(argv[1], "intrude")) {
        port = atoi(argv[3]);
        unsetenv("SPMD_AUTH_TOKEN");
        return intruder(argv[2]);
    }
    int nconn = argc > 1 ? atoi(argv[1]) : 500;
    setenv("SPMD_LOG_LEVEL", "error", 1); /* every refusal is logged as a warning */
    setenv("SPMD_HANDSHAKE_TIMEOUT_MS", "1000", 1);
    setenv("SPMD_STORE_MAX_VALUE_BYTES", "65536", 1);
    setenv("SPMD_STORE_MAX_KEYS", "100", 1);
    setenv("SPMD_STORE_MAX_CLIENT_BYTES", "1048576", 1);
    spmd_store_server *srv = tsu_server();
    REQUIRE(srv);
    port = spmd_store_server_port(srv);
    spmd_store *job = tsu_connect(port, 20000);
    REQUIRE(job);
    CHECK_OK(spmd_store_set(job, "secret", "job-data", 8));

    /* 1. no secret, wrong secret: refused, nothing read or written */
    CHECK_MSG(run_child("none") == 0, "client without the secret");
    CHECK_MSG(run_child("wrong") == 0, "client with a wrong secret");
    CHECK(key_is(job, "secret", "job-data"));
    int64_t nkeys = 0;
    CHECK(spmd_store_num_keys(job, &nkeys) == SPMD_OK && nkeys == 1);

    /* 2. garbage, then truncated handshakes: dropped; the job goes on */
    int fd = raw_connect();
    send(fd, "GET / HTTP/1.1\r\n\r\n", 18, MSG_NOSIGNAL);
    CHECK(closed_by_server(fd, 5000));
    close(fd);
    unsigned char ch[SPMD__STORE_CHELLO_LEN];
    spmd__auth none = {0};
    spmd__store_hs_client_hello(&none, ch);
    for (size_t cut = 1; cut < sizeof ch; cut += 7) { /* cut short, then silent */
        fd = raw_connect();
        send(fd, ch, cut, MSG_NOSIGNAL);
        CHECK_MSG(closed_by_server(fd, 5000), "handshake cut at %zu bytes not dropped", cut);
        close(fd);
    }
    /* a request frame where a handshake belongs */
    fd = raw_connect();
    unsigned char frame[64] = {60, 0, 0, 0, SPMD__STORE_OP_DELETE};
    send(fd, frame, sizeof frame, MSG_NOSIGNAL);
    CHECK(closed_by_server(fd, 5000));
    close(fd);
    CHECK(key_is(job, "secret", "job-data"));

    /* 3. many simultaneous silent connections: shed or timed out; a new job
     * client still connects and works while they are open */
    int *fds = calloc((size_t)nconn, sizeof *fds);
    REQUIRE(fds);
    int opened = 0;
    for (int i = 0; i < nconn; i++)
        if ((fds[i] = raw_connect()) >= 0) opened++;
    CHECK_MSG(opened == nconn, "opened %d of %d", opened, nconn);
    spmd_store *late = tsu_connect(port, 20000);
    CHECK(late != NULL);
    if (late) {
        CHECK(key_is(late, "secret", "job-data"));
        CHECK_OK(spmd_store_set(late, "late", "1", 1));
    }
    CHECK_OK(spmd_store_set(job, "during", "flood", 5));
    int dropped = 0;
    for (int i = 0; i < nconn; i++)
        if (fds[i] >= 0) {
            dropped += closed_by_server(fds[i], 10000);
            close(fds[i]);
        }
    CHECK_MSG(dropped == opened, "%d of %d silent connections dropped", dropped, opened);
    free(fds);
    CHECK(tsu_wait_conns(srv, late ? 2 : 1, 10000));

    /* 4. limits: a value over the configured size, more keys than allowed, a
     * client over its byte budget: refused with an error naming the limit */
    char *big = calloc(1, 70000);
    REQUIRE(big);
    CHECK(spmd_store_set(job, "big", big, 70000) == SPMD_ERR_NOMEM);
    CHECK_MSG(strstr(spmd_store_errmsg(job), "SPMD_STORE_MAX_VALUE_BYTES") != NULL, "%s",
              spmd_store_errmsg(job));
    spmd_status st = SPMD_OK;
    int i = 0;
    for (; i < 200 && st == SPMD_OK; i++) {
        char k[32];
        snprintf(k, sizeof k, "k%d", i);
        st = spmd_store_set(job, k, "v", 1);
    }
    CHECK(st == SPMD_ERR_NOMEM && strstr(spmd_store_errmsg(job), "SPMD_STORE_MAX_KEYS"));
    for (int j = 0; j < i; j++) {
        char k[32];
        snprintf(k, sizeof k, "k%d", j);
        spmd_store_delete(job, k, NULL);
    }
    st = SPMD_OK;
    for (i = 0; i < 40 && st == SPMD_OK; i++) {
        char k[32];
        snprintf(k, sizeof k, "big%d", i);
        st = spmd_store_set(job, k, big, 60000);
    }
    CHECK(st == SPMD_ERR_NOMEM && strstr(spmd_store_errmsg(job), "SPMD_STORE_MAX_CLIENT_BYTES"));
    free(big);
    /* The client that hit the limits still works; so does everyone else. */
    CHECK(key_is(job, "secret", "job-data"));
    if (late) CHECK_OK(spmd_store_set(late, "after", "limits", 6));

    if (late) spmd_store_close(late);
    spmd_store_close(job);
    spmd_store_server_stop(srv);
    TEST_MAIN_END();
}
