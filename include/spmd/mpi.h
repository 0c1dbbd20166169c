/* spmd/mpi.h — groups over MPI (spmd built with -DSPMD_WITH_MPI=ON).
 *
 * A group over MPI is an MPI communicator: its ranks are the communicator's,
 * and every byte (point-to-point, collectives) moves through MPI, so the
 * cluster's own fabric carries it.  Everything in spmd/group.h works on it
 * unchanged — p2p with tags and any-source, every collective, dtype and op,
 * async work, subgroups — and so do DDP (spmd/ddp.h), SyncBatchNorm and the
 * tools.
 *
 * Ways in:
 *   - spmd_group_init with backend "mpi" (spmd_group_opts.backend or
 *     SPMD_BACKEND=mpi), or "auto" under mpirun/srun: MPI_COMM_WORLD.
 *     spmd calls MPI_Init_thread (asking for MPI_THREAD_MULTIPLE) unless the
 *     application already initialized MPI, and then MPI_Finalize at exit.
 *   - spmd_group_from_mpi_comm: a communicator the application owns (it
 *     initialized MPI; it finalizes it after destroying the group).
 *
 * Threads: with MPI_THREAD_MULTIPLE, async collectives run on the group's
 * executor thread and overlap computation (DDP's buckets).  Below it, spmd
 * starts no thread of its own and serializes its MPI calls: an async
 * collective runs when it is waited for or tested (spmd_group_mpi_thread_level
 * tells which; a warning is logged at group creation).
 *
 * Deadlines: spmd never waits inside a blocking MPI call; every operation is
 * non-blocking and polled against the group's deadline (SPMD_TIMEOUT), its
 * failure state and notices from the other ranks.  Only MPI_Init_thread and,
 * for subgroups, MPI_Comm_create_group (after all members have met within
 * the deadline) block in MPI. */
#ifndef SPMD_MPI_H
#define SPMD_MPI_H

#include <mpi.h>
#include "spmd/group.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Form a group over comm, collectively (every rank of comm calls it).  The
 * group's rank r is comm's rank r.  comm is duplicated: the application keeps
 * it and may go on using it.  MPI must be initialized.  opts may be NULL; its
 * timeout_ms and name are used, rank/world_size must be -1 or comm's, and
 * init_method/store/backend must be unset.  On failure *out is untouched and
 * err receives the reason. */
spmd_status spmd_group_from_mpi_comm(MPI_Comm comm, const spmd_group_opts *opts, spmd_group **out, char *err,
                                     size_t errlen);

/* The thread level MPI provides (MPI_THREAD_SINGLE ... MPI_THREAD_MULTIPLE)
 * for a group over MPI; -1 for any other group. */
int spmd_group_mpi_thread_level(const spmd_group *g);

/* 1 once a group over MPI saw a rank of the job die (or was told by a rank
 * that saw it); else 0.  MPI_Finalize would then wait for the dead rank
 * forever (Open MPI's finalize waits for every process of the job): an
 * application that owns MPI should exit without it, as spmd does when it
 * initialized MPI. */
int spmd_mpi_rank_lost(void);

#ifdef __cplusplus
}
#endif
#endif
