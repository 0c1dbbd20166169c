/* Forming groups every way the API offers, and the deadlines:
 *   - init_method "tcp://127.0.0.1:<port>" (rank 0 hosts the store there),
 *   - init_method "file:///path" (rank 0 hosts on a free port, writes the file),
 *   - an explicit store handle with explicit rank and world size,
 *   - a receive nobody answers ends in SPMD_ERR_TIMEOUT after the group's
 *     deadline, and spmd_work_wait's own timeout leaves the work running,
 *   - spmd_spawn reports which rank failed and how (exit code, signal). */
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
#include "common/common.h"
#include "harness.h"
#include "spmd/group.h"

static char url[600];
static int mode; /* 0 tcp://, 1 file://, 2 explicit store */
static int store_port;

#define RREQ(cond, ...)                                                         \
    do {                                                                        \
        if (!(cond)) {                                                          \
            fprintf(stderr, "rank %d: %s:%d: %s: ", rank, __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                       \
            fputc('\n', stderr);                                                \
            return 1;                                                           \
        }                                                                       \
    } while (0)

static int init_ways(int rank, int world, void *arg) {
    (void)arg;
    /* Forget the launcher environment: the options alone must suffice. */
    unsetenv("RANK");
    unsetenv("WORLD_SIZE");
    unsetenv("MASTER_ADDR");
    unsetenv("MASTER_PORT");
    unsetenv("TORCHELASTIC_USE_AGENT_STORE");
    spmd_group_opts o = SPMD_GROUP_OPTS_DEFAULT;
    o.rank = rank;
    o.world_size = world;
    o.timeout_ms = 20000;
    spmd_store *st = NULL;
    char err[512];
    if (mode == 0 || mode == 1) {
        o.init_method = url;
    } else {
        RREQ(spmd_store_connect("127.0.0.1", store_port, 10000, &st, err, sizeof err) == SPMD_OK, "%s", err);
        o.store = st;
    }
    spmd_group *g = NULL;
    RREQ(spmd_group_init(&o, &g, err, sizeof err) == SPMD_OK, "mode %d: %s", mode, err);
    RREQ(spmd_group_rank(g) == rank && spmd_group_size(g) == world, "identity");
    int32_t v = rank, sum = 0;
    RREQ(spmd_all_reduce(g, &v, &sum, 1, SPMD_I32, SPMD_SUM) == SPMD_OK && sum == world * (world - 1) / 2, "sum %d", sum);
    spmd_group_destroy(g);
    spmd_store_close(st);
    return 0;
}

static int deadlines(int rank, int world, void *arg) {
    (void)arg;
    (void)world;
    spmd_group *g = NULL;
    char err[512];
    RREQ(spmd_group_init(NULL, &g, err, sizeof err) == SPMD_OK, "%s", err);
    int32_t v = 0;
    if (rank == 0) {
        /* group deadline: 300 ms; rank 1 is alive but never sends tag 9 */
        spmd_group_set_timeout(g, 300);
        int64_t t0 = spmd__now_ms();
        spmd_status st = spmd_recv(g, &v, 1, SPMD_I32, 1, 9, NULL);
        int64_t took = spmd__now_ms() - t0;
        RREQ(st == SPMD_ERR_TIMEOUT, "status %d", st);
        RREQ(took >= 290 && took < 5000, "took %lld ms", (long long)took);
        RREQ(strstr(spmd_group_errmsg(g), "rank 1") != NULL, "%s", spmd_group_errmsg(g));
        spmd_group_set_timeout(g, 0); /* back to the default */
        /* a wait's own timeout does not cancel the work: it completes later */
        spmd_work *w = NULL;
        RREQ(spmd_irecv(g, &v, 1, SPMD_I32, 1, 10, &w) == SPMD_OK, "irecv");
        RREQ(spmd_work_wait(w, 100) == SPMD_ERR_TIMEOUT, "short wait");
        RREQ(spmd_work_test(w) == SPMD_ERR_AGAIN, "still running");
        int32_t go = 1;
        RREQ(spmd_send(g, &go, 1, SPMD_I32, 1, 11) == SPMD_OK, "go");
        RREQ(spmd_work_wait(w, -1) == SPMD_OK && v == 42, "late completion, v=%d", v);
        spmd_work_free(w);
    } else if (rank == 1) {
        int32_t go = 0, answer = 42;
        RREQ(spmd_recv(g, &go, 1, SPMD_I32, 0, 11, NULL) == SPMD_OK, "%s", spmd_group_errmsg(g));
        RREQ(spmd_send(g, &answer, 1, SPMD_I32, 0, 10) == SPMD_OK, "%s", spmd_group_errmsg(g));
    }
    spmd_group_destroy(g);
    return 0;
}

static int fail_rank1(int rank, int world, void *arg) {
    (void)world;
    int how = *(int *)arg;
    if (rank != 1) {
        pause(); /* killed by spawn once rank 1 has failed */
        return 0;
    }
    if (how == 0) return 3;
    raise(SIGKILL);
    return 0;
}

int main(void) {
    char report[512];
    /* tcp:// — a port that was free a moment ago; rank 0 binds it */
    char lerr[128];
    int port = 0;
    int fd = spmd__listen("127.0.0.1", 0, 1, &port, lerr, sizeof lerr);
    close(fd);
    snprintf(url, sizeof url, "tcp://127.0.0.1:%d", port);
    mode = 0;
    CHECK_MSG(spmd_spawn_timeout(3, init_ways, NULL, 60000, report, sizeof report) == SPMD_OK, "tcp://: %s", report);

    /* file:// — the file must not exist beforehand */
    const char *tmp = getenv("TMPDIR");
    snprintf(url, sizeof url, "file://%s/spmd_test_init_%ld", tmp && *tmp ? tmp : "/tmp", (long)getpid());
    unlink(url + 7);
    mode = 1;
    CHECK_MSG(spmd_spawn_timeout(3, init_ways, NULL, 60000, report, sizeof report) == SPMD_OK, "file://: %s", report);
    unlink(url + 7);

    /* an explicit store */
    spmd_store_server *srv = NULL;
    REQUIRE(spmd_store_server_open("127.0.0.1", 0, &srv, lerr, sizeof lerr) == SPMD_OK);
    store_port = spmd_store_server_port(srv);
    pid_t sp = fork();
    if (sp == 0) _exit(spmd_store_server_run(srv) == SPMD_OK ? 0 : 1);
    spmd_store_server_forget(srv);
    mode = 2;
    CHECK_MSG(spmd_spawn_timeout(2, init_ways, NULL, 60000, report, sizeof report) == SPMD_OK, "store: %s", report);
    kill(sp, SIGKILL);
    waitpid(sp, NULL, 0);

    CHECK_MSG(spmd_spawn_timeout(2, deadlines, NULL, 60000, report, sizeof report) == SPMD_OK, "deadlines: %s", report);

    int how = 0;
    CHECK(spmd_spawn_timeout(3, fail_rank1, &how, 30000, report, sizeof report) == SPMD_ERR_REMOTE);
    CHECK_MSG(strstr(report, "rank 1") && strstr(report, "exited with code 3"), "%s", report);
    how = 1;
    CHECK(spmd_spawn_timeout(3, fail_rank1, &how, 30000, report, sizeof report) == SPMD_ERR_REMOTE);
    CHECK_MSG(strstr(report, "rank 1") && strstr(report, "SIGKILL"), "%s", report);
    TEST_MAIN_END();
}
