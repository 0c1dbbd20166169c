/* coll_sweep — time every algorithm of one collective over a range of sizes
 * on this machine (spawned ranks over TCP loopback), nccl-tests style:
 * time is the slowest rank's mean, algbw = bytes / time, busbw = algbw ×
 * (all_reduce 2(w-1)/w; all_gather, reduce_scatter, all_to_all (w-1)/w;
 * others 1).  This is what the thresholds of src/coll/select.c come from.
 *
 *   coll_sweep [-c all_reduce] [-w 2] [-a ring,rhd,...] [-b 4] [-e 64M] [-f 4]
 *              [-t dtype] [-s segment_bytes] [-i] [-r repeats]
 *
 * -a: comma-separated algorithms ("auto" = the selection table; default: all
 *     of the collective plus auto); -i: in place (default out of place);
 * -r: repeat each measurement and keep the median (-m: the fastest, which
 * is steadier on a shared machine).  Output: one line per
 * size and algorithm. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "spmd/group.h"
#include "../tools/size_arg.h"

typedef struct {
    char kind[32];
    int world;
    char algos[256];
    size_t lo, hi;
    int factor;
    spmd_dtype dt;
    int inplace;
    int repeats;
    int best; /* report the fastest repeat instead of the median */
} cfg;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static const char *default_algos(const char *kind) {
    if (!strcmp(kind, "all_reduce")) return "auto,rd,rhd,ring,butterfly,naive";
    if (!strcmp(kind, "broadcast")) return "auto,tree,scatter_ring";
    if (!strcmp(kind, "reduce")) return "auto,tree";
    if (!strcmp(kind, "all_gather")) return "auto,ring,bruck";
    if (!strcmp(kind, "reduce_scatter")) return "auto,ring,direct";
    if (!strcmp(kind, "all_to_all")) return "auto,pairwise,linear";
    if (!strcmp(kind, "gather") || !strcmp(kind, "scatter")) return "auto,linear,tree";
    if (!strcmp(kind, "barrier")) return "auto,dissemination";
    return "auto";
}

/* One call; bytes is the per-rank buffer the size axis refers to: the
 * all_reduce/broadcast/reduce buffer, the all_gather/gather output, the
 * reduce_scatter/scatter/all_to_all input. */
static spmd_status one(spmd_group *g, const cfg *c, void *a, void *b, size_t n) {
    const size_t w = (size_t)c->world;
    void *dst = c->inplace ? a : b;
    if (!strcmp(c->kind, "all_reduce")) return spmd_all_reduce(g, a, dst, n, c->dt, SPMD_SUM);
    if (!strcmp(c->kind, "broadcast")) return spmd_broadcast(g, a, n, c->dt, 0);
    if (!strcmp(c->kind, "reduce")) return spmd_reduce(g, a, dst, n, c->dt, SPMD_SUM, 0);
    if (!strcmp(c->kind, "all_gather")) return spmd_all_gather(g, a, b, n / w, c->dt);
    if (!strcmp(c->kind, "reduce_scatter")) return spmd_reduce_scatter(g, a, b, n / w, c->dt, SPMD_SUM);
    if (!strcmp(c->kind, "all_to_all")) return spmd_all_to_all(g, a, dst, n / w, c->dt);
    if (!strcmp(c->kind, "gather")) return spmd_gather(g, a, b, n / w, c->dt, 0);
    if (!strcmp(c->kind, "scatter")) return spmd_scatter(g, a, b, n / w, c->dt, 0);
    if (!strcmp(c->kind, "barrier")) return spmd_barrier(g); /* (run it with -e 4) */
    return SPMD_ERR_INVALID;
}

static double busbw_factor(const cfg *c) {
    const double w = c->world;
    if (!strcmp(c->kind, "all_reduce")) return 2 * (w - 1) / w;
    if (!strcmp(c->kind, "all_gather") || !strcmp(c->kind, "reduce_scatter") || !strcmp(c->kind, "all_to_all"))
        return (w - 1) / w;
    return 1;
}

static int cmp_d(const void *x, const void *y) {
    double a = *(const double *)x, b = *(const double *)y;
    return a < b ? -1 : a > b;
}

static int run(int rank, int world, void *arg) {
    cfg *c = arg;
    spmd_group *g = NULL;
    char err[256];
    if (spmd_group_init(NULL, &g, err, sizeof err) != SPMD_OK) {
        fprintf(stderr, "rank %d: %s\n", rank, err);
        return 1;
    }
    const size_t es = spmd_dtype_size(c->dt);
    const size_t cap = c->hi * (size_t)world + 64;
    char *a = malloc(cap), *b = malloc(cap);
    memset(a, 0, cap);
    memset(b, 0, cap);
    if (rank == 0)
        printf("# %s, world %d, %s, %s; time = slowest rank's mean (%s of %d)\n%12s %-12s %12s %10s %10s\n",
               c->kind, world, spmd_dtype_name(c->dt), c->inplace ? "in place" : "out of place", c->best ? "best" : "median", c->repeats,
               "bytes", "algorithm", "time_us", "algbw_GB/s", "busbw_GB/s");
    for (size_t bytes = c->lo; bytes <= c->hi; bytes = bytes * (size_t)c->factor) {
        size_t n = bytes / es;
        if (n == 0) n = 1;
        char list[256];
        snprintf(list, sizeof list, "%s", c->algos);
        for (char *save = NULL, *al = strtok_r(list, ",", &save); al; al = strtok_r(NULL, ",", &save)) {
            /* blocking calls (no hand-off to the executor thread), algorithm by environment */
            char var[64];
            snprintf(var, sizeof var, "SPMD_ALGO_%s", c->kind);
            for (char *p = var; *p; p++) *p = (char)(*p >= 'a' && *p <= 'z' ? *p - 32 : *p);
            if (strcmp(al, "auto")) setenv(var, al, 1);
            else unsetenv(var);
            int iters = (int)(256.0 * 1024 * 1024 / (double)(bytes + 4096));
            if (iters > 2000) iters = 2000;
            if (iters < 5) iters = 5;
            double times[15];
            int ok = 1;
            for (int rep = 0; rep < c->repeats && ok; rep++) {
                for (int i = 0; i < 3 && ok; i++) ok = one(g, c, a, b, n) == SPMD_OK; /* warm up */
                spmd_barrier(g);
                double t0 = now_s();
                for (int i = 0; i < iters && ok; i++) ok = one(g, c, a, b, n) == SPMD_OK;
                double mine = (now_s() - t0) / iters, slowest = mine;
                /* blocking on purpose: an async call would start the executor thread,
                 * which changes what later blocking calls cost */
                spmd_all_reduce(g, &mine, &slowest, 1, SPMD_F64, SPMD_MAX);
                times[rep] = slowest;
            }
            if (!ok) {
                if (rank == 0) printf("%12zu %-12s failed: %s\n", n * es, al, spmd_group_errmsg(g));
                spmd_group_destroy(g);
                return 1;
            }
            qsort(times, (size_t)c->repeats, sizeof times[0], cmp_d);
            double t = c->best ? times[0] : times[c->repeats / 2], alg = (double)(n * es) / t / 1e9;
            if (rank == 0)
                printf("%12zu %-12s %12.2f %10.3f %10.3f\n", n * es, al, t * 1e6, alg, alg * busbw_factor(c));
            fflush(stdout);
        }
    }
    free(a);
    free(b);
    spmd_group_destroy(g);
    return 0;
}

int main(int argc, char **argv) {
    cfg c = {"all_reduce", 2, "", 4, 64u << 20, 4, SPMD_F32, 0, 3, 0};
    for (int i = 1; i < argc; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : "";
        if (!strcmp(argv[i], "-c")) snprintf(c.kind, sizeof c.kind, "%s", v), i++;
        else if (!strcmp(argv[i], "-w")) c.world = atoi(v), i++;
        else if (!strcmp(argv[i], "-a")) snprintf(c.algos, sizeof c.algos, "%s", v), i++;
        else if (!strcmp(argv[i], "-b") || !strcmp(argv[i], "-e")) {
            if (spmd_size_arg(v, argv[i][1] == 'b' ? &c.lo : &c.hi)) {
                fprintf(stderr, "coll_sweep: %s takes a size (4, 64K, 1M), not '%s'\n", argv[i], v);
                return 2;
            }
            i++;
        }
        else if (!strcmp(argv[i], "-f")) c.factor = atoi(v), i++;
        else if (!strcmp(argv[i], "-s")) setenv("SPMD_SEGMENT_BYTES", v, 1), i++;
        else if (!strcmp(argv[i], "-r")) c.repeats = atoi(v), i++;
        else if (!strcmp(argv[i], "-t")) {
            if (spmd_dtype_parse(v, &c.dt) != SPMD_OK) return fprintf(stderr, "bad dtype %s\n", v), 2;
            i++;
        } else if (!strcmp(argv[i], "-i")) c.inplace = 1;
        else if (!strcmp(argv[i], "-m")) c.best = 1;
        else return fprintf(stderr, "usage: see the comment at the top of bench/coll_sweep.c\n"), 2;
    }
    if (!c.algos[0]) snprintf(c.algos, sizeof c.algos, "%s", default_algos(c.kind));
    if (c.world < 1 || c.factor < 2 || c.lo < 1 || c.repeats < 1 || c.repeats > 15) return fprintf(stderr, "bad arguments\n"), 2;
    char report[256];
    if (spmd_spawn(c.world, run, &c, report, sizeof report) != SPMD_OK) {
        fprintf(stderr, "coll_sweep: %s\n", report);
        return 1;
    }
    return 0;
}
