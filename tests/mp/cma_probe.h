/* tests/mp/cma_probe.h — may a process read another's memory on this kernel
 * (process_vm_readv on a child)?  Containers and Yama can forbid it; tests of
 * cross-memory attach and shared memory then check the fallback instead. */
#ifndef SPMD_TEST_CMA_PROBE_H
#define SPMD_TEST_CMA_PROBE_H
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <stdint.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

static int probe_kernel(void) {
    static volatile uint64_t cookie = 0;
    int up[2], down[2];
    if (pipe(up) != 0 || pipe(down) != 0) return 0;
    pid_t pid = fork();
    if (pid == 0) {
        cookie = 0x5a5a1234abcdull;
        char b;
        if (write(up[1], "x", 1) != 1) _exit(1);
        close(down[1]);
        ssize_t r = read(down[0], &b, 1); /* until the parent closes its end */
        (void)r;
        _exit(0);
    }
    close(up[1]);
    close(down[0]);
    char b;
    int ok = 0;
    if (pid > 0 && read(up[0], &b, 1) == 1) {
        uint64_t got = 0;
        struct iovec l = {&got, sizeof got}, r = {(void *)&cookie, sizeof cookie};
        ok = process_vm_readv(pid, &l, 1, &r, 1, 0) == (ssize_t)sizeof got && got == 0x5a5a1234abcdull;
    }
    close(down[1]);
    close(up[0]);
    if (pid > 0) waitpid(pid, NULL, 0);
    return ok;
}

#endif
