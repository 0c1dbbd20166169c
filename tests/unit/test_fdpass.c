/* test_fdpass.c — handing a descriptor to local processes (src/group/fdpass.c):
 * the expected process receives it with its tag and reads what the owner
 * wrote through it; a process the owner does not expect gets nothing; a
 * listener that does not exist (or is gone) refuses the connection. */
#define _GNU_SOURCE
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/wait.h>
#include <unistd.h>
#include "common/common.h"
#include "transport/fdpass.h"
#include "harness.h"

static uint64_t nonce;

/* Child: connect to the parent, receive; exit 0 when the outcome is `want`
 * (1: a descriptor tagged 7 whose file starts with "hello", 0: nothing). */
static int child(pid_t parent, int want) {
    int c = spmd__fdpass_connect((int)parent, nonce);
    if (c < 0) return want ? 1 : 0;
    uint32_t tag = 0;
    int fd = spmd__fdpass_receive(c, &tag, spmd__deadline(20000));
    close(c);
    if (fd < 0) return want ? 2 : 0;
    char buf[6] = {0};
    ssize_t n = pread(fd, buf, 5, 0);
    close(fd);
    if (!want) return 3;
    return tag == 7 && n == 5 && strcmp(buf, "hello") == 0 ? 0 : 4;
}

int main(void) {
    CHECK(getrandom(&nonce, sizeof nonce, 0) == (ssize_t)sizeof nonce);
    /* nobody listens yet */
    CHECK(spmd__fdpass_connect((int)getpid(), nonce) < 0);
    int lfd = spmd__fdpass_listen(nonce, 4);
    CHECK(lfd >= 0);
    int mfd = memfd_create("test-fdpass", MFD_CLOEXEC);
    CHECK(mfd >= 0 && write(mfd, "hello", 5) == 5);
    pid_t parent = getpid();
    pid_t stranger = fork();
    if (stranger == 0) _exit(child(parent, 0));
    pid_t expected = fork();
    if (expected == 0) _exit(child(parent, 1));
    int pids[1] = {(int)expected};
    /* serves the expected child only, whatever the order they connect in */
    CHECK(spmd__fdpass_serve(lfd, mfd, 7, pids, 1, spmd__deadline(20000)) == 1);
    close(lfd); /* the stranger's connection, if still queued, is refused now */
    int status = 0;
    CHECK(waitpid(expected, &status, 0) == expected && WIFEXITED(status));
    CHECK_MSG(WEXITSTATUS(status) == 0, "expected process: outcome %d", WEXITSTATUS(status));
    CHECK(waitpid(stranger, &status, 0) == stranger && WIFEXITED(status));
    CHECK_MSG(WEXITSTATUS(status) == 0, "stranger: outcome %d", WEXITSTATUS(status));
    /* the listener is gone */
    CHECK(spmd__fdpass_connect((int)getpid(), nonce) < 0);
    close(mfd);
    TEST_MAIN_END();
}
