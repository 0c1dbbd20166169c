/* The Open MPI peer of spmd-bench, for benchmarks only (built by
 * bench/compare.sh with mpicc; spmd never needs MPI).
 *   mpirun -np 2 --mca btl tcp,self mpi_bench allreduce 4 67108864 20 [warmup]
 *   mpirun -np 2 --mca btl tcp,self mpi_bench pingpong 4 16777216 200 [warmup]
 * Prints "size time_us busbw_GBps" lines, measured as spmd-bench measures:
 * all_reduce float sum, the slowest rank's mean over the iterations (after
 * `warmup`, default 5), busbw = size/time × 2(n-1)/n; ping-pong (as
 * osu_latency and spmd-bench -o pingpong): after `warmup` round trips (the
 * first size at least about 64 MiB of them, up to 20000: start-up is not the
 * steady state), the
 * loop of round trips timed as a whole on rank 0, half of it per iteration,
 * and size/time.  MPI_BENCH_THREADS=multiple initialises with
 * MPI_THREAD_MULTIPLE.
 *   mpirun -np 2 mpi_bench exchange 4 65536 2000 [warmup]
 * times, as allreduce, the least an all_reduce at world 2 costs when no
 * call may block in MPI (how spmd's MPI backend must call it to notice a
 * dead peer or a deadline): MPI_Irecv and MPI_Isend of the whole buffer,
 * MPI_Testall until both are done, then the sum.
 * MPI_BENCH_MIN_MS=M runs each size's loop again with more iterations until
 * it lasts at least M ms (as spmd-bench --min-ms: beside other jobs a short
 * loop shows whether the scheduler preempted it, not the sustained rate). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* MPI_BENCH_MIN_MS: the iterations for the next run of a loop that took
 * `per_s` seconds per iteration with `iters`, or 0 when it lasted long
 * enough (the rule of spmd-bench's longer_loop). */
static int longer_loop(int iters, double per_s, int min_ms) {
    const double want = min_ms / 1000.0, took = per_s * iters;
    if (took >= want || iters >= (1 << 28)) return 0;
    double next = took > 0 ? iters * (want / took) * 1.1 : iters * 16.0;
    if (next < iters * 2.0) next = iters * 2.0;
    return next > (double)(1 << 28) ? 1 << 28 : (int)next;
}

int main(int argc, char **argv) {
    /* MPI_BENCH_THREADS=multiple: the guarantee spmd always gives (any
     * thread may call at any time), which makes Open MPI lock and use
     * atomics as spmd does; by default MPI_Init (one thread calls MPI). */
    const char *th = getenv("MPI_BENCH_THREADS");
    if (th && strcmp(th, "multiple") == 0) {
        int got = 0;
        MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &got);
        if (got != MPI_THREAD_MULTIPLE) fprintf(stderr, "mpi_bench: MPI_THREAD_MULTIPLE not granted (%d)\n", got);
    } else {
        MPI_Init(&argc, &argv);
    }
    int rank, world;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    const char *what = argc > 1 ? argv[1] : "allreduce";
    size_t minb = argc > 2 ? strtoull(argv[2], NULL, 10) : 4;
    size_t maxb = argc > 3 ? strtoull(argv[3], NULL, 10) : 64u << 20;
    const int iters0 = argc > 4 ? atoi(argv[4]) : 20;
    int warmup = argc > 5 ? atoi(argv[5]) : 5;
    const int min_ms = getenv("MPI_BENCH_MIN_MS") ? atoi(getenv("MPI_BENCH_MIN_MS")) : 0;
    char *buf = malloc(maxb + 64), *out = malloc(maxb + 64);
    memset(buf, 0, maxb);
    for (size_t bytes = minb; bytes <= maxb; bytes *= 2) {
        double t = 0;
        if (!strcmp(what, "pingpong")) {
            MPI_Barrier(MPI_COMM_WORLD);
            double t0 = 0;
            /* the first size also settles the pair, as in spmd-bench: about
             * 64 MiB of round trips, between 4 and 20000 */
            size_t settle = ((size_t)64 << 20) / (bytes ? bytes : 1);
            settle = settle > 20000 ? 20000 : settle < 4 ? 4 : settle;
            int warm = bytes == minb && warmup < (int)settle ? (int)settle : warmup;
            int iters = iters0;
            for (;;) {
                for (int i = -warm; i < iters; i++) {
                    if (i == 0) t0 = MPI_Wtime();
                    if (rank == 0) {
                        MPI_Send(buf, (int)bytes, MPI_BYTE, 1, 1, MPI_COMM_WORLD);
                        MPI_Recv(buf, (int)bytes, MPI_BYTE, 1, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                    } else if (rank == 1) {
                        MPI_Recv(buf, (int)bytes, MPI_BYTE, 0, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                        MPI_Send(buf, (int)bytes, MPI_BYTE, 0, 1, MPI_COMM_WORLD);
                    }
                }
                t = MPI_Wtime() - t0;
                if (!min_ms) break;
                int next = rank == 0 ? longer_loop(iters, t / iters, min_ms) : 0; /* rank 0 timed it */
                MPI_Bcast(&next, 1, MPI_INT, 0, MPI_COMM_WORLD);
                if (!next) break;
                iters = next;
                warm = 0;
            }
            double us = t / iters / 2 * 1e6;
            if (rank == 0) printf("%zu %.2f %.3f\n", bytes, us, bytes / (us * 1e3));
        } else {
            int count = (int)(bytes / 4);
            if (count < 1) count = 1;
            const int exchange = !strcmp(what, "exchange");
            if (exchange && world != 2) {
                if (rank == 0) fprintf(stderr, "mpi_bench: exchange needs 2 ranks\n");
                break;
            }
            int iters = iters0, warm = warmup;
            double slowest;
            for (;;) {
                t = 0;
                for (int i = -warm; i < iters; i++) {
                    if (i == 0) MPI_Barrier(MPI_COMM_WORLD);
                    double t0 = MPI_Wtime();
                    if (exchange) {
                        MPI_Request rq[2];
                        MPI_Status sts[2]; /* not MPI_STATUSES_IGNORE: gcc takes MPICH's for an empty array */
                        int done = 0;
                        MPI_Irecv(out, count, MPI_FLOAT, 1 - rank, 7, MPI_COMM_WORLD, &rq[0]);
                        MPI_Isend(buf, count, MPI_FLOAT, 1 - rank, 7, MPI_COMM_WORLD, &rq[1]);
                        while (!done) MPI_Testall(2, rq, &done, sts);
                        float *o = (float *)(void *)out;
                        const float *b = (const float *)(void *)buf;
                        for (int k = 0; k < count; k++) o[k] += b[k];
                    } else {
                        MPI_Allreduce(buf, out, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
                    }
                    if (i >= 0) t += MPI_Wtime() - t0;
                }
                double mean = t / iters;
                MPI_Allreduce(&mean, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
                /* every rank has the same slowest mean, so all take the same branch */
                const int next = min_ms ? longer_loop(iters, slowest, min_ms) : 0;
                if (!next) break;
                iters = next;
                warm = 0;
            }
            double us = slowest * 1e6;
            if (rank == 0) printf("%zu %.2f %.3f\n", bytes, us, bytes / (us * 1e3) * 2.0 * (world - 1) / world);
        }
        fflush(stdout);
        if (bytes > maxb / 2) break;
    }
    free(buf);
    free(out);
    MPI_Finalize();
    return 0;
}
