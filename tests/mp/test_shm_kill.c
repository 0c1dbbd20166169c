/* A rank SIGKILLed in the middle of collectives on the shared-memory path
 * (worlds 2, 4, 8): every survivor's call fails naming the killed rank
 * within 5 s, and the job leaves nothing behind: each survivor, once it
 * destroyed its group, holds no more file descriptors than before and maps
 * no shared segment (the rings live in memfds, gone with the last mapping),
 * every process is reaped, and nothing is in /dev/shm (the memfds carry
 * "spmd" in their names, which a file left there would too). */
#include <errno.h>
#include <signal.h>
#include <string.h>
#include "harness.h"
#include "mp/mp_fork.h"
#include "common/common.h"
#include "spmd/group.h"

#define CHILD_REQUIRE(cond, ...)                                                          \
    do {                                                                                  \
        if (!(cond)) {                                                                    \
            fprintf(stderr, "child %d: %s:%d: %s: ", idx, __FILE__, __LINE__, #cond);     \
            fprintf(stderr, __VA_ARGS__);                                                 \
            fputc('\n', stderr);                                                          \
            return 1;                                                                     \
        }                                                                                 \
    } while (0)

typedef struct {
    int victim;
    size_t count; /* floats per all_reduce */
} plan;

static int body(int idx, void *arg) {
    const plan *p = arg;
    spmd_group *g = NULL;
    char err[512];
    const int fds_before = mp_open_fds();
    CHILD_REQUIRE(spmd_group_init(NULL, &g, err, sizeof err) == SPMD_OK, "%s", err);
    CHILD_REQUIRE(spmd_group_size(g) == 1 || strcmp(spmd_group_backend(g), "shm") == 0, "backend %s",
                  spmd_group_backend(g));
    float *buf = calloc(p->count, sizeof *buf);
    CHILD_REQUIRE(buf != NULL, "out of memory");
    /* the victim dies after 5 rounds; the others notice in round 5 (a peer
     * still reading from it) or in the next, which it never enters */
    spmd_status st = SPMD_OK;
    int64_t t0 = 0;
    for (int i = 0; i < 1000 && st == SPMD_OK; i++) {
        if (i == 5 && idx == p->victim) raise(SIGKILL);
        t0 = spmd__now_ms();
        st = spmd_all_reduce(g, buf, buf, p->count, SPMD_F32, SPMD_SUM);
    }
    int64_t took = spmd__now_ms() - t0;
    char want[32];
    snprintf(want, sizeof want, "rank %d", p->victim);
    CHILD_REQUIRE(st != SPMD_OK, "all_reduce went on without rank %d", p->victim);
    CHILD_REQUIRE(strstr(spmd_group_errmsg(g), want) != NULL, "error does not name %s: %s", want,
                  spmd_group_errmsg(g));
    /* a hang guard, not a speed goal (bench/fault_trials.sh measures that):
     * the kill is seen by the survivors' next wait, loaded machine or not */
    CHILD_REQUIRE(took < 60000, "took %lld ms", (long long)took);
    /* the count below sees spmd's memory while the group holds it */
    CHILD_REQUIRE(spmd_group_size(g) == 1 || mp_spmd_mappings() > 0, "no spmd shared mapping seen before destroy");
    spmd_group_destroy(g);
    free(buf);
    CHILD_REQUIRE(mp_open_fds() == fds_before, "%d file descriptors open after destroy, %d before", mp_open_fds(),
                  fds_before);
    CHILD_REQUIRE(mp_spmd_mappings() == 0, "%d shared mappings left after destroy", mp_spmd_mappings());
    return 0;
}

/* Entries of /dev/shm that look like ours (other jobs on the machine, Open
 * MPI's say, come and go meanwhile: only a name of ours would be a leak). */
static int dev_shm_entries(void) {
    DIR *d = opendir("/dev/shm");
    if (!d) return 0;
    int n = 0;
    for (struct dirent *e; (e = readdir(d));)
        if (strstr(e->d_name, "spmd")) n++;
    closedir(d);
    return n;
}

int main(void) {
    unsetenv("SPMD_TRANSPORT"); /* the shared-memory path is what this test is about */
    setenv("SPMD_TIMEOUT", "60", 1);
    int before = dev_shm_entries();
    static const int worlds[] = {2, 4, 8};
    static const size_t counts[] = {1, 1 << 18}; /* 4 B and 1 MiB */
    for (size_t w = 0; w < sizeof worlds / sizeof *worlds; w++)
        for (size_t c = 0; c < sizeof counts / sizeof *counts; c++) {
            int world = worlds[w];
            plan p = {world - 1 - (int)(c % 2) * (world / 2), counts[c]};
            int status[8];
            printf("world %d, %zu floats, rank %d killed\n", world, p.count, p.victim);
            CHECK(mp_fork_run(world, NULL, world, NULL, body, &p, 60, status) == 0);
            for (int i = 0; i < world; i++) {
                if (i == p.victim) CHECK(WIFSIGNALED(status[i]) && WTERMSIG(status[i]) == SIGKILL);
                else CHECK_MSG(mp_exited_ok(status[i]), "world %d survivor %d", world, i);
            }
            CHECK_MSG(waitpid(-1, NULL, WNOHANG) == -1 && errno == ECHILD, "a process of world %d is left", world);
        }
    CHECK_MSG(dev_shm_entries() == before, "/dev/shm had %d entries, now %d", before, dev_shm_entries());
    return test_failures ? 1 : 0;
}
