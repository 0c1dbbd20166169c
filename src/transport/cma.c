/* cma.c — same-kernel single-copy transfers (Linux cross-memory attach).
 *
 * Two ranks under one kernel can move a large collective message with one
 * copy: the receiver reads it straight out of the sender's memory with
 * process_vm_readv(2), where TCP over loopback copies every byte twice (into
 * the kernel and out again) on both ranks' CPU time.
 *
 * Whether a pair may do it is settled once, when the group connects, over the
 * collective channel (still idle then): every rank sends every peer a probe
 *     u32 magic | u32 willing | u32 pid | u32 zero | u64 pid-namespace id |
 *     u64 token address | u64 token | 40 bytes boot id | u64 network namespace id
 * then tries to read the token of each peer that runs under the same kernel
 * (same boot id, same pid namespace), and answers with a verdict
 *     u32 magic | u32 could-read.
 * (`willing`: bit 0 cross-memory attach, bit 1 shared memory, mode.c).  A
 * pair under one kernel where both want shared memory is marked `local`
 * (shm_link.c builds its rings).
 * A pair uses cross-memory attach only when both ranks could read the other
 * (containers often forbid the syscall, Yama's ptrace_scope may too);
 * otherwise its messages stay on TCP.  SPMD_CMA=0 turns it off;
 * SPMD_CMA_MIN_BYTES (default 128 KiB: below it TCP was as fast or faster) is the
 * smallest message that uses it.
 *
 * Every later read also reads the token again and checks it, so a pid that
 * no longer belongs to the peer can never yield foreign bytes, and a rank
 * whose group fails changes its token (spmd__group_mark_failed) before its
 * caller can free a buffer a peer may still be reading.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>
#include "mesh.h"

#define PROBE_MAGIC 0x434d4131u   /* "CMA1" */
#define VERDICT_MAGIC 0x434d4156u /* "CMAV" */
#define BOOT_ID_LEN SPMD__BOOT_ID_LEN
#define PROBE_LEN (48 + BOOT_ID_LEN)

typedef struct {
    int willing, pid;
    uint64_t pidns, netns, token_addr, token;
    char boot_id[BOOT_ID_LEN];
} probe;

/* Which kernel and pid namespace we run under; 0 when unknown. */
int spmd__kernel_identity(char boot_id[SPMD__BOOT_ID_LEN], uint64_t *pidns) {
    memset(boot_id, 0, BOOT_ID_LEN);
    int fd = open("/proc/sys/kernel/random/boot_id", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    ssize_t n = read(fd, boot_id, BOOT_ID_LEN - 1);
    close(fd);
    struct stat s;
    if (n < 16 || stat("/proc/self/ns/pid", &s) != 0) return 0;
    *pidns = ((uint64_t)s.st_dev << 32) ^ (uint64_t)s.st_ino;
    return 1;
}

static void encode(const probe *p, unsigned char *b) {
    memset(b, 0, PROBE_LEN);
    spmd__put_u32(b, PROBE_MAGIC);
    spmd__put_u32(b + 4, (uint32_t)p->willing);
    spmd__put_u32(b + 8, (uint32_t)p->pid);
    spmd__put_u64(b + 16, p->pidns);
    spmd__put_u64(b + 40 + BOOT_ID_LEN, p->netns);
    spmd__put_u64(b + 24, p->token_addr);
    spmd__put_u64(b + 32, p->token);
    memcpy(b + 40, p->boot_id, BOOT_ID_LEN);
}

static int decode(const unsigned char *b, probe *p) {
    if (spmd__get_u32(b) != PROBE_MAGIC || spmd__get_u32(b + 12) != 0) return 0;
    p->willing = (int)spmd__get_u32(b + 4);
    if (p->willing & ~3) return 0;
    p->pid = (int)spmd__get_u32(b + 8);
    p->pidns = spmd__get_u64(b + 16);
    p->netns = spmd__get_u64(b + 40 + BOOT_ID_LEN);
    p->token_addr = spmd__get_u64(b + 24);
    p->token = spmd__get_u64(b + 32);
    memcpy(p->boot_id, b + 40, BOOT_ID_LEN);
    p->boot_id[BOOT_ID_LEN - 1] = 0;
    return 1;
}

/* Read len bytes at addr, then the 8 bytes at seal_addr into *seal_now, in
 * one call: the seal is read after the payload.  seal_now NULL: the bytes
 * alone (a piece of a message whose seal its reader checks afterwards). */
static spmd_status read_then_seal(spmd__mesh *g, int peer, void *dst, uint64_t addr, size_t len, uint64_t seal_addr,
                                  uint64_t *seal_now, char *err, size_t errlen) {
    const spmd__cma_peer *p = &g->cma[peer];
    struct iovec local[2] = {{dst, len}, {seal_now, sizeof *seal_now}};
    struct iovec remote[2] = {{(void *)(uintptr_t)addr, len}, {(void *)(uintptr_t)seal_addr, sizeof *seal_now}};
    const int parts = seal_now ? 2 : 1;
    size_t want = (seal_now ? sizeof *seal_now : 0) + len, got = 0;
    while (got < want) {
        ssize_t n = process_vm_readv(p->pid, local, (unsigned long)parts, remote, (unsigned long)parts, 0);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0)
            return spmd__fail(err, errlen, n < 0 && errno == ESRCH ? SPMD_ERR_REMOTE : SPMD_ERR_SYSTEM,
                              "reading %zu bytes from rank %d (pid %d) with process_vm_readv: %s", len, peer,
                              p->pid, n < 0 ? strerror(errno) : "nothing read");
        got += (size_t)n;
        /* a partial read stops at a page boundary; go on from there */
        for (int i = 0; i < parts; i++) {
            size_t take = (size_t)n < local[i].iov_len ? (size_t)n : local[i].iov_len;
            local[i].iov_base = (char *)local[i].iov_base + take;
            local[i].iov_len -= take;
            remote[i].iov_base = (char *)remote[i].iov_base + take;
            remote[i].iov_len -= take;
            n -= (ssize_t)take;
        }
    }
    return SPMD_OK;
}

spmd_status spmd__cma_read(spmd__mesh *g, int peer, void *dst, uint64_t addr, size_t len, char *err,
                           size_t errlen) {
    /* The token is read after the payload: a sender whose group failed
     * changes its token before its caller may free the buffer, so a payload
     * read from freed memory is always followed by a token that no longer
     * matches. */
    const spmd__cma_peer *p = &g->cma[peer];
    uint64_t token = 0;
    spmd_status st = read_then_seal(g, peer, dst, addr, len, p->token_addr, &token, err, errlen);
    if (!st && token != p->token)
        return spmd__fail(err, errlen, SPMD_ERR_REMOTE,
                          "rank %d (pid %d) failed its group or is gone: its memory no longer holds its token",
                          peer, p->pid);
    return st;
}

spmd_status spmd__cma_copy(spmd__mesh *g, int peer, void *dst, uint64_t addr, size_t len, char *err, size_t errlen) {
    return read_then_seal(g, peer, dst, addr, len, 0, NULL, err, errlen);
}

spmd_status spmd__cma_read_sealed(spmd__mesh *g, int peer, void *dst, uint64_t addr, size_t len, uint64_t seal_addr,
                                  uint64_t seal, char *err, size_t errlen) {
    /* the same rule with the sender's own seal, which it changes before it
     * takes the buffer back (its send withdrawn or failed) */
    uint64_t now = 0;
    spmd_status st = read_then_seal(g, peer, dst, addr, len, seal_addr, &now, err, errlen);
    if (!st && now != seal)
        return spmd__fail(err, errlen, SPMD_ERR_REMOTE,
                          "rank %d (pid %d) took its buffer back before it was read (its send was withdrawn or its "
                          "group failed)", peer, g->cma[peer].pid);
    return st;
}

spmd_status spmd__cma_negotiate(spmd__mesh *g, int64_t deadline, char *err, size_t errlen) {
    g->cma = calloc((size_t)g->world, sizeof *g->cma);
    if (!g->cma) return spmd__fail(err, errlen, SPMD_ERR_NOMEM, "out of memory");
    long min = 128 * 1024;
    if (spmd__env_int("SPMD_CMA_MIN_BYTES", 1, 1L << 40, &min) != SPMD_OK) min = 128 * 1024;
    g->cma_min = (size_t)min;
    if (g->world == 1) return SPMD_OK;
    probe me = {0};
    if (getrandom(&g->cma_token, sizeof g->cma_token, 0) != (ssize_t)sizeof g->cma_token)
        g->cma_token = spmd__now_ns() * 0x9e3779b97f4a7c15ull;
    struct stat ns;
    if (stat("/proc/self/ns/net", &ns) == 0) me.netns = ((uint64_t)ns.st_dev << 32) ^ (uint64_t)ns.st_ino;
    if (spmd__kernel_identity(me.boot_id, &me.pidns))
        me.willing = (spmd__transport_wants_cma() ? 1 : 0) | (spmd__transport_wants_shm() ? 2 : 0);
    me.pid = (int)getpid();
    me.token_addr = (uint64_t)(uintptr_t)&g->cma_token;
    me.token = g->cma_token;
    unsigned char out[PROBE_LEN], in[PROBE_LEN];
    encode(&me, out);
    char why[SPMD__ERRLEN];
    spmd_status st;
    /* 80 bytes fit any socket buffer: write to everyone, then read everyone */
    for (int p = 0; p < g->world; p++) {
        if (p == g->rank) continue;
        if ((st = spmd__write_full(g->fd[SPMD__CH_COLL][p], out, sizeof out, deadline, NULL, why, sizeof why)))
            return spmd__fail(err, errlen, st, "rank %d: same-host probe to rank %d: %s", g->rank, p, why);
    }
    for (int p = 0; p < g->world; p++) {
        if (p == g->rank) continue;
        probe them;
        if ((st = spmd__read_full(g->fd[SPMD__CH_COLL][p], in, sizeof in, deadline, NULL, why, sizeof why)))
            return spmd__fail(err, errlen, st, "rank %d: same-host probe from rank %d: %s", g->rank, p, why);
        if (!decode(in, &them))
            return spmd__fail(err, errlen, SPMD_ERR_PROTOCOL, "rank %d: garbled same-host probe from rank %d",
                              g->rank, p);
        spmd__cma_peer *cp = &g->cma[p];
        cp->pid = them.pid;
        cp->token_addr = them.token_addr;
        cp->token = them.token;
        int kernel = me.willing && them.willing && them.pidns == me.pidns &&
                     strncmp(them.boot_id, me.boot_id, BOOT_ID_LEN) == 0;
        /* rings need the abstract sockets of one network namespace (fdpass.h) */
        cp->local = kernel && me.netns && them.netns == me.netns && (me.willing & them.willing & 2);
        int same = kernel && (me.willing & them.willing & 1) &&
                   strncmp(them.boot_id, me.boot_id, BOOT_ID_LEN) == 0;
        if (same) {
            char scratch[8];
            /* ok holds "we can read the peer" until the peer's verdict arrives */
            cp->ok = spmd__cma_read(g, p, scratch, them.token_addr, sizeof scratch, why, sizeof why) == SPMD_OK;
            if (!cp->ok) spmd__log(SPMD__LOG_INFO, "rank %d: no cross-memory attach with rank %d: %s", g->rank, p, why);
        }
    }
    unsigned char v[8];
    for (int p = 0; p < g->world; p++) {
        if (p == g->rank) continue;
        spmd__put_u32(v, VERDICT_MAGIC);
        spmd__put_u32(v + 4, (uint32_t)g->cma[p].ok);
        if ((st = spmd__write_full(g->fd[SPMD__CH_COLL][p], v, sizeof v, deadline, NULL, why, sizeof why)))
            return spmd__fail(err, errlen, st, "rank %d: same-host verdict to rank %d: %s", g->rank, p, why);
    }
    for (int p = 0; p < g->world; p++) {
        if (p == g->rank) continue;
        if ((st = spmd__read_full(g->fd[SPMD__CH_COLL][p], v, sizeof v, deadline, NULL, why, sizeof why)))
            return spmd__fail(err, errlen, st, "rank %d: same-host verdict from rank %d: %s", g->rank, p, why);
        if (spmd__get_u32(v) != VERDICT_MAGIC || spmd__get_u32(v + 4) > 1)
            return spmd__fail(err, errlen, SPMD_ERR_PROTOCOL, "rank %d: garbled same-host verdict from rank %d",
                              g->rank, p);
        g->cma[p].ok = g->cma[p].ok && spmd__get_u32(v + 4) == 1;
    }
    return SPMD_OK;
}
