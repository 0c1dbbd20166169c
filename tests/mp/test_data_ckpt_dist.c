/* The checkpoint pattern of the DDP tutorial over real ranks: rank 0 saves,
 * the others wait for it, everyone loads — afterwards every rank holds rank
 * 0's tensors bit for bit.  Failures are agreed: rank 0 unable to save, or
 * one rank unable to load, makes the call fail on every rank.
 * Ranks are forked from this single-threaded process and meet through a
 * file:// rendezvous (rank 0 hosts the store on a free port), so the test
 * also runs under TSan, which refuses threads after a multi-threaded fork. */
#include <signal.h>
#include <stdint.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>
#include "harness.h"
#include "spmd/auth.h"
#include "spmd/data.h"
#include "spmd/group.h"

#define RREQUIRE(cond)                                                                   \
    do {                                                                                 \
        if (!(cond)) {                                                                   \
            fprintf(stderr, "rank %d: %s:%d: failed: %s (%s)\n", rank, __FILE__, __LINE__, #cond, \
                    err);                                                                \
            return 1;                                                                    \
        }                                                                                \
    } while (0)

static char dir[256];

/* Per-rank contents: only rank 0's survive a save_dist. */
static void fill(int rank, float *w, int64_t *step) {
    for (int i = 0; i < 1000; i++) w[i] = (float)(rank * 1000 + i) * 0.5f;
    *step = 100 + rank;
}

static int body(int rank, int world) {
    spmd_group *g = NULL;
    char err[512] = "", rdzv[400];
    snprintf(rdzv, sizeof rdzv, "file://%s/rdzv-w%d", dir, world);
    spmd_group_opts o = SPMD_GROUP_OPTS_DEFAULT;
    o.init_method = rdzv, o.rank = rank, o.world_size = world, o.timeout_ms = 30000;
    RREQUIRE(spmd_group_init(&o, &g, err, sizeof err) == SPMD_OK);
    RREQUIRE(spmd_group_rank(g) == rank && spmd_group_size(g) == world);
    char path[400];
    snprintf(path, sizeof path, "%s/w%d.safetensors", dir, world);

    float w[1000];
    int64_t step;
    fill(rank, w, &step);
    spmd_ckpt_tensor t[2] = {{"w", SPMD_F32, 2, {10, 100}, w}, {"step", SPMD_I64, 0, {0}, &step}};
    spmd_ckpt_kv meta[1] = {{"epoch", "2"}};
    RREQUIRE(spmd_ckpt_save_dist(g, path, t, 2, meta, 1, err, sizeof err) == SPMD_OK);
    float want[1000];
    int64_t want_step;
    fill(0, want, &want_step);
    RREQUIRE(memcmp(w, want, sizeof w) == 0 && step == want_step);

    /* resume: scribble, then load_dist restores rank 0's state everywhere */
    fill(rank + 7, w, &step);
    RREQUIRE(spmd_ckpt_load_dist(g, path, t, 2, err, sizeof err) == SPMD_OK);
    RREQUIRE(memcmp(w, want, sizeof w) == 0 && step == want_step);

    /* rank 0 cannot save: every rank fails with its status */
    char bad[400];
    snprintf(bad, sizeof bad, "%s/no-such-dir/x.safetensors", dir);
    spmd_status st = spmd_ckpt_save_dist(g, bad, t, 2, NULL, 0, err, sizeof err);
    RREQUIRE(st == SPMD_ERR_IO);
    if (rank != 0) RREQUIRE(strstr(err, "rank 0 failed to save"));

    /* one rank expects another shape: every rank fails, nobody hangs */
    if (world > 1) {
        spmd_ckpt_tensor t2[2] = {t[0], t[1]};
        if (rank == world - 1) t2[0].shape[0] = 20, t2[0].shape[1] = 50;
        st = spmd_ckpt_load_dist(g, path, t2, 2, err, sizeof err);
        RREQUIRE(st == SPMD_ERR_MISMATCH);
        if (rank == world - 1) RREQUIRE(strstr(err, "tensor \"w\""));
        else RREQUIRE(strstr(err, "another rank failed"));
    }
    RREQUIRE(spmd_barrier(g) == SPMD_OK);
    spmd_group_destroy(g);
    return 0;
}

int main(int argc, char **argv) {
    /* Ranks forked before any store exists meet as mpirun'd ones do: with a
     * job secret from the environment. */
    char token[SPMD_AUTH_TOKEN_CHARS + 1];
    REQUIRE(spmd_auth_new_token(token) == SPMD_OK);
    setenv("SPMD_AUTH_TOKEN", token, 1);
    const char *t = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/spmd-ckdist-XXXXXX", t && *t ? t : "/tmp");
    REQUIRE(mkdtemp(dir));
    int worlds[] = {1, 2, 3, 4};
    for (size_t i = 0; i < sizeof worlds / sizeof worlds[0]; i++) {
        int world = worlds[i];
        if (argc > 1 && atoi(argv[1]) != world) continue;
        pid_t pids[8];
        fflush(NULL);
        for (int r = 0; r < world; r++) {
            pids[r] = fork();
            REQUIRE(pids[r] >= 0);
            if (pids[r] == 0) {
                prctl(PR_SET_PDEATHSIG, SIGKILL);
                alarm(60); /* never outlive a hung test */
                int rc = body(r, world);
                fflush(NULL);
                _exit(rc);
            }
        }
        for (int r = 0; r < world; r++) {
            int status = 0;
            REQUIRE(waitpid(pids[r], &status, 0) == pids[r]);
            CHECK_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 0, "world %d rank %d: status 0x%x",
                      world, r, status);
        }
        char path[400];
        snprintf(path, sizeof path, "%s/w%d.safetensors", dir, world);
        unlink(path);
        snprintf(path, sizeof path, "%s/rdzv-w%d", dir, world);
        unlink(path);
    }
    rmdir(dir);
    TEST_MAIN_END();
}
