/* main.c — spmdrun: the agent's life from the command line to the exit status.
 *
 *   parse flags -> find the program -> block the stop signals (signalfd) ->
 *   fork the guard -> host the store (one node) or open the rendezvous
 *   (several) -> attempts: [join a round] -> supervise the workers ->
 *   success / restart within the budget / report and fail.
 *
 * Exit status: 0 success, 1 the job failed, 2 bad usage, and death by the
 * signal that stopped spmdrun (128+N in a shell).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/common.h"
#include "spmdrun.h"

#ifndef SPMDRUN_VERSION
#define SPMDRUN_VERSION "unknown"
#endif

#define MAX_OTHERS 16

/* PATH lookup done here, before fork, so the child only calls execve(). */
static int resolve_program(const char *name, char *out, size_t outlen, char *err,
                           size_t errlen) {
    struct stat sb;
    if (strchr(name, '/')) {
        if (stat(name, &sb) < 0) {
            snprintf(err, errlen, "program '%s': %s", name, strerror(errno));
            return -1;
        }
        if (S_ISDIR(sb.st_mode) || access(name, X_OK) < 0) {
            size_t nl = strlen(name);
            snprintf(err, errlen, "program '%s' is not an executable file%s%s", name,
                     nl > 3 && !strcmp(name + nl - 3, ".py") ? "; for a Python script write spmdrun [options] python3 " : "",
                     nl > 3 && !strcmp(name + nl - 3, ".py") ? name : "");
            return -1;
        }
        snprintf(out, outlen, "%s", name);
        return 0;
    }
    const char *path = getenv("PATH");
    if (!path || !*path) path = "/usr/local/bin:/usr/bin:/bin";
    for (const char *p = path; *p;) {
        size_t n = strcspn(p, ":");
        char cand[PATH_MAX];
        if (n == 0) snprintf(cand, sizeof cand, "./%s", name);
        else snprintf(cand, sizeof cand, "%.*s/%s", (int)n, p, name);
        if (stat(cand, &sb) == 0 && !S_ISDIR(sb.st_mode) && access(cand, X_OK) == 0) {
            snprintf(out, outlen, "%s", cand);
            return 0;
        }
        p += n;
        if (*p == ':') p++;
    }
    /* the usual slips: a script without its interpreter, a program in the
     * current folder without "./" */
    size_t nl = strlen(name);
    if (nl > 3 && !strcmp(name + nl - 3, ".py"))
        snprintf(err, errlen, "program '%s' not found in PATH; spmdrun runs programs as they are "
                 "(torchrun's --no-python): for a Python script write spmdrun [options] python3 %s ...",
                 name, name);
    else if (stat(name, &sb) == 0 && !S_ISDIR(sb.st_mode))
        snprintf(err, errlen, "program '%s' not found in PATH; to run the file in this folder write ./%s",
                 name, name);
    else
        snprintf(err, errlen, "program '%s' not found in PATH", name);
    return -1;
}

/* torchrun --standalone uses a fresh uuid4 as the run id. */
static void random_run_id(char *out, size_t outlen) {
    unsigned char b[16];
    if (getrandom(b, sizeof b, 0) != (ssize_t)sizeof b) {
        uint64_t t = spmd__now_ns() ^ ((uint64_t)getpid() << 32);
        memcpy(b, &t, 8);
        memcpy(b + 8, &t, 8);
    }
    b[6] = (unsigned char)((b[6] & 0x0f) | 0x40);
    b[8] = (unsigned char)((b[8] & 0x3f) | 0x80);
    snprintf(out, outlen,
             "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1],
             b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14],
             b[15]);
}

/* Does any local rank's stream go to a file? */
static int files_needed(const sr_config *cfg) {
    for (int lr = 0; lr < cfg->nproc; lr++)
        if (sr_std_mode(&cfg->redirects, lr) | sr_std_mode(&cfg->tee, lr)) return 1;
    return 0;
}

static int setup_log_root(sr_config *cfg, sr_agent *a, char *err, size_t errlen) {
    /* A log directory alone means "keep the logs": tee both streams. */
    if (cfg->log_dir && !cfg->redirects_set && !cfg->tee_set) cfg->tee.dflt = SR_STD_ALL;
    if (!files_needed(cfg)) return 0;
    char tmp[PATH_MAX];
    const char *base = cfg->log_dir;
    if (!base) { /* as torchrun: a temporary directory */
        const char *t = getenv("TMPDIR");
        snprintf(tmp, sizeof tmp, "%s/spmdrun_XXXXXX", t && *t ? t : "/tmp");
        if (!mkdtemp(tmp)) {
            snprintf(err, errlen, "cannot create a log directory %s: %s", tmp, strerror(errno));
            return -1;
        }
        base = tmp;
        fprintf(stderr, "spmdrun: no --log-dir given; worker logs go to %s\n", tmp);
    }
    snprintf(a->log_root, sizeof a->log_root, "%s/%s", base, cfg->rdzv_id);
    return 0;
}

/* Die by the signal that stopped us, so a calling shell sees it. */
static int die_by(int sig) {
    if (sig == SIGQUIT) return 128 + sig; /* no core dump for a requested stop */
    signal(sig, SIG_DFL);
    sigset_t s;
    sigemptyset(&s);
    sigaddset(&s, sig);
    sigprocmask(SIG_UNBLOCK, &s, NULL);
    raise(sig);
    return 128 + sig;
}

/* Single node: host the store where the workers will look for it. */
static int host_local_store(sr_agent *a, spmd_store_server **srv, sr_assignment *as, char *err,
                            size_t errlen) {
    const sr_config *cfg = a->cfg;
    char host[SR_HOST_MAX];
    int port = cfg->master_port;
    snprintf(host, sizeof host, "%s", cfg->master_addr);
    if (cfg->standalone) {
        snprintf(host, sizeof host, "127.0.0.1");
        port = 0;
    } else if (cfg->rdzv_endpoint) {
        port = 29400;
        if (sr_split_endpoint(cfg->rdzv_endpoint, host, sizeof host, &port, err, errlen))
            return -1;
    }
    if (!sr_is_local_address(host)) {
        snprintf(err, errlen,
                 "%s is not an address of this machine; a single-node job hosts its own store "
                 "(use --master-addr 127.0.0.1, or --nnodes N for several nodes)",
                 host);
        return -1;
    }
    char e[512];
    if (spmd_store_server_start(host, port, srv, e, sizeof e) != SPMD_OK) {
        snprintf(err, errlen,
                 "cannot host the store on %s:%d: %s (another job on this port? use "
                 "--standalone or another --master-port)",
                 host, port, e);
        return -1;
    }
    memset(as, 0, sizeof *as);
    as->nnodes = 1;
    as->world_size = as->role_world_size = as->local_world_size = cfg->nproc;
    snprintf(as->master_addr, sizeof as->master_addr, "%s", host);
    as->master_port = spmd_store_server_port(*srv);
    return 0;
}

static void failure_summary(const sr_failure *f, char *out, size_t outlen) {
    if (f->signo)
        snprintf(out, outlen, "rank %d on %s: %s", f->rank, f->host, sr_signal_name(f->signo));
    else
        snprintf(out, outlen, "rank %d on %s: exit code %d", f->rank, f->host, f->exit_code);
}

/* The agent's signals and descriptor limit, before any thread exists;
 * -1 (errno set) when the signalfd cannot be made. */
static int setup_signals(sr_agent *a) {
    /* Stop signals and SIGCHLD arrive through a signalfd; blocked before any
     * thread (the store's) exists, so every thread inherits the mask.  A stop
     * signal we were started with ignored (nohup's SIGHUP, SIGINT of a
     * background job) stays ignored, for us and for the workers. */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGCHLD);
    sigaddset(&set, SIGUSR1); /* print the workers' flight records (flight.c) */
    static const int stops[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT};
    for (size_t i = 0; i < sizeof stops / sizeof stops[0]; i++) {
        struct sigaction old;
        if (sigaction(stops[i], NULL, &old) == 0 && old.sa_handler == SIG_IGN) continue;
        sigaddset(&set, stops[i]);
    }
    signal(SIGCHLD, SIG_DFL); /* an inherited SIG_IGN would reap the workers behind our back */
    sigprocmask(SIG_BLOCK, &set, &a->orig_mask);
    signal(SIGPIPE, SIG_IGN); /* a closed console must not kill the agent */
    /* Two pipes and up to two log files per worker: lift the soft descriptor
     * limit to the hard one for the agent (the workers get the original back). */
    if (getrlimit(RLIMIT_NOFILE, &a->orig_nofile) == 0 && a->orig_nofile.rlim_cur < a->orig_nofile.rlim_max) {
        struct rlimit raised = a->orig_nofile;
        raised.rlim_cur = raised.rlim_max;
        if (setrlimit(RLIMIT_NOFILE, &raised) == 0) a->restore_nofile = 1;
    }
    a->sigfd = signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
    return a->sigfd < 0 ? -1 : 0;
}

/* Out of restarts: the final report.  The root cause is the round's first
 * failure, which may be ours (fail, with the other failures of our node) or
 * another node's (remote_body: its summary line, then its report entry). */
static void report_final(const sr_agent *a, sr_attempt_result res, const sr_failure *fail, sr_failure *others,
                         int nothers, const char *remote_body, const char *mine, const char *summary) {
    const sr_config *cfg = a->cfg;
    int ours = res == SR_ATTEMPT_FAILED && (!remote_body || !strcmp(remote_body, mine));
    if (ours) {
        sr_report_print(cfg->prog_argv[0], fail, NULL, others, nothers);
    } else {
        if (res == SR_ATTEMPT_FAILED && nothers < MAX_OTHERS) others[nothers++] = *fail;
        /* A remote failure's entry follows its summary line; other kinds are one line. */
        const char *entry = remote_body ? strchr(remote_body, '\n') : NULL;
        char line[SR_HOST_MAX + 160];
        if (!entry || !entry[1]) {
            snprintf(line, sizeof line, "  %s\n", summary);
            entry = line;
        } else {
            entry++;
        }
        sr_report_print(cfg->prog_argv[0], NULL, entry, others, nothers);
    }
}

/* Attempts until one succeeds, the restarts run out, or a stop signal: each
 * one (re)starts the local workers (after a rendezvous round when several
 * nodes take part), supervises them and decides what comes next.  Returns the
 * exit status (0 when the job succeeded). */
static int run_attempts(sr_agent *a, sr_assignment *as, int multi) {
    const sr_config *cfg = a->cfg;
    int status = 1;
    char err[1024] = "";
    static sr_failure fail, others[MAX_OTHERS];
    for (int attempt = 0;; attempt++) {
        if (multi) {
            if (sr_rdzv_next_round(a->rdzv, as, err, sizeof err)) {
                if (!a->stop_signal) fprintf(stderr, "spmdrun: rendezvous failed: %s\n", err);
                break;
            }
        } else {
            as->restart_count = attempt;
        }
        if (a->stop_signal) break;
        if (sr_flight_begin(a, as->restart_count, err, sizeof err))
            fprintf(stderr, "spmdrun: %s (no flight records)\n", err);
        int nothers = 0;
        sr_attempt_result res =
            sr_supervise(a, as, multi ? sr_rdzv_tick : NULL, a->rdzv, &fail, others,
                         MAX_OTHERS, &nothers, err, sizeof err);
        if (a->stop_signal) break; /* asked to stop: no restart, no report */
        int can_restart = multi ? sr_rdzv_can_restart(a->rdzv) : attempt < cfg->max_restarts;
        char *remote = NULL;
        if (res == SR_ATTEMPT_OK) {
            if (!multi) {
                status = 0;
                break;
            }
            int b = sr_rdzv_exit_barrier(a->rdzv, err, sizeof err);
            if (b == 0) {
                sr_rdzv_summary(a->rdzv);
                status = 0;
                break;
            }
            if (b < 0) {
                if (!a->stop_signal) fprintf(stderr, "spmdrun: %s\n", err);
                break;
            }
            res = SR_ATTEMPT_CHANGED; /* another node failed after ours finished */
        }
        if (res == SR_ATTEMPT_ERROR) {
            fprintf(stderr, "spmdrun: %s\n", err);
            if (multi) {
                char why[1400];
                snprintf(why, sizeof why, "node %d (%s): %s", as->node_rank, a->host, err);
                sr_rdzv_post_change(a->rdzv, "lost", why);
            }
            break;
        }
        char summary[SR_HOST_MAX + 128] = "";
        /* How a round ended, for every node: "<kind>\n<summary>[\n<report entry>]". */
        char mine[SR_TAIL_BYTES + 2048] = "";
        if (res == SR_ATTEMPT_FAILED) {
            sr_flight_report(a, "the worker group failed", 0);
            failure_summary(&fail, summary, sizeof summary);
            size_t o = (size_t)snprintf(mine, sizeof mine, "%s\n", summary);
            sr_failure_format(&fail, mine + o, sizeof mine - o);
            if (multi && as->joining) { /* not taken in: leave, the job goes on without this node */
                char why[SR_HOST_MAX + 200];
                snprintf(why, sizeof why, "its joining workers failed (%s)", summary);
                sr_rdzv_node_stopped(a->rdzv, why);
                sr_report_print(cfg->prog_argv[0], &fail, NULL, others, nothers);
                break;
            }
            if (multi) sr_rdzv_post_change(a->rdzv, "fail", mine);
        }
        if (multi) remote = sr_rdzv_change_text(a->rdzv);
        const char *remote_body = remote ? strchr(remote, '\n') : NULL;
        remote_body = remote_body ? remote_body + 1 : NULL;
        if (res == SR_ATTEMPT_CHANGED)
            snprintf(summary, sizeof summary, "%.*s",
                     (int)strcspn(remote_body ? remote_body : "", "\n"),
                     remote_body                              ? remote_body
                     : remote && !strcmp(remote, "complete") ? "the job completed on the other nodes first"
                                                              : "another node ended the round");
        if (can_restart) {
            fprintf(stderr,
                    "spmdrun: worker group %s (%s); restarting it (restart %d of %d)\n",
                    res == SR_ATTEMPT_FAILED ? "failed" : "stopped", summary,
                    as->restart_count + 1, cfg->max_restarts);
            free(remote);
            continue;
        }
        /* Out of restarts: explain. */
        report_final(a, res, &fail, others, nothers, remote_body, mine, summary);
        free(remote);
        break;
    }
    return status;
}

int main(int argc, char **argv) {
    static sr_config cfg;
    static sr_agent a;
    char err[1024] = "";
    if (sr_parse_args(argc, argv, &cfg, err, sizeof err)) {
        fprintf(stderr, "spmdrun: %s\n", err);
        return 2;
    }
    if (cfg.help) {
        fputs(sr_help_text(), stdout);
        return 0;
    }
    if (cfg.version) {
        printf("spmdrun %s (spmd)\n", SPMDRUN_VERSION);
        return 0;
    }
    char prog[PATH_MAX];
    if (resolve_program(cfg.prog_argv[0], prog, sizeof prog, err, sizeof err)) {
        fprintf(stderr, "spmdrun: %s\n", err);
        return 2;
    }
    char run_id[64];
    if (cfg.standalone) {
        random_run_id(run_id, sizeof run_id);
        cfg.rdzv_id = run_id;
    }
    a.cfg = &cfg;
    a.prog = prog;
    a.sigfd = a.guard_fd = -1;
    if (gethostname(a.host, sizeof a.host) < 0) snprintf(a.host, sizeof a.host, "localhost");
    a.host[sizeof a.host - 1] = 0;
    if (setup_log_root(&cfg, &a, err, sizeof err)) {
        fprintf(stderr, "spmdrun: %s\n", err);
        return 1;
    }
    if (!getenv("OMP_NUM_THREADS") && cfg.nproc > 1) {
        a.set_omp = 1;
        fprintf(stderr, "spmdrun: setting OMP_NUM_THREADS=1 for each worker to avoid overloading "
                        "the system; tune it for your program as needed\n");
    }

    if (setup_signals(&a)) {
        fprintf(stderr, "spmdrun: signalfd: %s\n", strerror(errno));
        return 1;
    }
    if (sr_trust_setup(&cfg, err, sizeof err)) {
        fprintf(stderr, "spmdrun: %s\n", err);
        return 2;
    }
    if (sr_guard_start(&a, err, sizeof err)) {
        fprintf(stderr, "spmdrun: cannot start the guard process: %s\n", err);
        return 1;
    }

    int status = 1;
    int multi = cfg.max_nodes > 1;
    spmd_store_server *srv = NULL;
    sr_assignment as;
    memset(&as, 0, sizeof as);
    if (multi) {
        if (!(a.rdzv = sr_rdzv_open(&a, err, sizeof err))) {
            if (!a.stop_signal) fprintf(stderr, "spmdrun: %s\n", err);
            goto out;
        }
    } else if (host_local_store(&a, &srv, &as, err, sizeof err)) {
        fprintf(stderr, "spmdrun: %s\n", err);
        goto out;
    }

    status = run_attempts(&a, &as, multi);
    if (a.stop_signal && multi && a.rdzv) {
        char why[SR_HOST_MAX + 96];
        snprintf(why, sizeof why, "node %d (%s) stopped by %s", as.node_rank, a.host,
                 sr_signal_name(a.stop_signal));
        sr_rdzv_node_stopped(a.rdzv, why);
    }
out:
    sr_rdzv_close(a.rdzv);
    spmd_store_server_stop(srv);
    sr_trust_sweep(&a, NULL, 0); /* nothing the job started outlives it */
    sr_flight_end(&a);
    sr_guard_stop(&a);
    close(a.sigfd);
    if (a.stop_signal) {
        fprintf(stderr, "spmdrun: stopped by %s\n", sr_signal_name(a.stop_signal));
        return die_by(a.stop_signal);
    }
    return status;
}
