/* mpi_overhead — the cost of the spmd layer over MPI: in one MPI program,
 * rounds of plain MPI_Allreduce on MPI_COMM_WORLD interleaved with rounds of
 * spmd_all_reduce on a group over MPI_COMM_WORLD (SPMD_BACKEND=mpi), same
 * buffers, same sizes, so both see the same machine load.  Built with the
 * MPI backend (tests/mpi.cmake); results in docs/PERFORMANCE.md.
 *
 *   mpirun -np 2 [--mca btl tcp,self] mpi_overhead [-b 4] [-e 64M] [-r 9] [-a algo,...]
 *
 * For each size: -r rounds; each round times a batch of iterations (about
 * 20 ms worth) of every contender in turn, starting one further each
 * round: "MPI" (MPI_Allreduce), "spmd" (the selection table), and the spmd
 * algorithms named by -a (e.g. mpi,rd,ring);
 * "floor" among them is no spmd at all: the same exchange by hand with
 * MPI_Isend/MPI_Irecv/MPI_Testall, what any caller that must not block in
 * MPI pays.
 * A contender's time is the fastest round's (the one least disturbed by
 * other jobs on a shared machine) slowest rank's mean per call.  float32 sum, out of place.  Printed: size, the times in us,
 * spmd/MPI and spmd - MPI (us). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "spmd/mpi.h"
#include "../tools/size_arg.h"

#define MAXC 8

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Mean time per call of `iters` calls of contender k (0: MPI). */
/* The floor for any layer that must not block inside MPI (spmd keeps its
 * deadline and failure checks between MPI calls): recursive doubling by
 * hand, MPI_Isend/MPI_Irecv polled with MPI_Testall, on its own
 * communicator.  Worlds that are powers of two only. */
static MPI_Comm floor_comm = MPI_COMM_NULL;
static float *floor_tmp;

static void floor_allreduce(const float *in, float *out, int n) {
    int rank, world;
    MPI_Comm_rank(floor_comm, &rank);
    MPI_Comm_size(floor_comm, &world);
    memcpy(out, in, sizeof(float) * (size_t)n);
    for (int mask = 1; mask < world; mask <<= 1) {
        MPI_Request r[2];
        MPI_Irecv(floor_tmp, n, MPI_FLOAT, rank ^ mask, 7, floor_comm, &r[0]);
        MPI_Isend(out, n, MPI_FLOAT, rank ^ mask, 7, floor_comm, &r[1]);
        int done = 0;
        while (!done) MPI_Testall(2, r, &done, MPI_STATUSES_IGNORE);
        for (int i = 0; i < n; i++) out[i] += floor_tmp[i];
    }
}

static double timed(int k, const char *algo, spmd_group *g, float *in, float *out, int n, int iters) {
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    for (int i = 0; i < iters; i++) {
        if (k == 0) {
            MPI_Allreduce(in, out, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        } else if (algo && !strcmp(algo, "floor")) {
            floor_allreduce(in, out, n);
        } else if (!algo) {
            if (spmd_all_reduce(g, in, out, (size_t)n, SPMD_F32, SPMD_SUM)) {
                fprintf(stderr, "spmd_all_reduce: %s\n", spmd_group_errmsg(g));
                MPI_Abort(MPI_COMM_WORLD, 1);
            }
        } else { /* the blocking call, the algorithm by name through the environment (as coll_sweep) */
            setenv("SPMD_ALGO_ALL_REDUCE", algo, 1);
            spmd_status st = spmd_all_reduce(g, in, out, (size_t)n, SPMD_F32, SPMD_SUM);
            unsetenv("SPMD_ALGO_ALL_REDUCE");
            if (st) {
                fprintf(stderr, "spmd_all_reduce (%s): %s\n", algo, spmd_group_errmsg(g));
                MPI_Abort(MPI_COMM_WORLD, 1);
            }
        }
    }
    double t = (MPI_Wtime() - t0) / iters, slowest;
    MPI_Allreduce(&t, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return slowest;
}

int main(int argc, char **argv) {
    size_t lo = 4, hi = 64u << 20;
    int rounds = 9;
    char algos_arg[256] = "";
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "-b") || !strcmp(argv[i], "-e")) {
            if (spmd_size_arg(argv[i + 1], argv[i][1] == 'b' ? &lo : &hi)) {
                fprintf(stderr, "mpi_overhead: %s takes a size (4, 64K, 1M), not '%s'\n", argv[i], argv[i + 1]);
                return 2;
            }
        } else if (!strcmp(argv[i], "-r")) rounds = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-a")) snprintf(algos_arg, sizeof algos_arg, "%s", argv[i + 1]);
    }
    if (rounds < 1) rounds = 1;
    int provided, rank, world;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    spmd_group *g = NULL;
    char err[512];
    if (spmd_group_from_mpi_comm(MPI_COMM_WORLD, NULL, &g, err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    const char *names[MAXC] = {"MPI", "spmd"};
    const char *algo[MAXC] = {NULL, NULL};
    int nc = 2;
    for (char *tok = strtok(algos_arg, ","); tok && nc < MAXC; tok = strtok(NULL, ",")) {
        if (!strcmp(tok, "floor") && (world & (world - 1))) continue; /* powers of two only */
        names[nc] = tok;
        algo[nc++] = tok;
    }
    float *in = malloc(hi + 64), *out = malloc(hi + 64);
    floor_tmp = malloc(hi + 64);
    MPI_Comm_dup(MPI_COMM_WORLD, &floor_comm);
    for (size_t i = 0; i < hi / 4 + 1; i++) in[i] = (float)(i % 7);
    if (rank == 0) {
        printf("# all_reduce float32 sum, out of place, %d ranks (%s); best of %d rounds of the slowest rank's mean\n",
               world, provided == MPI_THREAD_MULTIPLE ? "MPI_THREAD_MULTIPLE" : "below MPI_THREAD_MULTIPLE", rounds);
        printf("%12s", "bytes");
        for (int k = 0; k < nc; k++) printf(" %11s", names[k]);
        printf(" %10s %10s\n", "spmd/MPI", "spmd-MPI");
    }
    for (size_t bytes = lo; bytes <= hi; bytes *= 2) {
        int n = (int)(bytes / 4);
        if (n < 1) n = 1;
        /* about 20 ms per batch: the first call's time decides the count */
        double one = timed(0, NULL, g, in, out, n, 3);
        int iters = one > 0 ? (int)(0.02 / one) : 1000;
        if (iters < 3) iters = 3;
        if (iters > 20000) iters = 20000;
        MPI_Bcast(&iters, 1, MPI_INT, 0, MPI_COMM_WORLD);
        for (int k = 0; k < nc; k++) timed(k, algo[k], g, in, out, n, 2); /* warm-up */
        double t[MAXC][64];
        /* each round starts with the next contender: with the order fixed,
         * a contender's place in the round moved its time at 1-16 MiB by up
         * to 1.4x (this guest's copies, not the contender) */
        for (int r = 0; r < rounds && r < 64; r++)
            for (int j = 0; j < nc; j++) {
                const int k = (r + j) % nc;
                t[k][r] = timed(k, algo[k], g, in, out, n, iters);
            }
        if (rank == 0) {
            double med[MAXC];
            for (int k = 0; k < nc; k++) {
                qsort(t[k], (size_t)(rounds < 64 ? rounds : 64), sizeof(double), cmp_double);
                med[k] = t[k][0] * 1e6; /* the fastest round */
            }
            printf("%12zu", bytes);
            for (int k = 0; k < nc; k++) printf(" %11.2f", med[k]);
            printf(" %10.3f %10.2f\n", med[1] / med[0], med[1] - med[0]);
            fflush(stdout);
        }
    }
    free(in);
    free(out);
    free(floor_tmp);
    MPI_Comm_free(&floor_comm);
    spmd_group_destroy(g);
    MPI_Finalize();
    return 0;
}
