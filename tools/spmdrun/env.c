/* env.c — the worker environment, exactly the variables torchrun's agent sets
 * (torch/distributed/elastic/agent/server/local_elastic_agent.py) plus the
 * SPMD_* spellings of the restart bookkeeping.  Built in the agent before
 * fork(), so the child only has to execve(). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "spmdrun.h"

enum { NVARS = 19 };

static int named(const char *entry, const char *const *names, int n) {
    for (int i = 0; i < n; i++) {
        size_t l = strlen(names[i]);
        if (!strncmp(entry, names[i], l) && entry[l] == '=') return 1;
    }
    return 0;
}

char **sr_env_build(char *const *base, const sr_config *cfg, const sr_assignment *a, int lr,
                    int set_omp) {
    static const char *const names[NVARS] = {
        "LOCAL_RANK", "RANK", "GROUP_RANK", "ROLE_RANK", "ROLE_NAME", "LOCAL_WORLD_SIZE",
        "WORLD_SIZE", "GROUP_WORLD_SIZE", "ROLE_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
        "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS", "TORCHELASTIC_RUN_ID",
        "TORCHELASTIC_USE_AGENT_STORE", "SPMD_RESTART_COUNT", "SPMD_MAX_RESTARTS",
        "SPMD_RUN_ID", "OMP_NUM_THREADS"};
    char vals[NVARS][SR_HOST_MAX + 8];
    int nv = 0;
#define PUTI(v) snprintf(vals[nv++], sizeof vals[0], "%d", (v))
#define PUTS(v) snprintf(vals[nv++], sizeof vals[0], "%s", (v))
    PUTI(lr);
    PUTI(a->rank_offset + lr);
    PUTI(a->node_rank);
    PUTI(a->role_rank_offset + lr);
    PUTS(cfg->role);
    PUTI(a->local_world_size);
    PUTI(a->world_size);
    PUTI(a->nnodes);
    PUTI(a->role_world_size);
    PUTS(a->master_addr);
    PUTI(a->master_port);
    PUTI(a->restart_count);
    PUTI(cfg->max_restarts);
    PUTS(cfg->rdzv_id);
    PUTS("True"); /* the agent hosts the store; workers connect as clients */
    PUTI(a->restart_count);
    PUTI(cfg->max_restarts);
    PUTS(cfg->rdzv_id);
    PUTS("1");
#undef PUTI
#undef PUTS
    int nset = set_omp ? NVARS : NVARS - 1;
    const char *join = a->joining ? "SPMD_JOIN=1" : NULL; /* a node joining a running round in place */
    char standby[sizeof a->standby + 24];
    snprintf(standby, sizeof standby, "SPMD_STORE_STANDBY=%s", a->standby); /* the store's stand-ins */
    /* OMP_NUM_THREADS is only replaced when we set it; otherwise it passes through. */
    size_t nbase = 0;
    while (base && base[nbase]) nbase++;
    char **env = calloc(nbase + (size_t)nset + 3, sizeof *env);
    if (!env) return NULL;
    size_t k = 0;
    for (size_t i = 0; i < nbase; i++) {
        if (named(base[i], names, nset) || (join && !strncmp(base[i], "SPMD_JOIN=", 10)) ||
            !strncmp(base[i], "SPMD_STORE_STANDBY=", 19))
            continue;
        if (!(env[k++] = strdup(base[i]))) goto oom;
    }
    for (int i = 0; i < nset; i++) {
        size_t l = strlen(names[i]) + strlen(vals[i]) + 2;
        if (!(env[k] = malloc(l))) goto oom;
        snprintf(env[k++], l, "%s=%s", names[i], vals[i]);
    }
    if (join && !(env[k++] = strdup(join))) goto oom;
    if (a->standby[0] && !(env[k++] = strdup(standby))) goto oom;
    env[k] = NULL;
    return env;
oom:
    sr_env_free(env);
    return NULL;
}

void sr_env_free(char **env) {
    if (!env) return;
    for (char **p = env; *p; p++) free(*p);
    free(env);
}

/* Where launch.py's argument goes: right after the script.  For a Python
 * interpreter that is after its own options and the script (or -m MODULE,
 * -c CODE); for any other program, right after the program name. */
static int local_rank_position(const sr_config *cfg) {
    const char *base = strrchr(cfg->prog_argv[0], '/');
    base = base ? base + 1 : cfg->prog_argv[0];
    if (strncmp(base, "python", 6) != 0) return 1;
    for (int i = 1; i < cfg->prog_argc; i++) {
        const char *a = cfg->prog_argv[i];
        if (!strcmp(a, "-m") || !strcmp(a, "-c")) return i + 2 <= cfg->prog_argc ? i + 2 : cfg->prog_argc;
        if (a[0] != '-' || !strcmp(a, "-")) return i + 1;
    }
    return cfg->prog_argc;
}

char **sr_argv_build(const sr_config *cfg, int lr) {
    char **argv = calloc((size_t)cfg->prog_argc + 2, sizeof *argv);
    if (!argv) return NULL;
    int at = cfg->local_rank_arg ? local_rank_position(cfg) : -1, k = 0;
    for (int i = 0; i <= cfg->prog_argc; i++) {
        if (i == at) {
            char arg[64];
            snprintf(arg, sizeof arg, "%s=%d", cfg->local_rank_arg, lr);
            if (!(argv[k++] = strdup(arg))) goto oom;
        }
        if (i < cfg->prog_argc && !(argv[k++] = strdup(cfg->prog_argv[i]))) goto oom;
    }
    return argv;
oom:
    sr_env_free(argv);
    return NULL;
}
