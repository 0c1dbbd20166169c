/* src/group/envinfo.h — who am I, according to the launcher's environment. */
#ifndef SPMD_ENVINFO_H
#define SPMD_ENVINFO_H

#include "common/common.h"

typedef struct {
    int rank, world;           /* -1 when the environment does not say */
    int local_rank, local_world;
    char master_addr[256];     /* "" when unknown */
    int master_port;           /* 0 when unknown */
    int agent_store;           /* a launcher hosts the store: connect, don't host */
    char run_id[64];
    int restart_count;
    const char *source;        /* "torchrun", "openmpi", "slurm", "pmi" or "none" */
} spmd__envinfo;

/* Read the environment: torchrun/spmdrun variables first, then Open MPI,
 * Slurm and PMI.  Malformed values are an error naming the variable. */
spmd_status spmd__env_read(spmd__envinfo *e, char *err, size_t errlen);

#endif
