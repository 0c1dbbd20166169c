/* args.c — torchrun's command line, parsed without side effects.
 *
 * Accepted like torchrun (Python argparse) accepts it: "--nproc-per-node 4",
 * "--nproc_per_node=4", any unambiguous prefix ("--nnode", the legacy
 * torch.distributed.launch spelling), short -r/-t/-h, and PET_<NAME>
 * variables as defaults.  Parsing stops at the program (the first word that
 * is not an option) or after "--"; everything from there on is the program's.
 */
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/common.h"
#include "spmdrun.h"

typedef enum {
    O_NNODES, O_NPROC, O_NODE_RANK, O_MASTER_ADDR, O_MASTER_PORT, O_RDZV_ENDPOINT, O_RDZV_ID,
    O_RDZV_BACKEND, O_RDZV_CONF, O_STANDALONE, O_MAX_RESTARTS, O_ON_FAILURE, O_MONITOR, O_START_METHOD,
    O_ROLE, O_MODULE, O_NO_PYTHON, O_RUN_PATH, O_LOG_DIR, O_REDIRECTS, O_TEE, O_FILTER,
    O_USE_ENV, O_PASS_LOCAL_RANK, O_HELP, O_VERSION, O_COUNT
} opt_id;

typedef struct {
    const char *name;  /* canonical, with dashes */
    const char *alias; /* another accepted name or NULL */
    char shortopt;     /* 0 if none */
    int takes_value;   /* 0 no, 1 yes, 2 optional (only as --name=VALUE) */
    opt_id id;
} opt_def;

static const opt_def OPTS[] = {
    {"nnodes", "nnode", 0, 1, O_NNODES},
    {"nproc-per-node", NULL, 'n', 1, O_NPROC},
    {"node-rank", NULL, 0, 1, O_NODE_RANK},
    {"master-addr", NULL, 0, 1, O_MASTER_ADDR},
    {"master-port", NULL, 0, 1, O_MASTER_PORT},
    {"rdzv-endpoint", NULL, 0, 1, O_RDZV_ENDPOINT},
    {"rdzv-id", NULL, 0, 1, O_RDZV_ID},
    {"rdzv-backend", NULL, 0, 1, O_RDZV_BACKEND},
    {"rdzv-conf", NULL, 0, 1, O_RDZV_CONF},
    {"standalone", NULL, 0, 0, O_STANDALONE},
    {"max-restarts", NULL, 0, 1, O_MAX_RESTARTS},
    {"on-failure", NULL, 0, 1, O_ON_FAILURE},
    {"monitor-interval", NULL, 0, 1, O_MONITOR},
    {"start-method", NULL, 0, 1, O_START_METHOD},
    {"role", NULL, 0, 1, O_ROLE},
    {"module", NULL, 'm', 0, O_MODULE},
    {"no-python", NULL, 0, 0, O_NO_PYTHON},
    {"run-path", NULL, 0, 0, O_RUN_PATH},
    {"log-dir", NULL, 0, 1, O_LOG_DIR},
    {"redirects", NULL, 'r', 1, O_REDIRECTS},
    {"tee", NULL, 't', 1, O_TEE},
    {"local-ranks-filter", NULL, 0, 1, O_FILTER},
    {"use-env", NULL, 0, 0, O_USE_ENV},
    {"pass-local-rank", NULL, 0, 2, O_PASS_LOCAL_RANK},
    {"help", NULL, 'h', 0, O_HELP},
    {"version", NULL, 0, 0, O_VERSION},
};
#define NOPTS (sizeof OPTS / sizeof OPTS[0])

/* Strict integer: the whole text, within [lo, hi]. */
static int parse_long(const char *s, long lo, long hi, long *out) {
    if (!s || !*s) return -1;
    char *end = NULL;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || !end || *end || v < lo || v > hi) return -1;
    *out = v;
    return 0;
}

static int fail(char *err, size_t errlen, const char *fmt, ...) SPMD__PRINTF(3, 4);
static int fail(char *err, size_t errlen, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    if (err && errlen) vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return -1;
}

int sr_std_mode(const sr_std *s, int local_rank) {
    if (s->n == 0) return s->dflt;
    for (int i = 0; i < s->n; i++)
        if (s->rank[i] == local_rank) return s->mode[i];
    return SR_STD_NONE;
}

int sr_parse_std(const char *text, sr_std *out, char *err, size_t errlen) {
    sr_std s;
    memset(&s, 0, sizeof s);
    long v;
    if (!strchr(text, ':')) {
        if (parse_long(text, 0, 3, &v))
            return fail(err, errlen,
                        "'%s' is not 0 (none), 1 (stdout), 2 (stderr), 3 (both) or a per-rank "
                        "map like 0:3,1:0",
                        text);
        s.dflt = (int)v;
        *out = s;
        return 0;
    }
    const char *p = text;
    while (*p) {
        const char *comma = strchr(p, ',');
        size_t n = comma ? (size_t)(comma - p) : strlen(p);
        char item[64];
        if (n == 0 || n >= sizeof item)
            return fail(err, errlen, "'%s': empty or overlong entry in a per-rank map", text);
        memcpy(item, p, n);
        item[n] = 0;
        char *colon = strchr(item, ':');
        long r, m;
        if (!colon) return fail(err, errlen, "'%s': entry '%s' is not RANK:MODE", text, item);
        *colon = 0;
        if (parse_long(item, 0, SR_MAX_LOCAL - 1, &r) || parse_long(colon + 1, 0, 3, &m))
            return fail(err, errlen,
                        "'%s': entry '%s:%s' needs a local rank and a mode 0..3", text, item,
                        colon + 1);
        for (int i = 0; i < s.n; i++)
            if (s.rank[i] == r)
                return fail(err, errlen, "'%s': local rank %ld appears twice", text, r);
        if (s.n == SR_STD_MAP_MAX)
            return fail(err, errlen, "'%s': more than %d entries", text, SR_STD_MAP_MAX);
        s.rank[s.n] = (int)r;
        s.mode[s.n] = (int)m;
        s.n++;
        p += n;
        if (*p == ',') {
            p++;
            if (!*p) return fail(err, errlen, "'%s': trailing comma", text);
        }
    }
    *out = s;
    return 0;
}

/* "0,2,5-7" into the filter bitmap. */
static int parse_filter(const char *text, sr_config *cfg, char *err, size_t errlen) {
    memset(cfg->filter, 0, sizeof cfg->filter);
    const char *p = text;
    if (!*p) return fail(err, errlen, "--local-ranks-filter: empty list");
    while (*p) {
        const char *comma = strchr(p, ',');
        size_t n = comma ? (size_t)(comma - p) : strlen(p);
        char item[32];
        if (n == 0 || n >= sizeof item)
            return fail(err, errlen, "--local-ranks-filter: bad entry in '%s'", text);
        memcpy(item, p, n);
        item[n] = 0;
        char *dash = strchr(item, '-');
        long lo, hi;
        if (dash) {
            *dash = 0;
            if (parse_long(item, 0, SR_MAX_LOCAL - 1, &lo) ||
                parse_long(dash + 1, 0, SR_MAX_LOCAL - 1, &hi) || hi < lo)
                return fail(err, errlen,
                            "--local-ranks-filter: '%s' is not a list of local ranks like 0,2,4-7",
                            text);
        } else if (parse_long(item, 0, SR_MAX_LOCAL - 1, &lo)) {
            return fail(err, errlen,
                        "--local-ranks-filter: '%s' is not a list of local ranks like 0,2,4-7",
                        text);
        } else {
            hi = lo;
        }
        for (long r = lo; r <= hi; r++) cfg->filter[r] = 1;
        p += n;
        if (*p == ',') p++;
    }
    cfg->filter_set = 1;
    return 0;
}

/* "1", "true", "yes" -> 1; "0", "false", "no", "" -> 0; else -1. */
static int parse_bool(const char *s) {
    if (!s || !*s || !strcmp(s, "0") || !strcasecmp(s, "false") || !strcasecmp(s, "no"))
        return 0;
    if (!strcmp(s, "1") || !strcasecmp(s, "true") || !strcasecmp(s, "yes")) return 1;
    return -1;
}

static int parse_seconds(const char *what, const char *s, long *ms, char *err, size_t errlen) {
    if (spmd__parse_duration_ms(s, ms) != SPMD_OK)
        return fail(err, errlen, "%s: '%s' is not a duration (seconds, or 500ms, 2s, 5m, 1h)",
                    what, s);
    return 0;
}

/* --rdzv-conf join_timeout=600,last_call_timeout=30,keep_alive_interval=5,... */
static int parse_rdzv_conf(const char *text, sr_config *cfg, int *is_host, char *err,
                           size_t errlen) {
    char buf[1024];
    if (strlen(text) >= sizeof buf) return fail(err, errlen, "--rdzv-conf: too long");
    strcpy(buf, text);
    long attempts = -1;
    for (char *save = NULL, *kv = strtok_r(buf, ",", &save); kv;
         kv = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(kv, '=');
        if (!eq) return fail(err, errlen, "--rdzv-conf: '%s' is not KEY=VALUE", kv);
        *eq = 0;
        const char *v = eq + 1;
        if (!strcmp(kv, "join_timeout")) {
            if (parse_seconds("--rdzv-conf join_timeout", v, &cfg->join_timeout_ms, err, errlen))
                return -1;
        } else if (!strcmp(kv, "last_call_timeout")) {
            if (parse_seconds("--rdzv-conf last_call_timeout", v, &cfg->last_call_ms, err,
                              errlen))
                return -1;
        } else if (!strcmp(kv, "keep_alive_interval")) {
            if (parse_seconds("--rdzv-conf keep_alive_interval", v, &cfg->keepalive_interval_ms,
                              err, errlen))
                return -1;
        } else if (!strcmp(kv, "keep_alive_max_attempt")) {
            if (parse_long(v, 1, 1000, &attempts))
                return fail(err, errlen, "--rdzv-conf keep_alive_max_attempt: '%s' is not 1..1000",
                            v);
        } else if (!strcmp(kv, "is_host")) {
            int b = parse_bool(v);
            if (b < 0) return fail(err, errlen, "--rdzv-conf is_host: '%s' is not true/false", v);
            *is_host = b;
        }
        /* Other keys of torch's backends (timeout, read_timeout, close_timeout,
         * ...) have no meaning here and are accepted so configs keep working. */
    }
    if (attempts > 0) cfg->keepalive_timeout_ms = cfg->keepalive_interval_ms * attempts;
    return 0;
}

const char *sr_help_text(void) {
    return "usage: spmdrun [options] [--] PROGRAM [ARGS...]\n"
           "\n"
           "Start PROGRAM as a group of workers with torchrun's environment (RANK, WORLD_SIZE,\n"
           "LOCAL_RANK, MASTER_ADDR, MASTER_PORT, ...).  PROGRAM is any executable; spmdrun\n"
           "never prepends python.  Options take '-' or '_' (--nproc-per-node, --nproc_per_node)\n"
           "and may also be set through PET_<NAME> variables, as with torchrun.\n"
           "\n"
           "  --nnodes N|MIN:MAX        number of nodes, or an elastic range (default 1); with\n"
           "                            --on-failure shrink|replace in place: a lost node is left\n"
           "                            behind while MIN remain, a new node joins while < MAX run\n"
           "  -n, --nproc-per-node N|auto  workers on this node; auto = number of CPUs (default 1)\n"
           "  --node-rank R             this node's rank (default: 0 with the static backend,\n"
           "                            by arrival with c10d)\n"
           "  --master-addr HOST        address of the store host (default 127.0.0.1)\n"
           "  --master-port PORT        its port (default 29500; 0 = pick a free port)\n"
           "  --rdzv-endpoint HOST[:P]  rendezvous store for several nodes (default port 29400)\n"
           "  --rdzv-id ID              job id; isolates jobs sharing a store (default none)\n"
           "  --rdzv-backend c10d|static  static: fixed node ranks; c10d: assigned by arrival\n"
           "  --rdzv-conf K=V,...       join_timeout, last_call_timeout, keep_alive_interval,\n"
           "                            keep_alive_max_attempt, is_host\n"
           "  --standalone              single node; the store on a free local port\n"
           "  --max-restarts K          restart the worker group up to K times (default 0)\n"
           "  --on-failure restart|shrink|replace  shrink: a worker killed by a signal (or exiting\n"
           "                            with 75, SPMD_EXIT_EXCLUDED) leaves the others running\n"
           "                            (they recover with spmd_group_shrink);\n"
           "                            replace: and a new worker with SPMD_JOIN=1 joins them\n"
           "  --monitor-interval SEC    how often the agent checks on other nodes (default 0.1)\n"
           "  --role NAME               ROLE_NAME of the workers (default 'default')\n"
           "  --log-dir DIR             write <DIR>/<run-id>/attempt_<k>/<rank>/std{out,err}.log\n"
           "  -r, --redirects M         send streams to the log files only: 0 none, 1 stdout,\n"
           "                            2 stderr, 3 both, or per local rank: 0:3,1:0\n"
           "  -t, --tee M               like --redirects but also to the console\n"
           "  --local-ranks-filter L    show only these local ranks on the console (0,2,4-7)\n"
           "  --pass-local-rank[=local_rank]  as torch.distributed.launch: give each worker\n"
           "                            --local-rank=N (or --local_rank=N, torch < 2.0's spelling)\n"
           "                            right after the program name; --use-env turns it off\n"
           "  --start-method M, --no-python, --use-env   accepted for compatibility\n"
           "  -h, --help                this text\n"
           "  --version                 print the version\n"
           "\n"
           "Environment: SPMD_GRACE_PERIOD (seconds between SIGTERM and SIGKILL, default 5),\n"
           "SPMD_RDZV_JOIN_TIMEOUT (600), SPMD_RDZV_LAST_CALL (30), SPMD_RDZV_KEEPALIVE_INTERVAL (1),\n"
           "SPMD_RDZV_KEEPALIVE_TIMEOUT (30), SPMD_EXIT_BARRIER_TIMEOUT (300).\n"
           "Exit status: 0 success, 1 the job failed, 2 bad usage, 128+N stopped by signal N.\n";
}

/* Find the option a long name (already normalised) designates: exact match,
 * else a unique prefix as argparse allows. */
static const opt_def *lookup(const char *name, char *err, size_t errlen) {
    for (size_t i = 0; i < NOPTS; i++)
        if (!strcmp(OPTS[i].name, name) || (OPTS[i].alias && !strcmp(OPTS[i].alias, name)))
            return &OPTS[i];
    const opt_def *hit = NULL;
    int nhits = 0;
    char cands[256] = "";
    size_t nl = strlen(name);
    for (size_t i = 0; i < NOPTS; i++) {
        if (!strncmp(OPTS[i].name, name, nl)) {
            hit = &OPTS[i];
            nhits++;
            size_t cl = strlen(cands);
            snprintf(cands + cl, sizeof cands - cl, "%s--%s", cl ? ", " : "", OPTS[i].name);
        }
    }
    if (nhits == 1 && nl > 0) return hit;
    if (nhits > 1) fail(err, errlen, "ambiguous option --%s: could be %s", name, cands);
    else fail(err, errlen, "unknown option --%s (see spmdrun --help)", name);
    return NULL;
}

typedef struct {
    int is_host; /* from --rdzv-conf, -1 unset */
    int node_rank_given;
    const char *nnodes, *nproc, *rdzv_conf;
    char nnodes_who[64], nproc_who[64]; /* where they came from, for messages */
} parse_state;

/* Apply one option.  `who` names it in messages ("--nnodes", "PET_NNODES"). */
static int apply(sr_config *cfg, parse_state *ps, const opt_def *o, const char *val,
                 const char *who, char *err, size_t errlen) {
    long v;
    switch (o->id) {
    case O_NNODES:
        ps->nnodes = val;
        snprintf(ps->nnodes_who, sizeof ps->nnodes_who, "%s", who);
        break;
    case O_NPROC:
        ps->nproc = val;
        snprintf(ps->nproc_who, sizeof ps->nproc_who, "%s", who);
        break;
    case O_NODE_RANK:
        if (parse_long(val, 0, INT_MAX, &v))
            return fail(err, errlen, "%s: '%s' is not a node rank (an integer >= 0)", who, val);
        cfg->node_rank = (int)v;
        ps->node_rank_given = 1;
        break;
    case O_MASTER_ADDR:
        if (!*val) return fail(err, errlen, "%s: empty address", who);
        cfg->master_addr = val;
        cfg->master_addr_set = 1;
        break;
    case O_MASTER_PORT:
        if (parse_long(val, 0, 65535, &v))
            return fail(err, errlen, "%s: '%s' is not a port number 0..65535", who, val);
        cfg->master_port = (int)v;
        cfg->master_port_set = 1;
        break;
    case O_RDZV_ENDPOINT: cfg->rdzv_endpoint = *val ? val : NULL; break;
    case O_RDZV_ID:
        if (!*val || strlen(val) > 128 || strchr(val, '/'))
            return fail(err, errlen, "%s: '%s' must be 1..128 characters without '/'", who, val);
        cfg->rdzv_id = val;
        break;
    case O_RDZV_BACKEND:
        if (strcmp(val, "c10d") && strcmp(val, "static"))
            return fail(err, errlen,
                        "%s: backend '%s' is not supported; spmdrun offers 'c10d' (node ranks "
                        "by arrival) and 'static' (fixed node ranks)",
                        who, val);
        cfg->rdzv_backend = val;
        break;
    case O_RDZV_CONF: ps->rdzv_conf = val; break;
    case O_STANDALONE: cfg->standalone = 1; break;
    case O_MAX_RESTARTS:
        if (parse_long(val, 0, 1000000, &v))
            return fail(err, errlen, "%s: '%s' is not a number of restarts (>= 0)", who, val);
        cfg->max_restarts = (int)v;
        break;
    case O_ON_FAILURE:
        if (!strcmp(val, "restart")) cfg->on_failure_shrink = 0;
        else if (!strcmp(val, "shrink")) cfg->on_failure_shrink = 1;
        else if (!strcmp(val, "replace")) cfg->on_failure_shrink = SR_ON_FAILURE_REPLACE;
        else return fail(err, errlen, "%s: '%s' is not one of restart, shrink, replace", who, val);
        break;
    case O_MONITOR: {
        char *end = NULL;
        errno = 0;
        double d = strtod(val, &end);
        if (errno || end == val || *end || !(d > 0) || d > 3600)
            return fail(err, errlen, "%s: '%s' is not a positive number of seconds", who, val);
        cfg->monitor_interval_ms = (long)(d * 1000.0 + 0.5);
        if (cfg->monitor_interval_ms < 1) cfg->monitor_interval_ms = 1;
        break;
    }
    case O_START_METHOD:
        if (strcmp(val, "spawn") && strcmp(val, "fork") && strcmp(val, "forkserver"))
            return fail(err, errlen, "%s: '%s' is not spawn, fork or forkserver", who, val);
        break; /* every worker is a fork + exec of the program; the choice is moot */
    case O_ROLE:
        if (!*val || strlen(val) > 64 || strpbrk(val, " \t\n"))
            return fail(err, errlen, "%s: '%s' must be 1..64 characters without spaces", who,
                        val);
        cfg->role = val;
        break;
    case O_MODULE:
        return fail(err, errlen,
                    "%s runs a Python module and is python-only; spmdrun starts any executable "
                    "as it is, so write: spmdrun [options] python3 -m MODULE [ARGS...]",
                    who);
    case O_RUN_PATH:
        return fail(err, errlen,
                    "%s runs a script inside the launcher's Python interpreter and is "
                    "python-only; spmdrun starts any executable, so write: spmdrun [options] "
                    "python3 SCRIPT [ARGS...]",
                    who);
    case O_NO_PYTHON: break;   /* spmdrun never prepends python */
    case O_USE_ENV: cfg->use_env = 1; break; /* launch.py: the environment only, no argument */
    case O_PASS_LOCAL_RANK:
        /* torch.distributed.launch gives each worker its local rank as an
         * argument: --local-rank=N since torch 2.0, --local_rank=N before */
        if (*val && parse_bool(val) == 0) cfg->local_rank_arg = NULL; /* PET_PASS_LOCAL_RANK=0 */
        else if (!*val || parse_bool(val) == 1 || !strcmp(val, "local-rank")) cfg->local_rank_arg = "--local-rank";
        else if (!strcmp(val, "local_rank")) cfg->local_rank_arg = "--local_rank";
        else
            return fail(err, errlen, "%s: '%s' is not local-rank (--local-rank=N, torch >= 2.0) or "
                        "local_rank (--local_rank=N, torch < 2.0)", who, val);
        break;
    case O_LOG_DIR:
        if (!*val) return fail(err, errlen, "%s: empty directory", who);
        cfg->log_dir = val;
        break;
    case O_REDIRECTS:
    case O_TEE: {
        char e[256];
        sr_std s;
        if (sr_parse_std(val, &s, e, sizeof e)) return fail(err, errlen, "%s: %s", who, e);
        if (o->id == O_REDIRECTS) { cfg->redirects = s; cfg->redirects_set = 1; }
        else { cfg->tee = s; cfg->tee_set = 1; }
        break;
    }
    case O_FILTER: return parse_filter(val, cfg, err, errlen);
    case O_HELP: cfg->help = 1; break;
    case O_VERSION: cfg->version = 1; break;
    case O_COUNT: break;
    }
    return 0;
}

/* PET_NPROC_PER_NODE and friends: torchrun reads a default for every option there. */
static int apply_pet_env(sr_config *cfg, parse_state *ps, char *err, size_t errlen) {
    for (size_t i = 0; i < NOPTS; i++) {
        const opt_def *o = &OPTS[i];
        if (o->id == O_HELP || o->id == O_VERSION) continue;
        char name[64] = "PET_";
        size_t k = 4;
        for (const char *p = o->name; *p && k + 1 < sizeof name; p++)
            name[k++] = *p == '-' ? '_' : (char)toupper((unsigned char)*p);
        name[k] = 0;
        const char *val = getenv(name);
        if (!val) continue;
        if (!o->takes_value) {
            int b = parse_bool(val);
            if (b < 0) return fail(err, errlen, "%s: '%s' is not 0 or 1", name, val);
            if (!b) continue;
        }
        if (apply(cfg, ps, o, val, name, err, errlen)) return -1;
    }
    return 0;
}

static int env_duration(const char *name, long *ms, char *err, size_t errlen) {
    const char *s = getenv(name);
    if (!s || !*s) return 0;
    return parse_seconds(name, s, ms, err, errlen);
}

int sr_parse_args(int argc, char **argv, sr_config *cfg, char *err, size_t errlen) {
    memset(cfg, 0, sizeof *cfg);
    cfg->min_nodes = cfg->max_nodes = 1;
    cfg->nproc = 1;
    cfg->node_rank = -1;
    cfg->master_addr = "127.0.0.1";
    cfg->master_port = 29500;
    cfg->rdzv_id = "none";
    cfg->rdzv_backend = "static";
    cfg->monitor_interval_ms = 100;
    cfg->role = "default";
    cfg->join_timeout_ms = 600000;
    cfg->last_call_ms = 30000;
    cfg->keepalive_interval_ms = 1000;
    cfg->keepalive_timeout_ms = 30000;
    cfg->grace_ms = 5000;
    cfg->exit_barrier_ms = 300000;
    parse_state ps = {.is_host = -1, .node_rank_given = 0,
                      .nnodes = "1", .nproc = "1", .rdzv_conf = NULL,
                      .nnodes_who = "--nnodes", .nproc_who = "--nproc-per-node"};

    if (apply_pet_env(cfg, &ps, err, errlen)) return -1;

    int i = 1;
    for (; i < argc; i++) {
        const char *arg = argv[i];
        if (!strcmp(arg, "--")) { i++; break; }
        if (arg[0] != '-' || !arg[1]) break; /* the program */
        const opt_def *o = NULL;
        const char *val = NULL;
        char who[80];
        if (arg[1] == '-') {
            char name[64];
            const char *eq = strchr(arg + 2, '=');
            size_t n = eq ? (size_t)(eq - (arg + 2)) : strlen(arg + 2);
            if (n >= sizeof name) return fail(err, errlen, "unknown option %.60s...", arg);
            for (size_t k = 0; k < n; k++) name[k] = arg[2 + k] == '_' ? '-' : arg[2 + k];
            name[n] = 0;
            if (!(o = lookup(name, err, errlen))) return -1;
            snprintf(who, sizeof who, "--%s", o->name);
            if (eq) {
                if (!o->takes_value) return fail(err, errlen, "%s takes no value", who);
                val = eq + 1;
            }
        } else {
            for (size_t k = 0; k < NOPTS; k++)
                if (OPTS[k].shortopt == arg[1]) o = &OPTS[k];
            if (!o) return fail(err, errlen, "unknown option %s (see spmdrun --help)", arg);
            snprintf(who, sizeof who, "-%c/--%s", o->shortopt, o->name);
            if (arg[2]) {
                if (!o->takes_value) return fail(err, errlen, "%s takes no value", who);
                val = arg + 2;
            }
        }
        if (o->takes_value == 1 && !val) {
            if (i + 1 >= argc) return fail(err, errlen, "%s needs a value", who);
            val = argv[++i];
        }
        if (apply(cfg, &ps, o, val ? val : "", who, err, errlen)) return -1;
    }
    cfg->prog_argv = argv + i;
    cfg->prog_argc = argc - i;
    if (cfg->use_env) cfg->local_rank_arg = NULL; /* launch.py's --use-env: no argument */
    if (cfg->help || cfg->version) return 0;

    /* --nnodes N | MIN:MAX */
    {
        char a[32], b[32];
        const char *colon = strchr(ps.nnodes, ':');
        long lo, hi;
        int bad = strlen(ps.nnodes) >= sizeof a;
        if (!bad && colon) {
            snprintf(a, sizeof a, "%.*s", (int)(colon - ps.nnodes), ps.nnodes);
            snprintf(b, sizeof b, "%s", colon + 1);
            bad = parse_long(a, 1, 100000, &lo) || parse_long(b, 1, 100000, &hi) || lo > hi;
        } else if (!bad) {
            bad = parse_long(ps.nnodes, 1, 100000, &lo);
            hi = lo;
        }
        if (bad)
            return fail(err, errlen,
                        "%s: '%s' is not N or MIN:MAX (positive integers, MIN <= MAX)",
                        ps.nnodes_who, ps.nnodes);
        cfg->min_nodes = (int)lo;
        cfg->max_nodes = (int)hi;
    }
    /* --nproc-per-node N | auto | cpu */
    if (!strcmp(ps.nproc, "auto") || !strcmp(ps.nproc, "cpu")) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        cfg->nproc = n < 1 ? 1 : n > SR_MAX_LOCAL ? SR_MAX_LOCAL : (int)n;
    } else if (!strcmp(ps.nproc, "gpu")) {
        return fail(err, errlen, "%s gpu: spmdrun has no GPU support; give a "
                                 "number or auto (= number of CPUs)", ps.nproc_who);
    } else {
        long n;
        if (parse_long(ps.nproc, 1, SR_MAX_LOCAL, &n))
            return fail(err, errlen, "%s: '%s' is not a number 1..%d or auto",
                        ps.nproc_who, ps.nproc, SR_MAX_LOCAL);
        cfg->nproc = (int)n;
    }

    /* Timeouts: SPMD_* variables, then --rdzv-conf (more specific) on top. */
    if (env_duration("SPMD_RDZV_JOIN_TIMEOUT", &cfg->join_timeout_ms, err, errlen) ||
        env_duration("SPMD_RDZV_LAST_CALL", &cfg->last_call_ms, err, errlen) ||
        env_duration("SPMD_RDZV_KEEPALIVE_INTERVAL", &cfg->keepalive_interval_ms, err, errlen) ||
        env_duration("SPMD_RDZV_KEEPALIVE_TIMEOUT", &cfg->keepalive_timeout_ms, err, errlen) ||
        env_duration("SPMD_GRACE_PERIOD", &cfg->grace_ms, err, errlen) ||
        env_duration("SPMD_EXIT_BARRIER_TIMEOUT", &cfg->exit_barrier_ms, err, errlen))
        return -1;
    if (ps.rdzv_conf && parse_rdzv_conf(ps.rdzv_conf, cfg, &ps.is_host, err, errlen)) return -1;
    if (cfg->keepalive_interval_ms < 1) cfg->keepalive_interval_ms = 1;
    if (cfg->keepalive_timeout_ms < cfg->keepalive_interval_ms)
        return fail(err, errlen, "keep-alive timeout (%ld ms) is shorter than its interval (%ld ms)",
                    cfg->keepalive_timeout_ms, cfg->keepalive_interval_ms);

    if (cfg->prog_argc == 0)
        return fail(err, errlen, "no program given (usage: spmdrun [options] PROGRAM [ARGS...])");
    if (cfg->standalone && cfg->max_nodes > 1)
        return fail(err, errlen,
                    "--standalone is for a single node but --nnodes is %d:%d; drop one of them",
                    cfg->min_nodes, cfg->max_nodes);
    if (cfg->node_rank >= cfg->max_nodes)
        return fail(err, errlen, "--node-rank %d is out of range for --nnodes %d (0..%d)",
                    cfg->node_rank, cfg->max_nodes, cfg->max_nodes - 1);
    /* torchrun's static backend means fixed node ranks, defaulting to 0; an
     * elastic range or c10d assigns them by arrival. */
    if (!ps.node_rank_given && !strcmp(cfg->rdzv_backend, "static") &&
        cfg->min_nodes == cfg->max_nodes && cfg->max_nodes > 1)
        cfg->node_rank = 0;
    if (cfg->rdzv_endpoint) {
        char h[SR_HOST_MAX];
        int port = 29400;
        if (sr_split_endpoint(cfg->rdzv_endpoint, h, sizeof h, &port, err, errlen)) return -1;
    }
    cfg->is_host = ps.is_host;
    return 0;
}
