/* guard.c — nothing outlives spmdrun, not even when it is SIGKILLed.
 *
 * Each worker gets PR_SET_PDEATHSIG, but that reaches only the worker itself,
 * not the processes it started in its own process group.  So before any
 * thread exists spmdrun forks a guard: a copy of itself that ignores the
 * terminal's signals and reads the workers' process-group ids from a pipe.
 * When spmdrun dies, however it dies, the kernel closes the pipe's write
 * end; the guard sees EOF, SIGKILLs every group still registered and exits.
 * On a normal exit spmdrun deregisters the groups first, so the guard just
 * exits.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "spmdrun.h"

#define GUARD_MAX 4096

static void guard_main(int rfd) {
    static const int quiet[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGPIPE, SIGTSTP, SIGTTIN, SIGTTOU};
    for (size_t i = 0; i < sizeof quiet / sizeof quiet[0]; i++) signal(quiet[i], SIG_IGN);
    int devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
    if (devnull >= 0) {
        dup2(devnull, 0);
        dup2(devnull, 1);
        dup2(devnull, 2);
        if (devnull > 2) close(devnull);
    }
    static int32_t groups[GUARD_MAX];
    int n = 0;
    pid_t agent = getppid(); /* still alive on a normal exit: spared by the sweep */
    for (;;) {
        int32_t rec[2];
        ssize_t got = read(rfd, rec, sizeof rec);
        if (got < 0 && errno == EINTR) continue;
        if (got != (ssize_t)sizeof rec) break; /* EOF: spmdrun is gone */
        if (rec[0] > 0 && n < GUARD_MAX) {
            groups[n++] = rec[1];
        } else if (rec[0] < 0) {
            for (int i = 0; i < n; i++)
                if (groups[i] == rec[1]) {
                    groups[i] = groups[--n];
                    break;
                }
        }
    }
    for (int i = 0; i < n; i++) kill(-(pid_t)groups[i], SIGKILL);
    sr_trust_guard_sweep(agent); /* and whatever left its group (trust.c) */
    _exit(0);
}

int sr_guard_start(sr_agent *a, char *err, size_t errlen) {
    int p[2];
    if (pipe2(p, O_CLOEXEC) < 0) {
        snprintf(err, errlen, "pipe: %s", strerror(errno));
        return -1;
    }
    pid_t pid = fork();
    if (pid < 0) {
        snprintf(err, errlen, "fork: %s", strerror(errno));
        close(p[0]);
        close(p[1]);
        return -1;
    }
    if (pid == 0) {
        close(p[1]);
        guard_main(p[0]);
    }
    close(p[0]);
    a->guard_fd = p[1];
    a->guard_pid = pid;
    return 0;
}

static void guard_send(sr_agent *a, int32_t op, pid_t pgid) {
    if (a->guard_fd < 0) return;
    int32_t rec[2] = {op, (int32_t)pgid};
    ssize_t n;
    do n = write(a->guard_fd, rec, sizeof rec); /* 8 bytes: atomic on a pipe */
    while (n < 0 && errno == EINTR);
}

void sr_guard_add(sr_agent *a, pid_t pgid) { guard_send(a, 1, pgid); }
void sr_guard_remove(sr_agent *a, pid_t pgid) { guard_send(a, -1, pgid); }

void sr_guard_stop(sr_agent *a) {
    if (a->guard_fd >= 0) close(a->guard_fd);
    a->guard_fd = -1;
    if (a->guard_pid > 0) {
        while (waitpid(a->guard_pid, NULL, 0) < 0 && errno == EINTR) {
        }
    }
    a->guard_pid = 0;
}
