/* backend.c — which transport a new group uses (spmd_group_opts.backend,
 * SPMD_BACKEND):
 *   spmd   spmd's own transport: TCP and shared-memory rings (SPMD_TRANSPORT);
 *          "tcp" and "shm" are accepted as its names too
 *   mpi    MPI: the group is MPI_COMM_WORLD (spmd/mpi.h for another
 *          communicator); needs spmd built with SPMD_WITH_MPI
 *   auto   (default) mpi when spmd was built with MPI and either an MPI
 *          launcher started the process or the application has initialized
 *          MPI, unless spmd's own rendezvous is configured (init_method, a
 *          store, MASTER_ADDR or MASTER_PORT) — those runs keep spmd's own
 *          transport, as before; else spmd. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "backend.h"
#include "common/common.h"

static int set(const char *name) {
    const char *v = getenv(name);
    return v && *v;
}

int spmd__mpi_launched(void) {
    /* Open MPI's mpirun; PMIx (srun --mpi=pmix, Open MPI 5, prrte); PMI-1/2
     * (MPICH's hydra, Intel MPI, srun --mpi=pmi2) */
    return set("OMPI_COMM_WORLD_SIZE") || set("PMIX_RANK") || (set("PMI_RANK") && set("PMI_SIZE")) ||
           set("PMI_FD");
}

spmd_status spmd__backend_choose(const spmd_group_opts *opts, spmd__backend *out, char *err, size_t errlen) {
    const char *b = opts && opts->backend ? opts->backend : getenv("SPMD_BACKEND");
    const char *origin = opts && opts->backend ? "spmd_group_opts.backend" : "SPMD_BACKEND";
    if (!b || !*b || !strcmp(b, "auto")) {
        int own_rendezvous = (opts && (opts->init_method || opts->store)) || set("MASTER_ADDR") || set("MASTER_PORT");
        int mpi = 0;
#ifdef SPMD_HAVE_MPI
        mpi = !own_rendezvous && (spmd__mpi_launched() || spmd__mpi_app_initialized());
#else
        (void)own_rendezvous;
#endif
        *out = mpi ? SPMD__BACKEND_MPI : SPMD__BACKEND_SPMD;
        return SPMD_OK;
    }
    if (!strcmp(b, "spmd") || !strcmp(b, "tcp") || !strcmp(b, "shm")) {
        *out = SPMD__BACKEND_SPMD;
        return SPMD_OK;
    }
    if (!strcmp(b, "mpi")) {
#ifdef SPMD_HAVE_MPI
        *out = SPMD__BACKEND_MPI;
        return SPMD_OK;
#else
        return spmd__fail(err, errlen, SPMD_ERR_INVALID,
                          "%s=mpi, but spmd was built without MPI (configure with -DSPMD_WITH_MPI=ON)", origin);
#endif
    }
    return spmd__fail(err, errlen, SPMD_ERR_INVALID, "%s='%s' is not one of auto, spmd, mpi", origin, b);
}
