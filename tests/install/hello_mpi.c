/* A program of another project that owns MPI, built against an installed spmd
 * with the MPI backend: its communicator becomes a group. */
#include <mpi.h>
#include <spmd/mpi.h>
#include <stdio.h>

int main(int argc, char **argv) {
    int provided, world;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    spmd_group *g;
    char err[256];
    if (spmd_group_from_mpi_comm(MPI_COMM_WORLD, NULL, &g, err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    float x = 1.0f;
    int rc = spmd_all_reduce(g, &x, &x, 1, SPMD_F32, SPMD_SUM) != SPMD_OK || x != (float)world;
    printf("rank %d of %d over %s: %g\n", spmd_group_rank(g), world, spmd_group_backend(g), x);
    spmd_group_destroy(g);
    MPI_Finalize();
    return rc;
}
