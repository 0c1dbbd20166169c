/* Which transport a group uses (src/group/backend.c): spmd_group_opts.backend,
 * else SPMD_BACKEND, else auto — MPI only when spmd was built with it
 * (SPMD_HAVE_MPI) and an MPI launcher started the process, unless spmd's own
 * rendezvous is configured.  Runs in both kinds of build. */
#include <stdlib.h>
#include "group/backend.h"
#include "harness.h"

static spmd__backend choose(const spmd_group_opts *o, spmd_status *st, char *err, size_t len) {
    spmd__backend b = (spmd__backend)-1;
    *st = spmd__backend_choose(o, &b, err, len);
    return b;
}

int main(void) {
    static const char *launcher[] = {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE", "PMI_FD",
                                     "MASTER_ADDR", "MASTER_PORT", "SPMD_BACKEND"};
    for (size_t i = 0; i < sizeof launcher / sizeof launcher[0]; i++) unsetenv(launcher[i]);
    spmd_group_opts o = SPMD_GROUP_OPTS_DEFAULT;
    spmd_status st;
    char err[256];
#ifdef SPMD_HAVE_MPI
    const spmd__backend mpi_or_spmd = SPMD__BACKEND_MPI;
#else
    const spmd__backend mpi_or_spmd = SPMD__BACKEND_SPMD;
#endif
    /* no launcher: spmd's own */
    CHECK(choose(NULL, &st, err, sizeof err) == SPMD__BACKEND_SPMD && st == SPMD_OK);
    CHECK(!spmd__mpi_launched());
    /* under mpirun: MPI when built with it */
    setenv("OMPI_COMM_WORLD_SIZE", "4", 1);
    CHECK(spmd__mpi_launched());
    CHECK(choose(NULL, &st, err, sizeof err) == mpi_or_spmd && st == SPMD_OK);
    /* ... unless spmd's rendezvous is configured */
    setenv("MASTER_PORT", "29500", 1);
    CHECK(choose(NULL, &st, err, sizeof err) == SPMD__BACKEND_SPMD);
    unsetenv("MASTER_PORT");
    o.init_method = "tcp://127.0.0.1:1234";
    CHECK(choose(&o, &st, err, sizeof err) == SPMD__BACKEND_SPMD);
    o.init_method = NULL;
    unsetenv("OMPI_COMM_WORLD_SIZE");
    /* srun --mpi=pmix, MPICH's hydra */
    setenv("PMIX_RANK", "0", 1);
    CHECK(spmd__mpi_launched() && choose(NULL, &st, err, sizeof err) == mpi_or_spmd);
    unsetenv("PMIX_RANK");
    setenv("PMI_RANK", "0", 1);
    CHECK(!spmd__mpi_launched()); /* PMI_RANK alone (a Slurm task without MPI) is not enough */
    setenv("PMI_SIZE", "2", 1);
    CHECK(spmd__mpi_launched());
    unsetenv("PMI_RANK");
    unsetenv("PMI_SIZE");
    /* explicit names */
    setenv("SPMD_BACKEND", "tcp", 1);
    CHECK(choose(NULL, &st, err, sizeof err) == SPMD__BACKEND_SPMD && st == SPMD_OK);
    setenv("SPMD_BACKEND", "spmd", 1);
    CHECK(choose(NULL, &st, err, sizeof err) == SPMD__BACKEND_SPMD && st == SPMD_OK);
    setenv("SPMD_BACKEND", "nccl", 1);
    CHECK(choose(NULL, &st, err, sizeof err) == (spmd__backend)-1 && st == SPMD_ERR_INVALID);
    CHECK_MSG(strstr(err, "SPMD_BACKEND='nccl'") && strstr(err, "auto, spmd, mpi"), "%s", err);
    /* the option wins over the environment */
    o.backend = "mpi";
    spmd__backend b = choose(&o, &st, err, sizeof err);
#ifdef SPMD_HAVE_MPI
    CHECK(b == SPMD__BACKEND_MPI && st == SPMD_OK);
#else
    CHECK(b == (spmd__backend)-1 && st == SPMD_ERR_INVALID);
    CHECK_MSG(strstr(err, "built without MPI") && strstr(err, "SPMD_WITH_MPI"), "%s", err);
    /* and spmd_group_init says so */
    spmd_group *g = NULL;
    CHECK(spmd_group_init(&o, &g, err, sizeof err) == SPMD_ERR_INVALID && !g);
    CHECK_MSG(strstr(err, "spmd_group_opts.backend=mpi"), "%s", err);
#endif
    o.backend = "spmd";
    CHECK(choose(&o, &st, err, sizeof err) == SPMD__BACKEND_SPMD && st == SPMD_OK);
    unsetenv("SPMD_BACKEND");
    TEST_MAIN_END();
}
