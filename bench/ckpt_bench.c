/* ckpt_bench.c — spmd's DCP checkpoints at world N (forked ranks, file://
 * rendezvous): save and load bandwidth, and the async save's stall against
 * a training step.  The state is a model's parameters plus one optimizer
 * moment per parameter (SGD momentum, the seeds' recipe), each tensor split
 * by rows over the ranks (as FSDP / ZeRO-3 shards it), so every rank writes.
 *
 *   ckpt_bench MODEL WORLD DIR [REPS [SHAPES_FILE]]
 *
 * MODEL: cnn | resnet34 (any spmd_model_create architecture).  DIR is
 * emptied of its checkpoints after.  Loads are cold: the data files' pages
 * are dropped from the page cache (posix_fadvise DONTNEED, after fsync) before
 * each load.  SHAPES_FILE: the tensors' names and shapes, one a line, for
 * bench/ckpt_torch.py to save the same bytes.  Prints one line of key=value
 * (medians of REPS, default 5) for bench/ckpt_bench.sh.
 *
 * The step: forward + backward of one batch (cnn: 16 Fashion-MNIST-sized
 * samples; resnet34: 32 CIFAR-10-sized), as spmd-train's defaults, measured
 * on every rank at once; the stall is how long spmd_dcp_save_async blocks
 * (the copy into the staging buffer), the steady state (the first save's
 * staging buffer is new memory: reported apart); with deferred staging
 * (spmd_dcp_save_async_deferred) the call plus what spmd_dcp_save_staged
 * still waits after one step. */
#define _GNU_SOURCE
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "spmd/auth.h"
#include "spmd/ckpt.h"
#include "spmd/nn.h"

#define MAXR 21

static const char *arch, *dir;
static int world, reps;

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}
static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* The slowest rank's value (every rank gets it). */
static double slowest(spmd_group *g, double v) {
    if (g) spmd_all_reduce(g, &v, &v, 1, SPMD_F64, SPMD_MAX);
    return v;
}

static void drop_cache(const char *d) {
    DIR *dd = opendir(d);
    if (!dd) return;
    struct dirent *de;
    char p[4300];
    while ((de = readdir(dd))) {
        if (strncmp(de->d_name, "__", 2)) continue;
        snprintf(p, sizeof p, "%s/%s", d, de->d_name);
        int fd = open(p, O_RDONLY);
        if (fd >= 0) {
            posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
            close(fd);
        }
    }
    closedir(dd);
}

static void rmrf(const char *d) {
    DIR *dd = opendir(d);
    if (!dd) return;
    struct dirent *de;
    char p[4300];
    while ((de = readdir(dd)))
        if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..")) {
            snprintf(p, sizeof p, "%s/%s", d, de->d_name);
            unlink(p);
        }
    closedir(dd);
    rmdir(d);
}

/* Rows [lo, lo + cnt) of n for rank r of w (the first n % w ranks one more). */
static void split(int64_t n, int r, int w, int64_t *lo, int64_t *cnt) {
    int64_t q = n / w, e = n % w;
    *lo = r * q + (r < e ? r : e);
    *cnt = q + (r < e);
}

#define FAIL(...)                                                   \
    do {                                                            \
        fprintf(stderr, "ckpt_bench rank %d: ", rank);              \
        fprintf(stderr, __VA_ARGS__);                               \
        fputc('\n', stderr);                                        \
        return 1;                                                   \
    } while (0)

static int run_rank(int rank, const char *shapes_file) {
    char err[512] = "", rdzv[4300];
    spmd_group *g = NULL;
    if (world > 1) {
        snprintf(rdzv, sizeof rdzv, "file://%s/rdzv", dir);
        spmd_group_opts o = SPMD_GROUP_OPTS_DEFAULT;
        o.init_method = rdzv, o.rank = rank, o.world_size = world, o.timeout_ms = 600000;
        if (spmd_group_init(&o, &g, err, sizeof err)) FAIL("group: %s", err);
    }
    spmd_model_opts mo = SPMD_MODEL_OPTS_DEFAULT;
    mo.arch = arch;
    spmd_model *m = NULL;
    if (spmd_model_create(&mo, &m, err, sizeof err)) FAIL("model: %s", err);
    size_t nparam = 0;
    float *params = spmd_model_params(m, &nparam);
    float *moment = malloc(sizeof(float) * nparam);
    int np = spmd_model_num_params(m);
    spmd_dcp_shard *sh = calloc((size_t)np * 2, sizeof *sh);
    char (*names)[160] = calloc((size_t)np, sizeof *names);
    if (!moment || !sh || !names) FAIL("out of memory");
    for (size_t i = 0; i < nparam; i++) moment[i] = params[i] * 0.5f;
    FILE *sf = rank == 0 && shapes_file ? fopen(shapes_file, "w") : NULL;
    size_t ns = 0;
    uint64_t total = 0;
    for (int i = 0; i < np; i++) {
        const spmd_tensor_info *t = spmd_model_param(m, i);
        snprintf(names[i], sizeof names[i], "optim.state.%s.momentum_buffer", t->name);
        int64_t lo, cnt, row = (int64_t)t->count / (t->ndim ? t->shape[0] : 1);
        split(t->ndim ? t->shape[0] : 1, rank, world, &lo, &cnt);
        total += 2 * t->count * sizeof(float);
        for (int k = 0; k < 2; k++) {
            spmd_dcp_shard s = {k ? names[i] : t->name, "float32", t->ndim, {0}, {0}, {0},
                                (k ? moment : params) + t->offset + lo * row};
            for (int d = 0; d < t->ndim; d++) s.global[d] = s.sizes[d] = t->shape[d];
            if (t->ndim) s.offsets[0] = lo, s.sizes[0] = cnt;
            if (cnt > 0) sh[ns++] = s;
            if (sf) {
                fprintf(sf, "%s", s.fqn);
                for (int d = 0; d < t->ndim; d++) fprintf(sf, " %d", t->shape[d]);
                fputc('\n', sf);
            }
        }
    }
    if (sf) fclose(sf);

    /* The training step. */
    int c, h, w, B = strcmp(arch, "cnn") ? 32 : 16;
    spmd_model_input_shape(m, &c, &h, &w);
    int nout = spmd_model_num_outputs(m);
    float *x = malloc(sizeof(float) * (size_t)B * (size_t)(c * h * w)), *dl = malloc(sizeof(float) * (size_t)B * (size_t)nout);
    if (!x || !dl) FAIL("out of memory");
    for (size_t i = 0; i < (size_t)B * (size_t)(c * h * w); i++) x[i] = (float)((i * 2654435761u) % 1000) / 1000.0f;
    for (int i = 0; i < B * nout; i++) dl[i] = (i % nout == 0 ? -1.0f : 1.0f / (float)nout) / (float)B;
    double step[MAXR];
    for (int k = 0; k < reps + 1; k++) {
        double t0 = now();
        if (spmd_model_forward(m, x, B, NULL) || spmd_model_backward(m, dl, NULL, NULL)) FAIL("step failed");
        if (k) step[k - 1] = now() - t0; /* the first step warms up */
    }
    double step_s = slowest(g, median(step, reps));

    double save[MAXR], load[MAXR], stall[MAXR], async_total[MAXR], first_stall = 0;
    char d[4300];
    for (int k = 0; k < reps; k++) {
        snprintf(d, sizeof d, "%s/sync-%d", dir, k);
        if (g) spmd_barrier(g);
        double t0 = now();
        if (spmd_dcp_save(g, d, sh, ns, NULL, 0, err, sizeof err)) FAIL("save: %s", err);
        save[k] = slowest(g, now() - t0);
        drop_cache(d);
        if (g) spmd_barrier(g);
        t0 = now();
        if (spmd_dcp_load(d, sh, ns, err, sizeof err)) FAIL("load: %s", err);
        load[k] = slowest(g, now() - t0);
    }
    spmd_dcp_saver *sv = NULL;
    if (spmd_dcp_saver_new(g, &sv, err, sizeof err)) FAIL("saver: %s", err);
    for (int k = 0; k <= reps; k++) {
        snprintf(d, sizeof d, "%s/async-%d", dir, k);
        if (g) spmd_barrier(g);
        double t0 = now();
        if (spmd_dcp_save_async(sv, d, sh, ns, NULL, 0, err, sizeof err)) FAIL("save_async: %s", err);
        double t1 = now();
        if (spmd_dcp_save_wait(sv, err, sizeof err)) FAIL("save_wait: %s", err);
        double t2 = now();
        if (k == 0) first_stall = slowest(g, t1 - t0);
        else stall[k - 1] = slowest(g, t1 - t0), async_total[k - 1] = slowest(g, t2 - t0);
    }
    /* Deferred staging: the copy overlaps the next forward+backward; the
     * stall is the call plus what save_staged still waits after the step. */
    double deferred[MAXR];
    for (int k = 0; k < reps; k++) {
        snprintf(d, sizeof d, "%s/deferred-%d", dir, k);
        if (g) spmd_barrier(g);
        double t0 = now();
        if (spmd_dcp_save_async_deferred(sv, d, sh, ns, NULL, 0, err, sizeof err)) FAIL("save_async_deferred: %s", err);
        double t1 = now();
        if (spmd_model_forward(m, x, B, NULL) || spmd_model_backward(m, dl, NULL, NULL)) FAIL("step failed");
        double t2 = now();
        spmd_dcp_save_staged(sv);
        deferred[k] = slowest(g, (t1 - t0) + (now() - t2));
        if (spmd_dcp_save_wait(sv, err, sizeof err)) FAIL("save_wait: %s", err);
    }
    spmd_dcp_saver_free(sv);
    if (rank == 0) {
        double sv_s = median(save, reps), ld_s = median(load, reps), st_s = median(stall, reps);
        printf("impl=spmd model=%s world=%d bytes=%llu save_s=%.4f save_MBps=%.0f load_s=%.4f load_MBps=%.0f "
               "async_stall_ms=%.3f async_first_stall_ms=%.3f async_total_s=%.4f step_ms=%.2f "
               "sync_stall_pct_of_step=%.1f async_stall_pct_of_step=%.2f deferred_stall_ms=%.3f "
               "deferred_stall_pct_of_step=%.3f\n",
               arch, world, (unsigned long long)total, sv_s, (double)total / sv_s / 1e6, ld_s,
               (double)total / ld_s / 1e6, st_s * 1e3, first_stall * 1e3, median(async_total, reps), step_s * 1e3,
               100 * sv_s / step_s, 100 * st_s / step_s, median(deferred, reps) * 1e3,
               100 * median(deferred, reps) / step_s);
        fflush(stdout);
        for (int k = 0; k <= reps; k++) {
            snprintf(d, sizeof d, "%s/sync-%d", dir, k);
            rmrf(d);
            snprintf(d, sizeof d, "%s/async-%d", dir, k);
            rmrf(d);
            snprintf(d, sizeof d, "%s/deferred-%d", dir, k);
            rmrf(d);
        }
    }
    if (g) {
        spmd_barrier(g);
        spmd_group_destroy(g);
    }
    spmd_model_free(m);
    free(moment), free(sh), free(names), free(x), free(dl);
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: ckpt_bench MODEL WORLD DIR [REPS [SHAPES_FILE]]\n");
        return 2;
    }
    arch = argv[1], world = atoi(argv[2]), dir = argv[3], reps = argc > 4 ? atoi(argv[4]) : 5;
    if (world < 1 || world > 64 || reps < 1 || reps > MAXR - 1) {
        fprintf(stderr, "ckpt_bench: WORLD 1..64, REPS 1..%d\n", MAXR - 1);
        return 2;
    }
    char token[SPMD_AUTH_TOKEN_CHARS + 1];
    if (spmd_auth_new_token(token) != SPMD_OK) return 1;
    setenv("SPMD_AUTH_TOKEN", token, 1);
    if (world == 1) return run_rank(0, argc > 5 ? argv[5] : NULL);
    pid_t pids[64];
    fflush(NULL);
    for (int r = 0; r < world; r++) {
        if ((pids[r] = fork()) < 0) return 1;
        if (pids[r] == 0) {
            prctl(PR_SET_PDEATHSIG, SIGKILL);
            _exit(run_rank(r, argc > 5 ? argv[5] : NULL));
        }
    }
    int ok = 1;
    for (int r = 0; r < world; r++) {
        int st = 0;
        ok &= waitpid(pids[r], &st, 0) == pids[r] && WIFEXITED(st) && WEXITSTATUS(st) == 0;
    }
    char rdzv[4300];
    snprintf(rdzv, sizeof rdzv, "%s/rdzv", dir);
    unlink(rdzv);
    return ok ? 0 : 1;
}
