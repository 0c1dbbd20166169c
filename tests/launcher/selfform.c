/* tests/launcher/selfform.c — the seeds' own way to start a job, with no
 * launcher and no secret: the program forks its ranks itself, each calls
 * spmd_group_init with an explicit rank and world size, meeting through
 *   env   MASTER_ADDR / MASTER_PORT in its environment (set here)
 *   tcp   init_method tcp://127.0.0.1:PORT
 *   file  init_method file://PATH
 * then all_reduces and prints "selfform ok rank R of N".  The parent exits 0
 * only when every rank did.
 *   launcher_selfform env|tcp|file WORLD PORT-or-PATH [BADRANK [BADFILE]]
 * BADRANK: that rank uses a wrong secret (SPMD_AUTH_TOKEN), or with BADFILE
 * the secret file BADFILE (SPMD_AUTH_FILE), which the test makes unsafe so the
 * rank has no secret at all — every rank must then fail, and print its
 * error, well before the group's timeout. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "spmd/group.h"

static int run_rank(const char *mode, int rank, int world, const char *where, int badrank,
                    const char *badfile) {
    char url[4200];
    spmd_group_opts o = SPMD_GROUP_OPTS_DEFAULT;
    o.rank = rank;
    o.world_size = world;
    o.timeout_ms = 120000; /* a refusal must end the rendezvous long before this */
    if (rank == badrank && badfile)
        setenv("SPMD_AUTH_FILE", badfile, 1);
    else if (rank == badrank)
        setenv("SPMD_AUTH_TOKEN", "0123456789abcdef0123456789abcdef-a-wrong-secret", 1);
    if (!strcmp(mode, "env")) {
        setenv("MASTER_ADDR", "127.0.0.1", 1);
        setenv("MASTER_PORT", where, 1);
    } else if (!strcmp(mode, "tcp")) {
        snprintf(url, sizeof url, "tcp://127.0.0.1:%s", where);
        o.init_method = url;
    } else {
        snprintf(url, sizeof url, "file://%s", where);
        o.init_method = url;
    }
    spmd_group *g = NULL;
    char err[1024];
    if (spmd_group_init(&o, &g, err, sizeof err) != SPMD_OK) {
        printf("selfform rank %d failed: %s\n", rank, err);
        return 1;
    }
    int v = rank + 1;
    int bad = spmd_all_reduce(g, &v, &v, 1, SPMD_I32, SPMD_SUM) != SPMD_OK || v != world * (world + 1) / 2;
    if (!bad) printf("selfform ok rank %d of %d\n", spmd_group_rank(g), spmd_group_size(g));
    else printf("selfform rank %d: all_reduce failed: %s\n", rank, spmd_group_errmsg(g));
    spmd_group_destroy(g);
    return bad;
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: %s env|tcp|file WORLD PORT-or-PATH [BADRANK [BADFILE]]\n", argv[0]);
        return 2;
    }
    int world = atoi(argv[2]), badrank = argc > 4 ? atoi(argv[4]) : -1, failed = 0;
    const char *badfile = argc > 5 ? argv[5] : NULL;
    setvbuf(stdout, NULL, _IOLBF, 0);
    for (int r = 0; r < world; r++) {
        if (fork() == 0) _exit(run_rank(argv[1], r, world, argv[3], badrank, badfile));
    }
    for (int r = 0; r < world; r++) {
        int status = 0;
        if (wait(&status) < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) failed++;
    }
    return failed ? 1 : 0;
}
