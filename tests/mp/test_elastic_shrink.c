/* Agree and shrink (issue 25, docs/RELIABILITY.md "Recovery in place"): at
 * world 4, over shared memory and over TCP, one rank (rank 0 included) or
 * two at once are SIGKILLed; the survivors' call fails naming a victim,
 * spmd_group_shrink builds a group of the survivors (dense ranks in the old
 * order, epoch 1) and its collectives and messages are exact.  Then: a rank
 * killed during the shrink itself (after it registered): the first attempt
 * fails and the call returns the second's group (epoch 2); a rank stopped
 * past the heartbeat timeout is left out, and once resumed is refused
 * cleanly; rank 0 hosting the store (file://) is killed, the survivors meet
 * on the standby, and its new host is killed again; the store's host is
 * stopped instead; and a healthy group shrinks to itself.  Once every group
 * is destroyed nothing is left mapped. */
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <time.h>
#include "harness.h"
#include "mp/mp_fork.h"
#include "spmd/group.h"

#define WORLD 4
#define BIG (1u << 18) /* floats: 1 MiB */

enum { KILL, KILL_IN_SHRINK, STOP, STORE_HOST, STOP_STORE_HOST };

typedef struct {
    int how;
    int victims[2], nvictims;
    const char *transport;
    char rdv[128]; /* STORE_HOST: the file:// rendezvous (rank 0 hosts the store) */
} sh_case;

static int is_victim(const sh_case *c, int r) {
    for (int i = 0; i < c->nvictims; i++)
        if (c->victims[i] == r) return 1;
    return 0;
}

/* Everything a group of the survivors must do right (this rank is old rank
 * `old`): its shape, then sums, a 1 MiB all_reduce and a ring of messages. */
static int check_new_group(int idx, const sh_case *c, spmd_group *s, int old, const int *alive, int nalive,
                           int epoch) {
    CREQ(spmd_group_size(s) == nalive, "size %d, want %d", spmd_group_size(s), nalive);
    CREQ(spmd_group_epoch(s) == epoch, "epoch %d, want %d", spmd_group_epoch(s), epoch);
    int me = spmd_group_rank(s);
    for (int r = 0; r < nalive; r++)
        CREQ(spmd_group_parent_rank(s, r) == alive[r], "new rank %d is old rank %d, want %d", r,
             spmd_group_parent_rank(s, r), alive[r]);
    CREQ(alive[me] == old, "this rank is new rank %d (old %d)", me, old);
    int64_t v = old + 1, want = 0;
    for (int r = 0; r < nalive; r++) want += alive[r] + 1;
    CREQ(spmd_all_reduce(s, &v, &v, 1, SPMD_I64, SPMD_SUM) == SPMD_OK, "%s", spmd_group_errmsg(s));
    CREQ(v == want, "sum %lld, want %lld", (long long)v, (long long)want);
    float *big = malloc(sizeof(float) * BIG);
    CREQ(big != NULL, "out of memory");
    for (size_t i = 0; i < BIG; i++) big[i] = (float)(old + 1) + (float)(i % 7);
    CREQ(spmd_all_reduce(s, big, big, BIG, SPMD_F32, SPMD_SUM) == SPMD_OK, "%s", spmd_group_errmsg(s));
    for (size_t i = 0; i < BIG; i++)
        if (big[i] != (float)want + (float)nalive * (float)(i % 7)) {
            free(big);
            CREQ(0, "element %zu is wrong", i);
        }
    free(big);
    int32_t token = me, got = -1;
    spmd_work *w = NULL;
    CREQ(spmd_irecv(s, &got, 1, SPMD_I32, (me + nalive - 1) % nalive, 5, &w) == SPMD_OK, "%s", spmd_group_errmsg(s));
    CREQ(spmd_send(s, &token, 1, SPMD_I32, (me + 1) % nalive, 5) == SPMD_OK, "%s", spmd_group_errmsg(s));
    CREQ(spmd_work_wait(w, -1) == SPMD_OK, "%s", spmd_work_errmsg(w));
    spmd_work_free(w);
    CREQ(got == (me + nalive - 1) % nalive, "ring got %d", got);
    CREQ(spmd_barrier(s) == SPMD_OK, "%s", spmd_group_errmsg(s));
    (void)c;
    return 0;
}

/* Once every group is destroyed, nothing of them is left: no mapping of
 * any rank's shared memory (the dead ones' included) and no descriptor —
 * except after a formation given up on, which keeps its own until its
 * deadline. */
static int check_reclaimed(int idx, const sh_case *c, int fds_before) {
    CREQ(mp_spmd_mappings() == 0, "%d shared mappings left after destroy", mp_spmd_mappings());
    if (c->how != KILL_IN_SHRINK)
        CREQ(mp_open_fds() == fds_before, "%d descriptors open after destroy, %d before", mp_open_fds(), fds_before);
    return 0;
}

typedef struct {
    spmd_group *g, *out;
    spmd_status st;
    char err[512];
} shrink_call;

static void *shrink_thread(void *arg) {
    shrink_call *sc = arg;
    sc->st = spmd_group_shrink(sc->g, &sc->out, sc->err, sizeof sc->err);
    return NULL;
}

/* A victim of KILL_IN_SHRINK: it joins the shrink and dies once it has
 * registered (its key is in the store), before the others can form. */
static int die_in_shrink(int idx, spmd_group *g) {
    shrink_call sc = {.g = g};
    pthread_t t;
    CREQ(pthread_create(&t, NULL, shrink_thread, &sc) == 0, "pthread_create");
    spmd_store *st = NULL;
    CREQ(spmd_store_prefixed(spmd_group_store(g), "", &st) == SPMD_OK, "store handle");
    char key[64];
    snprintf(key, sizeof key, "shrink1/alive/%d", spmd_group_rank(g));
    for (;;) {
        void *v = NULL;
        size_t vl = 0;
        if (spmd_store_try_get(st, key, &v, &vl) == SPMD_OK) raise(SIGKILL);
        free(v);
    }
}

static int rank_main(int idx, void *arg) {
    const sh_case *c = arg;
    setenv("SPMD_TRANSPORT", c->transport, 1);
    /* heartbeats only where a rank is stopped: no false alarm elsewhere */
    setenv("SPMD_HEARTBEAT_TIMEOUT", c->how == STOP || c->how == STOP_STORE_HOST ? "1" : "0", 1);
    const int fds_before = mp_open_fds();
    spmd_group *g = NULL;
    char err[512], url[160];
    spmd_group_opts opts = SPMD_GROUP_OPTS_DEFAULT;
    if (c->how == STORE_HOST || c->how == STOP_STORE_HOST) {
        snprintf(url, sizeof url, "file://%s", c->rdv);
        opts.init_method = url;
    }
    CREQ(spmd_group_init(&opts, &g, err, sizeof err) == SPMD_OK, "%s", err);
    int32_t pids[WORLD], pid = (int32_t)getpid();
    if (spmd_all_gather(g, &pid, pids, 1, SPMD_I32) != SPMD_OK) {
        /* With nobody killed, a rank that has all the pieces goes on to
         * shrink, and that revokes the group under a rank still waiting for
         * its last piece: the documented revoke, not a failure.  It must
         * name the shrinking rank, and this rank still joins the shrink. */
        CREQ(c->nvictims == 0 && strstr(spmd_group_errmsg(g), "is shrinking the group"), "%s",
             spmd_group_errmsg(g));
    }
    /* The victims act once every survivor is past the all_gather. */
    float past = 1;
    int first = c->victims[0], in_shrink = c->how == KILL_IN_SHRINK ? c->victims[1] : -1;
    int nalive = 0, alive[WORLD];
    for (int r = 0; r < WORLD; r++)
        if (!is_victim(c, r)) alive[nalive++] = r;
    if (is_victim(c, idx) && idx != in_shrink) {
        /* (with two victims, the other one's death may end this early: then
         * it had heard from everyone) */
        for (int i = 0; i < nalive; i++)
            if (spmd_recv(g, &past, 1, SPMD_F32, SPMD_ANY_SOURCE, 76, NULL) != SPMD_OK) break;
        if (c->how != STOP && c->how != STOP_STORE_HOST) raise(SIGKILL);
        raise(SIGSTOP);
        if (c->how == STOP_STORE_HOST) return 1; /* never resumed: killed by the test */
        /* Resumed by a survivor after the others went on without us: the
         * old group is of no use (a first all_reduce may still finish the
         * step the others began before they gave up on it; the next one
         * cannot) and the shrink refuses us. */
        int32_t v = 1;
        if (spmd_all_reduce(g, &v, &v, 1, SPMD_I32, SPMD_SUM) == SPMD_OK)
            CREQ(spmd_all_reduce(g, &v, &v, 1, SPMD_I32, SPMD_SUM) != SPMD_OK, "all_reduces succeed after resuming");
        spmd_group *s = NULL;
        spmd_status st = spmd_group_shrink(g, &s, err, sizeof err);
        CREQ(st == SPMD_ERR_REMOTE && s == NULL, "shrink after resuming: %s: %s", spmd_status_str(st), err);
        CREQ(strstr(err, "excluded from epoch 1"), "message: %s", err);
        spmd_group_destroy(g);
        return 0;
    }
    if (idx != in_shrink)
        for (int i = 0; i < c->nvictims; i++)
            if (c->victims[i] != in_shrink) /* may fail: the other victim may be dead */
                (void)spmd_send(g, &past, 1, SPMD_F32, c->victims[i], 76);
    /* The old group fails naming the first victim (or, with two, either);
     * with none, the shrink revokes the healthy group itself. */
    int32_t v = 1;
    spmd_status st = c->nvictims ? spmd_all_reduce(g, &v, &v, 1, SPMD_I32, SPMD_SUM) : SPMD_ERR_REMOTE;
    const char *msg = c->nvictims ? spmd_group_errmsg(g) : "rank -1 ";
    char w1[32], w2[32];
    snprintf(w1, sizeof w1, "rank %d ", first);
    snprintf(w2, sizeof w2, "rank %d ", c->nvictims > 1 ? c->victims[1] : first); /* either, when two die */
    CREQ(st == SPMD_ERR_REMOTE && (strstr(msg, w1) || strstr(msg, w2)), "%s: %s", spmd_status_str(st), msg);
    if (idx == in_shrink) return die_in_shrink(idx, g);
    spmd_group *s = NULL;
    st = spmd_group_shrink(g, &s, err, sizeof err);
    /* A member killed once registered in the shrink ends the first attempt
     * (epoch 1); the second forms without it. */
    int epoch = c->how == KILL_IN_SHRINK ? 2 : 1;
    CREQ(st == SPMD_OK, "shrink: %s: %s", spmd_status_str(st), err);
    int victims_failed[WORLD], nf = spmd_group_failed_ranks(g, victims_failed, WORLD);
    CREQ(nf >= (c->nvictims > 0), "no failed rank known after the shrink");
    if (check_new_group(idx, c, s, idx, alive, nalive, epoch)) return 1;
    if (c->how == STORE_HOST) {
        /* The store now lives on new rank 0 (old rank 1, the standby's host):
         * kill it too, and shrink again on the new standby. */
        int me = spmd_group_rank(s);
        if (me == 0) {
            for (int i = 0; i < nalive - 1; i++)
                CREQ(spmd_recv(s, &past, 1, SPMD_F32, SPMD_ANY_SOURCE, 76, NULL) == SPMD_OK, "%s", spmd_group_errmsg(s));
            raise(SIGKILL);
        }
        CREQ(spmd_send(s, &past, 1, SPMD_F32, 0, 76) == SPMD_OK, "%s", spmd_group_errmsg(s));
        st = spmd_all_reduce(s, &v, &v, 1, SPMD_I32, SPMD_SUM);
        CREQ(st == SPMD_ERR_REMOTE && strstr(spmd_group_errmsg(s), "rank 0 "), "%s: %s", spmd_status_str(st),
             spmd_group_errmsg(s));
        spmd_group *s2 = NULL;
        CREQ(spmd_group_shrink(s, &s2, err, sizeof err) == SPMD_OK, "second shrink: %s", err);
        int alive2[WORLD];
        for (int r = 1; r < nalive; r++) alive2[r - 1] = r;
        if (check_new_group(idx, c, s2, me, alive2, nalive - 1, 2)) return 1;
        spmd_group_destroy(s);
        spmd_group_destroy(g);
        spmd_group_destroy(s2);
        return check_reclaimed(idx, c, fds_before);
    }
    if (c->how == STOP && spmd_group_rank(s) == 0) {
        /* wake the stopped rank once everyone is done with the old group */
        spmd_group_destroy(g);
        g = NULL;
        CREQ(spmd_barrier(s) == SPMD_OK, "%s", spmd_group_errmsg(s));
        kill(pids[first], SIGCONT);
    } else if (c->how == STOP) {
        spmd_group_destroy(g);
        g = NULL;
        CREQ(spmd_barrier(s) == SPMD_OK, "%s", spmd_group_errmsg(s));
    }
    /* Either order of destruction is fine: alternate. */
    if (idx % 2) {
        spmd_group_destroy(g);
        spmd_group_destroy(s);
    } else {
        spmd_group_destroy(s);
        spmd_group_destroy(g);
    }
    return check_reclaimed(idx, c, fds_before);
}

static void run_case(const sh_case *c) {
    int status[WORLD];
    char what[160];
    if (!c->nvictims) snprintf(what, sizeof what, "%s, nobody killed", c->transport);
    else snprintf(what, sizeof what, "%s, %s rank %d%s%.0d", c->transport,
             c->how == KILL                ? "killed"
             : c->how == STOP            ? "stopped"
             : c->how == STORE_HOST      ? "store host killed, twice:"
             : c->how == STOP_STORE_HOST ? "store host stopped:"
                                         : "killed, then in the shrink",
             c->victims[0], c->nvictims > 1 ? " and " : "", c->nvictims > 1 ? c->victims[1] : 0);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    CHECK(mp_fork_run_frozen(WORLD, NULL, WORLD, NULL, rank_main, (void *)c, 90,
                             c->how == STOP_STORE_HOST ? c->victims[0] : -1, status) == 0);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    printf("%s: %.2f s\n", what, (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9);
    for (int i = 0; i < WORLD; i++) {
        if ((is_victim(c, i) && c->how != STOP) || (c->how == STORE_HOST && i == 1)) {
            /* (the stopped store host is SIGKILLed by mp_fork_run_frozen) */
            CHECK_MSG(WIFSIGNALED(status[i]) && WTERMSIG(status[i]) == SIGKILL, "%s: rank %d was not killed (%#x)",
                      what, i, status[i]);
            continue;
        }
        CHECK_MSG(mp_exited_ok(status[i]), "%s: rank %d failed (status %#x)", what, i, status[i]);
    }
}

int main(void) {
    setenv("SPMD_TIMEOUT", "60s", 1); /* a hang guard, never reached when it works */
    const char *transports[] = {"auto", "tcp"};
    sh_case none = {KILL, {-1, -1}, 0, "auto", ""}; /* a healthy group shrinks to itself */
    run_case(&none);
    for (int t = 0; t < 2; t++) {
        sh_case one = {KILL, {t ? 3 : 0, -1}, 1, transports[t], ""};
        run_case(&one);
        sh_case two = {KILL, {t ? 0 : 1, t ? 3 : 2}, 2, transports[t], ""};
        run_case(&two);
        sh_case during = {KILL_IN_SHRINK, {t ? 2 : 3, 1}, 2, transports[t], ""};
        run_case(&during);
        sh_case stop = {STOP, {t ? 1 : 2, -1}, 1, transports[t], ""};
        run_case(&stop);
        sh_case host = {STORE_HOST, {0, -1}, 1, transports[t], ""};
        char dir[] = "/tmp/spmd_elastic_XXXXXX";
        REQUIRE(mkdtemp(dir) != NULL);
        snprintf(host.rdv, sizeof host.rdv, "%s/rdv", dir);
        run_case(&host);
        unlink(host.rdv);
        host.how = STOP_STORE_HOST;
        run_case(&host);
        unlink(host.rdv);
        rmdir(dir);
    }
    TEST_MAIN_END();
}
