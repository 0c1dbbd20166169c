/* tests/launcher/worker.c — the program the launcher tests run under spmdrun,
 * and a few helpers the test scripts need.  One mode per first argument:
 *
 *   env                      print the launcher's variables, one KEY=VALUE a line
 *   exit CODE RANK           every rank starts a grandchild and prints "pids <self>
 *                            <grandchild>"; after a store barrier (so every rank is up)
 *                            RANK exits with CODE (after a line on stderr), others wait
 *   kill9 RANK               the same, but RANK SIGKILLs itself
 *   fail-first RANK          RANK fails while TORCHELASTIC_RESTART_COUNT is 0
 *   hold                     print "hold restart=C world=W rank=R group=G", start a
 *                            grandchild, print "pids <self> <grandchild>", wait
 *                            (HOLD_IGNORE_TERM=1: local rank 0 ignores SIGTERM and SIGINT, so only
 *                            SIGKILL ends it)
 *   hang-until R             while the restart count is below R: like hold; from R on:
 *                            print "restart=C world=W rank=R group=G" and exit 0
 *   lines N                  N long numbered lines to stdout, N/2 to stderr, written in
 *                            chunks that cut lines in the middle
 *   partial                  "no newline" without a newline
 *   store-check              through the agent's store (MASTER_ADDR:MASTER_PORT), check
 *                            that every rank of this job and no other is there
 *                            (HOLD_OUT/HOLD_IN: rank 0 reports "up" and waits on fifos)
 *   gone TIMEOUT_MS PID...   helper: wait (pidfd) until every PID has exited
 *   args [ARGS...]           print "rank=R local=L first=F args=A|B|...": what the program was
 *                            given (F: the --local-rank=N argument before the mode, if any)
 *   run CMD [ARGS...]        helper: exec CMD with SIGINT and SIGQUIT at their defaults
 *                            (a shell starts background jobs with them ignored)
 *
 * "Others wait" = block in sigsuspend until a signal ends them.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "spmd/store.h"

static int env_int(const char *name, int dflt) {
    const char *s = getenv(name);
    return s && *s ? atoi(s) : dflt;
}

static void wait_forever(void) {
    sigset_t none;
    sigemptyset(&none);
    for (;;) sigsuspend(&none);
}

static int mode_env(void) {
    static const char *const names[] = {
        "RANK", "LOCAL_RANK", "GROUP_RANK", "ROLE_RANK", "ROLE_NAME", "LOCAL_WORLD_SIZE",
        "WORLD_SIZE", "GROUP_WORLD_SIZE", "ROLE_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
        "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS", "TORCHELASTIC_RUN_ID",
        "TORCHELASTIC_USE_AGENT_STORE", "SPMD_RESTART_COUNT", "SPMD_MAX_RESTARTS",
        "SPMD_RUN_ID", "OMP_NUM_THREADS"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        const char *v = getenv(names[i]);
        printf("%s=%s\n", names[i], v ? v : "<unset>");
    }
    return 0;
}

static int mode_lines(int n) {
    int rank = env_int("RANK", 0);
    size_t cap = (size_t)n * 400 + 1, len = 0;
    char *buf = malloc(cap);
    if (!buf) return 1;
    for (int i = 0; i < n; i++) {
        len += (size_t)snprintf(buf + len, cap - len, "rank=%d line=%d ", rank, i);
        for (int k = 0; k < 200 + (i * 37 + rank * 11) % 150; k++) buf[len++] = (char)('a' + k % 26);
        len += (size_t)snprintf(buf + len, cap - len, " end\n");
    }
    /* Odd chunk sizes so pipe reads end in the middle of lines. */
    for (size_t off = 0, chunk = 777; off < len; off += chunk, chunk = chunk % 1500 + 311) {
        size_t c = off + chunk > len ? len - off : chunk;
        if (write(1, buf + off, c) != (ssize_t)c) return 1;
    }
    for (int i = 0; i < n / 2; i++) fprintf(stderr, "rank=%d err=%d end\n", rank, i);
    free(buf);
    return 0;
}

/* A grandchild in the worker's process group that only SIGKILL ends. */
static int start_grandchild(void) {
    pid_t child = fork();
    if (child < 0) return -1;
    if (child == 0) {
        signal(SIGTERM, SIG_IGN); /* the group kill, not politeness, must end it */
        wait_forever();
    }
    printf("pids %d %d\n", (int)getpid(), (int)child);
    fflush(stdout);
    return 0;
}

static int mode_hold(void) {
    if (env_int("HOLD_IGNORE_TERM", 0) && env_int("LOCAL_RANK", 0) == 0) {
        signal(SIGTERM, SIG_IGN);
        signal(SIGINT, SIG_IGN);
    }
    printf("hold restart=%d world=%d rank=%d group=%d\n", env_int("TORCHELASTIC_RESTART_COUNT", -1),
           env_int("WORLD_SIZE", -1), env_int("RANK", -1), env_int("GROUP_RANK", -1));
    if (start_grandchild()) return 1;
    wait_forever();
    return 0;
}

/* Every rank of this attempt has arrived (through the agent's store). */
static int store_barrier(void) {
    const char *addr = getenv("MASTER_ADDR");
    int port = env_int("MASTER_PORT", 0), world = env_int("WORLD_SIZE", 0);
    int restart = env_int("TORCHELASTIC_RESTART_COUNT", 0);
    spmd_store *s = NULL;
    char err[256], key[64], done[64];
    if (!addr || spmd_store_connect(addr, port, 10000, &s, err, sizeof err)) {
        fprintf(stderr, "barrier: cannot reach the store: %s\n", addr ? err : "no MASTER_ADDR");
        return -1;
    }
    snprintf(key, sizeof key, "barrier/%d/count", restart);
    snprintf(done, sizeof done, "barrier/%d/done", restart);
    int64_t n = 0;
    const char *keys[1] = {done};
    int bad = spmd_store_add(s, key, 1, &n) != SPMD_OK;
    if (!bad && n == world) bad = spmd_store_set(s, done, "1", 1) != SPMD_OK;
    if (!bad) bad = spmd_store_wait(s, keys, 1, 10000) != SPMD_OK;
    spmd_store_close(s);
    return bad ? -1 : 0;
}

static int mode_store_check(void) {
    const char *addr = getenv("MASTER_ADDR"), *run = getenv("TORCHELASTIC_RUN_ID");
    int port = env_int("MASTER_PORT", 0), rank = env_int("RANK", -1), world = env_int("WORLD_SIZE", 0);
    if (!addr || !run || port <= 0 || rank < 0 || world <= 0) {
        fprintf(stderr, "store-check: launcher variables missing\n");
        return 1;
    }
    spmd_store *s = NULL;
    char err[256];
    if (spmd_store_connect(addr, port, 10000, &s, err, sizeof err)) {
        fprintf(stderr, "store-check: %s\n", err);
        return 1;
    }
    char key[64];
    snprintf(key, sizeof key, "check/%d", rank);
    int bad = spmd_store_set(s, key, run, strlen(run)) != SPMD_OK;
    for (int r = 0; r < world && !bad; r++) {
        void *v = NULL;
        size_t len = 0;
        snprintf(key, sizeof key, "check/%d", r);
        if (spmd_store_get(s, key, &v, &len) || len != strlen(run) || memcmp(v, run, len)) {
            fprintf(stderr, "store-check: %s is not this job's (%s)\n", key, run);
            bad = 1;
        }
        free(v);
    }
    int64_t nkeys = 0;
    if (!bad && (spmd_store_num_keys(s, &nkeys) || nkeys != world)) {
        fprintf(stderr, "store-check: the store holds %lld keys, expected %d\n", (long long)nkeys,
                world);
        bad = 1;
    }
    const char *out = getenv("HOLD_OUT"), *in = getenv("HOLD_IN");
    if (!bad && rank == 0 && out && in) { /* keep this job's store up while the other job runs */
        FILE *fo = fopen(out, "w");
        if (fo) {
            fputs("up\n", fo);
            fclose(fo);
        }
        FILE *fi = fopen(in, "r");
        char line[16];
        if (fi) {
            if (!fgets(line, sizeof line, fi)) line[0] = 0;
            fclose(fi);
        }
    }
    spmd_store_close(s);
    if (!bad) printf("store ok rank %d of %d\n", rank, world);
    return bad;
}

static int mode_gone(int timeout_ms, int n, char **pids) {
    int left = n, rc = 0;
    struct pollfd *p = calloc((size_t)n, sizeof *p);
    if (!p) return 2;
    for (int i = 0; i < n; i++) {
        int fd = (int)syscall(SYS_pidfd_open, atoi(pids[i]), 0);
        p[i].fd = fd;
        p[i].events = POLLIN;
        if (fd < 0) left--; /* ESRCH: already gone */
    }
    while (left > 0) {
        int r = poll(p, (nfds_t)n, timeout_ms);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        for (int i = 0; i < n; i++)
            if (p[i].fd >= 0 && p[i].revents) {
                close(p[i].fd);
                p[i].fd = -1;
                left--;
            }
    }
    for (int i = 0; i < n; i++)
        if (p[i].fd >= 0) {
            fprintf(stderr, "gone: process %s still exists after %d ms\n", pids[i], timeout_ms);
            close(p[i].fd);
            rc = 1;
        }
    free(p);
    return rc;
}

int main(int argc, char **argv) {
    /* spmdrun --pass-local-rank puts launch.py's argument before the mode */
    const char *local_rank_arg = "";
    if (argc > 1 && !strncmp(argv[1], "--local", 7)) {
        local_rank_arg = argv[1];
        argv++;
        argc--;
    }
    if (argc < 2) {
        fprintf(stderr, "usage: worker MODE ...\n");
        return 2;
    }
    const char *m = argv[1];
    int rank = env_int("RANK", -1);
    if (!strcmp(m, "env")) return mode_env();
    if (!strcmp(m, "args")) {   /* one line: the ranks and every argument after the mode */
        printf("rank=%d local=%s first=%s args=", rank, getenv("LOCAL_RANK") ? getenv("LOCAL_RANK") : "?",
               local_rank_arg);
        for (int i = 2; i < argc; i++) printf("%s%s", i > 2 ? "|" : "", argv[i]);
        printf("\n");
        return 0;
    }
    if ((!strcmp(m, "exit") && argc == 4) || (!strcmp(m, "kill9") && argc == 3)) {
        if (start_grandchild() || store_barrier()) return 1;
        if (rank == atoi(argv[argc - 1])) {
            fprintf(stderr, "rank %d fails on purpose\n", rank);
            if (!strcmp(m, "kill9")) raise(SIGKILL);
            return atoi(argv[2]);
        }
        wait_forever();
    }
    if (!strcmp(m, "hang-until") && argc == 3) {
        int restart = env_int("TORCHELASTIC_RESTART_COUNT", -1);
        if (restart < atoi(argv[2])) return mode_hold();
        printf("restart=%d world=%d rank=%d group=%d\n", restart, env_int("WORLD_SIZE", -1),
               rank, env_int("GROUP_RANK", -1));
        return 0;
    }
    if (!strcmp(m, "fail-first") && argc == 3) {
        int restart = env_int("TORCHELASTIC_RESTART_COUNT", -1);
        if (rank == atoi(argv[2]) && restart == 0) {
            fprintf(stderr, "rank %d fails on the first attempt\n", rank);
            return 1;
        }
        printf("rank %d ok at restart %d\n", rank, restart);
        return 0;
    }
    if (!strcmp(m, "hold")) return mode_hold();
    if (!strcmp(m, "lines") && argc == 3) return mode_lines(atoi(argv[2]));
    if (!strcmp(m, "partial")) {
        fputs("no newline", stdout);
        return 0;
    }
    if (!strcmp(m, "store-check")) return mode_store_check();
    if (!strcmp(m, "run") && argc >= 3) {
        signal(SIGINT, SIG_DFL);
        signal(SIGQUIT, SIG_DFL);
        execvp(argv[2], argv + 2);
        perror(argv[2]);
        return 127;
    }
    if (!strcmp(m, "gone") && argc >= 3) return mode_gone(atoi(argv[2]), argc - 3, argv + 3);
    fprintf(stderr, "worker: unknown mode or arguments: %s\n", m);
    return 2;
}
