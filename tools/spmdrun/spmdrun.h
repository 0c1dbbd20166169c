/* tools/spmdrun/spmdrun.h — the launcher's private header.
 *
 * spmdrun is a torchrun-compatible agent: it parses torchrun's flags
 * (args.c), hosts the TCP store the workers rendezvous through (endpoint.c),
 * agrees with the other nodes' agents on node ranks and world size
 * (rendezvous.c), starts the local workers with torchrun's environment
 * (env.c, supervise.c), carries their output to the console and log files
 * (output.c), tears everything down on the first failure and explains it
 * (report.c), and makes sure nothing survives it (guard.c).  main.c strings
 * the pieces together and owns the restart loop.
 *
 * Names: sr_ for what crosses files inside the tool, static for the rest.
 */
#ifndef SPMDRUN_H
#define SPMDRUN_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/resource.h>
#include <sys/types.h>

#include "spmd/store.h"

#define SR_MAX_LOCAL 1024      /* workers per node */
#define SR_STD_MAP_MAX 256     /* entries of a "0:3,1:0" map */
#define SR_HOST_MAX 256
#define SR_TAIL_BYTES 4096     /* stderr kept per worker for the failure report */
#define SR_TAIL_LINES 10

/* ---- args.c: the command line ------------------------------------------- */

/* --redirects / --tee: a mode (bit 0 stdout, bit 1 stderr) for every local
 * rank, or a per-rank map ("0:3,1:0"; ranks not listed get 0). */
enum { SR_STD_NONE = 0, SR_STD_OUT = 1, SR_STD_ERR = 2, SR_STD_ALL = 3 };
#define SR_ON_FAILURE_REPLACE 2

typedef struct {
    int dflt;
    int n;
    int rank[SR_STD_MAP_MAX];
    int mode[SR_STD_MAP_MAX];
} sr_std;

typedef struct {
    int min_nodes, max_nodes;      /* --nnodes N | MIN:MAX */
    int nproc;                     /* --nproc-per-node (auto resolved) */
    int node_rank;                 /* --node-rank, -1 when not given */
    const char *master_addr;       /* default 127.0.0.1 */
    int master_port;               /* default 29500; 0 = a free port */
    int master_addr_set, master_port_set;
    const char *rdzv_endpoint;     /* host[:port] or NULL */
    const char *rdzv_id;           /* default "none" */
    const char *rdzv_backend;      /* "static" or "c10d" */
    int standalone;
    int max_restarts;
    int on_failure_shrink;         /* --on-failure shrink: a worker killed by a signal does not end the attempt;
                                      SR_ON_FAILURE_REPLACE: and a new one joins in its place */
    long monitor_interval_ms;
    const char *log_dir;           /* NULL: none (a temporary one if files are asked for) */
    sr_std redirects, tee;
    int redirects_set, tee_set;
    int filter_set;                /* --local-ranks-filter given */
    unsigned char filter[SR_MAX_LOCAL];
    const char *role;              /* default "default" */
    int is_host;                   /* --rdzv-conf is_host=: 1, 0, or -1 (decide) */
    /* timeouts (ms) from --rdzv-conf and SPMD_* variables */
    long join_timeout_ms;          /* SPMD_RDZV_JOIN_TIMEOUT, join_timeout (600 s) */
    long last_call_ms;             /* SPMD_RDZV_LAST_CALL, last_call_timeout (30 s) */
    long keepalive_interval_ms;    /* SPMD_RDZV_KEEPALIVE_INTERVAL, keep_alive_interval (1 s) */
    long keepalive_timeout_ms;     /* SPMD_RDZV_KEEPALIVE_TIMEOUT (30 s) */
    long grace_ms;                 /* SPMD_GRACE_PERIOD (5 s) */
    long exit_barrier_ms;          /* SPMD_EXIT_BARRIER_TIMEOUT (300 s) */
    int help, version;
    int use_env;                   /* launch.py's --use-env */
    const char *local_rank_arg;    /* --pass-local-rank: "--local-rank" or "--local_rank", or NULL */
    char **prog_argv;              /* the program and its arguments (points into argv) */
    int prog_argc;
} sr_config;

/* Parse argv (argv[0] is spmdrun itself).  Options may also come from
 * PET_<NAME> variables as with torchrun; the command line wins.  Returns 0, or
 * -1 with a message naming the flag and the problem in err. */
int sr_parse_args(int argc, char **argv, sr_config *cfg, char *err, size_t errlen);
/* Mode of a local rank in a --redirects / --tee setting. */
int sr_std_mode(const sr_std *s, int local_rank);
/* Parse "3" or "0:3,1:0". */
int sr_parse_std(const char *text, sr_std *out, char *err, size_t errlen);
/* The --help text. */
const char *sr_help_text(void);

/* ---- what the rendezvous decided for this node and round ----------------- */
typedef struct {
    int restart_count;             /* = the round number */
    int node_rank, nnodes;         /* GROUP_RANK, GROUP_WORLD_SIZE */
    int world_size, rank_offset;   /* global rank = rank_offset + local rank */
    int role_world_size, role_rank_offset;
    int local_world_size;
    int joining;                   /* joins a running round in place: the workers get SPMD_JOIN=1 */
    char master_addr[SR_HOST_MAX];
    int master_port;
    char standby[1024];            /* SPMD_STORE_STANDBY: where the store moves if its host is lost, "" none */
} sr_assignment;

/* ---- env.c: the workers' environment -------------------------------------- */
/* A malloc()ed NULL-terminated copy of base in which every variable spmdrun
 * sets for local rank lr is replaced (and SPMD_JOIN=1 added when a->joining).
 * NULL when out of memory. */
char **sr_env_build(char *const *base, const sr_config *cfg, const sr_assignment *a, int lr,
                    int set_omp);
void sr_env_free(char **env);
/* The argument vector of local rank lr: the program's, with
 * "<local_rank_arg>=<lr>" right after the script when --pass-local-rank is
 * given, as torch.distributed.launch (after the program name, or for a
 * python* program after its options and the script).  malloc()ed, free with
 * sr_env_free; NULL when out of memory. */
char **sr_argv_build(const sr_config *cfg, int lr);

/* ---- output.c: one worker stream (stdout or stderr) ----------------------- */
typedef struct {
    int fd;                  /* read end of the worker's pipe; -1 once closed */
    int console_fd;          /* 1, 2, or -1 when this stream is not shown */
    int file_fd;             /* log file or -1 */
    char prefix[24];         /* "[rank3]:" or "" */
    size_t prefix_len;
    char *buf;               /* bytes of the line being assembled */
    size_t len, cap;
    char *out;               /* whole prefixed lines waiting for one write() */
    size_t out_cap;
    int keep_tail;           /* keep the last bytes for the failure report */
    char tail[SR_TAIL_BYTES];
    size_t tail_len;
    int64_t eof_deadline_ms; /* after the worker exited: stop waiting for EOF then */
} sr_stream;

int sr_stream_init(sr_stream *s, int fd, int console_fd, int file_fd, const char *prefix,
                   int keep_tail);
/* Read what is available.  Returns 1 while open, 0 once EOF was seen (the
 * stream is then flushed and its fd closed). */
int sr_stream_pump(sr_stream *s);
/* Flush a partial line and close (used when EOF never comes). */
void sr_stream_close(sr_stream *s);
void sr_stream_free(sr_stream *s);
/* The last up to nlines lines of the kept tail, each line indented by indent. */
size_t sr_stream_tail(const sr_stream *s, int nlines, const char *indent, char *out,
                      size_t outlen);
/* write() all of buf to a console or file descriptor (EINTR, EAGAIN handled);
 * 0 or -1 (errno set). */
int sr_write_all(int fd, const char *buf, size_t len);

/* ---- the agent: state shared by supervise, rendezvous and main ------------ */
typedef struct sr_rdzv sr_rdzv;

typedef struct {
    const sr_config *cfg;
    const char *prog;               /* resolved path of the program */
    char host[SR_HOST_MAX];         /* this machine's name */
    int sigfd;                      /* signalfd: SIGCHLD SIGINT SIGTERM SIGHUP SIGQUIT */
    sigset_t orig_mask;             /* restored in the workers */
    struct rlimit orig_nofile;      /* restored in the workers when restore_nofile */
    int restore_nofile;
    int guard_fd;                   /* write end of the guard's pipe, -1 none */
    pid_t guard_pid;
    int set_omp;                    /* OMP_NUM_THREADS=1 for the workers */
    char log_root[4096];            /* <log-dir>/<run-id>, "" when no files */
    int stop_signal;                /* signal that asked us to stop (0: none) */
    int stop_count;                 /* further stop signals after the first */
    int dump_asked;                 /* SIGUSR1s received: print the flight records */
    sr_rdzv *rdzv;                  /* NULL on a single node */
    /* flight records (flight.c) */
    char flight_dir[4096];          /* this attempt's SPMD_RECORDER_DIR */
    char flight_tmp[4096];          /* a temporary directory of ours, "" none */
    double flight_since;            /* wall clock: older records are not this attempt's */
    uint64_t flight_gen;            /* the last request's generation */
} sr_agent;

/* Drain the signalfd without waiting: records SIGINT/SIGTERM/SIGHUP/SIGQUIT
 * in a->stop_signal, counts SIGUSR1 in a->dump_asked.  Returns a->stop_signal. */
int sr_agent_poll_signals(sr_agent *a);

/* ---- flight.c: the workers' flight records (SPMD_RECORDER_DIR) ------------- */
/* Choose and create this attempt's directory: SPMD_RECORDER_DIR when set,
 * else <log root>/attempt_<k>/flight, else a temporary directory.  0 or -1. */
int sr_flight_begin(sr_agent *a, int attempt, char *err, size_t errlen);
/* Put SPMD_RECORDER_DIR into a worker's environment (*env is realloc()ed); 0 or -1. */
int sr_flight_env(const sr_agent *a, char ***env);
/* Ask every worker's groups for their records; returns the request's generation. */
uint64_t sr_flight_request(sr_agent *a);
/* How many records answer request `gen`. */
int sr_flight_answered(const sr_agent *a, uint64_t gen);
/* The rank most failure records of the job's world group blame (-1: none). */
int sr_flight_culprit(const sr_agent *a, int world);
/* After a failure: how many of these running workers have written no record
 * of a failure or timeout yet (0: all have; -1: nobody wrote any record). */
int sr_flight_missing(const sr_agent *a, const pid_t *pids, int n);
/* Print the diagnosis of this attempt's records (those answering `gen` when
 * gen > 0) to stderr, after "spmdrun: <why>". */
void sr_flight_report(const sr_agent *a, const char *why, uint64_t gen);
/* Remove the temporary directory, if we made one. */
void sr_flight_end(sr_agent *a);

/* ---- guard.c: kills the workers' process groups if spmdrun dies ----------- */
/* Fork the guard (before any thread exists).  0 or -1 with err. */
int sr_guard_start(sr_agent *a, char *err, size_t errlen);
void sr_guard_add(sr_agent *a, pid_t pgid);
void sr_guard_remove(sr_agent *a, pid_t pgid);
/* Close the pipe and reap the guard. */
void sr_guard_stop(sr_agent *a);

/* ---- trust.c: the job secret and the job's descendants --------------------- */
/* Generate the job secret (single node, none given) or check the user's; mark
 * this agent's descendants; become a child subreaper.  Before any thread. */
int sr_trust_setup(const sr_config *cfg, char *err, size_t errlen);
/* Kill every marked descendant and reap adopted children (not the guard, not
 * the `keep` pids). */
void sr_trust_sweep(const sr_agent *a, const pid_t *keep, int nkeep);
/* In the guard once spmdrun is gone (or, on a normal exit, spares `agent`). */
void sr_trust_guard_sweep(pid_t agent);

/* ---- supervise.c: one attempt of the local worker group ------------------- */
typedef struct {
    int valid;
    int local_rank, rank;
    pid_t pid;
    int exit_code;                  /* exit status, or -signal like torch */
    int signo;                      /* 0 for a plain exit */
    char when[32];                  /* wall clock, torch's format */
    char host[SR_HOST_MAX];
    char tail[SR_TAIL_BYTES + 256]; /* last stderr lines, indented */
    char note[160];                 /* "exited after rank 2 died (SIGKILL)" or "" */
    int stopped;                    /* it was stopped (SIGSTOP, a debugger) when the others failed */
} sr_failure;

typedef enum {
    SR_ATTEMPT_OK = 0,        /* every worker exited 0 */
    SR_ATTEMPT_FAILED,        /* a worker failed: *fail says which */
    SR_ATTEMPT_INTERRUPTED,   /* spmdrun got agent->stop_signal */
    SR_ATTEMPT_CHANGED,       /* the tick asked to end the attempt (another node) */
    SR_ATTEMPT_ERROR          /* could not start (err says why) */
} sr_attempt_result;

/* Called every monitor interval while the workers run: 0 go on, 1 end the
 * attempt (the rendezvous round changed), -1 fatal error (message in err). */
typedef int (*sr_tick_fn)(void *arg, char *err, size_t errlen);

/* Start the workers of one attempt, carry their output, wait for the end.
 * others[] (capacity nothers_cap) receives other workers that failed on their
 * own before the teardown began. */
sr_attempt_result sr_supervise(sr_agent *a, const sr_assignment *as, sr_tick_fn tick,
                               void *tick_arg, sr_failure *fail, sr_failure *others,
                               int nothers_cap, int *nothers, char *err, size_t errlen);

/* ---- report.c -------------------------------------------------------------- */
/* "exitcode 3" / "Signal 9 (SIGKILL)" text of a failure. */
const char *sr_signal_name(int signo);
/* One failure entry in torch's ChildFailedError shape. */
size_t sr_failure_format(const sr_failure *f, char *out, size_t outlen);
/* The whole box: title, other failures, root cause (remote_root: an already
 * formatted root cause from another node, used when root is NULL). */
void sr_report_print(const char *prog, const sr_failure *root, const char *remote_root,
                     const sr_failure *others, int nothers);
/* Fill when[] with the current wall-clock time. */
void sr_now_text(char *out, size_t outlen);

/* ---- endpoint.c: where the store lives ------------------------------------ */
/* Split "host", "host:port", "[v6]:port"; *port untouched when absent. */
int sr_split_endpoint(const char *ep, char *host, size_t hostlen, int *port, char *err,
                      size_t errlen);
/* 1 when host names an address of this machine (it can be bound here). */
int sr_is_local_address(const char *host);

/* ---- rendezvous.c: multi-node agreement through the store ------------------ */
/* Host (when this node should) and connect to the store; NULL + err on failure. */
sr_rdzv *sr_rdzv_open(sr_agent *a, char *err, size_t errlen);
/* Join the next round; fills *as.  0, or -1 with err (deadline, store lost,
 * interrupted: a->stop_signal set, or restart budget exhausted). */
int sr_rdzv_next_round(sr_rdzv *r, sr_assignment *as, char *err, size_t errlen);
/* The supervise tick: heartbeats, lost-node checks, change notices
 * (membership.c: the keep-alive ring, lost and joining nodes, the exit barrier). */
int sr_rdzv_tick(void *rdzv, char *err, size_t errlen);
/* End the current round because of us: kind "fail", "lost", "join"; text is
 * the reason shown by every agent.  First writer wins. */
void sr_rdzv_post_change(sr_rdzv *r, const char *kind, const char *text);
/* The reason the current round ended (malloc()ed, NULL if none yet). */
char *sr_rdzv_change_text(sr_rdzv *r);
/* After local success: wait for every node's workers (0), for a change of
 * round (1), or fail (-1, err). */
int sr_rdzv_exit_barrier(sr_rdzv *r, char *err, size_t errlen);
/* This agent stops (a stop signal, its joining workers failed): in place it
 * leaves the round (the others go on while at least --nnodes MIN are left),
 * else it ends the round as "lost" with why. */
void sr_rdzv_node_stopped(sr_rdzv *r, const char *why);
/* In place: print which nodes joined and which were lost, and when. */
void sr_rdzv_summary(const sr_rdzv *r);
/* May another round start within the restart budget? */
int sr_rdzv_can_restart(const sr_rdzv *r);
/* Say goodbye; the store's host waits (bounded) for everyone else first. */
void sr_rdzv_close(sr_rdzv *r);

#endif
