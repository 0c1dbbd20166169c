/* Secret files against another user on the same host (issue 29): a file that
 * user planted (mode 600, owned by uid 65534) is refused; a FIFO at the path
 * fails at once instead of blocking in open(); a file or directory others
 * can read or write is refused naming the file and the fix; leading and
 * trailing blanks are ignored alike.  The per-user secret: created once,
 * mode 600 in a mode-700 directory, the same for racing processes; another
 * uid with its own per-user secret is refused by the store.  Needs root (to
 * become `nobody`); exits 77 (skipped) otherwise.
 *   test_secret_file */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include "../unit/test_store_util.h"
#include "auth/auth.h"

#define NOBODY 65534
#define SECRET "0123456789abcdef0123456789abcdef-file"

static char base[256];

static void write_file(const char *path, const char *text, mode_t mode) {
    FILE *f = fopen(path, "w");
    if (f) {
        fputs(text, f);
        fclose(f);
    }
    chmod(path, mode);
}

/* Read `path` as SPMD_AUTH_FILE in a child (a blocking open would hang only
 * it); the child writes its status and message to a pipe.  Returns the
 * status, HUNG when the child did not answer within 20 s (it is killed). */
#define HUNG 999
static int read_in_child(const char *path, char *msg, size_t msglen) {
    int p[2];
    if (pipe(p)) return -2;
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        close(p[0]);
        char err[512] = "";
        spmd__auth a;
        setenv("SPMD_AUTH_FILE", path, 1);
        int st = spmd__auth_get(&a, err, sizeof err);
        char out[700];
        int len = snprintf(out, sizeof out, "%d %.*s|%s", st, st ? 0 : (int)a.keylen, (const char *)a.key, err);
        if (write(p[1], out, (size_t)len) < 0) _exit(3);
        _exit(0);
    }
    close(p[1]);
    struct pollfd pf = {.fd = p[0], .events = POLLIN, .revents = 0};
    int got = poll(&pf, 1, 20000);
    int st = HUNG;
    if (got == 1) {
        char out[700] = "";
        ssize_t r = read(p[0], out, sizeof out - 1);
        if (r > 0) {
            out[r] = 0;
            st = atoi(out);
            snprintf(msg, msglen, "%s", strchr(out, ' ') ? strchr(out, ' ') + 1 : out);
        }
    } else kill(pid, SIGKILL);
    close(p[0]);
    waitpid(pid, NULL, 0);
    return st;
}

/* Refused with a message (not hung, not accepted). */
static int bad(int st) { return st != 0 && st != HUNG; }

static int as_nobody(void) {
    return setgroups(0, NULL) == 0 && setgid(NOBODY) == 0 && setuid(NOBODY) == 0 ? 0 : -1;
}

static void test_file_checks(void) {
    char path[300], msg[700], want[400];
    snprintf(path, sizeof path, "%s/good", base);
    write_file(path, "  \t" SECRET " \r\n", 0600);
    CHECK_MSG(read_in_child(path, msg, sizeof msg) == 0 && !strncmp(msg, SECRET "|", strlen(SECRET) + 1),
              "blanks on both sides are stripped: %s", msg);

    snprintf(path, sizeof path, "%s/readable", base);
    write_file(path, SECRET "\n", 0644);
    snprintf(want, sizeof want, "chmod 600 %s", path);
    CHECK_MSG(bad(read_in_child(path, msg, sizeof msg)) && strstr(msg, want) && strstr(msg, "mode 644"),
              "a file others can read is refused naming it and the fix: %s", msg);

    snprintf(path, sizeof path, "%s/fifo", base);
    CHECK(mkfifo(path, 0600) == 0);
    int st = read_in_child(path, msg, sizeof msg);
    CHECK_MSG(bad(st) && strstr(msg, "a FIFO") && strstr(msg, path), "a FIFO fails at once: %d %s", st, msg);

    char link[300];
    snprintf(link, sizeof link, "%s/link", base);
    snprintf(path, sizeof path, "%s/good", base);
    CHECK(symlink(path, link) == 0);
    CHECK_MSG(bad(read_in_child(link, msg, sizeof msg)) && strstr(msg, "symbolic link"), "symlink: %s", msg);

    /* A directory others may write to (not sticky): they could swap the file. */
    char dir[300];
    snprintf(dir, sizeof dir, "%s/open", base);
    CHECK(mkdir(dir, 0777) == 0 && chmod(dir, 0777) == 0);
    snprintf(path, sizeof path, "%s/secret", dir);
    write_file(path, SECRET "\n", 0600);
    snprintf(want, sizeof want, "chmod go-w %s", dir);
    CHECK_MSG(bad(read_in_child(path, msg, sizeof msg)) && strstr(msg, want), "open directory: %s", msg);
}

/* The attack of issue 29: uid 65534 plants a mode-600 file at the path a
 * root job will read, in a shared sticky directory like /tmp. */
static void test_planted_file(void) {
    char shared[300], path[300], msg[700];
    snprintf(shared, sizeof shared, "%s/shared", base);
    CHECK(mkdir(shared, 0777) == 0 && chmod(shared, 01777) == 0);
    snprintf(path, sizeof path, "%s/job.secret", shared);
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        if (as_nobody()) _exit(2);
        umask(077);
        FILE *f = fopen(path, "w");
        if (!f) _exit(3);
        fputs(SECRET "\n", f);
        _exit(fclose(f) == 0 ? 0 : 4);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    struct stat sb;
    REQUIRE_VOID(WIFEXITED(status) && WEXITSTATUS(status) == 0 && stat(path, &sb) == 0);
    CHECK(sb.st_uid == NOBODY && (sb.st_mode & 0777) == 0600);
    CHECK_MSG(bad(read_in_child(path, msg, sizeof msg)) && strstr(msg, "belongs to uid 65534") &&
                  strstr(msg, path),
              "a file planted by another user is refused: %s", msg);
    /* In the sticky directory our own file is fine (nobody can swap it). */
    snprintf(path, sizeof path, "%s/mine", shared);
    write_file(path, SECRET "\n", 0600);
    CHECK_MSG(read_in_child(path, msg, sizeof msg) == 0, "own file in a sticky directory: %s", msg);
}

/* Several processes create the per-user secret at once: one file, one secret. */
static void test_user_secret_race(void) {
    char cfg[300];
    snprintf(cfg, sizeof cfg, "%s/home/.config", base);
    setenv("XDG_CONFIG_HOME", cfg, 1); /* its parent does not exist yet either */
    char home[300];
    snprintf(home, sizeof home, "%s/home", base);
    CHECK(mkdir(home, 0700) == 0);
    enum { N = 8 };
    int p[2];
    REQUIRE_VOID(pipe(p) == 0);
    fflush(NULL);
    for (int i = 0; i < N; i++) {
        if (fork() == 0) {
            close(p[0]);
            spmd__auth a;
            char err[512], line[SPMD__AUTH_MAX_SECRET + 2];
            if (spmd__auth_get(&a, err, sizeof err) || !a.on) {
                fprintf(stderr, "racer: %s\n", err);
                _exit(1);
            }
            memcpy(line, a.key, a.keylen);
            line[a.keylen] = '\n';
            _exit(write(p[1], line, a.keylen + 1) == (ssize_t)a.keylen + 1 ? 0 : 2);
        }
    }
    close(p[1]);
    char all[N * 80 + 1] = "";
    size_t got = 0;
    ssize_t r;
    while (got < sizeof all - 1 && (r = read(p[0], all + got, sizeof all - 1 - got)) > 0) got += (size_t)r;
    close(p[0]);
    for (int i = 0; i < N; i++) {
        int status = 0;
        wait(&status);
        CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    }
    all[got] = 0;
    CHECK_MSG(got == N * 65, "every racer got a 64-character secret (%zu bytes)", got);
    for (int i = 1; i < N && got == N * 65; i++)
        CHECK_MSG(!memcmp(all, all + i * 65, 65), "racer %d has another secret", i);
    char path[400];
    struct stat sb, db;
    snprintf(path, sizeof path, "%s/spmd/secret", cfg);
    CHECK(stat(path, &sb) == 0 && (sb.st_mode & 0777) == 0600 && S_ISREG(sb.st_mode));
    snprintf(path, sizeof path, "%s/spmd", cfg);
    CHECK(stat(path, &db) == 0 && (db.st_mode & 0777) == 0700);
    /* No temporary file is left behind. */
    char cmd[500];
    snprintf(cmd, sizeof cmd, "test $(ls -A %s | wc -l) -eq 1", path);
    CHECK_MSG(system(cmd) == 0, "%s holds only the secret", path);

    /* A config directory that cannot be created: the error names the path and the ways out. */
    char file[300], msg[600];
    snprintf(file, sizeof file, "%s/plainfile", base);
    write_file(file, "x", 0600);
    setenv("XDG_CONFIG_HOME", file, 1);
    spmd__auth a;
    spmd_status st = spmd__auth_get(&a, msg, sizeof msg);
    CHECK_MSG(st && strstr(msg, file) && strstr(msg, "SPMD_AUTH_TOKEN") && strstr(msg, "XDG_CONFIG_HOME"),
              "uncreatable per-user secret: %s", msg);
    setenv("XDG_CONFIG_HOME", cfg, 1);
}

/* A process of another uid with the store's address: with its own per-user
 * secret it is refused; it cannot read ours.  The clients are forked before
 * the server's thread exists and are sent its port: a fork while another
 * thread holds a lock (ASan's allocator, OpenSSL's) can leave the child
 * blocked on that lock for ever. */
static void nobody_client(const char *cfg, int port_fd, int out_fd) {
    char err[600] = "";
    int port = 0;
    struct pollfd pf = {.fd = port_fd, .events = POLLIN, .revents = 0};
    if (poll(&pf, 1, 60000) != 1 || read(port_fd, &port, sizeof port) != (ssize_t)sizeof port || port <= 0)
        _exit(4);
    if (as_nobody()) _exit(2);
    setenv("XDG_CONFIG_HOME", cfg, 1);
    setenv("SPMD_LOG_LEVEL", "error", 1);
    spmd_store *c = NULL;
    spmd_status st = spmd_store_connect("127.0.0.1", port, 5000, &c, err, sizeof err);
    if (st == SPMD_OK) {
        spmd_store_close(c);
        snprintf(err, sizeof err, "CONNECTED");
    }
    if (write(out_fd, err, strlen(err)) < 0) _exit(3);
    _exit(0);
}

static void test_other_uid_refused(void) {
    char rootcfg[300], nbcfg[300];
    snprintf(rootcfg, sizeof rootcfg, "%s/home/.config", base); /* made by the race test */
    snprintf(nbcfg, sizeof nbcfg, "%s/nobody", base);
    REQUIRE_VOID(mkdir(nbcfg, 0700) == 0 && chown(nbcfg, NOBODY, NOBODY) == 0);
    setenv("XDG_CONFIG_HOME", rootcfg, 1);
    const char *cfgs[2] = {nbcfg, rootcfg};
    int to_child[2], from_child[2];
    pid_t pids[2];
    fflush(NULL);
    for (int k = 0; k < 2; k++) {
        int a[2], b[2];
        REQUIRE_VOID(pipe(a) == 0 && pipe(b) == 0);
        pids[k] = fork();
        REQUIRE_VOID(pids[k] >= 0);
        if (pids[k] == 0) {
            close(a[1]);
            close(b[0]);
            nobody_client(cfgs[k], a[0], b[1]);
        }
        close(a[0]);
        close(b[1]);
        to_child[k] = a[1];
        from_child[k] = b[0];
    }
    spmd_store_server *srv = tsu_server();
    int port = srv ? spmd_store_server_port(srv) : 0;
    for (int k = 0; k < 2; k++) {
        if (write(to_child[k], &port, sizeof port) != (ssize_t)sizeof port) CHECK_MSG(0, "port to client %d", k);
        close(to_child[k]);
        char msg[700] = "";
        struct pollfd pf = {.fd = from_child[k], .events = POLLIN, .revents = 0};
        ssize_t r = poll(&pf, 1, 60000) == 1 ? read(from_child[k], msg, sizeof msg - 1) : -1;
        msg[r > 0 ? r : 0] = 0;
        close(from_child[k]);
        if (r < 0) kill(pids[k], SIGKILL);
        int status = 0;
        waitpid(pids[k], &status, 0);
        if (k == 0)
            CHECK_MSG(strstr(msg, "failed to prove"), "nobody with its own secret is refused: %s (status %d)", msg,
                      status);
        else
            CHECK_MSG(strstr(msg, "cannot read the per-user secret") && strstr(msg, "Permission denied"),
                      "nobody cannot read root's per-user secret: %s (status %d)", msg, status);
    }
    if (srv) spmd_store_server_stop(srv);
}

int main(void) {
    if (geteuid() != 0) {
        fprintf(stderr, "test_secret_file: needs root (to act as uid %d); skipped\n", NOBODY);
        return 77;
    }
    unsetenv("SPMD_AUTH_TOKEN");
    unsetenv("SPMD_AUTH_FILE");
    unsetenv("SPMD_AUTH");
    snprintf(base, sizeof base, "/tmp/spmd-secret-test.XXXXXX");
    REQUIRE(mkdtemp(base) && chmod(base, 0755) == 0);
    test_file_checks();
    test_planted_file();
    test_user_secret_race();
    test_other_uid_refused();
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", base);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", base);
    TEST_MAIN_END();
}
