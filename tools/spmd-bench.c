/* spmd-bench — collective and point-to-point benchmarks in the nccl-tests
 * format (columns, busbw factors, #wrong) and osu_latency/osu_bw style.
 *
 *   spmdrun --nproc-per-node 2 spmd-bench -b 8 -e 64M -f 2 -o all_reduce
 *   spmd-bench --np 4 -o all_gather -d float -c 1 --csv out.csv --plot out.png
 *   spmd-bench --np 2 -o pingpong        (latency: half round trip)
 *   spmd-bench --np 2 -o bw              (bandwidth: a window of isends)
 *
 * Time per size is the mean over -n iterations after -w warm-up iterations,
 * of the slowest rank.  algbw = size / time; busbw = algbw × factor:
 * all_reduce 2(n-1)/n; all_gather, reduce_scatter, all_to_all, gather,
 * scatter (n-1)/n; broadcast, reduce 1.  For all_gather, reduce_scatter and
 * all_to_all the size is the whole (world × block) buffer, as nccl-tests has it.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "common/seconds.h"
#include "spmd/spmd.h"
#include "size_arg.h"
#include "spmd-bench.h"

static const struct { const char *name; op_t op; } OPS[] = {
    {"all_reduce", O_ALL_REDUCE}, {"allreduce", O_ALL_REDUCE}, {"broadcast", O_BROADCAST},
    {"reduce", O_REDUCE}, {"all_gather", O_ALL_GATHER}, {"allgather", O_ALL_GATHER},
    {"reduce_scatter", O_REDUCE_SCATTER}, {"reducescatter", O_REDUCE_SCATTER},
    {"all_to_all", O_ALL_TO_ALL}, {"alltoall", O_ALL_TO_ALL}, {"gather", O_GATHER},
    {"scatter", O_SCATTER}, {"barrier", O_BARRIER}, {"pingpong", O_PINGPONG}, {"latency", O_PINGPONG},
    {"bw", O_BW}, {"bandwidth", O_BW},
};


static void usage(FILE *f) {
    fprintf(f,
            "usage: spmd-bench [options]   (run under spmdrun/mpirun/srun, or with --np N)\n"
            "nccl-tests' options are accepted where they mean something on CPUs: -o takes a\n"
            "collective or, as nccl-tests' -o, a reduction (sum prod min max avg); -d all runs\n"
            "every datatype; -g 1 and -t 1 (one rank per process, no GPU) are the only settings.\n"
            "  -b, --minbytes N     smallest size (default 8; K/M/G suffixes)\n"
            "  -e, --maxbytes N     largest size (default 64M)\n"
            "  -f, --stepfactor F   multiply the size by F each step (default 2)\n"
            "  -i, --stepbytes N    add N bytes each step instead\n"
            "  -n, --iters N        timed iterations per size (default 20)\n"
            "  -T, --min-ms MS      time each size for at least MS ms: the loop is run again with more\n"
            "                       iterations until it lasts that long (beside other jobs, a short loop\n"
            "                       shows whether the scheduler preempted it, not the sustained rate)\n"
            "  -w, --warmup_iters N warm-up iterations per size (default 5; pingpong's first size:\n"
            "                       at least about 64 MiB of round trips, up to 20000)\n"
            "  -c, --check 0|1      check results (default 1)\n"
            "  -o, --op NAME        all_reduce broadcast reduce all_gather reduce_scatter\n"
            "                       all_to_all gather scatter barrier | pingpong bw | rpc (default all_reduce),\n"
            "                       or a reduction as -r\n"
            "  -d, --datatype T     float double half bfloat16 int8 uint8 int32 int64, or all\n"
            "                       (default float)\n"
            "  -r, --redop OP       sum avg prod min max band bor bxor (default sum)\n"
            "  -R, --root N         root of rooted collectives (default 0)\n"
            "  --algo NAME          force an algorithm (ring, rhd, rd, tree, naive, butterfly, ...)\n"
            "  --inplace-only | --outplace-only\n"
            "  --csv FILE           also write the table as CSV\n"
            "  --plot FILE.png      draw busbw against size (needs gnuplot)\n"
            "  --np N               fork N local ranks (when not under a launcher; --np 1: one rank)\n"
            "  -g, --ngpus 1        -t, --nthreads 1: nccl-tests' devices and threads per process\n"
            "  -h, --help\n");
}

static int parse_args(int argc, char **argv, opts_t *o) {
    memset(o, 0, sizeof *o);
    o->min_bytes = 8;
    o->max_bytes = 64u << 20;
    o->factor = 2;
    o->iters = 20;
    o->warmup = 5;
    o->check = 1;
    o->op = O_ALL_REDUCE;
    o->opname = "all_reduce";
    o->dt = SPMD_F32;
    o->redop = SPMD_SUM;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
#define IS(s, l) (!strcmp(a, s) || !strcmp(a, l))
        if (IS("-h", "--help")) { usage(stdout); exit(0); }
        if (IS("--inplace-only", "--inplace-only")) { o->inplace_only = 1; continue; }
        if (IS("--outplace-only", "--outplace-only")) { o->outplace_only = 1; continue; }
        if (!v) { fprintf(stderr, "spmd-bench: %s needs a value\n", a); return -1; }
        i++;
        if (IS("-b", "--minbytes")) { if (spmd_size_arg(v, &o->min_bytes)) goto bad; }
        else if (IS("-e", "--maxbytes")) { if (spmd_size_arg(v, &o->max_bytes)) goto bad; }
        else if (IS("-i", "--stepbytes")) { if (spmd_size_arg(v, &o->step_bytes)) goto bad; }
        else if (IS("-f", "--stepfactor")) { o->factor = atof(v); if (o->factor <= 1) goto bad; }
        else if (IS("-n", "--iters")) { o->iters = atoi(v); if (o->iters < 1) goto bad; }
        else if (IS("-T", "--min-ms")) { o->min_ms = atoi(v); if (o->min_ms < 0 || o->min_ms > 600000) goto bad; }
        else if (IS("-w", "--warmup_iters")) { o->warmup = atoi(v); if (o->warmup < 0) goto bad; }
        else if (IS("-c", "--check")) o->check = atoi(v);
        else if (IS("-R", "--root")) o->root = atoi(v);
        else if (IS("-d", "--datatype")) {
            o->all_dtypes = !strcmp(v, "all");
            if (!o->all_dtypes && spmd_dtype_parse(v, &o->dt)) goto bad;
        } else if (IS("-g", "--ngpus") || IS("-t", "--nthreads")) {
            /* nccl-tests: devices per thread, threads per process; here every
             * rank is one process on CPUs */
            if (strcmp(v, "1") != 0) {
                fprintf(stderr, "spmd-bench: %s %s: spmd-bench runs one rank per process on CPUs, so only "
                                "%s 1 is meaningful; start more ranks with the launcher (spmdrun -n N, "
                                "mpirun -n N) or --np N\n", a, v, a);
                return -1;
            }
        }
        else if (IS("-r", "--redop")) { if (spmd_op_parse(v, &o->redop)) goto bad; }
        else if (IS("--algo", "--algorithm")) o->algo = v;
        else if (IS("--csv", "--csv")) o->csv = v;
        else if (IS("--plot", "--plot")) o->plot = v;
        else if (IS("--np", "--nprocs")) { o->np = atoi(v); if (o->np < 1) goto bad; }
        else if (IS("-o", "--op")) {
            size_t k;
            for (k = 0; k < sizeof OPS / sizeof OPS[0]; k++)
                if (!strcmp(OPS[k].name, v)) break;
            if (k < sizeof OPS / sizeof OPS[0]) {
                o->op = OPS[k].op;
                o->opname = OPS[k].name;
            } else if (spmd_op_parse(v, &o->redop) != SPMD_OK) {   /* nccl-tests' -o sum */
                goto bad;
            }
        } else {
            fprintf(stderr, "spmd-bench: unknown option %s; the accepted ones:\n", a);
            usage(stderr);
            return -1;
        }
        continue;
    bad:
        fprintf(stderr, "spmd-bench: bad value '%s' for %s; the accepted values:\n", v, a);
        usage(stderr);
        return -1;
#undef IS
    }
    if (o->max_bytes < o->min_bytes) o->max_bytes = o->min_bytes;
    /* files written after the measurement: their folders must exist now */
    const char *outs[2] = {o->csv, o->plot};
    for (int k = 0; k < 2; k++) {
        if (!outs[k]) continue;
        const char *slash = strrchr(outs[k], '/');
        char dir[4096];
        snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash - outs[k]) : 1, slash ? outs[k] : ".");
        if (slash == outs[k]) snprintf(dir, sizeof dir, "/");
        if (access(dir, W_OK) != 0) {
            fprintf(stderr, "spmd-bench: %s %s: cannot write in the folder %s: %s\n", k ? "--plot" : "--csv",
                    outs[k], dir, strerror(errno));
            return -1;
        }
    }
    return 0;
}

/* ---- one size ----------------------------------------------------------- */

typedef struct {
    void *send, *recv;
    size_t cap;
} bufs_t;

static double now_us(void) { return spmd__seconds() * 1e6; }

/* --min-ms: the iterations for the next run of a size's loop, which took
 * `per_us` per iteration with `iters`, or 0 when it lasted long enough (or
 * cannot grow further). */
static int longer_loop(int iters, double per_us, int min_ms) {
    const double want = (double)min_ms * 1000.0, took = per_us * iters;
    if (took >= want || iters >= (1 << 28)) return 0;
    double next = took > 0 ? iters * (want / took) * 1.1 : iters * 16.0;
    if (next < iters * 2.0) next = iters * 2.0;
    return next > (double)(1 << 28) ? 1 << 28 : (int)next;
}

/* The blocking calls, as applications (and the seeds) use them; --algo is
 * passed through SPMD_ALGO_<COLLECTIVE> (set in main). */
static spmd_status run_op(spmd_group *g, const opts_t *o, bufs_t *b, size_t count, int inplace) {
    void *s = inplace ? b->recv : b->send, *r = b->recv;
    size_t es = spmd_dtype_size(o->dt);
    size_t mine = (size_t)spmd_group_rank(g) * count * es;
    spmd_status st;
    switch (o->op) {
    case O_ALL_REDUCE: st = spmd_all_reduce(g, s, r, count, o->dt, o->redop); break;
    case O_BROADCAST: st = spmd_broadcast(g, r, count, o->dt, o->root); break;
    case O_REDUCE: st = spmd_reduce(g, s, r, count, o->dt, o->redop, o->root); break;
    case O_ALL_GATHER:
        /* in place: this rank's block already sits at its offset in recv */
        st = spmd_all_gather(g, inplace ? (char *)r + mine : s, r, count, o->dt);
        break;
    case O_REDUCE_SCATTER:
        st = spmd_reduce_scatter(g, inplace ? r : s, inplace ? (char *)r + mine : r, count, o->dt, o->redop);
        break;
    case O_ALL_TO_ALL: st = spmd_all_to_all(g, s, r, count, o->dt); break;
    case O_GATHER: st = spmd_gather(g, s, r, count, o->dt, o->root); break;
    case O_SCATTER: st = spmd_scatter(g, s, r, count, o->dt, o->root); break;
    case O_BARRIER: st = spmd_barrier(g); break;
    default: return SPMD_ERR_INVALID;
    }
    if (st) fprintf(stderr, "spmd-bench: %s\n", spmd_group_errmsg(g));
    return st;
}

/* Per-rank elements in the send buffer / receive buffer for a size in bytes. */
static void shape(const opts_t *o, int w, size_t bytes, size_t es, size_t *count, size_t *send_elems,
                  size_t *recv_elems) {
    size_t n = bytes / es;
    switch (o->op) {
    case O_ALL_GATHER: *count = n / (size_t)w; *send_elems = *count; *recv_elems = *count * (size_t)w; break;
    case O_REDUCE_SCATTER: *count = n / (size_t)w; *send_elems = *count * (size_t)w; *recv_elems = *count * (size_t)w; break;
    case O_ALL_TO_ALL: *count = n / (size_t)w; *send_elems = *recv_elems = *count * (size_t)w; break;
    case O_GATHER: *count = n / (size_t)w; *send_elems = *count; *recv_elems = *count * (size_t)w; break;
    case O_SCATTER: *count = n / (size_t)w; *send_elems = *count * (size_t)w; *recv_elems = *count; break;
    case O_BARRIER: *count = 0; *send_elems = *recv_elems = 0; break;
    default: *count = n; *send_elems = *recv_elems = n; break;
    }
}

static double bus_factor(op_t op, int w) {
    if (w <= 1) return op == O_BROADCAST || op == O_REDUCE ? 1 : 0;
    switch (op) {
    case O_ALL_REDUCE: return 2.0 * (w - 1) / w;
    case O_BROADCAST: case O_REDUCE: return 1;
    default: return (double)(w - 1) / w;
    }
}

/* Returns mean µs per iteration of the slowest rank, wrong-element count. */
static spmd_status measure(spmd_group *g, const opts_t *o, bufs_t *b, size_t bytes, int inplace, double *us,
                           long *wrong) {
    int rank = spmd_group_rank(g), w = spmd_group_size(g);
    size_t es = spmd_dtype_size(o->dt), count, se, re;
    shape(o, w, bytes, es, &count, &se, &re);
    spmd_status st;
    for (int i = 0; i < o->warmup; i++) {
        spmd__bench_fill(o, rank, w, b->send, b->recv, count, inplace);
        if ((st = run_op(g, o, b, count, inplace))) return st;
    }
    /* As nccl-tests: time the loop as a whole, data left as it is (refilling
     * each iteration would put the slowest rank's fill inside the others'
     * timing).  The correctness check runs once more on fresh data. */
    spmd__bench_fill(o, rank, w, b->send, b->recv, count, inplace);
    double slowest = 0;
    for (int iters = o->iters;;) {
        if ((st = spmd_barrier(g))) return st;
        double t0 = now_us();
        for (int i = 0; i < iters; i++)
            if ((st = run_op(g, o, b, count, inplace))) return st;
        double mean = (now_us() - t0) / iters;
        if ((st = spmd_all_reduce(g, &mean, &slowest, 1, SPMD_F64, SPMD_MAX))) return st;
        /* every rank has the same slowest mean, so all take the same branch */
        if ((iters = longer_loop(iters, slowest, o->min_ms)) == 0) break;
    }
    if (o->check) {
        spmd__bench_fill(o, rank, w, b->send, b->recv, count, inplace);
        if ((st = run_op(g, o, b, count, inplace))) return st;
    }
    *us = slowest;
    int64_t bad = o->check ? spmd__bench_count_wrong(o, rank, w, b->recv, count, inplace) : 0, sum = 0;
    if ((st = spmd_all_reduce(g, &bad, &sum, 1, SPMD_I64, SPMD_SUM))) return st;
    *wrong = (long)sum;
    return SPMD_OK;
}

static const char *dtype_col(spmd_dtype dt) {
    static const char *n[] = {"float", "double", "half", "bfloat16", "int8", "uint8", "int32", "int64"};
    return dt < SPMD_DTYPE_COUNT ? n[dt] : "?";
}

static int collective_bench(spmd_group *g, const opts_t *o) {
    int rank = spmd_group_rank(g), w = spmd_group_size(g);
    size_t es = spmd_dtype_size(o->dt);
    size_t maxcount, se, re;
    shape(o, w, o->max_bytes, es, &maxcount, &se, &re);
    bufs_t b;
    b.cap = (se > re ? se : re) * es + 64;
    b.send = aligned_alloc(64, (b.cap + 63) / 64 * 64);
    b.recv = aligned_alloc(64, (b.cap + 63) / 64 * 64);
    if (!b.send || !b.recv) {
        fprintf(stderr, "spmd-bench: cannot allocate %zu bytes\n", b.cap);
        return 1;
    }
    memset(b.send, 0, b.cap);
    memset(b.recv, 0, b.cap);
    FILE *csv = NULL;
    if (rank == 0) {
        printf("# spmd-bench %s: minBytes %zu maxBytes %zu step: %g(factor) warmup iters: %d iters: %d validation: %d\n",
               o->opname, o->min_bytes, o->max_bytes, o->factor, o->warmup, o->iters, o->check);
        printf("#\n# Using ranks: %d (backend %s)%s%s\n#\n", w, spmd_group_backend(g), o->algo ? ", algorithm " : "",
               o->algo ? o->algo : "");
        printf("#%63s%33s\n", "out-of-place", "in-place");
        printf("# %10s %12s %8s %6s %6s %9s %7s %7s %6s %9s %7s %7s %6s\n", "size", "count", "type", "redop", "root",
               "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw", "#wrong");
        printf("# %10s %12s %8s %6s %6s %9s %7s %7s %6s %9s %7s %7s %6s\n", "(B)", "(elements)", "", "", "", "(us)",
               "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "");
        if (o->csv) {
            csv = fopen(o->csv, "w");
            if (!csv) fprintf(stderr, "spmd-bench: cannot write %s: %s\n", o->csv, strerror(errno));
            else fprintf(csv, "op,size_bytes,count,type,redop,root,ranks,oop_time_us,oop_algbw,oop_busbw,oop_wrong,ip_time_us,ip_algbw,ip_busbw,ip_wrong\n");
        }
    }
    int rc = 0;
    double busbw_sum = 0;
    int nsizes = 0;
    long wrong_total = 0;
    int rooted = o->op == O_BROADCAST || o->op == O_REDUCE || o->op == O_GATHER || o->op == O_SCATTER;
    int reducing = o->op == O_ALL_REDUCE || o->op == O_REDUCE || o->op == O_REDUCE_SCATTER;
    for (size_t bytes = o->min_bytes;;) {
        size_t count, se2, re2;
        shape(o, w, bytes, es, &count, &se2, &re2);
        size_t real_bytes = o->op == O_BARRIER ? 0 : (o->op == O_ALL_REDUCE || o->op == O_BROADCAST || o->op == O_REDUCE ? count : count * (size_t)w) * es;
        double t[2] = {0, 0};
        long wr[2] = {0, 0};
        int skip_ip = o->outplace_only || o->op == O_SCATTER || o->op == O_GATHER || o->op == O_ALL_TO_ALL || o->op == O_BARRIER;
        for (int ip = 0; ip < 2; ip++) {
            if ((ip == 0 && o->inplace_only) || (ip == 1 && skip_ip)) { t[ip] = -1; continue; }
            spmd_status st = measure(g, o, &b, bytes, ip, &t[ip], &wr[ip]);
            if (st) {
                if (rank == 0) fprintf(stderr, "spmd-bench: %s failed at %zu bytes: %s\n", o->opname, bytes, spmd_status_str(st));
                rc = 1;
                goto done;
            }
            wrong_total += wr[ip];
        }
        if (rank == 0) {
            double f = bus_factor(o->op, w);
            char cols[2][64];
            double busbw_last = 0;
            for (int ip = 0; ip < 2; ip++) {
                if (t[ip] < 0) { snprintf(cols[ip], sizeof cols[ip], "%9s %7s %7s %6s", "n/a", "n/a", "n/a", "n/a"); continue; }
                double algbw = t[ip] > 0 ? real_bytes / (t[ip] * 1e3) : 0;
                busbw_last = algbw * f;
                snprintf(cols[ip], sizeof cols[ip], "%9.2f %7.2f %7.2f %6ld", t[ip], algbw, algbw * f, o->check ? wr[ip] : -1L);
            }
            printf("  %10zu %12zu %8s %6s %6d %s %s\n", real_bytes, count, dtype_col(o->dt),
                   reducing ? spmd_op_name(o->redop) : "none", rooted ? o->root : -1, cols[0], cols[1]);
            fflush(stdout);
            if (csv) {
                fprintf(csv, "%s,%zu,%zu,%s,%s,%d,%d", o->opname, real_bytes, count, dtype_col(o->dt),
                        reducing ? spmd_op_name(o->redop) : "none", rooted ? o->root : -1, w);
                for (int ip = 0; ip < 2; ip++) {
                    if (t[ip] < 0) { fprintf(csv, ",,,,"); continue; }
                    double algbw = t[ip] > 0 ? real_bytes / (t[ip] * 1e3) : 0;
                    fprintf(csv, ",%.3f,%.4f,%.4f,%ld", t[ip], algbw, algbw * f, wr[ip]);
                }
                fprintf(csv, "\n");
            }
            busbw_sum += busbw_last;
            nsizes++;
        }
        if (bytes >= o->max_bytes) break;
        size_t next = o->step_bytes ? bytes + o->step_bytes : (size_t)(bytes * o->factor);
        if (next <= bytes) next = bytes + 1;
        bytes = next > o->max_bytes ? o->max_bytes : next;
    }
done:
    if (rank == 0) {
        printf("# Out of bounds values : %ld %s\n", wrong_total, wrong_total ? "FAILED" : "OK");
        printf("# Avg bus bandwidth    : %.4f\n#\n", nsizes ? busbw_sum / nsizes : 0);
        if (csv) fclose(csv);
    }
    if (wrong_total) rc = 1;
    free(b.send);
    free(b.recv);
    return rc;
}

/* osu_latency / osu_bw: ranks 0 and 1; others idle. */

/* Warm-up round trips of the first size: about 64 MiB moved, between 4 and
 * 20000 (at 4 B, 20000 round trips: about 10 ms here). */
static int settle_iters(size_t bytes) {
    size_t n = ((size_t)64 << 20) / (bytes ? bytes : 1);
    return n > 20000 ? 20000 : n < 4 ? 4 : (int)n;
}

static int p2p_bench(spmd_group *g, const opts_t *o) {
    int rank = spmd_group_rank(g), w = spmd_group_size(g);
    if (w < 2) {
        fprintf(stderr, "spmd-bench: %s needs at least 2 ranks\n", o->opname);
        return 1;
    }
    char *buf = aligned_alloc(64, (o->max_bytes + 64) / 64 * 64);
    if (!buf) return 1;
    memset(buf, rank, o->max_bytes);
    const int window = 64;
    spmd_work *ws[64];
    if (rank == 0) {
        printf("# spmd-bench %s (%s), ranks 0 and 1 of %d (backend %s)\n", o->opname,
               o->op == O_PINGPONG ? "half round trip" : "window of 64 isends, then a 4-byte ack", w,
               spmd_group_backend(g));
        printf("# %10s %12s %12s\n", "size (B)", o->op == O_PINGPONG ? "latency (us)" : "time (us)", "bw (GB/s)");
    }
    int rc = 0;
    int first = 1;
    for (size_t bytes = o->min_bytes ? o->min_bytes : 1;;) {
        double t = 0;
        int iters = o->iters, warm = o->warmup;
        /* The first size also settles the pair (bench/mpi_bench.c does the
         * same): a job's first few milliseconds after start-up (threads
         * still starting, wake-ups backing off) are not the steady state, and
         * fell on the first size alone. */
        if (first && o->op == O_PINGPONG && warm < settle_iters(bytes)) warm = settle_iters(bytes);
        first = 0;
        while (rank <= 1) {
            int peer = 1 - rank;
            double t0 = now_us();
            for (int it = -warm; it < iters; it++) {
                if (it == 0) t0 = now_us(); /* the loop timed as a whole, as osu_latency does */
                spmd_status st = SPMD_OK;
                if (o->op == O_PINGPONG) {
                    if (rank == 0) {
                        st = spmd_send(g, buf, bytes, SPMD_U8, peer, 1);
                        if (!st) st = spmd_recv(g, buf, bytes, SPMD_U8, peer, 1, NULL);
                    } else {
                        st = spmd_recv(g, buf, bytes, SPMD_U8, peer, 1, NULL);
                        if (!st) st = spmd_send(g, buf, bytes, SPMD_U8, peer, 1);
                    }
                } else {
                    int32_t ack = 0;
                    for (int k = 0; k < window && !st; k++)
                        st = rank == 0 ? spmd_isend(g, buf, bytes, SPMD_U8, peer, 2, &ws[k])
                                       : spmd_irecv(g, buf, bytes, SPMD_U8, peer, 2, &ws[k]);
                    for (int k = 0; k < window; k++) {
                        if (!st) st = spmd_work_wait(ws[k], -1);
                        spmd_work_free(ws[k]);
                    }
                    if (!st) st = rank == 0 ? spmd_recv(g, &ack, 1, SPMD_I32, peer, 3, NULL)
                                            : spmd_send(g, &ack, 1, SPMD_I32, peer, 3);
                }
                if (st) {
                    fprintf(stderr, "spmd-bench: rank %d: %s\n", rank, spmd_group_errmsg(g));
                    rc = 1;
                    goto out;
                }
            }
            t = now_us() - t0;
            if (!o->min_ms) break;
            /* --min-ms: rank 0 timed the loop and says whether to run it again, longer */
            int32_t next = rank == 0 ? longer_loop(iters, t / iters, o->min_ms) : 0;
            spmd_status st = rank == 0 ? spmd_send(g, &next, 1, SPMD_I32, peer, 4)
                                       : spmd_recv(g, &next, 1, SPMD_I32, peer, 4, NULL);
            if (st) {
                fprintf(stderr, "spmd-bench: rank %d: %s\n", rank, spmd_group_errmsg(g));
                rc = 1;
                goto out;
            }
            if (!next) break;
            iters = next;
            warm = 0;
        }
        if (rank == 0) {
            double per = o->op == O_PINGPONG ? t / iters / 2 : t / iters;
            double moved = o->op == O_PINGPONG ? (double)bytes : (double)bytes * window;
            printf("  %10zu %12.2f %12.3f\n", bytes, per, per > 0 ? moved / (per * 1e3) : 0);
            fflush(stdout);
        }
        if (bytes >= o->max_bytes) break;
        size_t next = o->step_bytes ? bytes + o->step_bytes : (size_t)(bytes * o->factor);
        if (next <= bytes) next = bytes + 1;
        bytes = next > o->max_bytes ? o->max_bytes : next;
    }
out:
    free(buf);
    return rc;
}

/* 0, or 1 (said why) when the plot was asked for and not written. */
static int draw_plot(const opts_t *o) {
    if (!o->plot) return 0;
    if (!o->csv) {
        fprintf(stderr, "spmd-bench: --plot needs --csv (the plot is drawn from the CSV)\n");
        return 1;
    }
    if (system("command -v gnuplot >/dev/null 2>&1") != 0) {
        fprintf(stderr, "spmd-bench: gnuplot is not installed (apt-get install gnuplot-nox); no plot drawn\n");
        return 1;
    }
    (void)remove(o->plot);
    char cmd[4096];
    snprintf(cmd, sizeof cmd,
             "gnuplot -e \"set terminal pngcairo size 900,600 noenhanced; set output '%s'; set datafile separator ',';"
             " set logscale x 2; set format x '%%.0b%%BB'; set xlabel 'size'; set ylabel 'busbw (GB/s)';"
             " set key top left; set grid; set title 'spmd-bench %s';"
             " plot '%s' every ::1 using 2:10 with linespoints title 'out-of-place',"
             " '' every ::1 using 2:14 with linespoints title 'in-place'\" >/dev/null",
             o->plot, o->opname, o->csv);
    /* (gnuplot writes the image to stdout when it cannot open the file) */
    if (system(cmd) != 0 || access(o->plot, R_OK) != 0) {
        fprintf(stderr, "spmd-bench: gnuplot failed writing %s\n", o->plot);
        return 1;
    }
    printf("# plot written to %s\n", o->plot);
    return 0;
}

typedef struct {
    const opts_t *o;
} run_arg;

static int bench_main(spmd_group *g, const opts_t *o) {
    int rc;
    if (o->op == O_PINGPONG || o->op == O_BW) {
        rc = p2p_bench(g, o);
    } else if (o->all_dtypes) {   /* -d all: every datatype in turn */
        static const spmd_dtype all[] = {SPMD_I8, SPMD_U8, SPMD_I32, SPMD_I64, SPMD_F16, SPMD_F32, SPMD_F64, SPMD_BF16};
        rc = 0;
        for (size_t k = 0; k < sizeof all / sizeof all[0] && !rc; k++) {
            opts_t one = *o;
            one.dt = all[k];
            one.all_dtypes = 0;
            rc = collective_bench(g, &one);
        }
    } else {
        rc = collective_bench(g, o);
    }
    if (spmd_group_rank(g) == 0 && !rc) rc = draw_plot(o);
    return rc;
}

static int rank_fn(int rank, int world, void *arg) {
    (void)rank;
    (void)world;
    const opts_t *o = ((run_arg *)arg)->o;
    spmd_group *g = NULL;
    char err[512];
    if (spmd_group_init(NULL, &g, err, sizeof err)) {
        fprintf(stderr, "spmd-bench: %s\n", err);
        return 1;
    }
    int rc = bench_main(g, o);
    spmd_group_destroy(g);
    return rc;
}

int spmd__bench_rpc(int argc, char **argv);   /* spmd-bench-rpc.c */

int main(int argc, char **argv) {
    for (int i = 1; i + 1 < argc; i++)
        if ((!strcmp(argv[i], "-o") || !strcmp(argv[i], "--op")) && !strcmp(argv[i + 1], "rpc"))
            return spmd__bench_rpc(argc, argv);
    opts_t o;
    if (parse_args(argc, argv, &o)) return 2;
    run_arg ra = {&o};
    if (o.algo) {
        /* SPMD_ALGO_ALL_REDUCE=ring ...: the blocking calls take no options */
        static const char *canon[] = {"ALL_REDUCE", "BROADCAST", "REDUCE", "ALL_GATHER", "REDUCE_SCATTER",
                                      "ALL_TO_ALL", "GATHER", "SCATTER", "BARRIER", "PINGPONG", "BW"};
        char var[64] = "SPMD_ALGO_";
        size_t n = strlen(var);
        for (const char *c = canon[o.op]; *c && n + 1 < sizeof var; c++) var[n++] = (char)(*c >= 'a' && *c <= 'z' ? *c - 32 : *c);
        var[n] = 0;
        setenv(var, o.algo, 1);
    }
    /* Started by hand, without a launcher: world 1 would measure nothing
     * (busbw 0) while looking like a result. */
    static const char *const launcher_vars[] = {"WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "SLURM_NTASKS", "PMI_SIZE"};
    int launched = 0;
    for (size_t k = 0; k < sizeof launcher_vars / sizeof launcher_vars[0]; k++)
        if (getenv(launcher_vars[k]) && *getenv(launcher_vars[k])) launched = 1;
    if (!launched && o.np == 0) {
        fprintf(stderr, "spmd-bench: no launcher found (WORLD_SIZE, OMPI_COMM_WORLD_SIZE, SLURM_NTASKS and PMI_SIZE "
                        "are unset), so there is only one rank to measure.  Start the ranks with a launcher:\n"
                        "  spmdrun -n 2 spmd-bench ...   (or mpirun -n 2, srun -n 2)\n"
                        "or let spmd-bench fork them: spmd-bench --np 2 ...  (--np 1 measures one rank on purpose)\n");
        return 2;
    }
    if (o.np > 0 && !getenv("WORLD_SIZE")) {
        char report[512];
        spmd_status st = spmd_spawn(o.np, rank_fn, &ra, report, sizeof report);
        if (st) fprintf(stderr, "spmd-bench: %s\n", report);
        return st ? 1 : 0;
    }
    return rank_fn(0, 1, &ra);
}
