/* tests/mp/mpi_job.h — the multi-process tests under mpirun (tests/mpi.cmake
 * runs them with SPMD_BACKEND=mpi at -np 1..4): spmd_spawn then forks nothing
 * (each process the launcher started is a rank), so a test's cases for other
 * world sizes are skipped, and a few behaviours differ on a group over MPI. */
#ifndef SPMD_TEST_MPI_JOB_H
#define SPMD_TEST_MPI_JOB_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "spmd/group.h"

/* Ranks of the MPI job this process belongs to; 0 when not under mpirun. */
static inline int mpi_job_size(void) {
    const char *s = getenv("OMPI_COMM_WORLD_SIZE");
    if (!s || !*s) s = getenv("PMI_SIZE");
    return s && *s ? atoi(s) : 0;
}

/* spmd_spawn_timeout, or SPMD_OK doing nothing when this MPI job has another
 * size than `world` (the case runs in the job of that size). */
static inline spmd_status test_spawn(int world, spmd_spawn_fn fn, void *arg, int timeout_ms, char *report,
                                     size_t len) {
    int n = mpi_job_size();
    if (n && n != world) {
        if (report && len) snprintf(report, len, "skipped: this MPI job has %d ranks", n);
        return SPMD_OK;
    }
    return spmd_spawn_timeout(world, fn, arg, timeout_ms, report, len);
}

static inline int group_on_mpi(const spmd_group *g) { return !strcmp(spmd_group_backend(g), "mpi"); }

#endif
