/* SPMD_BACKEND=mpi in a process no MPI launcher started, while its
 * environment names a larger world (as under spmdrun -n 2, torchrun or srun
 * without --mpi): spmd_group_init fails naming both worlds, instead of
 * forming a world of 1 in every process.  Without such a world in the
 * environment a lone process is still a valid world of 1.
 * usage: test_mpi_world_env torchrun|slurm|alone */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "spmd/mpi.h"

int main(int argc, char **argv) {
    const char *how = argc > 1 ? argv[1] : "";
    setenv("SPMD_BACKEND", "mpi", 1);
    if (!strcmp(how, "torchrun")) {
        setenv("RANK", "1", 1);
        setenv("WORLD_SIZE", "2", 1);
    } else if (!strcmp(how, "slurm")) {
        setenv("SLURM_PROCID", "0", 1);
        setenv("SLURM_NTASKS", "4", 1);
        setenv("SLURM_JOB_NODELIST", "rack[2-3]n[05-06]", 1);
    } else if (strcmp(how, "alone")) {
        fprintf(stderr, "usage: %s torchrun|slurm|alone\n", argv[0]);
        return 2;
    }
    spmd_group *g = NULL;
    char err[512] = "";
    spmd_status st = spmd_group_init(NULL, &g, err, sizeof err);
    printf("%s: %s (%s)\n", how, spmd_status_name(st), err);
    int ok;
    if (!strcmp(how, "alone")) {
        ok = st == SPMD_OK && spmd_group_size(g) == 1;
    } else {
        const char *world = !strcmp(how, "torchrun") ? "a world of 2" : "a world of 4";
        const char *vars = !strcmp(how, "torchrun") ? "RANK/WORLD_SIZE" : "SLURM_PROCID/SLURM_NTASKS";
        ok = st == SPMD_ERR_INVALID && !g && strstr(err, "MPI_COMM_WORLD has 1 rank") && strstr(err, world) &&
             strstr(err, vars);
    }
    if (g) spmd_group_destroy(g);
    if (!ok) fprintf(stderr, "FAIL: %s\n", how);
    return ok ? 0 : 1;
}
