/* src/group/backend.h — which transport a new group uses (backend.c). */
#ifndef SPMD_GROUP_BACKEND_H
#define SPMD_GROUP_BACKEND_H

#include "spmd/group.h"

typedef enum { SPMD__BACKEND_SPMD = 0, SPMD__BACKEND_MPI = 1 } spmd__backend;

/* The backend for spmd_group_init(opts) (opts may be NULL): the option,
 * else SPMD_BACKEND, else auto.  SPMD_ERR_INVALID for an unknown name, or
 * "mpi" in a build without MPI. */
spmd_status spmd__backend_choose(const spmd_group_opts *opts, spmd__backend *out, char *err, size_t errlen);
/* An MPI launcher started this process (mpirun/mpiexec, srun --mpi=pmix|pmi2). */
int spmd__mpi_launched(void);

#ifdef SPMD_HAVE_MPI
/* mpi_group.c */
int spmd__mpi_app_initialized(void); /* MPI_Initialized and not finalized */
spmd_status spmd__group_init_mpi(const spmd_group_opts *opts, spmd_group **out, char *err, size_t errlen);
/* spmd_group_new_subgroup of a group over MPI: `sorted` (owned) lists the
 * members, me is this rank's place among them (-1: not a member). */
spmd_status spmd__group_mpi_subgroup(spmd_group *g, int *sorted, int nranks, int me, int id, spmd_group **out);
#endif

#endif
