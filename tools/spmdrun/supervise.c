/* supervise.c — one attempt of the local worker group: start, watch, tear down.
 *
 * Each worker is fork() + execve() of the program, in its own process group
 * (so a teardown reaches whatever it started), with PR_SET_PDEATHSIG (checked
 * against a parent that may already be gone) and two pipes for stdout and
 * stderr.  The agent then sleeps in one poll() over the signalfd (SIGCHLD and
 * the stop signals) and the pipes, waking at least every monitor interval for
 * the rendezvous tick.
 *
 * The first failure (non-zero exit or a signal) ends the attempt: every other
 * worker's group gets SIGTERM (and SIGCONT, so a stopped one acts on it), and
 * SIGKILL when the grace period is over.  A stop signal to spmdrun is
 * forwarded the same way; a second one goes straight to SIGKILL.  SIGUSR1
 * asks the workers for their flight records (flight.c) and prints what they
 * say, without stopping anything.  The attempt is over once every worker is
 * reaped and its pipes are drained.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/procs.h"
#include "common/common.h"
#include "spmd/group.h"
#include "spmdrun.h"

/* After its exit, how long a worker's pipes may stay open (a descendant that
 * escaped the process group holds them). */
#define EOF_GRACE_MS 2000
/* After the first failure, how long the other workers may take to write
 * their flight records (their groups fail within milliseconds) before
 * SIGTERM, when the job keeps records at all. */
#define RECORD_GRACE_MS 3000

typedef struct {
    int local_rank, rank;
    pid_t pid;
    int running;      /* not reaped yet */
    int status;       /* wait status once reaped */
    char when[32];
    char **env;
    char **argv;      /* the program's arguments (sr_argv_build) */
    int exec_fd;      /* read end of the exec-status pipe, -1 when done */
    sr_stream out, err;
} worker;

typedef enum { RUNNING, STOPPING } phase;

typedef struct {
    sr_agent *a;
    const sr_assignment *as;
    worker *w;
    int n;
    phase ph;
    int64_t kill_at_ms;  /* SIGKILL deadline while STOPPING, -1 none */
    int64_t term_at_ms;  /* SIGTERM deferred until then for the flight records, -1 none */
    int killed;          /* SIGKILL already sent */
    sr_attempt_result result;
    int root;            /* index of the first failure, -1 none */
    int lost;            /* --on-failure shrink: workers killed while the others went on */
    int lost_first;      /* index of the first of them, -1 none */
    int replaced;        /* --on-failure replace: of them, replaced by a joining worker */
    int root_stopped;    /* the root cause is a worker that was stopped, not one that exited */
    int *others;         /* indices of other failures */
    int nothers, others_cap;
} attempt;

int sr_agent_poll_signals(sr_agent *a) {
    struct signalfd_siginfo si;
    for (;;) {
        ssize_t n = read(a->sigfd, &si, sizeof si);
        if (n < 0 && errno == EINTR) continue;
        if (n != (ssize_t)sizeof si) break;
        int sig = (int)si.ssi_signo;
        if (sig == SIGINT || sig == SIGTERM || sig == SIGHUP || sig == SIGQUIT) {
            if (a->stop_signal) a->stop_count++;
            else a->stop_signal = sig;
        }
        if (sig == SIGUSR1) a->dump_asked++;
    }
    return a->stop_signal;
}

/* mkdir -p */
static int make_dirs(const char *path) {
    char buf[4096];
    if (strlen(path) >= sizeof buf) {
        errno = ENAMETOOLONG;
        return -1;
    }
    strcpy(buf, path);
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/') continue;
        *p = 0;
        if (mkdir(buf, 0755) < 0 && errno != EEXIST) return -1;
        *p = '/';
    }
    if (mkdir(buf, 0755) < 0 && errno != EEXIST) return -1;
    return 0;
}

/* Which streams of local rank lr go to a file and which to the console. */
static void stream_targets(const sr_config *cfg, int lr, int *file_mask, int *console_mask) {
    int r = sr_std_mode(&cfg->redirects, lr), t = sr_std_mode(&cfg->tee, lr);
    *file_mask = r | t;
    *console_mask = SR_STD_ALL & ~r;
    if (cfg->filter_set && !cfg->filter[lr]) *console_mask = 0;
}

static int open_log(const char *dir, const char *name, char *err, size_t errlen) {
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) snprintf(err, errlen, "cannot create %s: %s", path, strerror(errno));
    return fd;
}

/* The child between fork() and execve(): async-signal-safe calls only (the
 * agent may have a store thread). */
static void child_exec(const sr_agent *a, worker *w, pid_t parent, int out_w, int err_w,
                       int exec_w) {
    setpgid(0, 0);
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0 || getppid() != parent) _exit(126);
    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    sigaction(SIGPIPE, &dfl, NULL); /* the agent ignores it; the worker must not */
    sigprocmask(SIG_SETMASK, &a->orig_mask, NULL);
    if (a->restore_nofile) setrlimit(RLIMIT_NOFILE, &a->orig_nofile);
    int devnull = open("/dev/null", O_RDONLY);
    if (devnull >= 0) dup2(devnull, 0);
    dup2(out_w, 1);
    dup2(err_w, 2);
    execve(a->prog, w->argv, w->env);
    int e = errno;
    ssize_t n = write(exec_w, &e, sizeof e);
    (void)n;
    _exit(127);
}

static void signal_groups(attempt *at, int sig) {
    for (int i = 0; i < at->n; i++) {
        if (!at->w[i].running || at->w[i].pid <= 0) continue;
        kill(-at->w[i].pid, sig);
        if (sig != SIGKILL) kill(-at->w[i].pid, SIGCONT); /* a stopped worker acts on it now */
    }
}

static void begin_stop(attempt *at, sr_attempt_result why, int sig) {
    if (at->ph == STOPPING) return;
    at->ph = STOPPING;
    at->result = why;
    signal_groups(at, sig);
    at->kill_at_ms = spmd__now_ms() + at->a->cfg->grace_ms;
}

/* The first failure ends the attempt, but the other workers' groups are
 * failing too and each writes its flight record as it notices: SIGTERM
 * waits until every running worker has one, RECORD_GRACE_MS at most (not at
 * all when nobody wrote a record: the job keeps none). */
static void begin_failed_stop(attempt *at) {
    if (at->ph == STOPPING) return;
    at->ph = STOPPING;
    at->result = SR_ATTEMPT_FAILED;
    at->term_at_ms = spmd__now_ms() + RECORD_GRACE_MS;
}

/* Send the deferred SIGTERM when the records are in or the grace is over. */
static void maybe_term(attempt *at, int64_t now) {
    if (at->term_at_ms < 0) return;
    pid_t running[at->n > 0 ? at->n : 1];
    int nr = 0;
    for (int i = 0; i < at->n; i++) /* a stopped worker writes nothing: not worth waiting for */
        if (at->w[i].running && !spmd__proc_stopped(at->w[i].pid)) running[nr++] = at->w[i].pid;
    if (now < at->term_at_ms && nr && sr_flight_missing(at->a, running, nr) > 0) return;
    at->term_at_ms = -1;
    signal_groups(at, SIGTERM);
    at->kill_at_ms = now + at->a->cfg->grace_ms;
}

static int failed_status(int st) { return !(WIFEXITED(st) && WEXITSTATUS(st) == 0); }

static void fill_failure(const attempt *at, const worker *w, sr_failure *f) {
    memset(f, 0, sizeof *f);
    f->valid = 1;
    f->local_rank = w->local_rank;
    f->rank = w->rank;
    f->pid = w->pid;
    if (WIFSIGNALED(w->status)) {
        f->signo = WTERMSIG(w->status);
        f->exit_code = -f->signo;
    } else {
        f->exit_code = WEXITSTATUS(w->status);
    }
    f->stopped = at->root_stopped && w == &at->w[at->root];
    if (f->stopped)
        snprintf(f->note, sizeof f->note, "the other ranks lost its heartbeat; spmdrun ended it (%s)",
                 f->signo ? sr_signal_name(f->signo) : "exit");
    snprintf(f->when, sizeof f->when, "%s", w->when);
    snprintf(f->host, sizeof f->host, "%s", at->a->host);
    sr_stream_tail(&w->err, SR_TAIL_LINES, "    ", f->tail, sizeof f->tail);
}

/* Reap worker i (its zombie exists); 1 when it failed. */
static int reap_one(attempt *at, int i) {
    worker *w = &at->w[i];
    kill(-w->pid, SIGKILL); /* whatever the worker left behind in its group */
    int st = 0;
    while (waitpid(w->pid, &st, 0) < 0 && errno == EINTR) {
    }
    w->running = 0;
    w->status = st;
    sr_now_text(w->when, sizeof w->when);
    sr_guard_remove(at->a, w->pid);
    w->out.eof_deadline_ms = w->err.eof_deadline_ms = spmd__now_ms() + EOF_GRACE_MS;
    return failed_status(st);
}

/* Add "NAME=value" at the end of a worker's environment; -1 when out of memory. */
static int env_append(char ***env, const char *kv) {
    size_t n = 0;
    while (*env && (*env)[n]) n++;
    char **e = *env ? realloc(*env, (n + 2) * sizeof *e) : NULL;
    if (!e) return -1;
    *env = e;
    e[n + 1] = NULL;
    return (e[n] = strdup(kv)) ? 0 : -1;
}

static int spawn_one(attempt *at, int i, char *err, size_t errlen);
static int check_exec(attempt *at, int i, char *err, size_t errlen);

/* --on-failure replace: start a new process in lost worker i's place, with
 * SPMD_JOIN=1: it joins the survivors' group (spmd_group_join) when they next
 * grow, and gets its rank from them.  On failure it is said, and the others
 * go on without it. */
static void replace_worker(attempt *at, int i) {
    worker *w = &at->w[i];
    char err[512] = "";
    /* the lost worker's output so far, then fresh streams */
    sr_stream_close(&w->out);
    sr_stream_close(&w->err);
    sr_stream_free(&w->out);
    sr_stream_free(&w->err);
    w->out.fd = w->err.fd = w->out.file_fd = w->err.file_fd = -1;
    if (env_append(&w->env, "SPMD_JOIN=1") < 0) snprintf(err, sizeof err, "out of memory");
    else if (spawn_one(at, i, err, sizeof err) == 0 && check_exec(at, i, err, sizeof err) == 0) {
        at->replaced++;
        fprintf(stderr, "spmdrun: started pid %d in its place (SPMD_JOIN=1: it joins the others' group)\n",
                (int)w->pid);
        return;
    }
    fprintf(stderr, "spmdrun: cannot start a replacement for rank %d: %s; the others go on without it\n", w->rank, err);
}

/* --on-failure shrink: a worker killed by a signal is lost, and the others
 * go on (their groups fail, they shrink); so is one that exits with
 * SPMD_EXIT_EXCLUDED (spmd/group.h: the others went on without it, e.g.
 * after it was stopped past the heartbeat timeout).  It is taken out of the
 * batch and said.  A worker that exits with another error still ends the
 * attempt.  Returns what is left of the batch. */
static int lose_killed(attempt *at, int *batch, int nb) {
    int left = 0;
    for (int k = 0; k < nb; k++) {
        worker *w = &at->w[batch[k]];
        int excluded = WIFEXITED(w->status) && WEXITSTATUS(w->status) == SPMD_EXIT_EXCLUDED;
        if (!WIFSIGNALED(w->status) && !excluded) {
            batch[left++] = batch[k];
            continue;
        }
        if (!at->lost++) at->lost_first = batch[k];
        int replace = at->a->cfg->on_failure_shrink == SR_ON_FAILURE_REPLACE;
        if (excluded)
            fprintf(stderr, "spmdrun: rank %d (pid %d) exited with code %d at %s: the others had gone on without it "
                            "(excluded); --on-failure %s: the other workers go on\n", w->rank, (int)w->pid,
                    SPMD_EXIT_EXCLUDED, w->when, replace ? "replace" : "shrink");
        else
            fprintf(stderr, "spmdrun: rank %d (pid %d) was killed by signal %d (%s) at %s; --on-failure %s: the "
                            "other workers go on\n", w->rank, (int)w->pid, WTERMSIG(w->status),
                    strsignal(WTERMSIG(w->status)), w->when, replace ? "replace" : "shrink");
        if (replace) replace_worker(at, batch[k]);
    }
    return left;
}

/* --on-failure shrink: once no running worker is left but stopped ones (the
 * others gave up on them by their heartbeats and finished), end them; they
 * are reaped as lost. */
static void end_stopped(attempt *at) {
    int running = 0, stopped = 0;
    for (int i = 0; i < at->n; i++) {
        if (!at->w[i].running) continue;
        running++;
        stopped += spmd__proc_stopped(at->w[i].pid) == 1;
    }
    if (!running || stopped < running) return;
    for (int i = 0; i < at->n; i++) {
        worker *w = &at->w[i];
        if (!w->running) continue;
        fprintf(stderr, "spmdrun: rank %d (pid %d) is stopped and the other workers are done: ending it\n", w->rank,
                (int)w->pid);
        kill(-w->pid, SIGKILL);
    }
}

/* Reap every worker that exited.  Failures seen while RUNNING are the
 * attempt's root cause and other failures; their reports are written once the
 * pipes are drained.  The root cause is a death by a signal when the batch has
 * one: a rank that exited because it saw a peer's connection close did so
 * after that peer began to die, and a peer that has begun to die is still
 * collected here (spmd__proc_exiting) before anyone is named — so a survivor
 * that exited first is never blamed. */
static void reap(attempt *at) {
    int batch[at->n > 0 ? at->n : 1];
    int nb = 0;
    for (int i = 0; i < at->n; i++) {
        worker *w = &at->w[i];
        if (!w->running) continue;
        siginfo_t si;
        memset(&si, 0, sizeof si);
        /* Look before reaping: while the zombie leader exists its process
         * group id cannot be reused, so the group kill below is safe. */
        if (waitid(P_PID, (id_t)w->pid, &si, WEXITED | WNOHANG | WNOWAIT) < 0 || si.si_pid == 0)
            continue;
        if (reap_one(at, i) && at->ph == RUNNING) batch[nb++] = i;
    }
    if (at->a->cfg->on_failure_shrink) nb = lose_killed(at, batch, nb);
    if (nb == 0) return;
    int root = batch[0];
    if (!WIFSIGNALED(at->w[root].status)) {
        for (int i = 0; i < at->n; i++) {
            worker *w = &at->w[i];
            if (!w->running || !spmd__proc_exiting(w->pid)) continue;
            if (reap_one(at, i)) batch[nb++] = i; /* dying: the wait is short */
        }
        for (int k = 0; k < nb; k++)
            if (WIFSIGNALED(at->w[batch[k]].status)) {
                root = batch[k];
                break;
            }
    }
    /* Nobody died by a signal: a worker that is stopped is what the others
     * gave up on (their heartbeat error names it).  Stopped by a signal
     * counts; held by a tracer only when the records blame it (a debugger;
     * LeakSanitizer traces a process as it exits too). */
    if (!WIFSIGNALED(at->w[root].status)) {
        int blamed = sr_flight_culprit(at->a, at->as->world_size);
        for (int i = 0; i < at->n; i++) {
            int how = at->w[i].running ? spmd__proc_stopped(at->w[i].pid) : 0;
            if (how == 1 || (how == 2 && at->w[i].rank == blamed)) {
                root = i;
                at->root_stopped = 1;
                break;
            }
        }
    }
    at->root = root;
    for (int k = 0; k < nb; k++)
        if (batch[k] != root && at->nothers < at->others_cap) at->others[at->nothers++] = batch[k];
    begin_failed_stop(at);
}

/* Start worker i (its env and argv built); its execve is checked by
 * check_exec.  -1 (err says why) on failure. */
static int spawn_one(attempt *at, int i, char *err, size_t errlen) {
    sr_agent *a = at->a;
    const sr_config *cfg = a->cfg;
    char dir[4200] = "";
    pid_t self = getpid();
    worker *w = &at->w[i];
    int file_mask, console_mask;
    stream_targets(cfg, i, &file_mask, &console_mask);
    int out_file = -1, err_file = -1;
    if (file_mask && a->log_root[0]) {
        /* attempt_<k>/<rank>: the local rank on one node as torchrun has it; the
         * global rank keeps several nodes apart on a shared file system. */
        snprintf(dir, sizeof dir, "%s/attempt_%d/%d", a->log_root, at->as->restart_count,
                 w->rank);
        if (make_dirs(dir) < 0) {
            snprintf(err, errlen, "cannot create log directory %s: %s", dir, strerror(errno));
            return -1;
        }
        if ((file_mask & SR_STD_OUT) && (out_file = open_log(dir, "stdout.log", err, errlen)) < 0)
            return -1;
        if ((file_mask & SR_STD_ERR) && (err_file = open_log(dir, "stderr.log", err, errlen)) < 0) {
            if (out_file >= 0) close(out_file);
            return -1;
        }
    }
    char prefix[24] = "";
    if (at->as->joining) snprintf(prefix, sizeof prefix, "[joiner%d]:", w->local_rank); /* its rank comes later */
    else if (at->as->world_size > 1) snprintf(prefix, sizeof prefix, "[rank%d]:", w->rank);
    /* stdout as torchrun has it: the [rankN]: prefix only on a --tee'd
     * stream, so a tool's output keeps its format.  Not tee'd and the
     * console a terminal: the worker writes to the terminal itself (it
     * sees a terminal: progress lines work); else the agent still passes
     * whole lines, so ranks never mix inside a line.  stderr keeps the
     * prefix: the agent reads it for the failure report anyway. */
    int out_teed = (file_mask & SR_STD_OUT) != 0;
    int direct_out = (console_mask & SR_STD_OUT) && !out_teed && isatty(STDOUT_FILENO);
    int po[2] = {-1, -1}, pe[2] = {-1, -1}, px[2] = {-1, -1};
    if ((!direct_out && pipe2(po, O_CLOEXEC) < 0) || pipe2(pe, O_CLOEXEC) < 0 || pipe2(px, O_CLOEXEC) < 0) {
        snprintf(err, errlen, "pipe: %s", strerror(errno));
        for (int k = 0; k < 2; k++) {
            if (po[k] >= 0) close(po[k]);
            if (pe[k] >= 0) close(pe[k]);
            if (px[k] >= 0) close(px[k]);
        }
        if (out_file >= 0) close(out_file);
        if (err_file >= 0) close(err_file);
        return -1;
    }
    if (po[0] >= 0) fcntl(po[0], F_SETFL, O_NONBLOCK);
    fcntl(pe[0], F_SETFL, O_NONBLOCK);
    /* Streams own the read ends and files from here on. */
    if (sr_stream_init(&w->out, po[0], (console_mask & SR_STD_OUT) ? 1 : -1, out_file, out_teed ? prefix : "", 0) ||
        sr_stream_init(&w->err, pe[0], (console_mask & SR_STD_ERR) ? 2 : -1, err_file, prefix, 1)) {
        snprintf(err, errlen, "out of memory");
        if (po[1] >= 0) close(po[1]);
        close(pe[1]);
        close(px[0]);
        close(px[1]);
        return -1;
    }
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) child_exec(a, w, self, direct_out ? STDOUT_FILENO : po[1], pe[1], px[1]);
    if (po[1] >= 0) close(po[1]);
    close(pe[1]);
    close(px[1]);
    if (pid < 0) {
        snprintf(err, errlen, "fork: %s", strerror(errno));
        close(px[0]);
        return -1;
    }
    setpgid(pid, pid); /* also done by the child; whichever runs first wins */
    w->pid = pid;
    w->running = 1;
    w->exec_fd = px[0];
    sr_guard_add(a, pid);
    return 0;
}

/* Did worker i's execve() succeed?  The status pipe closes on exec (EOF) or
 * carries errno. */
static int check_exec(attempt *at, int i, char *err, size_t errlen) {
    worker *w = &at->w[i];
    int e = 0;
    ssize_t got;
    do got = read(w->exec_fd, &e, sizeof e);
    while (got < 0 && errno == EINTR);
    close(w->exec_fd);
    w->exec_fd = -1;
    if (got == (ssize_t)sizeof e) {
        snprintf(err, errlen, "cannot execute %s: %s", at->a->prog, strerror(e));
        return -1;
    }
    return 0;
}

static int spawn_all(attempt *at, char *err, size_t errlen) {
    for (int i = 0; i < at->n; i++)
        if (spawn_one(at, i, err, errlen) < 0) return -1;
    for (int i = 0; i < at->n; i++)
        if (check_exec(at, i, err, errlen) < 0) return -1;
    return 0;
}

sr_attempt_result sr_supervise(sr_agent *a, const sr_assignment *as, sr_tick_fn tick,
                               void *tick_arg, sr_failure *fail, sr_failure *others,
                               int nothers_cap, int *nothers, char *err, size_t errlen) {
    attempt at = {.a = a, .as = as, .n = as->local_world_size, .ph = RUNNING,
                  .kill_at_ms = -1, .term_at_ms = -1, .killed = 0, .result = SR_ATTEMPT_OK, .root = -1, .lost_first = -1,
                  .nothers = 0, .others_cap = nothers_cap};
    memset(fail, 0, sizeof *fail);
    *nothers = 0;
    at.w = calloc((size_t)at.n, sizeof *at.w);
    at.others = calloc((size_t)nothers_cap + 1, sizeof *at.others);
    struct pollfd *pfd = calloc((size_t)(2 * at.n + 1), sizeof *pfd);
    int *pmap = calloc((size_t)(2 * at.n + 1), sizeof *pmap);
    if (!at.w || !at.others || !pfd || !pmap) {
        free(at.w);
        free(at.others);
        free(pfd);
        free(pmap);
        snprintf(err, errlen, "out of memory");
        return SR_ATTEMPT_ERROR;
    }
    char spawn_err[512] = "";
    for (int i = 0; i < at.n; i++) {
        worker *w = &at.w[i];
        w->local_rank = i;
        w->rank = as->rank_offset + i;
        w->exec_fd = -1;
        w->out.fd = w->err.fd = w->out.file_fd = w->err.file_fd = -1;
        /* SPMD_ON_FAILURE=replace: the workers may wait for the replacements */
        if (!(w->env = sr_env_build(environ, a->cfg, as, i, a->set_omp)) || sr_flight_env(a, &w->env) < 0 ||
            (a->cfg->on_failure_shrink == SR_ON_FAILURE_REPLACE && env_append(&w->env, "SPMD_ON_FAILURE=replace") < 0) ||
            !(w->argv = sr_argv_build(a->cfg, i))) {
            snprintf(spawn_err, sizeof spawn_err, "out of memory");
            break;
        }
    }
    if (!spawn_err[0]) spawn_all(&at, spawn_err, sizeof spawn_err);
    if (spawn_err[0]) {
        snprintf(err, errlen, "%s", spawn_err);
        begin_stop(&at, SR_ATTEMPT_ERROR, SIGKILL);
    }

    int64_t next_tick = tick ? spmd__now_ms() + a->cfg->monitor_interval_ms : -1;
    /* a SIGUSR1's request for flight records: look every 100 ms for the
     * answers, print them all or what came within the deadline */
    int dumps_seen = a->dump_asked;
    uint64_t dump_gen = 0;
    int64_t dump_look = -1, dump_deadline = -1;
    for (;;) {
        int live = 0, open_streams = 0;
        for (int i = 0; i < at.n; i++) {
            live += at.w[i].running;
            open_streams += (at.w[i].out.fd >= 0) + (at.w[i].err.fd >= 0);
        }
        if (!live && !open_streams) break;

        int64_t now = spmd__now_ms();
        int64_t wake = -1;
#define SOONER(t) do { if ((t) >= 0 && (wake < 0 || (t) < wake)) wake = (t); } while (0)
        if (at.ph == RUNNING) SOONER(next_tick);
        SOONER(dump_look);
        if (at.ph == STOPPING && !at.killed) SOONER(at.kill_at_ms);
        if (at.term_at_ms >= 0) SOONER(now + 20); /* look for the records again */
        int np = 0;
        pfd[np] = (struct pollfd){.fd = a->sigfd, .events = POLLIN, .revents = 0};
        pmap[np++] = -1;
        for (int i = 0; i < at.n; i++) {
            sr_stream *s[2] = {&at.w[i].out, &at.w[i].err};
            for (int k = 0; k < 2; k++) {
                if (s[k]->fd < 0) continue;
                SOONER(s[k]->eof_deadline_ms);
                pfd[np] = (struct pollfd){.fd = s[k]->fd, .events = POLLIN, .revents = 0};
                pmap[np++] = 2 * i + k;
            }
        }
#undef SOONER
        int timeout = wake < 0 ? -1 : (int)(wake > now ? wake - now : 0);
        int r = poll(pfd, (nfds_t)np, timeout);
        if (r < 0 && errno != EINTR) {
            /* Cannot watch any more: kill everything, give up the output, reap. */
            snprintf(err, errlen, "poll: %s", strerror(errno));
            at.ph = RUNNING;
            begin_stop(&at, SR_ATTEMPT_ERROR, SIGKILL);
            at.killed = 1;
            for (int i = 0; i < at.n; i++) {
                sr_stream_close(&at.w[i].out);
                sr_stream_close(&at.w[i].err);
                if (!at.w[i].running) continue;
                while (waitpid(at.w[i].pid, &at.w[i].status, 0) < 0 && errno == EINTR) {
                }
                at.w[i].running = 0;
                sr_guard_remove(a, at.w[i].pid);
            }
            continue;
        }
        for (int p = 1; r > 0 && p < np; p++) {
            if (!pfd[p].revents) continue;
            worker *w = &at.w[pmap[p] / 2];
            sr_stream_pump(pmap[p] % 2 ? &w->err : &w->out);
        }
        if (r > 0 && pfd[0].revents) {
            int before = a->stop_signal, count = a->stop_count;
            sr_agent_poll_signals(a);
            if (a->stop_signal && !before) {
                if (at.ph == RUNNING) begin_stop(&at, SR_ATTEMPT_INTERRUPTED, a->stop_signal);
                else { /* already stopping: pass it on, records or not */
                    signal_groups(&at, a->stop_signal);
                    if (at.term_at_ms >= 0) {
                        at.term_at_ms = -1;
                        at.kill_at_ms = spmd__now_ms() + a->cfg->grace_ms;
                    }
                }
            } else if (a->stop_count > count && !at.killed) {
                signal_groups(&at, SIGKILL); /* asked twice: no more grace */
                at.killed = 1;
            }
            reap(&at);
            if (a->cfg->on_failure_shrink && at.ph == RUNNING) end_stopped(&at);
        }
        now = spmd__now_ms();
        maybe_term(&at, now);
        if (at.ph == STOPPING && !at.killed && at.kill_at_ms >= 0 && now >= at.kill_at_ms) {
            signal_groups(&at, SIGKILL);
            at.killed = 1;
        }
        for (int i = 0; i < at.n; i++) {
            sr_stream *s[2] = {&at.w[i].out, &at.w[i].err};
            for (int k = 0; k < 2; k++)
                if (s[k]->fd >= 0 && s[k]->eof_deadline_ms >= 0 && now >= s[k]->eof_deadline_ms)
                    sr_stream_close(s[k]);
        }
        if (a->dump_asked != dumps_seen && at.ph == RUNNING) {
            dumps_seen = a->dump_asked;
            dump_gen = sr_flight_request(a);
            fprintf(stderr, "spmdrun: SIGUSR1: asking the workers for their flight records\n");
            dump_deadline = now + 3000;
            dump_look = now + 100;
        }
        if (dump_look >= 0 && now >= dump_look) {
            if (now >= dump_deadline || sr_flight_answered(a, dump_gen) >= at.n) {
                sr_flight_report(a, "on SIGUSR1 (the job goes on)", dump_gen);
                dump_look = -1;
            } else {
                dump_look = now + 100;
            }
        }
        if (at.ph == RUNNING && tick && now >= next_tick) {
            char terr[512] = "";
            int t = tick(tick_arg, terr, sizeof terr);
            if (t > 0) begin_stop(&at, SR_ATTEMPT_CHANGED, SIGTERM);
            else if (t < 0) {
                snprintf(err, errlen, "%s", terr);
                begin_stop(&at, SR_ATTEMPT_ERROR, SIGTERM);
            }
            next_tick = spmd__now_ms() + a->cfg->monitor_interval_ms;
        }
    }

    if (at.lost && at.result == SR_ATTEMPT_OK) {
        int finished = 0;
        for (int i = 0; i < at.n; i++) finished += !failed_status(at.w[i].status);
        if (finished && at.replaced) {
            fprintf(stderr, "spmdrun: %d worker(s) lost, %d replaced; %d finished (--on-failure replace)\n", at.lost,
                    at.replaced, finished);
        } else if (finished) {
            fprintf(stderr, "spmdrun: %d worker(s) lost, the other %d finished (--on-failure shrink)\n", at.lost,
                    finished);
        } else { /* nobody went on: the first loss is the failure */
            at.result = SR_ATTEMPT_FAILED;
            at.root = at.lost_first;
        }
    }
    if (at.root >= 0) fill_failure(&at, &at.w[at.root], fail);
    for (int k = 0; k < at.nothers; k++) {
        fill_failure(&at, &at.w[at.others[k]], &others[k]);
        if (fail->valid && fail->stopped && !others[k].signo)
            snprintf(others[k].note, sizeof others[k].note,
                     "exited after rank %d stopped responding - not the root cause", fail->rank);
        else if (fail->valid && !others[k].signo)
            snprintf(others[k].note, sizeof others[k].note,
                     "exited after rank %d %s (%s) - not the root cause", fail->rank,
                     fail->signo ? "died" : "failed",
                     fail->signo ? sr_signal_name(fail->signo) : "see below");
    }
    sr_trust_sweep(a, NULL, 0); /* descendants that left their group go with the attempt */
    *nothers = at.nothers;
    for (int i = 0; i < at.n; i++) {
        sr_stream_free(&at.w[i].out);
        sr_stream_free(&at.w[i].err);
        if (at.w[i].exec_fd >= 0) close(at.w[i].exec_fd);
        sr_env_free(at.w[i].env);
        sr_env_free(at.w[i].argv);
    }
    free(at.w);
    free(at.others);
    free(pfd);
    free(pmap);
    return at.result;
}
