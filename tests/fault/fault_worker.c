/* fault_worker.c — a worker for the fault scripts, started by spmdrun.
 *   FAULT_MODE=kill    all_reduce FAULT_ITERS times (FAULT_BYTES each); rank
 *                      FAULT_VICTIM SIGKILLs itself before iteration FAULT_AT.
 *                      A survivor whose collective fails exits 3.
 *   FAULT_MODE=stop    the same, but the victim SIGSTOPs itself (frozen).
 *   FAULT_MODE=skip    the same, but the victim skips that all_reduce: it
 *                      prints "skipping all_reduce <it>" and waits in a
 *                      receive nobody sends (a hang, as a rank-dependent bug
 *                      makes one) until the group fails.
 *   FAULT_MODE=idle    after a barrier rank 0 prints "ready"; every rank then
 *                      waits in a receive nobody sends (nobody waits on any
 *                      particular peer) until the group fails, prints
 *                      "rank R failed after N ms: <message>" and exits 3.
 *   FAULT_MODE=orphan  start a grandchild in its own session (setsid) that
 *                      sleeps, write its pid to FAULT_DIR/<rank>.pid, then
 *                      exit 0 (FAULT_HANG unset) or wait forever.
 *   FAULT_MODE=intrude rank 0 starts a copy of itself without the job secret
 *                      that tries the store (must be refused); then every
 *                      rank all_reduces and checks the sum. */
#define _GNU_SOURCE
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "spmd/group.h"
#include "spmd/store.h"

static int envi(const char *name, int dflt) {
    const char *v = getenv(name);
    return v && *v ? atoi(v) : dflt;
}

static int orphan(void) {
    const char *dir = getenv("FAULT_DIR");
    pid_t pid = fork();
    if (pid == 0) {
        setsid();
        execlp("sleep", "sleep", "600", (char *)NULL);
        _exit(127);
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/%s.pid", dir ? dir : ".", getenv("RANK") ? getenv("RANK") : "x");
    FILE *f = fopen(path, "w");
    if (!f) return 1;
    fprintf(f, "%d\n", (int)pid);
    fclose(f);
    if (getenv("FAULT_HANG")) for (;;) pause();
    return 0;
}

/* Without the secret: connect must fail, so nothing can be read or written. */
static int intruder(void) {
    unsetenv("SPMD_AUTH_TOKEN");
    unsetenv("SPMD_AUTH_FILE");
    setenv("SPMD_LOG_LEVEL", "error", 1);
    spmd_store *c = NULL;
    char err[512];
    const char *host = getenv("MASTER_ADDR");
    if (spmd_store_connect(host, envi("MASTER_PORT", 0), 5000, &c, err, sizeof err) == SPMD_OK) {
        void *v = NULL;
        size_t n = 0;
        spmd_store_try_get(c, "addr/0", &v, &n);
        fprintf(stderr, "INTRUDER GOT IN (read %zu bytes)\n", n);
        free(v);
        spmd_store_close(c);
        return 1;
    }
    fprintf(stderr, "intruder refused: %s\n", err);
    return 0;
}

static int idle(spmd_group *g) {
    int rank = spmd_group_rank(g);
    if (spmd_barrier(g) != SPMD_OK) {
        fprintf(stderr, "rank %d: barrier failed: %s\n", rank, spmd_group_errmsg(g));
        return 1;
    }
    if (rank == 0) {
        printf("ready\n");
        fflush(stdout);
    }
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int32_t never;
    spmd_status st = spmd_recv(g, &never, 1, SPMD_I32, SPMD_ANY_SOURCE, 77, NULL);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    long ms = (t1.tv_sec - t0.tv_sec) * 1000 + (t1.tv_nsec - t0.tv_nsec) / 1000000;
    printf("rank %d failed after %ld ms: %s\n", rank, ms, st ? spmd_group_errmsg(g) : "(no error)");
    fflush(stdout);
    spmd_group_destroy(g);
    return 3;
}

int main(int argc, char **argv) {
    const char *mode = getenv("FAULT_MODE") ? getenv("FAULT_MODE") : "kill";
    if (argc > 1 && !strcmp(argv[1], "intruder")) return intruder();
    if (!strcmp(mode, "orphan")) return orphan();
    spmd_group_opts o = SPMD_GROUP_OPTS_DEFAULT;
    o.timeout_ms = getenv("SPMD_TIMEOUT") ? 0 : 60000; /* SPMD_TIMEOUT wins when set */
    spmd_group *g = NULL;
    char err[512];
    if (spmd_group_init(&o, &g, err, sizeof err) != SPMD_OK) {
        fprintf(stderr, "group init failed: %s\n", err);
        return 3;
    }
    int rank = spmd_group_rank(g), world = spmd_group_size(g);
    if (!strcmp(mode, "idle")) return idle(g);
    if (!strcmp(mode, "intrude") && rank == 0) {
        pid_t pid = fork();
        if (pid == 0) {
            execl("/proc/self/exe", argv[0], "intruder", (char *)NULL);
            _exit(127);
        }
        int st = 0;
        waitpid(pid, &st, 0);
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
            fprintf(stderr, "the intruder was not refused\n");
            return 1;
        }
    }
    size_t bytes = (size_t)envi("FAULT_BYTES", 4), n = bytes / 4 ? bytes / 4 : 1;
    int iters = envi("FAULT_ITERS", 10), victim = envi("FAULT_VICTIM", -1), at = envi("FAULT_AT", 0);
    int32_t *v = malloc(n * sizeof *v);
    if (!v) return 1;
    for (int it = 0; it < iters; it++) {
        if (rank == victim && it == at) {
            if (!strcmp(mode, "stop")) raise(SIGSTOP);
            else if (!strcmp(mode, "skip")) {
                printf("skipping all_reduce %d\n", it);
                fflush(stdout);
                /* waits longer than the others' collective: their timeout
                 * fails the group, which ends this receive */
                int32_t never;
                spmd_work *w = NULL;
                spmd_status st = spmd_irecv(g, &never, 1, SPMD_I32, (rank + 1) % world, 99, &w);
                if (!st) st = spmd_work_wait(w, 1 << 30);
                fprintf(stderr, "rank %d: the receive ended: %s\n", rank,
                        st ? (w ? spmd_work_errmsg(w) : spmd_group_errmsg(g)) : "ok");
                spmd_work_free(w);
                free(v);
                spmd_group_destroy(g);
                return 3;
            } else {
                raise(SIGKILL);
            }
        }
        for (size_t i = 0; i < n; i++) v[i] = rank + 1;
        if (spmd_all_reduce(g, v, v, n, SPMD_I32, SPMD_SUM) != SPMD_OK) {
            fprintf(stderr, "rank %d: all_reduce %d failed: %s\n", rank, it, spmd_group_errmsg(g));
            free(v);
            spmd_group_destroy(g);
            return 3; /* the group failed: not the root cause */
        }
        if (v[0] != world * (world + 1) / 2 || v[n - 1] != v[0]) {
            fprintf(stderr, "rank %d: wrong sum %d\n", rank, v[0]);
            return 1;
        }
    }
    free(v);
    spmd_group_destroy(g);
    return 0;
}
