/* spawn.c — spmd_spawn: the C counterpart of torch.multiprocessing.spawn.
 * (Under a launcher — spmdrun, torchrun, mpirun, srun — it forks nothing:
 * each process the launcher started runs its own rank.)
 * A child process hosts the store on a free loopback port (so this process
 * starts no thread and forks the ranks single-threaded); each child gets the
 * torchrun environment (with TORCHELASTIC_USE_AGENT_STORE so it connects
 * instead of hosting), runs fn and exits with its return value.  Children die
 * with the parent (PR_SET_PDEATHSIG).  The parent waits on pidfds, so a
 * failure is seen at once: the other children are killed and the first
 * failure is reported. */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#include "auth/auth.h"
#include "auth/procs.h"
#include "envinfo.h"
#include "group_internal.h"

static int pidfd_open_(pid_t pid) { return (int)syscall(SYS_pidfd_open, pid, 0); }

static void describe_exit(int status, char *out, size_t len) {
    if (WIFEXITED(status)) snprintf(out, len, "exited with code %d", WEXITSTATUS(status));
    else if (WIFSIGNALED(status)) {
        int s = WTERMSIG(status);
        const char *name = sigabbrev_np(s);
        snprintf(out, len, "was killed by signal %d (SIG%s)", s, name ? name : "?");
    } else snprintf(out, len, "ended with status 0x%x", status);
}

static void child_main(int rank, int nprocs, int port, const char *run_id, pid_t parent, spmd_spawn_fn fn,
                       void *arg) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(126); /* parent already gone */
    char v[32];
    snprintf(v, sizeof v, "%d", rank);
    setenv("RANK", v, 1);
    setenv("LOCAL_RANK", v, 1);
    snprintf(v, sizeof v, "%d", nprocs);
    setenv("WORLD_SIZE", v, 1);
    setenv("LOCAL_WORLD_SIZE", v, 1);
    setenv("GROUP_RANK", "0", 1);
    setenv("MASTER_ADDR", "127.0.0.1", 1);
    snprintf(v, sizeof v, "%d", port);
    setenv("MASTER_PORT", v, 1);
    setenv("TORCHELASTIC_USE_AGENT_STORE", "True", 1);
    setenv("SPMD_RUN_ID", run_id, 1);
    spmd__auth_export(); /* the job secret, for a rank that exec()s a program */
    int rc = fn(rank, nprocs, arg);
    fflush(NULL);
    _exit(rc & 0xff);
}

/* Started by a launcher (spmdrun or torchrun: RANK/WORLD_SIZE; mpirun:
 * OMPI_COMM_WORLD_*; srun: SLURM_PROCID/SLURM_NTASKS; PMI), the ranks exist
 * already: forking nprocs more in each would run nprocs x world processes
 * (40 under spmdrun -n 4).  This process joins the launcher's ranks instead:
 * it runs fn(its rank, nprocs, arg) itself, and fn's groups form from the
 * launcher's environment.  A job of another size is refused, naming both. */
static int run_as_launched_rank(int nprocs, spmd_spawn_fn fn, void *arg, spmd_status *st, char *report,
                                size_t reportlen) {
    spmd__envinfo env;
    if ((*st = spmd__env_read(&env, report, reportlen))) return 1;
    if (env.rank < 0) return 0; /* no launcher: fork the ranks */
    if (env.world != nprocs) {
        *st = spmd__fail(report, reportlen, SPMD_ERR_INVALID,
                         "spawn of %d ranks, but this process is rank %d of %d started by a launcher (%s "
                         "environment): the launcher made the ranks, so start it with %d processes "
                         "(spmdrun -n %d, mpirun -np %d, srun -n %d) or run the program without a launcher",
                         nprocs, env.rank, env.world, env.source, nprocs, nprocs, nprocs, nprocs);
        return 1;
    }
    int rc = fn(env.rank, nprocs, arg);
    *st = rc ? spmd__fail(report, reportlen, SPMD_ERR_REMOTE, "rank %d returned %d", env.rank, rc) : SPMD_OK;
    return 1;
}

spmd_status spmd_spawn_timeout(int nprocs, spmd_spawn_fn fn, void *arg, int timeout_ms, char *report,
                               size_t reportlen) {
    if (nprocs < 1 || !fn) return spmd__fail(report, reportlen, SPMD_ERR_INVALID, "spawn: bad arguments");
    if (report && reportlen) report[0] = 0;
    spmd_status st;
    if (run_as_launched_rank(nprocs, fn, arg, &st, report, reportlen)) return st;
    /* A per-job secret (before the per-user file) for the store and the ranks. */
    if ((st = spmd__auth_ensure(report, reportlen))) return st;
    spmd_store_server *srv = NULL;
    st = spmd_store_server_open("127.0.0.1", 0, &srv, report, reportlen);
    if (st) return st;
    int port = spmd_store_server_port(srv);
    fflush(NULL);
    pid_t parent = getpid();
    pid_t store_pid = fork();
    if (store_pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent) _exit(126);
        _exit(spmd_store_server_run(srv) == SPMD_OK ? 0 : 1);
    }
    spmd_store_server_forget(srv); /* the child serves; our copy of the socket goes */
    if (store_pid < 0) return spmd__fail_errno(report, reportlen, SPMD_ERR_SYSTEM, errno, "spawn: fork of the store");
    char run_id[40];
    uint64_t r = 0;
    if (getrandom(&r, sizeof r, 0) != (ssize_t)sizeof r) r = spmd__now_ns();
    snprintf(run_id, sizeof run_id, "spawn-%016llx", (unsigned long long)r);
    pid_t *pids = calloc((size_t)nprocs, sizeof *pids);
    struct pollfd *pfd = calloc((size_t)nprocs, sizeof *pfd);
    int *alive = calloc((size_t)nprocs, sizeof *alive);
    if (!pids || !pfd || !alive) {
        free(pids); free(pfd); free(alive);
        kill(store_pid, SIGKILL);
        waitpid(store_pid, NULL, 0);
        return spmd__fail(report, reportlen, SPMD_ERR_NOMEM, "spawn: out of memory");
    }
    int started = 0;
    for (int i = 0; i < nprocs; i++) {
        pid_t pid = fork();
        if (pid == 0) {
            /* The rank needs none of the parent's bookkeeping. */
            for (int j = 0; j < i; j++)
                if (pfd[j].fd >= 0) close(pfd[j].fd);
            free(pids);
            free(pfd);
            free(alive);
            child_main(i, nprocs, port, run_id, parent, fn, arg);
        }
        if (pid < 0) {
            st = spmd__fail_errno(report, reportlen, SPMD_ERR_SYSTEM, errno, "spawn: fork of rank %d", i);
            break;
        }
        pids[i] = pid;
        alive[i] = 1;
        pfd[i].fd = pidfd_open_(pid);
        pfd[i].events = POLLIN;
        started++;
    }
    int64_t deadline = spmd__deadline(timeout_ms);
    int left = started, failed = st != SPMD_OK;
    while (left > 0) {
        int wait_ms = spmd__remaining_ms(deadline);
        if (wait_ms == 0 && !failed) {
            st = spmd__fail(report, reportlen, SPMD_ERR_TIMEOUT, "spawn: ranks still running after %d ms", timeout_ms);
            failed = 1;
            for (int i = 0; i < started; i++) if (alive[i]) kill(pids[i], SIGKILL);
        }
        int rc = poll(pfd, (nfds_t)started, failed ? 1000 : (wait_ms < 0 || wait_ms > 1000 ? 1000 : wait_ms));
        if (rc < 0 && errno != EINTR) break;
        for (int i = 0; i < started; i++) {
            if (!alive[i]) continue;
            int status = 0;
            pid_t w = waitpid(pids[i], &status, WNOHANG);
            if (w != pids[i]) continue;
            alive[i] = 0;
            if (pfd[i].fd >= 0) close(pfd[i].fd);
            pfd[i].fd = -1;
            left--;
            int ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
            if (!ok && !failed) {
                char how[96], after[160] = "";
                int root = i, root_status = status;
                /* A rank that exited because a peer's socket closed did so
                 * after that peer began to die: name the dying one. */
                if (!WIFSIGNALED(status))
                    for (int j = 0; j < started; j++) {
                        int sj = 0;
                        if (!alive[j] || !spmd__proc_exiting(pids[j])) continue;
                        if (waitpid(pids[j], &sj, 0) != pids[j]) continue;
                        alive[j] = 0;
                        if (pfd[j].fd >= 0) close(pfd[j].fd);
                        pfd[j].fd = -1;
                        left--;
                        if (WIFSIGNALED(sj) && root == i) {
                            root = j;
                            root_status = sj;
                        }
                    }
                /* Nobody died by a signal: a stopped rank is what the others
                 * gave up on (their heartbeat error names it). */
                int stopped = -1;
                for (int j = 0; j < started && !WIFSIGNALED(root_status) && stopped < 0; j++)
                    if (alive[j] && spmd__proc_stopped(pids[j]) == 1) stopped = root = j;
                if (root != i) {
                    describe_exit(status, how, sizeof how);
                    snprintf(after, sizeof after, "; rank %d %s after it", i, how);
                }
                if (stopped >= 0) snprintf(how, sizeof how, "was stopped (SIGSTOP or a debugger): its peers lost its heartbeat");
                else describe_exit(root_status, how, sizeof how);
                st = spmd__fail(report, reportlen, SPMD_ERR_REMOTE, "rank %d (pid %ld) %s%s", root,
                                (long)pids[root], how, after);
                failed = 1;
                for (int j = 0; j < started; j++) if (alive[j]) kill(pids[j], SIGKILL);
            }
        }
    }
    for (int i = 0; i < started; i++) {
        if (alive[i]) { kill(pids[i], SIGKILL); waitpid(pids[i], NULL, 0); }
        if (pfd[i].fd >= 0) close(pfd[i].fd);
    }
    free(pids);
    free(pfd);
    free(alive);
    kill(store_pid, SIGKILL);
    waitpid(store_pid, NULL, 0);
    return st;
}

spmd_status spmd_spawn(int nprocs, spmd_spawn_fn fn, void *arg, char *report, size_t reportlen) {
    return spmd_spawn_timeout(nprocs, fn, arg, -1, report, reportlen);
}
