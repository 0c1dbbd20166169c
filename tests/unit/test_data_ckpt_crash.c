/* A checkpoint save killed at several points: a child process overwrites a
 * large checkpoint and is SIGKILLed before it starts, while its temporary is
 * being written (at a quarter, half, 90 %), once the temporary is complete.
 * After each kill the checkpoint's path must hold an intact checkpoint —
 * the previous one, or the new one if the child got to the rename — and the
 * stray temporaries never carry the checkpoint's name and are removed by the
 * next save (or spmd_ckpt_remove_stale), while a live writer's is kept.
 * The parent watches the temporary's size to choose the moment (polling an
 * observable state, not sleeping). */
#include <dirent.h>
#include <signal.h>
#include <sched.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "harness.h"
#include "spmd/data.h"

#define BIG (8u << 20) /* floats: 32 MiB of tensor data */

static char tmpdir[256], path[600];
static float *big;

static void fill(float *x, int64_t version) {
    for (size_t i = 0; i < BIG; i++) x[i] = (float)((i * 31 + (size_t)version) % 1000003);
}

static spmd_status save_version(int64_t version) {
    static int64_t v;
    v = version;
    fill(big, version);
    char vs[32];
    snprintf(vs, sizeof vs, "%lld", (long long)version);
    spmd_ckpt_tensor t[2] = {{"version", SPMD_I64, 1, {1}, &v}, {"big", SPMD_F32, 1, {BIG}, big}};
    spmd_ckpt_kv m[1] = {{"version", vs}};
    char err[512];
    spmd_status st = spmd_ckpt_save(path, t, 2, m, 1, err, sizeof err);
    if (st) fprintf(stderr, "save: %s\n", err);
    return st;
}

/* The version held intact at path, or -1 if it is missing or damaged. */
static int64_t intact_version(const char *p, float *scratch) {
    int64_t v = -1;
    spmd_ckpt_tensor t[2] = {{"version", SPMD_I64, 1, {1}, &v},
                             {"big", SPMD_F32, 1, {BIG}, scratch}};
    char err[512];
    spmd_ckpt *c;
    if (spmd_ckpt_open(p, &c, err, sizeof err)) return -1;
    spmd_status st = spmd_ckpt_read(c, &t[0], err, sizeof err);
    if (!st) st = spmd_ckpt_read(c, &t[1], err, sizeof err);
    const char *mv = spmd_ckpt_meta(c, "version");
    if (!st && (!mv || atoll(mv) != v)) st = SPMD_ERR_FORMAT;
    spmd_ckpt_close(c);
    if (st) return -1;
    for (size_t i = 0; i < BIG; i++)
        if (scratch[i] != (float)((i * 31 + (size_t)v) % 1000003)) return -1;
    return v;
}

/* Names of the temporaries currently in tmpdir (up to max). */
static int list_temps(char names[][256], int max) {
    DIR *d = opendir(tmpdir);
    int n = 0;
    struct dirent *e;
    while (d && (e = readdir(d)))
        if (strstr(e->d_name, ".tmp-") && n < max) snprintf(names[n++], 256, "%s", e->d_name);
    if (d) closedir(d);
    return n;
}

static int in_list(char names[][256], int n, const char *s) {
    for (int i = 0; i < n; i++)
        if (!strcmp(names[i], s)) return 1;
    return 0;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

enum { AT_ONCE, AT_QUARTER, AT_HALF, AT_90, AT_FULL, NPOINTS };
static const char *point_name[NPOINTS] = {"at once", "25%", "50%", "90%", "complete temp"};

int main(void) {
    const char *t = getenv("TMPDIR");
    snprintf(tmpdir, sizeof tmpdir, "%s/spmd-crash-XXXXXX", t && *t ? t : "/tmp");
    REQUIRE(mkdtemp(tmpdir));
    snprintf(path, sizeof path, "%s/ckpt.safetensors", tmpdir);
    big = malloc(BIG * sizeof *big);
    float *scratch = malloc(BIG * sizeof *scratch);
    REQUIRE(big && scratch);
    REQUIRE(save_version(1) == SPMD_OK);
    REQUIRE(intact_version(path, scratch) == 1);
    const double full = 8.0 + 200 + BIG * 4.0; /* header is < 200 bytes */

    int64_t current = 1, next = 2;
    int mid_write_kills = 0;
    for (int point = 0; point < NPOINTS; point++) {
        char before[64][256];
        int nbefore = list_temps(before, 64);
        fflush(NULL);
        pid_t pid = fork();
        REQUIRE(pid >= 0);
        if (pid == 0) _exit(save_version(next) == SPMD_OK ? 0 : 1);

        int finished = 0, status = 0;
        double deadline = now_s() + 30;
        while (point != AT_ONCE && now_s() < deadline) {
            if (waitpid(pid, &status, WNOHANG) == pid) {
                finished = 1;
                break;
            }
            char names[64][256];
            int n = list_temps(names, 64);
            off_t size = -1;
            for (int i = 0; i < n; i++) {
                if (in_list(before, nbefore, names[i])) continue;
                char tp[600];
                struct stat sb;
                snprintf(tp, sizeof tp, "%s/%s", tmpdir, names[i]);
                if (stat(tp, &sb) == 0) size = sb.st_size;
            }
            double want = point == AT_QUARTER ? 0.25 : point == AT_HALF ? 0.5 : point == AT_90 ? 0.9 : 1.0;
            if (size >= 0 && (double)size >= want * (point == AT_FULL ? BIG * 4.0 : full)) break;
            sched_yield();
        }
        if (!finished) {
            kill(pid, SIGKILL);
            REQUIRE(waitpid(pid, &status, 0) == pid);
        }
        /* Was the child's temporary left torn?  (It is gone if the child
         * reached the rename.) */
        int torn = 0;
        {
            char names[64][256];
            int n = list_temps(names, 64);
            for (int i = 0; i < n; i++) {
                if (in_list(before, nbefore, names[i])) continue;
                char tp[600], err[256];
                spmd_ckpt *c;
                snprintf(tp, sizeof tp, "%s/%s", tmpdir, names[i]);
                if (spmd_ckpt_open(tp, &c, err, sizeof err) == SPMD_OK) spmd_ckpt_close(c);
                else torn = 1;
            }
        }
        int64_t v = intact_version(path, scratch);
        int completed = WIFEXITED(status) && WEXITSTATUS(status) == 0;
        printf("kill %-13s: child %s, %s, checkpoint holds version %lld\n", point_name[point],
               completed ? "completed the save" : "killed",
               torn ? "torn temporary left" : "no torn temporary", (long long)v);
        /* intact: the old checkpoint, or the new one if the child renamed it */
        CHECK_MSG(v == current || v == next, "point %s: version %lld", point_name[point],
                  (long long)v);
        if (torn) {
            CHECK(v == current); /* a half-written temporary never becomes the checkpoint */
            mid_write_kills++;
        }
        if (v == next) current = next;
        next++;
    }
    printf("%d kill(s) landed in the middle of writing the temporary\n", mid_write_kills);
    CHECK(mid_write_kills >= 1);

    /* leftover temporaries: never named like the checkpoint, and a torn one
     * never opens as a checkpoint */
    char names[64][256];
    int n = list_temps(names, 64);
    for (int i = 0; i < n; i++) {
        CHECK(strcmp(names[i], "ckpt.safetensors") != 0 && names[i][0] == '.');
        char tp[600];
        snprintf(tp, sizeof tp, "%s/%s", tmpdir, names[i]);
        struct stat sb;
        if (stat(tp, &sb) == 0 && (double)sb.st_size < BIG * 4.0) {
            spmd_ckpt *c;
            char err[256];
            CHECK(spmd_ckpt_open(tp, &c, err, sizeof err) == SPMD_ERR_FORMAT);
        }
    }
    /* they do not pile up: each save removed those of the writers killed
     * before it (issue 12: 29 files, 1.2 GB after 70 kills), so only the
     * last kill's can remain, and spmd_ckpt_remove_stale clears it */
    printf("%d temporary file(s) left after the kills\n", n);
    CHECK_MSG(n <= 1, "%d stale temporaries left", n);
    int removed = -1;
    CHECK(spmd_ckpt_remove_stale(path, &removed, NULL, 0) == SPMD_OK && removed == n);
    CHECK(list_temps(names, 64) == 0);
    /* a live writer's temporary stays (pid 1 always exists), a dead one's goes */
    {
        char host[256] = "";
        gethostname(host, sizeof host - 1);
        pid_t dead = fork();
        if (dead == 0) _exit(0);
        waitpid(dead, NULL, 0);
        char live_tmp[1200], dead_tmp[1200];
        snprintf(live_tmp, sizeof live_tmp, "%s/.ckpt.safetensors.tmp-%s-1-abcdef", tmpdir, host);
        snprintf(dead_tmp, sizeof dead_tmp, "%s/.ckpt.safetensors.tmp-%s-%ld-abcdef", tmpdir, host, (long)dead);
        FILE *f1 = fopen(live_tmp, "w"), *f2 = fopen(dead_tmp, "w");
        CHECK(f1 && f2);
        if (f1) fclose(f1);
        if (f2) fclose(f2);
        CHECK(spmd_ckpt_remove_stale(path, &removed, NULL, 0) == SPMD_OK && removed == 1);
        CHECK(access(live_tmp, F_OK) == 0 && access(dead_tmp, F_OK) != 0);
        unlink(live_tmp);
    }
    /* and the last word: a normal save still works over the same path */
    CHECK(save_version(99) == SPMD_OK && intact_version(path, scratch) == 99);
    unlink(path);
    rmdir(tmpdir);
    free(big);
    free(scratch);
    TEST_MAIN_END();
}
