/* tests/mp/mp_fork.h — fork ranks by hand when a test needs to see each
 * child's fate (spmd_spawn kills the others at the first failure, which is
 * right for users but hides what survivors report).  A child process hosts
 * the store on a free port (so the test process forks single-threaded, as
 * ThreadSanitizer requires); each rank gets the torchrun environment plus
 * per-rank overrides. */
#ifndef SPMD_TEST_MP_FORK_H
#define SPMD_TEST_MP_FORK_H

#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>
#include "spmd/store.h"

typedef int (*mp_fn)(int index, void *arg);

/* In a child (its index named idx): when cond is false, say where and why
 * on stderr and end the child with status 1. */
#define CREQ(cond, ...)                                                                \
    do {                                                                               \
        if (!(cond)) {                                                                 \
            fprintf(stderr, "child %d: %s:%d: %s: ", idx, __FILE__, __LINE__, #cond);  \
            fprintf(stderr, __VA_ARGS__);                                              \
            fputc('\n', stderr);                                                       \
            return 1;                                                                  \
        }                                                                              \
    } while (0)

/* Fork n children; child i gets RANK=ranks[i] (or i when ranks is NULL) and
 * WORLD_SIZE=worlds[i] (or world).  Returns 0 and fills status[i] with each
 * child's wait status; children still alive after timeout_s are killed.
 * Child `frozen` (-1: none) is expected to stop itself: it is not waited for
 * but SIGKILLed once the others are done. */
static inline int mp_fork_run_frozen(int n, const int *ranks, int world, const int *worlds, mp_fn fn, void *arg,
                                     int timeout_s, int frozen, int *status) {
    spmd_store_server *srv = NULL;
    char err[256];
    if (spmd_store_server_open("127.0.0.1", 0, &srv, err, sizeof err)) {
        fprintf(stderr, "store: %s\n", err);
        return -1;
    }
    int port = spmd_store_server_port(srv);
    fflush(NULL);
    pid_t store_pid = fork();
    if (store_pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        _exit(spmd_store_server_run(srv) == SPMD_OK ? 0 : 1);
    }
    spmd_store_server_forget(srv);
    pid_t pids[64];
    for (int i = 0; i < n; i++) {
        pid_t pid = fork();
        if (pid == 0) {
            prctl(PR_SET_PDEATHSIG, SIGKILL);
            alarm((unsigned)timeout_s + 5); /* belt and braces: never outlive the test */
            char v[32];
            snprintf(v, sizeof v, "%d", ranks ? ranks[i] : i);
            setenv("RANK", v, 1);
            snprintf(v, sizeof v, "%d", worlds ? worlds[i] : world);
            setenv("WORLD_SIZE", v, 1);
            setenv("MASTER_ADDR", "127.0.0.1", 1);
            snprintf(v, sizeof v, "%d", port);
            setenv("MASTER_PORT", v, 1);
            setenv("TORCHELASTIC_USE_AGENT_STORE", "True", 1);
            int rc = fn(i, arg);
            fflush(NULL);
            _exit(rc);
        }
        pids[i] = pid;
    }
    for (int i = 0; i < n; i++)
        if (i != frozen) waitpid(pids[i], &status[i], 0);
    if (frozen >= 0 && frozen < n) {
        kill(pids[frozen], SIGKILL);
        waitpid(pids[frozen], &status[frozen], 0);
    }
    kill(store_pid, SIGKILL);
    waitpid(store_pid, NULL, 0);
    return 0;
}

static inline int mp_fork_run(int n, const int *ranks, int world, const int *worlds, mp_fn fn, void *arg,
                              int timeout_s, int *status) {
    return mp_fork_run_frozen(n, ranks, world, worlds, fn, arg, timeout_s, -1, status);
}

/* File descriptors open in this process. */
static inline int mp_open_fds(void) {
    DIR *d = opendir("/proc/self/fd");
    if (!d) return -1;
    int n = 0;
    for (struct dirent *e; (e = readdir(d));)
        if (e->d_name[0] != '.') n++;
    closedir(d);
    return n - 1; /* the directory's own */
}

/* Mappings of spmd's shared memory left in this process.  That memory is
 * memfds named "spmd-..." (shm_link.c, arena.c), shown in the map as
 * "/memfd:spmd-link (deleted)"; matching only that keeps the executable's
 * own path out (a clone in a folder named spmd). */
static inline int mp_spmd_mappings(void) {
    FILE *f = fopen("/proc/self/maps", "r");
    if (!f) return -1;
    char line[512];
    int n = 0;
    while (fgets(line, sizeof line, f))
        if (strstr(line, "/memfd:spmd-")) n++;
    fclose(f);
    return n;
}

static int mp_exited_ok(int status) { return WIFEXITED(status) && WEXITSTATUS(status) == 0; }

#endif
