/* envinfo.c — the environment contract (docs/API.md lists it):
 *   RANK WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE MASTER_ADDR MASTER_PORT   (torchrun, spmdrun)
 *   OMPI_COMM_WORLD_RANK/SIZE/LOCAL_RANK/LOCAL_SIZE                      (Open MPI's mpirun)
 *   SLURM_PROCID SLURM_NTASKS SLURM_LOCALID SLURM_JOB_NODELIST           (srun)
 *   PMI_RANK PMI_SIZE                                                    (MPICH/Hydra)
 * The first family that names a rank wins; MASTER_ADDR/MASTER_PORT always win
 * when set. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "envinfo.h"

/* Integer variable: 1 if set and valid, 0 if unset, -1 (err filled) if malformed. */
static int get_int(const char *name, long lo, long hi, long *out, char *err, size_t errlen) {
    spmd_status st = spmd__env_int(name, lo, hi, out);
    if (st == SPMD_OK) return 1;
    if (st == SPMD_ERR_NOTFOUND) return 0;
    spmd__fail(err, errlen, SPMD_ERR_INVALID, "environment variable %s='%s' is not an integer in [%ld, %ld]",
               name, getenv(name), lo, hi);
    return -1;
}

typedef struct {
    const char *source, *rank, *size, *local_rank, *local_size;
} family;

static const family families[] = {
    {"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"},
    {"openmpi", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
     "OMPI_COMM_WORLD_LOCAL_SIZE"},
    {"slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE"},
    {"pmi", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"},
};

spmd_status spmd__env_read(spmd__envinfo *e, char *err, size_t errlen) {
    memset(e, 0, sizeof *e);
    e->rank = e->world = -1;
    e->local_rank = 0;
    e->local_world = 1;
    e->source = "none";
    long v;
    int r;
    for (size_t i = 0; i < sizeof families / sizeof families[0]; i++) {
        const family *f = &families[i];
        if ((r = get_int(f->rank, 0, 1 << 24, &v, err, errlen)) < 0) return SPMD_ERR_INVALID;
        if (!r) continue;
        e->rank = (int)v;
        e->source = f->source;
        if ((r = get_int(f->size, 1, 1 << 24, &v, err, errlen)) < 0) return SPMD_ERR_INVALID;
        if (r) e->world = (int)v;
        if ((r = get_int(f->local_rank, 0, 1 << 24, &v, err, errlen)) < 0) return SPMD_ERR_INVALID;
        if (r) e->local_rank = (int)v;
        /* SLURM_NTASKS_PER_NODE may look like "2(x3)": take the leading number. */
        const char *ls = getenv(f->local_size);
        if (ls && *ls) {
            long n = strtol(ls, NULL, 10);
            if (n >= 1) e->local_world = (int)n;
        }
        break;
    }
    const char *addr = getenv("MASTER_ADDR");
    if (addr && *addr) {
        snprintf(e->master_addr, sizeof e->master_addr, "%s", addr);
    } else if (!strcmp(e->source, "slurm")) {
        const char *nl = getenv("SLURM_JOB_NODELIST");
        if (!nl || !*nl) nl = getenv("SLURM_NODELIST");
        if (nl && *nl && spmd__hostlist_first(nl, e->master_addr, sizeof e->master_addr) != SPMD_OK)
            return spmd__fail(err, errlen, SPMD_ERR_INVALID, "cannot parse SLURM_JOB_NODELIST='%s'", nl);
    } else if (!strcmp(e->source, "openmpi") && e->world > 0 && e->local_world == e->world) {
        /* Every rank on this host: the master is here. */
        snprintf(e->master_addr, sizeof e->master_addr, "127.0.0.1");
    }
    if ((r = get_int("MASTER_PORT", 1, 65535, &v, err, errlen)) < 0) return SPMD_ERR_INVALID;
    if (r) {
        e->master_port = (int)v;
    } else if (!strcmp(e->source, "slurm") && get_int("SLURM_JOB_ID", 0, 1L << 40, &v, err, errlen) == 1) {
        e->master_port = 15000 + (int)(v % 20000); /* one port per job, as Lightning does */
    } else if (e->master_addr[0]) {
        e->master_port = 29500;
    }
    const char *as = getenv("TORCHELASTIC_USE_AGENT_STORE");
    e->agent_store = as && (!strcmp(as, "True") || !strcmp(as, "true") || !strcmp(as, "1"));
    const char *rid = getenv("SPMD_RUN_ID");
    if (!rid || !*rid) rid = getenv("TORCHELASTIC_RUN_ID");
    if (!rid || !*rid) rid = getenv("SLURM_JOB_ID");
    snprintf(e->run_id, sizeof e->run_id, "%s", rid && *rid ? rid : "none");
    if (get_int("TORCHELASTIC_RESTART_COUNT", 0, 1 << 20, &v, err, errlen) == 1) e->restart_count = (int)v;
    if (get_int("SPMD_RESTART_COUNT", 0, 1 << 20, &v, err, errlen) == 1) e->restart_count = (int)v;
    return SPMD_OK;
}
