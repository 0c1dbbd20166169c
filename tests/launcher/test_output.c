/* Unit tests for spmdrun's output assembly (output.c), worker environment
 * (env.c) and failure entries (report.c): lines leave whole and prefixed, a
 * line cut by the pipe is joined, an overlong line is split, a last line gets
 * its newline, files get the raw bytes, the stderr tail is kept. */
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include "harness.h"
#include "spmdrun.h"

static char got[200000];

/* Everything the console pipe holds right now. */
static size_t drain(int fd) {
    size_t n = 0;
    for (;;) {
        ssize_t r = read(fd, got + n, sizeof got - 1 - n);
        if (r <= 0) break;
        n += (size_t)r;
    }
    got[n] = 0;
    return n;
}

static void put(int fd, const char *s) {
    size_t n = strlen(s);
    CHECK(write(fd, s, n) == (ssize_t)n);
}

int main(void) {
    int in[2], con[2];
    REQUIRE(pipe(in) == 0 && pipe(con) == 0);
    fcntl(in[0], F_SETFL, O_NONBLOCK);
    fcntl(con[0], F_SETFL, O_NONBLOCK);
    fcntl(con[1], F_SETFL, O_NONBLOCK);
    char path[] = "/tmp/spmdrun-test-out.XXXXXX";
    int file = mkstemp(path);
    REQUIRE(file >= 0);
    unlink(path);
    int file_rd = dup(file);

    sr_stream s;
    REQUIRE(sr_stream_init(&s, in[0], con[1], file, "[rank3]:", 1) == 0);
    put(in[1], "hello\nwor");
    CHECK(sr_stream_pump(&s) == 1);
    drain(con[0]);
    CHECK_MSG(!strcmp(got, "[rank3]:hello\n"), "got '%s'", got);
    put(in[1], "ld\n\n");
    CHECK(sr_stream_pump(&s) == 1);
    drain(con[0]);
    CHECK_MSG(!strcmp(got, "[rank3]:world\n[rank3]:\n"), "got '%s'", got);

    /* EOF: a last line without newline gets one; the stream reports closing. */
    put(in[1], "tail");
    close(in[1]);
    while (sr_stream_pump(&s) == 1) {
    }
    drain(con[0]);
    CHECK_MSG(!strcmp(got, "[rank3]:tail\n"), "got '%s'", got);
    CHECK(s.fd == -1);

    /* The file is the raw stream. */
    char raw[50000];
    ssize_t rn = pread(file_rd, raw, sizeof raw, 0);
    CHECK(rn == (ssize_t)strlen("hello\nworld\n\ntail"));
    CHECK(rn > 13 && !memcmp(raw, "hello\nworld\n\n", 13));
    CHECK(rn > 4 && !memcmp(raw + rn - 4, "tail", 4));
    sr_stream_free(&s);
    close(file_rd);

    /* A line longer than the 32 KiB buffer leaves in buffer-sized pieces. */
    static char big[40001];
    memset(big, 'x', 40000);
    big[40000] = 0;
    REQUIRE(pipe(in) == 0);
    fcntl(in[0], F_SETFL, O_NONBLOCK);
    REQUIRE(sr_stream_init(&s, in[0], con[1], -1, "[r]:", 0) == 0);
    put(in[1], big);
    put(in[1], "\n");
    close(in[1]);
    size_t total = 0;
    static char all[100000];
    while (sr_stream_pump(&s) == 1) {
        size_t k = drain(con[0]);
        memcpy(all + total, got, k);
        total += k;
    }
    size_t k = drain(con[0]);
    memcpy(all + total, got, k);
    total += k;
    all[total] = 0;
    CHECK_MSG(total == 40000 + 2 * (4 + 1), "console got %zu bytes", total);
    CHECK(!strncmp(all, "[r]:xxx", 7));
    char *second = strstr(all + 1, "\n[r]:");
    CHECK(second && (size_t)(second - all) == 4 + 32768);
    CHECK(all[total - 1] == '\n');
    sr_stream_free(&s);

    /* The tail keeps the last lines, indented, control bytes replaced. */
    REQUIRE(pipe(in) == 0);
    fcntl(in[0], F_SETFL, O_NONBLOCK);
    REQUIRE(sr_stream_init(&s, in[0], -1, -1, "", 1) == 0);
    for (int i = 0; i < 20; i++) {
        char line[32];
        snprintf(line, sizeof line, "line %d%s\n", i, i == 19 ? "\a" : "");
        put(in[1], line);
    }
    close(in[1]);
    while (sr_stream_pump(&s) == 1) {
    }
    char tail[4096];
    sr_stream_tail(&s, 3, "  ", tail, sizeof tail);
    CHECK_MSG(!strcmp(tail, "  line 17\n  line 18\n  line 19?\n"), "tail '%s'", tail);
    sr_stream_tail(&s, 100, "", tail, sizeof tail);
    CHECK(!strncmp(tail, "line 0\n", 7));
    sr_stream_free(&s);

    /* Environment: our variables replace inherited ones; the rest passes through. */
    sr_config cfg;
    char *argv[] = {"spmdrun", "--rdzv-id", "job7", "--role", "r", "--max-restarts", "4", "p",
                    NULL};
    char err[256];
    REQUIRE(sr_parse_args(8, argv, &cfg, err, sizeof err) == 0);
    sr_assignment as;
    memset(&as, 0, sizeof as);
    as.restart_count = 2;
    as.node_rank = 1;
    as.nnodes = 2;
    as.world_size = 6;
    as.rank_offset = 4;
    as.role_rank_offset = 4;
    as.role_world_size = 6;
    as.local_world_size = 2;
    snprintf(as.master_addr, sizeof as.master_addr, "10.1.2.3");
    as.master_port = 4242;
    char *base[] = {"RANK=99", "FOO=bar", "OMP_NUM_THREADS=4", "MASTER_PORTX=1", NULL};
    for (int omp = 0; omp < 2; omp++) {
        char **env = sr_env_build(base, &cfg, &as, 1, omp);
        REQUIRE(env != NULL);
        int seen_rank = 0, seen_foo = 0, seen_omp = 0, seen_x = 0, count = 0;
        for (char **e = env; *e; e++, count++) {
            if (!strncmp(*e, "RANK=", 5)) {
                seen_rank++;
                CHECK(!strcmp(*e, "RANK=5"));
            }
            if (!strcmp(*e, "FOO=bar")) seen_foo++;
            if (!strcmp(*e, "MASTER_PORTX=1")) seen_x++;
            if (!strncmp(*e, "OMP_NUM_THREADS=", 16)) {
                seen_omp++;
                CHECK(!strcmp(*e, omp ? "OMP_NUM_THREADS=1" : "OMP_NUM_THREADS=4"));
            }
        }
        CHECK(seen_rank == 1 && seen_foo == 1 && seen_omp == 1 && seen_x == 1);
        const char *want[] = {"LOCAL_RANK=1", "GROUP_RANK=1", "ROLE_RANK=5", "ROLE_NAME=r",
                              "LOCAL_WORLD_SIZE=2", "WORLD_SIZE=6", "GROUP_WORLD_SIZE=2",
                              "ROLE_WORLD_SIZE=6", "MASTER_ADDR=10.1.2.3", "MASTER_PORT=4242",
                              "TORCHELASTIC_RESTART_COUNT=2", "TORCHELASTIC_MAX_RESTARTS=4",
                              "TORCHELASTIC_RUN_ID=job7", "TORCHELASTIC_USE_AGENT_STORE=True",
                              "SPMD_RESTART_COUNT=2", "SPMD_MAX_RESTARTS=4", "SPMD_RUN_ID=job7"};
        for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
            int found = 0;
            for (char **e = env; *e; e++) found += !strcmp(*e, want[i]);
            CHECK_MSG(found == 1, "%s found %d times", want[i], found);
        }
        sr_env_free(env);
    }

    /* Failure entries in torch's shape. */
    sr_failure f;
    memset(&f, 0, sizeof f);
    f.rank = 7;
    f.local_rank = 3;
    f.pid = 4242;
    f.signo = SIGKILL;
    f.exit_code = -SIGKILL;
    snprintf(f.host, sizeof f.host, "node9");
    snprintf(f.when, sizeof f.when, "2024-01-01_00:00:00");
    char text[2048];
    sr_failure_format(&f, text, sizeof text);
    CHECK(strstr(text, "[7]:\n") != NULL);
    CHECK(strstr(text, "rank      : 7 (local_rank: 3)") != NULL);
    CHECK(strstr(text, "exitcode  : -9 (pid: 4242)") != NULL);
    CHECK(strstr(text, "Signal 9 (SIGKILL) received by PID 4242") != NULL);
    CHECK(strstr(text, "host      : node9") != NULL);
    CHECK(!strcmp(sr_signal_name(SIGTERM), "SIGTERM"));
    TEST_MAIN_END();
}
