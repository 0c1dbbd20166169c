/* Unit tests for spmdrun's command line (tools/spmdrun/args.c, endpoint.c):
 * dashes and underscores, "=" and separate values, prefixes and the legacy
 * launch.py spellings, PET_ defaults, --nnodes MIN:MAX, and bad values
 * rejected with a message that names the flag. */
#include <unistd.h>

#include "harness.h"
#include "spmdrun.h"

#include <stdarg.h>

static char err[1024];
static char *words[64];

/* Parse the NULL-terminated words after "spmdrun". */
static int parse(sr_config *cfg, ...) {
    va_list ap;
    va_start(ap, cfg);
    int n = 0;
    words[n++] = "spmdrun";
    for (char *w; (w = va_arg(ap, char *)) != NULL && n < 63;) words[n++] = w;
    va_end(ap);
    words[n] = NULL;
    err[0] = 0;
    return sr_parse_args(n, words, cfg, err, sizeof err);
}
#define PARSE(cfg, ...) parse((cfg), __VA_ARGS__, (char *)NULL)

/* A bad command line: rejected, and the message mentions `needle`. */
#define REJECT(needle, ...)                                                              \
    do {                                                                                 \
        sr_config c_;                                                                    \
        int rc_ = PARSE(&c_, __VA_ARGS__);                                               \
        CHECK_MSG(rc_ == -1, "accepted: %s", #__VA_ARGS__);                             \
        CHECK_MSG(strstr(err, needle) != NULL, "message '%s' lacks '%s'", err, needle); \
    } while (0)

int main(void) {
    sr_config c;
    unsetenv("PET_NPROC_PER_NODE");
    unsetenv("SPMD_GRACE_PERIOD");

    /* Defaults, as torchrun's. */
    CHECK(PARSE(&c, "prog") == 0);
    CHECK(c.min_nodes == 1 && c.max_nodes == 1 && c.nproc == 1 && c.node_rank == -1);
    CHECK(!strcmp(c.master_addr, "127.0.0.1") && c.master_port == 29500);
    CHECK(!strcmp(c.rdzv_id, "none") && !strcmp(c.rdzv_backend, "static"));
    CHECK(!strcmp(c.role, "default") && c.max_restarts == 0 && !c.standalone);
    CHECK(c.grace_ms == 5000 && c.monitor_interval_ms == 100 && c.is_host == -1);
    CHECK(c.prog_argc == 1 && !strcmp(c.prog_argv[0], "prog"));

    /* Dashes, underscores, "=" or a separate word: all the same. */
    const char *spellings[][2] = {{"--nproc-per-node", "4"}, {"--nproc_per_node", "4"},
                                  {"--nproc-per-node=4", NULL}, {"--nproc_per_node=4", NULL}};
    for (int i = 0; i < 4; i++) {
        char *argv[] = {"spmdrun", (char *)spellings[i][0], (char *)spellings[i][1], "p", NULL};
        if (!spellings[i][1]) argv[2] = "p", argv[3] = NULL;
        int argc = spellings[i][1] ? 4 : 3;
        CHECK_MSG(sr_parse_args(argc, argv, &c, err, sizeof err) == 0 && c.nproc == 4, "%s: %s",
                  spellings[i][0], err);
    }
    CHECK(PARSE(&c, "--max_restarts", "3", "--max-restarts=5", "p") == 0 && c.max_restarts == 5);
    CHECK(PARSE(&c, "--master_addr=10.0.0.1", "--master-port", "0", "p") == 0 &&
          !strcmp(c.master_addr, "10.0.0.1") && c.master_port == 0);
    CHECK(PARSE(&c, "--monitor_interval", "0.5", "--role", "trainer", "p") == 0 &&
          c.monitor_interval_ms == 500 && !strcmp(c.role, "trainer"));

    /* torch.distributed.launch spellings from the seeds. */
    CHECK(PARSE(&c, "--nnode=1", "--node_rank=0", "--nproc_per_node=8", "--use_env", "example",
                "--local_world_size=8") == 0);
    CHECK(c.max_nodes == 1 && c.node_rank == 0 && c.nproc == 8 && c.prog_argc == 2);
    CHECK(!strcmp(c.prog_argv[1], "--local_world_size=8"));
    CHECK(PARSE(&c, "--use-env", "--no_python", "--start_method", "fork", "p") == 0);

    /* --nnodes forms; node ranks: static means fixed (default 0), c10d and ranges by arrival. */
    CHECK(PARSE(&c, "--nnodes", "2:4", "p") == 0 && c.min_nodes == 2 && c.max_nodes == 4 &&
          c.node_rank == -1);
    CHECK(PARSE(&c, "--nnodes", "2", "p") == 0 && c.min_nodes == 2 && c.max_nodes == 2 &&
          c.node_rank == 0);
    CHECK(PARSE(&c, "--nnodes", "2", "--rdzv-backend", "c10d", "p") == 0 && c.node_rank == -1);
    CHECK(PARSE(&c, "--nnodes", "3", "--node-rank", "2", "p") == 0 && c.node_rank == 2);
    REJECT("--nnodes", "--nnodes", "4:2", "p");
    REJECT("--nnodes", "--nnodes", "0", "p");
    REJECT("--nnodes", "--nnodes", "x", "p");
    REJECT("--nnodes", "--nnodes", "1:2:3", "p");
    REJECT("--nnodes", "--nnodes", "", "p");

    /* --nproc-per-node auto = CPUs. */
    CHECK(PARSE(&c, "--nproc-per-node", "auto", "p") == 0 &&
          c.nproc == (int)sysconf(_SC_NPROCESSORS_ONLN));
    REJECT("--nproc-per-node", "--nproc-per-node", "0", "p");
    REJECT("--nproc-per-node", "--nproc-per-node", "two", "p");
    REJECT("GPU", "--nproc-per-node", "gpu", "p");

    /* Program and arguments: everything after it belongs to it; "--" ends the options. */
    CHECK(PARSE(&c, "prog", "--nnodes", "5") == 0 && c.max_nodes == 1 && c.prog_argc == 3);
    CHECK(PARSE(&c, "--", "--weird-name", "x") == 0 && c.prog_argc == 2 &&
          !strcmp(c.prog_argv[0], "--weird-name"));

    /* Prefixes as argparse allows them; ambiguous and unknown ones are named. */
    CHECK(PARSE(&c, "--standa", "p") == 0 && c.standalone);
    REJECT("ambiguous option --r", "--r", "1", "p");
    REJECT("unknown option --frobnicate", "--frobnicate", "p");
    REJECT("unknown option -x", "-x", "p");

    /* Short forms. */
    CHECK(PARSE(&c, "-r3", "-t", "0:1,1:2", "p") == 0 && c.redirects.dflt == 3 &&
          sr_std_mode(&c.tee, 0) == 1 && sr_std_mode(&c.tee, 1) == 2 && sr_std_mode(&c.tee, 5) == 0);
    CHECK(PARSE(&c, "-h") == 0 && c.help);
    CHECK(PARSE(&c, "--version") == 0 && c.version);

    /* Python-only options: a clear refusal that says what to do instead. */
    REJECT("python-only", "-m", "pkg.mod");
    REJECT("python3 -m MODULE", "--module", "pkg.mod");
    REJECT("python-only", "--run-path", "x.py");
    REJECT("python-only", "--run_path", "x.py");

    /* Bad values name the flag. */
    REJECT("--max-restarts", "--max-restarts", "-1", "p");
    REJECT("--master-port", "--master-port", "70000", "p");
    REJECT("--master-port", "--master_port", "80x", "p");
    REJECT("--monitor-interval", "--monitor-interval", "0", "p");
    REJECT("--node-rank", "--node-rank", "-2", "p");
    REJECT("out of range", "--nnodes", "2", "--node-rank", "2", "p");
    REJECT("--redirects", "--redirects", "4", "p");
    REJECT("appears twice", "--tee", "0:3,0:1", "p");
    REJECT("--tee", "--tee", "0:3,", "p");
    REJECT("'etcd' is not supported", "--rdzv-backend", "etcd", "p");
    REJECT("--start-method", "--start-method", "thread", "p");
    REJECT("--local-ranks-filter", "--local-ranks-filter", "0,x", "p");
    REJECT("--local-ranks-filter", "--local-ranks-filter", "3-1", "p");
    REJECT("needs a value", "--nnodes");
    REJECT("takes no value", "--standalone=1", "p");
    REJECT("no program given", "--nproc-per-node", "2");
    REJECT("--standalone is for a single node", "--standalone", "--nnodes", "2", "p");
    REJECT("not a port", "--rdzv-endpoint", "host:http", "p");
    REJECT("--rdzv-id", "--rdzv-id", "a/b", "p");

    /* --local-ranks-filter lists and ranges. */
    CHECK(PARSE(&c, "--local-ranks-filter", "0,2-3", "p") == 0 && c.filter_set && c.filter[0] &&
          !c.filter[1] && c.filter[2] && c.filter[3] && !c.filter[4]);

    /* --rdzv-conf: torch's keys; unknown ones are tolerated. */
    CHECK(PARSE(&c, "--rdzv-conf",
                "join_timeout=5,last_call_timeout=1,keep_alive_interval=2,keep_alive_max_attempt=3,"
                "read_timeout=60,is_host=true",
                "p") == 0);
    CHECK(c.join_timeout_ms == 5000 && c.last_call_ms == 1000 && c.keepalive_interval_ms == 2000 &&
          c.keepalive_timeout_ms == 6000 && c.is_host == 1);
    REJECT("join_timeout", "--rdzv-conf", "join_timeout=soon", "p");
    REJECT("KEY=VALUE", "--rdzv-conf", "is_host", "p");

    /* PET_ variables are defaults; the command line wins. */
    setenv("PET_NPROC_PER_NODE", "3", 1);
    CHECK(PARSE(&c, "p") == 0 && c.nproc == 3);
    CHECK(PARSE(&c, "--nproc-per-node", "2", "p") == 0 && c.nproc == 2);
    setenv("PET_NPROC_PER_NODE", "zero", 1);
    REJECT("PET_NPROC_PER_NODE", "p");
    unsetenv("PET_NPROC_PER_NODE");
    setenv("PET_STANDALONE", "1", 1);
    CHECK(PARSE(&c, "p") == 0 && c.standalone);
    unsetenv("PET_STANDALONE");

    /* SPMD_* durations. */
    setenv("SPMD_GRACE_PERIOD", "500ms", 1);
    CHECK(PARSE(&c, "p") == 0 && c.grace_ms == 500);
    setenv("SPMD_GRACE_PERIOD", "2", 1);
    CHECK(PARSE(&c, "p") == 0 && c.grace_ms == 2000);
    setenv("SPMD_GRACE_PERIOD", "later", 1);
    REJECT("SPMD_GRACE_PERIOD", "p");
    unsetenv("SPMD_GRACE_PERIOD");

    /* Endpoints. */
    char host[SR_HOST_MAX];
    int port = -1;
    CHECK(sr_split_endpoint("node1:1234", host, sizeof host, &port, err, sizeof err) == 0 &&
          !strcmp(host, "node1") && port == 1234);
    port = 77;
    CHECK(sr_split_endpoint("node1", host, sizeof host, &port, err, sizeof err) == 0 &&
          !strcmp(host, "node1") && port == 77);
    CHECK(sr_split_endpoint("[::1]:5", host, sizeof host, &port, err, sizeof err) == 0 &&
          !strcmp(host, "::1") && port == 5);
    port = 9;
    CHECK(sr_split_endpoint("fe80::1", host, sizeof host, &port, err, sizeof err) == 0 &&
          !strcmp(host, "fe80::1") && port == 9);
    CHECK(sr_split_endpoint("[::1", host, sizeof host, &port, err, sizeof err) == -1);
    CHECK(sr_split_endpoint(":80", host, sizeof host, &port, err, sizeof err) == -1);
    CHECK(sr_is_local_address("127.0.0.1"));
    CHECK(!sr_is_local_address("192.0.2.1")); /* TEST-NET-1: never ours */

    /* The help text names every flag the issue lists. */
    const char *h = sr_help_text();
    const char *flags[] = {"--nnodes", "--nproc-per-node", "--node-rank", "--master-addr",
                           "--master-port", "--rdzv-endpoint", "--rdzv-id", "--rdzv-backend",
                           "--standalone", "--max-restarts", "--monitor-interval", "--log-dir",
                           "--redirects", "--tee", "--local-ranks-filter", "--role", "--version"};
    for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++)
        CHECK_MSG(strstr(h, flags[i]) != NULL, "help lacks %s", flags[i]);
    /* -n N: the short spelling docs/TRAINING.md uses (mpirun's -n). */
    CHECK(PARSE(&c, "-n", "2", "prog") == 0 && c.nproc == 2);
    CHECK(PARSE(&c, "-n3", "prog") == 0 && c.nproc == 3);
    REJECT("-n/--nproc-per-node", "-n", "zero", "prog");

    /* --pass-local-rank: launch.py's argument, after the program name. */
    CHECK(PARSE(&c, "prog", "a") == 0 && c.local_rank_arg == NULL);
    CHECK(PARSE(&c, "--pass-local-rank", "--nproc_per_node=2", "prog", "a") == 0 &&
          c.local_rank_arg && !strcmp(c.local_rank_arg, "--local-rank"));
    {
        char **argv = sr_argv_build(&c, 1);
        CHECK(argv && !strcmp(argv[0], "prog") && !strcmp(argv[1], "--local-rank=1") &&
              !strcmp(argv[2], "a") && argv[3] == NULL);
        sr_env_free(argv);
    }
    CHECK(PARSE(&c, "--pass-local-rank=local_rank", "prog") == 0 && !strcmp(c.local_rank_arg, "--local_rank"));
    {
        char **argv = sr_argv_build(&c, 0);
        CHECK(argv && !strcmp(argv[1], "--local_rank=0") && argv[2] == NULL);
        sr_env_free(argv);
    }
    /* a Python interpreter: after the script (or -m MODULE), as launch.py */
    CHECK(PARSE(&c, "--pass-local-rank", "/usr/bin/python3", "-u", "train.py", "--lr", "1") == 0);
    {
        char **argv = sr_argv_build(&c, 3);
        CHECK(argv && !strcmp(argv[2], "train.py") && !strcmp(argv[3], "--local-rank=3") &&
              !strcmp(argv[4], "--lr") && argv[6] == NULL);
        sr_env_free(argv);
    }
    CHECK(PARSE(&c, "--pass-local-rank", "python3", "-m", "pkg.train") == 0);
    {
        char **argv = sr_argv_build(&c, 0);
        CHECK(argv && !strcmp(argv[2], "pkg.train") && !strcmp(argv[3], "--local-rank=0") && argv[4] == NULL);
        sr_env_free(argv);
    }
    CHECK(PARSE(&c, "--pass-local-rank", "--use_env", "prog") == 0 && c.local_rank_arg == NULL);
    REJECT("--pass-local-rank", "--pass-local-rank=rank", "prog");
    /* without =, the next word is the program, not a value */
    CHECK(PARSE(&c, "--pass-local-rank", "local_rank") == 0 && c.prog_argc == 1 &&
          !strcmp(c.local_rank_arg, "--local-rank"));
    setenv("PET_PASS_LOCAL_RANK", "local_rank", 1);
    CHECK(PARSE(&c, "prog") == 0 && c.local_rank_arg && !strcmp(c.local_rank_arg, "--local_rank"));
    unsetenv("PET_PASS_LOCAL_RANK");

    TEST_MAIN_END();
}
