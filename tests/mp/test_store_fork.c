/* Multi-process store test over loopback:
 *  - a server in its own process is SIGKILLed while a client of ours is parked
 *    in a blocking get: the client gets SPMD_ERR_REMOTE, not a hang;
 *  - forked ranks add to one counter (exact total), announce themselves, and
 *    block in get until the parent sets a key.
 * Every fork happens while this process has a single thread: forking beside a
 * running server thread can leave the child holding a lock the thread owned
 * (AddressSanitizer's allocator lock hung this test in CI). */
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <pthread.h>
#include <unistd.h>
#include "../unit/test_store_util.h"
#include "spmd/auth.h"

enum { RANKS = 6, ADDS = 100 };

/* A whole int from a pipe, or 0 after 20 s. */
static int read_int(int fd, int *v) {
    struct pollfd p = {.fd = fd, .events = POLLIN, .revents = 0};
    if (poll(&p, 1, 20000) != 1) return 0;
    return read(fd, v, sizeof *v) == (ssize_t)sizeof *v; /* pipe writes of 4 bytes are atomic */
}

/* Child: serve, tell the parent our port, then tell it once a get is parked. */
static void server_process(int to_parent, int from_parent) {
    spmd_store_server *s = tsu_server();
    if (!s) _exit(2);
    int port = spmd_store_server_port(s);
    if (write(to_parent, &port, sizeof port) != sizeof port) _exit(3);
    if (!tsu_wait_parked(s, 1, 20000)) _exit(4);
    int one = 1;
    if (write(to_parent, &one, sizeof one) != sizeof one) _exit(5);
    char b;
    ssize_t r = read(from_parent, &b, 1); /* until killed */
    (void)r;
    _exit(6);
}

typedef struct {
    spmd_store *c;
    spmd_status st;
    char msg[512];
} blocked;

static void *blocked_get(void *arg) {
    blocked *b = arg;
    void *v = NULL;
    size_t n = 0;
    b->st = spmd_store_get(b->c, "never", &v, &n);
    snprintf(b->msg, sizeof b->msg, "%s", spmd_store_errmsg(b->c));
    free(v);
    return NULL;
}

static void test_server_killed(void) {
    int up[2], down[2];
    pid_t pid = tsu_fork_process(server_process, &up[0], &down[1]);
    REQUIRE_VOID(pid >= 0);
    int port = 0, parked = 0;
    CHECK(read_int(up[0], &port) && port > 0);
    spmd_store *c = port > 0 ? tsu_connect(port, 60000) : NULL;
    if (c) {
        CHECK_OK(spmd_store_set(c, "alive", "1", 1));
        blocked b = {c, SPMD_ERR_AGAIN, ""};
        pthread_t th;
        pthread_create(&th, NULL, blocked_get, &b);
        CHECK(read_int(up[0], &parked) && parked == 1);
        uint64_t t0 = spmd__now_ns();
        kill(pid, SIGKILL);
        pthread_join(th, NULL);
        double ms = tsu_ms_since(t0);
        CHECK_MSG(b.st == SPMD_ERR_REMOTE, "get on a killed server: %d %s", b.st, b.msg);
        CHECK_MSG(ms < 30000, "noticed after %.1f ms", ms);
        CHECK_MSG(strstr(b.msg, "server") != NULL, "%s", b.msg);
        CHECK(spmd_store_add(c, "x", 1, NULL) == SPMD_ERR_REMOTE);
        spmd_store_close(c);
    } else {
        kill(pid, SIGKILL);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
    close(up[0]);
    close(down[1]);
}

static int rank_main(int port_pipe, int rank) {
    int port = 0;
    if (!read_int(port_pipe, &port) || port <= 0) return 9;
    spmd_store *c = tsu_connect(port, 20000);
    if (!c) return 10;
    int bad = 0;
    for (int i = 0; i < ADDS; i++) {
        int64_t r = 0;
        if (spmd_store_add(c, "counter", 1, &r) || r < 1 || r > RANKS * ADDS) bad++;
    }
    char key[32];
    snprintf(key, sizeof key, "done/%d", rank);
    if (spmd_store_set(c, key, "1", 1)) bad++;
    void *v = NULL;
    size_t n = 0;
    /* blocks until the parent has seen every rank */
    spmd_status st = spmd_store_get(c, "release", &v, &n);
    if (st || n != 2 || memcmp(v, "go", 2)) {
        fprintf(stderr, "rank %d: get release: %s\n", rank, spmd_store_errmsg(c));
        bad++;
    }
    free(v);
    spmd_store_close(c);
    return bad ? 11 : 0;
}

static void test_forked_ranks(void) {
    pid_t pids[RANKS];
    int to_rank[RANKS];
    fflush(NULL);
    for (int r = 0; r < RANKS; r++) {
        int p[2];
        REQUIRE_VOID(pipe(p) == 0);
        pids[r] = fork();
        REQUIRE_VOID(pids[r] >= 0);
        if (pids[r] == 0) {
            close(p[1]);
            int rc = rank_main(p[0], r);
            fflush(NULL);
            _exit(rc);
        }
        close(p[0]);
        to_rank[r] = p[1];
    }
    /* the server thread starts only after the last fork */
    spmd_store_server *s = tsu_server();
    int port = s ? spmd_store_server_port(s) : 0;
    for (int r = 0; r < RANKS; r++) {
        if (write(to_rank[r], &port, sizeof port) != sizeof port) CHECK_MSG(0, "port to rank %d", r);
        close(to_rank[r]);
    }
    if (!s) {
        for (int r = 0; r < RANKS; r++) waitpid(pids[r], NULL, 0);
        REQUIRE_VOID(s);
    }
    spmd_store *c = tsu_connect(port, 30000);
    REQUIRE_VOID(c);
    char names[RANKS][32];
    const char *keys[RANKS];
    for (int r = 0; r < RANKS; r++) {
        snprintf(names[r], sizeof names[r], "done/%d", r);
        keys[r] = names[r];
    }
    CHECK_OK(spmd_store_wait(c, keys, RANKS, 30000));
    int64_t total = 0;
    CHECK_OK(spmd_store_add(c, "counter", 0, &total));
    CHECK_MSG(total == RANKS * ADDS, "counter %lld, want %d", (long long)total, RANKS * ADDS);
    /* every rank is (or soon will be) blocked in get "release" */
    CHECK(tsu_wait_parked(s, RANKS, 20000));
    CHECK_OK(spmd_store_set(c, "release", "go", 2));
    for (int r = 0; r < RANKS; r++) {
        int status = 0;
        waitpid(pids[r], &status, 0);
        CHECK_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 0, "rank %d status %#x", r, status);
    }
    spmd_store_close(c);
    spmd_store_server_stop(s);
}

int main(void) {
    /* The ranks are forked before the server exists (see above), so they get
     * the job secret the way mpirun'd ranks do: from the environment. */
    char token[SPMD_AUTH_TOKEN_CHARS + 1];
    REQUIRE(spmd_auth_new_token(token) == SPMD_OK);
    setenv("SPMD_AUTH_TOKEN", token, 1);
    test_server_killed(); /* first, while this process has no other thread */
    test_forked_ranks();
    TEST_MAIN_END();
}
