/* The launcher's store moves (issue 25, docs/LAUNCHER.md "The store's host
 * lost"): ranks formed on a launcher's store (TORCHELASTIC_USE_AGENT_STORE)
 * with stand-ins in SPMD_STORE_STANDBY follow it when it is gone.  World 3;
 * the store (A) and two stand-ins (B, C) each run in a process of their own,
 * the first stand-in named is a port nobody listens on.  A is SIGKILLed: a
 * shrink of the healthy group meets on B (the dead port is refused at once,
 * skipped), epoch 1 with every rank and exact sums; then B is killed and the
 * next shrink meets on C, the stand-in after B (epoch 2). */
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/mman.h>
#include "harness.h"
#include "mp/mp_fork.h"
#include "spmd/group.h"
#include "store/store_internal.h"

#define WORLD 3

static pid_t store_pid[3]; /* A, B, C */
static int store_port[3];

/* Shared by the forked ranks: how many have left each move's barrier.  No
 * group operation may be in flight on any rank when one of them shrinks
 * (the shrink revokes the old group: a peer still finishing a barrier would
 * fail it), so the ranks meet here, outside the group, before the kill. */
static _Atomic int *left_barrier;

static void meet(int move) {
    atomic_fetch_add(&left_barrier[move], 1);
    while (atomic_load(&left_barrier[move]) < WORLD) sched_yield();
}

/* A store server in a process of its own; 0 or -1. */
static int host_store(int i) {
    spmd_store_server *srv = NULL;
    char err[256];
    if (spmd_store_server_open("127.0.0.1", 0, &srv, err, sizeof err)) return -1;
    store_port[i] = spmd_store_server_port(srv);
    fflush(NULL);
    store_pid[i] = fork();
    if (store_pid[i] == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        _exit(spmd_store_server_run(srv) == SPMD_OK ? 0 : 1);
    }
    spmd_store_server_forget(srv);
    return store_pid[i] > 0 ? 0 : -1;
}

/* Rank 0 kills store i; every rank returns once it refuses connections. */
static int kill_store(int idx, int i) {
    if (idx == 0) CREQ(kill(store_pid[i], SIGKILL) == 0, "kill store %d", i);
    char err[256];
    for (;;) { /* the kernel closes its socket as it dies: refused from then on */
        spmd_store *s = NULL;
        spmd_status st = spmd__store_connect_up("127.0.0.1", store_port[i], 30000, &s, err, sizeof err);
        if (st == SPMD_OK) {
            spmd_store_close(s);
            continue;
        }
        CREQ(st == SPMD_ERR_SYSTEM, "store %d: %s", i, err);
        return 0;
    }
}

static int check_group(int idx, spmd_group *s, int epoch) {
    CREQ(spmd_group_size(s) == WORLD && spmd_group_rank(s) == idx, "rank %d of %d", spmd_group_rank(s),
         spmd_group_size(s));
    CREQ(spmd_group_epoch(s) == epoch, "epoch %d, want %d", spmd_group_epoch(s), epoch);
    int64_t v = idx + 1;
    CREQ(spmd_all_reduce(s, &v, &v, 1, SPMD_I64, SPMD_SUM) == SPMD_OK, "%s", spmd_group_errmsg(s));
    CREQ(v == WORLD * (WORLD + 1) / 2, "sum %lld", (long long)v);
    return 0;
}

static int rank_main(int idx, void *arg) {
    (void)arg;
    char v[32], err[512];
    snprintf(v, sizeof v, "%d", store_port[0]); /* the launcher's store is A */
    setenv("MASTER_PORT", v, 1);
    spmd_group *cur = NULL;
    CREQ(spmd_group_init(NULL, &cur, err, sizeof err) == SPMD_OK, "%s", err);
    for (int move = 1; move <= 2; move++) { /* A dies, then B */
        CREQ(spmd_barrier(cur) == SPMD_OK, "%s", spmd_group_errmsg(cur));
        meet(move);
        /* every rank waits until the store refuses: nobody shrinks on it */
        if (kill_store(idx, move - 1)) return 1;
        spmd_group *next = NULL;
        CREQ(spmd_group_shrink(cur, &next, err, sizeof err) == SPMD_OK, "shrink after store %c died: %s",
             "AB"[move - 1], err);
        spmd_group_destroy(cur);
        cur = next;
        if (check_group(idx, cur, move)) return 1;
    }
    spmd_group_destroy(cur);
    return 0;
}

int main(void) {
    setenv("SPMD_TIMEOUT", "60s", 1); /* a hang guard, never reached when it works */
    setenv("SPMD_HEARTBEAT_TIMEOUT", "0", 1);
    char err[256];
    int dead = 0; /* a port nobody listens on: bind one, learn it, close it */
    int fd = spmd__listen("127.0.0.1", 0, 1, &dead, err, sizeof err);
    REQUIRE(fd >= 0);
    close(fd);
    for (int i = 0; i < 3; i++) REQUIRE(host_store(i) == 0);
    char list[128];
    snprintf(list, sizeof list, "127.0.0.1:%d,127.0.0.1:%d,127.0.0.1:%d", dead, store_port[1], store_port[2]);
    setenv("SPMD_STORE_STANDBY", list, 1);
    left_barrier = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    REQUIRE(left_barrier != MAP_FAILED);
    int status[WORLD];
    CHECK(mp_fork_run(WORLD, NULL, WORLD, NULL, rank_main, NULL, 90, status) == 0);
    for (int i = 0; i < WORLD; i++) CHECK_MSG(mp_exited_ok(status[i]), "rank %d failed (status %#x)", i, status[i]);
    for (int i = 0; i < 3; i++) {
        kill(store_pid[i], SIGKILL);
        waitpid(store_pid[i], NULL, 0);
    }
    TEST_MAIN_END();
}
