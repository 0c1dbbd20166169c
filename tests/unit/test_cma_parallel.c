/* A large message read from another process's memory by the caller and a
 * helper thread at once (src/transport/cma_parallel.c), against a real
 * forked process:
 *   - every length (one byte past a chunk, odd lengths, several chunks)
 *     arrives bit for bit, many times over (the helper takes chunks or
 *     not, as the scheduler has it; both ways must give the same bytes)
 *   - a seal that no longer matches is refused, naming the rank
 *   - an address the peer does not map is an error naming the syscall
 *   - a peer that is gone is SPMD_ERR_REMOTE, not a crash or a hang
 *   - freeing the reader joins its helper (ASan/TSan runs check the rest).
 * Where this kernel forbids process_vm_readv the test says so and passes. */
#define _GNU_SOURCE
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>
#include "harness.h"
#include "transport/cma_parallel.h"
#include "transport/mesh.h"

#define BIG ((5u << 20) + 7)

static unsigned char *src;    /* same address and bytes in the child */
static uint64_t seal;

static unsigned char pattern(size_t i) { return (unsigned char)(i * 13 + (i >> 11)); }

int main(void) {
    src = malloc(BIG);
    CHECK(src != NULL);
    for (size_t i = 0; i < BIG; i++) src[i] = pattern(i);
    seal = 0x5ea1ed5ea1ull;
    int down[2];
    CHECK(pipe(down) == 0);
    pid_t child = fork();
    CHECK(child >= 0);
    if (child == 0) {
        close(down[1]);
        char b;
        ssize_t r = read(down[0], &b, 1); /* until the parent closes its end or dies */
        (void)r;
        _exit(0);
    }
    close(down[0]);
    uint64_t probe = 0;
    struct iovec l = {&probe, sizeof probe}, r = {(void *)&seal, sizeof seal};
    if (process_vm_readv(child, &l, 1, &r, 1, 0) != (ssize_t)sizeof probe) {
        printf("process_vm_readv is not allowed here: nothing to test\n");
        close(down[1]);
        waitpid(child, NULL, 0);
        TEST_MAIN_END();
    }
    spmd__cma_peer peers[2] = {{0}, {.ok = 1, .local = 1, .pid = child}};
    spmd__mesh m;
    memset(&m, 0, sizeof m);
    m.rank = 0;
    m.world = 2;
    m.cma = peers;
    spmd__cma_parallel *s = spmd__cma_parallel_new();
    CHECK(s != NULL);
    unsigned char *dst = malloc(BIG);
    CHECK(dst != NULL);
    char err[512];
    const uint64_t base = (uint64_t)(uintptr_t)src, seal_at = (uint64_t)(uintptr_t)&seal;

    static const size_t lens[] = {(256u << 10) + 1, (512u << 10) - 1, (1u << 20) + 3, (2u << 20) + 4096, BIG};
    for (int round = 0; round < 40; round++) {
        for (size_t k = 0; k < sizeof lens / sizeof *lens; k++) {
            size_t n = lens[k], at = (size_t)round * 97 % 4096; /* unaligned starts too */
            if (at + n > BIG) at = BIG - n;
            memset(dst, 0, n);
            spmd_status st = spmd__cma_read_parallel(s, &m, 1, dst, base + at, n, seal_at, 0x5ea1ed5ea1ull, err,
                                                     sizeof err);
            CHECK_MSG(st == SPMD_OK, "%zu bytes at %zu: %s", n, at, err);
            size_t bad = n;
            for (size_t i = 0; i < n && bad == n; i++)
                if (dst[i] != pattern(at + i)) bad = i;
            CHECK_MSG(bad == n, "%zu bytes at %zu: byte %zu differs", n, at, bad);
        }
    }
    printf("%lu reads offered to the helper, %lu chunks copied by it\n", spmd__cma_parallel_jobs(s),
           spmd__cma_parallel_helped(s));
    if (sysconf(_SC_NPROCESSORS_ONLN) > 1) CHECK(spmd__cma_parallel_jobs(s) > 0); /* one core: one thread */

    /* the sender took its buffer back: the seal changed */
    spmd_status st = spmd__cma_read_parallel(s, &m, 1, dst, base, BIG, seal_at, 0x5ea1ed5ea2ull, err, sizeof err);
    CHECK(st == SPMD_ERR_REMOTE);
    CHECK_MSG(strstr(err, "rank 1") && strstr(err, "took its buffer back"), "%s", err);

    /* an address the peer does not map (the page after the top of a
     * 47-bit address space): every chunk fails, once reported */
    st = spmd__cma_read_parallel(s, &m, 1, dst, (uint64_t)1 << 47, BIG, seal_at, 0x5ea1ed5ea1ull, err, sizeof err);
    CHECK(st != SPMD_OK);
    CHECK_MSG(strstr(err, "process_vm_readv") && strstr(err, "rank 1"), "%s", err);

    /* the peer is gone */
    close(down[1]);
    CHECK(waitpid(child, NULL, 0) == child);
    st = spmd__cma_read_parallel(s, &m, 1, dst, base, BIG, seal_at, 0x5ea1ed5ea1ull, err, sizeof err);
    CHECK_MSG(st == SPMD_ERR_REMOTE, "%d: %s", (int)st, err);

    spmd__cma_parallel_free(s);
    free(dst);
    free(src);
    TEST_MAIN_END();
}
