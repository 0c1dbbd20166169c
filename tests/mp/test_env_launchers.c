/* Running without spmdrun: the group reads what mpirun (Open MPI), srun
 * (Slurm) and Hydra (PMI) set.  Each case forks ranks with only that family's
 * variables (rank 0 hosts the store itself, as it does under those
 * launchers), then checks rank, size, local rank and an all_reduce.
 * Also the parsing rules in-process: Slurm's master from the node list and
 * its port from the job id, malformed values named in the error. */
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>
#include "common/common.h"
#include "group/envinfo.h"
#include "harness.h"
#include "spmd/auth.h"
#include "spmd/group.h"

static const char *ALL_VARS[] = {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
                                 "MASTER_PORT", "TORCHELASTIC_USE_AGENT_STORE", "OMPI_COMM_WORLD_RANK",
                                 "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE",
                                 "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE",
                                 "SLURM_JOB_NODELIST", "SLURM_NODELIST", "SLURM_JOB_ID", "PMI_RANK", "PMI_SIZE",
                                 "MPI_LOCALRANKID", "MPI_LOCALNRANKS", "SPMD_RUN_ID", "TORCHELASTIC_RUN_ID"};

static void clear_env(void) {
    for (size_t i = 0; i < sizeof ALL_VARS / sizeof ALL_VARS[0]; i++) unsetenv(ALL_VARS[i]);
}

static void setint(const char *k, long v) {
    char b[32];
    snprintf(b, sizeof b, "%ld", v);
    setenv(k, b, 1);
}

static int free_port(void) {
    char err[128];
    int port = 0;
    int fd = spmd__listen("127.0.0.1", 0, 1, &port, err, sizeof err);
    if (fd >= 0) close(fd);
    return port;
}

enum { OMPI, SLURM, PMI };

static int rank_main(int family, int rank, int world, int port) {
    clear_env();
    switch (family) {
    case OMPI:
        setint("OMPI_COMM_WORLD_RANK", rank);
        setint("OMPI_COMM_WORLD_SIZE", world);
        setint("OMPI_COMM_WORLD_LOCAL_RANK", rank);
        setint("OMPI_COMM_WORLD_LOCAL_SIZE", world); /* all local: master 127.0.0.1 */
        break;
    case SLURM:
        setint("SLURM_PROCID", rank);
        setint("SLURM_NTASKS", world);
        setint("SLURM_LOCALID", rank);
        setenv("SLURM_NTASKS_PER_NODE", "3(x2)", 1);
        setenv("SLURM_JOB_NODELIST", "localhost,node[02-04]", 1); /* master: first host */
        setint("SLURM_JOB_ID", 4242);
        break;
    case PMI:
        setint("PMI_RANK", rank);
        setint("PMI_SIZE", world);
        setenv("MASTER_ADDR", "127.0.0.1", 1);
        break;
    }
    setint("MASTER_PORT", port);
    spmd_group *g = NULL;
    char err[512];
    spmd_group_opts o = SPMD_GROUP_OPTS_DEFAULT;
    o.timeout_ms = 20000;
    if (spmd_group_init(&o, &g, err, sizeof err)) {
        fprintf(stderr, "family %d rank %d: %s\n", family, rank, err);
        return 1;
    }
    int rc = 0;
    if (spmd_group_rank(g) != rank || spmd_group_size(g) != world) rc = 1;
    if (family != PMI && spmd_group_local_rank(g) != rank) rc = 1;
    if (family == SLURM && spmd_group_local_size(g) != 3) rc = 1;
    int32_t v = rank + 1, sum = 0;
    if (spmd_all_reduce(g, &v, &sum, 1, SPMD_I32, SPMD_SUM) || sum != world * (world + 1) / 2) rc = 1;
    if (rc) fprintf(stderr, "family %d rank %d: wrong identity or sum %d\n", family, rank, sum);
    spmd_group_destroy(g);
    return rc;
}

static int run_family(int family, int world) {
    int port = free_port();
    if (port <= 0) return 1;
    pid_t pids[8];
    fflush(NULL);
    for (int r = 0; r < world; r++) {
        pids[r] = fork();
        if (pids[r] == 0) {
            prctl(PR_SET_PDEATHSIG, SIGKILL);
            alarm(60);
            _exit(rank_main(family, r, world, port));
        }
    }
    int bad = 0;
    for (int r = 0; r < world; r++) {
        int status = 0;
        waitpid(pids[r], &status, 0);
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) bad++;
    }
    return bad;
}

static void parsing(void) {
    spmd__envinfo e;
    char err[256];
    clear_env();
    setenv("SLURM_PROCID", "2", 1);
    setenv("SLURM_NTASKS", "8", 1);
    setenv("SLURM_LOCALID", "0", 1);
    setenv("SLURM_JOB_NODELIST", "gpu[07-09,12],cpu1", 1);
    setenv("SLURM_JOB_ID", "123456", 1);
    CHECK(spmd__env_read(&e, err, sizeof err) == SPMD_OK);
    CHECK(e.rank == 2 && e.world == 8 && !strcmp(e.source, "slurm"));
    CHECK(!strcmp(e.master_addr, "gpu07"));
    CHECK(e.master_port == 15000 + 123456 % 20000);
    CHECK(!strcmp(e.run_id, "123456"));
    /* MASTER_ADDR / MASTER_PORT win when set */
    setenv("MASTER_ADDR", "10.0.0.9", 1);
    setenv("MASTER_PORT", "29555", 1);
    CHECK(spmd__env_read(&e, err, sizeof err) == SPMD_OK);
    CHECK(!strcmp(e.master_addr, "10.0.0.9") && e.master_port == 29555);
    /* torchrun's variables win over Slurm's */
    setenv("RANK", "5", 1);
    setenv("WORLD_SIZE", "6", 1);
    CHECK(spmd__env_read(&e, err, sizeof err) == SPMD_OK);
    CHECK(e.rank == 5 && e.world == 6 && !strcmp(e.source, "torchrun"));
    /* malformed values are named */
    setenv("RANK", "five", 1);
    CHECK(spmd__env_read(&e, err, sizeof err) == SPMD_ERR_INVALID && strstr(err, "RANK='five'"));
    setenv("RANK", "1", 1);
    setenv("MASTER_PORT", "70000", 1);
    CHECK(spmd__env_read(&e, err, sizeof err) == SPMD_ERR_INVALID && strstr(err, "MASTER_PORT"));
    clear_env();
    setenv("SLURM_PROCID", "0", 1);
    setenv("SLURM_NTASKS", "2", 1);
    setenv("SLURM_JOB_NODELIST", "node[1-", 1);
    CHECK(spmd__env_read(&e, err, sizeof err) == SPMD_ERR_INVALID && strstr(err, "SLURM_JOB_NODELIST"));
    /* Open MPI spread over hosts: no master can be guessed */
    clear_env();
    setenv("OMPI_COMM_WORLD_RANK", "1", 1);
    setenv("OMPI_COMM_WORLD_SIZE", "4", 1);
    setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "2", 1);
    CHECK(spmd__env_read(&e, err, sizeof err) == SPMD_OK && e.master_addr[0] == 0);
    spmd_group *g = NULL;
    setenv("SPMD_BACKEND", "spmd", 1); /* spmd's own rendezvous (auto would choose MPI under mpirun) */
    CHECK(spmd_group_init(NULL, &g, err, sizeof err) == SPMD_ERR_INVALID && strstr(err, "MASTER_ADDR"));
    unsetenv("SPMD_BACKEND");
    clear_env();
}

int main(void) {
    /* Ranks forked before any store exists meet as mpirun'd ones do: with a
     * job secret from the environment. */
    char token[SPMD_AUTH_TOKEN_CHARS + 1];
    REQUIRE(spmd_auth_new_token(token) == SPMD_OK);
    setenv("SPMD_AUTH_TOKEN", token, 1);
    parsing();
    CHECK_MSG(run_family(OMPI, 3) == 0, "Open MPI environment");
    CHECK_MSG(run_family(SLURM, 3) == 0, "Slurm environment");
    CHECK_MSG(run_family(PMI, 2) == 0, "PMI environment");
    TEST_MAIN_END();
}
