/* The flight recorder in real groups (src/group/recorder.c):
 *   - spmd_group_dump_record: the record holds the collectives (numbered
 *     alike on every rank) and p2p ops just run, with their arguments;
 *   - a signal handler calling spmd_request_record_dump: the record appears
 *     in SPMD_RECORDER_DIR (reason "request");
 *   - a failure (a rank SIGKILLed): each survivor's record is on disk by the
 *     time its call returns, blaming the dead rank (the collective it was in,
 *     when it had issued it before the death was seen, unfinished);
 *   - a p2p call that times out writes a record too (reason "timeout").
 * Over TCP and shared memory. */
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "harness.h"
#include "mp/mp_fork.h"
#include "common/common.h"
#include "group/flight_record.h"
#include "spmd/group.h"

#define CHILD_REQUIRE(cond, ...)                                                          \
    do {                                                                                  \
        if (!(cond)) {                                                                    \
            fprintf(stderr, "child %d: %s:%d: %s: ", idx, __FILE__, __LINE__, #cond);     \
            fprintf(stderr, __VA_ARGS__);                                                 \
            fputc('\n', stderr);                                                          \
            return 1;                                                                     \
        }                                                                                 \
    } while (0)

static char dir[256];

/* Parse the record file at path; 0 when readable and valid. */
static int load(const char *path, spmd__flight_record *r) {
    int fd = open(path, O_RDONLY);
    if (fd < 0) return -1;
    static char text[1 << 20];
    ssize_t n = read(fd, text, sizeof text);
    close(fd);
    char err[256];
    if (n < 0 || spmd__flight_parse(text, (size_t)n, r, err, sizeof err) != SPMD_OK) {
        fprintf(stderr, "%s: %s\n", path, n < 0 ? "unreadable" : err);
        return -1;
    }
    return 0;
}

static const spmd__flight_op *find(const spmd__flight_record *r, char cls, const char *kind) {
    for (int i = 0; i < r->nops; i++)
        if (r->ops[i].cls == cls && !strcmp(r->ops[i].kind, kind)) return &r->ops[i];
    return NULL;
}

static void on_usr1(int sig) {
    (void)sig;
    spmd_request_record_dump();
}

static int contents(int idx, void *arg) {
    (void)arg;
    spmd_group *g = NULL;
    char err[512], path[512];
    CHILD_REQUIRE(spmd_group_init(NULL, &g, err, sizeof err) == SPMD_OK, "%s", err);
    float v[3] = {1, 2, 3};
    int32_t m[4] = {0};
    CHILD_REQUIRE(spmd_barrier(g) == SPMD_OK, "%s", spmd_group_errmsg(g));
    CHILD_REQUIRE(spmd_all_reduce(g, v, v, 3, SPMD_F32, SPMD_SUM) == SPMD_OK, "%s", spmd_group_errmsg(g));
    if (idx == 0) CHILD_REQUIRE(spmd_send(g, m, 4, SPMD_I32, 1, 5) == SPMD_OK, "%s", spmd_group_errmsg(g));
    else CHILD_REQUIRE(spmd_recv(g, m, 4, SPMD_I32, 0, 5, NULL) == SPMD_OK, "%s", spmd_group_errmsg(g));
    snprintf(path, sizeof path, "%s/call.%d.rec", dir, idx);
    CHILD_REQUIRE(spmd_group_dump_record(g, path) == SPMD_OK, "%s", spmd_group_errmsg(g));
    spmd__flight_record r;
    CHILD_REQUIRE(load(path, &r) == 0, "no record");
    CHILD_REQUIRE(!strcmp(r.group, "default") && r.rank == idx && r.world == 2 && r.pid == getpid() &&
                      !strcmp(r.reason, "call") && r.status == 0 && r.issued == 2,
                  "header: group %s rank %d/%d reason %s status %d issued %llu", r.group, r.rank, r.world, r.reason,
                  r.status, (unsigned long long)r.issued);
    const spmd__flight_op *b = find(&r, 'c', "barrier"), *a = find(&r, 'c', "all_reduce"),
                          *p = find(&r, 'p', idx == 0 ? "send" : "recv");
    CHILD_REQUIRE(b && b->seq == 1 && b->state == SPMD__FLIGHT_DONE, "barrier #1 missing or unfinished");
    CHILD_REQUIRE(a && a->seq == 2 && a->state == SPMD__FLIGHT_DONE && a->count == 3 && !strcmp(a->dtype, "float32") &&
                      !strcmp(a->op, "sum") && a->peer == -1,
                  "all_reduce #2 wrong");
    CHILD_REQUIRE(p && p->state == SPMD__FLIGHT_DONE && p->count == 16 && p->peer == (idx ^ 1) && p->tag == 5 &&
                      !strcmp(p->dtype, "int32"),
                  "p2p op wrong");
    CHILD_REQUIRE(a->t_issue > 0 && a->t_end >= a->t_start && a->t_start >= a->t_issue && r.time >= a->t_end,
                  "times out of order");
    spmd__flight_free(&r);
    /* A handler the program installs itself asks for a record. */
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_usr1;
    sigaction(SIGUSR1, &sa, NULL);
    raise(SIGUSR1);
    snprintf(path, sizeof path, "%s/default.%d.rec", dir, idx);
    int64_t until = spmd__now_ms() + 10000;
    int got = 0;
    while (!got && spmd__now_ms() < until) { /* the progress thread writes it at its next tick */
        if (load(path, &r) == 0) {
            got = !strcmp(r.reason, "request");
            spmd__flight_free(&r);
        }
        if (!got) {
            struct timespec ts = {0, 20 * 1000000};
            nanosleep(&ts, NULL);
        }
    }
    CHILD_REQUIRE(got, "no requested record in %s", path);
    CHILD_REQUIRE(spmd_barrier(g) == SPMD_OK, "%s", spmd_group_errmsg(g));
    spmd_group_destroy(g);
    return 0;
}

/* Rank 2 dies while 0 and 1 wait for it in all_reduce #2. */
static int failure(int idx, void *arg) {
    (void)arg;
    spmd_group *g = NULL;
    char err[512], path[512];
    CHILD_REQUIRE(spmd_group_init(NULL, &g, err, sizeof err) == SPMD_OK, "%s", err);
    CHILD_REQUIRE(spmd_barrier(g) == SPMD_OK, "%s", spmd_group_errmsg(g));
    int32_t v = 1;
    if (idx == 2) { /* once both others are out of the barrier, die without a goodbye */
        CHILD_REQUIRE(spmd_recv(g, &v, 1, SPMD_I32, 0, 1, NULL) == SPMD_OK, "%s", spmd_group_errmsg(g));
        CHILD_REQUIRE(spmd_recv(g, &v, 1, SPMD_I32, 1, 1, NULL) == SPMD_OK, "%s", spmd_group_errmsg(g));
        raise(SIGKILL);
    }
    CHILD_REQUIRE(spmd_send(g, &v, 1, SPMD_I32, 2, 1) == SPMD_OK, "%s", spmd_group_errmsg(g));
    CHILD_REQUIRE(spmd_all_reduce(g, &v, &v, 1, SPMD_I32, SPMD_SUM) == SPMD_ERR_REMOTE, "%s", spmd_group_errmsg(g));
    /* written before the failure could be seen: no waiting */
    snprintf(path, sizeof path, "%s/default.%d.rec", dir, idx);
    spmd__flight_record r;
    CHILD_REQUIRE(load(path, &r) == 0, "no record at %s", path);
    CHILD_REQUIRE(!strcmp(r.reason, "failure") && r.status == SPMD_ERR_REMOTE && r.culprit == 2 &&
                      strstr(r.error, "rank 2"),
                  "reason %s status %d culprit %d error '%s'", r.reason, r.status, r.culprit, r.error);
    /* all_reduce #2, if issued before the death was seen, is unfinished */
    const spmd__flight_op *a = find(&r, 'c', "all_reduce"), *b = find(&r, 'c', "barrier");
    CHILD_REQUIRE(b && b->seq == 1 && b->state == SPMD__FLIGHT_DONE, "barrier #1 missing or unfinished");
    CHILD_REQUIRE(!a || (a->seq == 2 && a->state != SPMD__FLIGHT_DONE), "all_reduce #2 should be unfinished");
    spmd__flight_free(&r);
    /* A p2p timeout writes a record too, and leaves the group as it was. */
    spmd_group_set_timeout(g, 100);
    CHILD_REQUIRE(spmd_recv(g, &v, 1, SPMD_I32, idx ^ 1, 9, NULL) != SPMD_OK, "recv succeeded");
    spmd_group_destroy(g);
    return 0;
}

static int timeout_record(int idx, void *arg) {
    (void)arg;
    spmd_group *g = NULL;
    char err[512], path[512];
    CHILD_REQUIRE(spmd_group_init(NULL, &g, err, sizeof err) == SPMD_OK, "%s", err);
    if (idx == 0) {
        int32_t v;
        spmd_group_set_timeout(g, 200);
        CHILD_REQUIRE(spmd_recv(g, &v, 1, SPMD_I32, 1, 9, NULL) == SPMD_ERR_TIMEOUT, "%s", spmd_group_errmsg(g));
        snprintf(path, sizeof path, "%s/default.0.rec", dir);
        spmd__flight_record r;
        CHILD_REQUIRE(load(path, &r) == 0, "no record");
        const spmd__flight_op *p = find(&r, 'p', "recv");
        /* written when the wait gave up: the receive was still posted */
        CHILD_REQUIRE(!strcmp(r.reason, "timeout") && r.status == 0 && strstr(r.error, "no progress") && p &&
                          p->state == SPMD__FLIGHT_RUNNING && p->peer == 1 && p->tag == 9,
                      "reason %s error '%s'", r.reason, r.error);
        spmd__flight_free(&r);
        spmd_group_set_timeout(g, 0);
    }
    CHILD_REQUIRE(spmd_barrier(g) == SPMD_OK, "%s", spmd_group_errmsg(g));
    spmd_group_destroy(g);
    return 0;
}

static void run(const char *transport, mp_fn fn, int world, const char *what) {
    char tmpl[] = "/tmp/spmd_rec_XXXXXX";
    if (!mkdtemp(tmpl)) {
        CHECK(0);
        return;
    }
    snprintf(dir, sizeof dir, "%s", tmpl);
    setenv("SPMD_RECORDER_DIR", dir, 1);
    setenv("SPMD_TRANSPORT", transport, 1);
    int status[4];
    CHECK(mp_fork_run(world, NULL, world, NULL, fn, NULL, 60, status) == 0);
    int expect = fn == failure ? 2 : world; /* the killed rank is not expected to exit 0 */
    for (int i = 0; i < expect; i++) CHECK_MSG(mp_exited_ok(status[i]), "%s over %s: rank %d failed", what, transport, i);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK(system(cmd) == 0);
}

int main(void) {
    setenv("SPMD_LOG_LEVEL", "error", 1);
    static const char *const transports[] = {"tcp", "shm"};
    for (int t = 0; t < 2; t++) {
        run(transports[t], contents, 2, "record contents and requests");
        run(transports[t], failure, 3, "records at a failure");
        run(transports[t], timeout_record, 2, "record at a p2p timeout");
    }
    TEST_MAIN_END();
}
