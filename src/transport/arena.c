/* arena.c — memory shared by the ranks of one host (see arena.h).
 *
 * Each rank's arena is a memfd: a control page, then the data.  To connect,
 * ranks all_gather (through the caller's collectives, arena.h) (pid, listener nonce, size, layout, kernel) and, when all
 * run under one kernel and agree, hand each other their memfds over abstract
 * Unix sockets (fdpass.h: no ptrace permission needed, only processes of the
 * group are served) and map them.  An all_reduce of the outcome then tells
 * every rank whether all succeeded, and doubles as the barrier after which
 * each rank closes its fd: the mappings keep the memory alive, nothing is
 * left in the file system, and a rank that exits or frees its arena cannot
 * pull memory from under a peer still writing to it.
 *
 * The control page holds the counters, one cache line each; only the owner
 * writes its own.  Waiters spin briefly, then sleep on a (shared) futex in
 * slices so they notice a broken group or the timeout.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#include "common/fnv.h"
#include "arena.h"
#include "fdpass.h"
#include "mesh.h"

#define CTRL_BYTES 4096
#define SHM_MAGIC 0x73706d6473686d31ull /* "spmdshm1" */
#define SPIN_LIMIT 4000                 /* polls before sleeping (a few microseconds) */
#define SLICE_MS 20                     /* sleep slice: how soon a failure is noticed */

typedef struct {
    uint64_t magic;
    uint32_t rank, pad;
    /* counter k at counter[k][0]: one cache line each */
    _Alignas(64) _Atomic uint32_t counter[SPMD__SHM_COUNTERS][16];
} ctrl_page;

_Static_assert(sizeof(ctrl_page) <= CTRL_BYTES, "control page too small");

struct spmd__arena {
    spmd__mesh *g;
    size_t bytes, map_len;
    int fd;
    unsigned char *base;      /* own mapping: control page + data */
    unsigned char **peer;     /* [world] every rank's mapping (peer[rank] == base) once connected */
    int64_t *gather;          /* [world * NF] connect's all_gather (allocated up front) */
    int *conn;                /* [world] connect's sockets to the peers' listeners, -1 */
    int *pids;                /* [world] the peers' pids (connect) */
};

enum { F_OK_, F_PID, F_NONCE, F_BYTES, F_LAYOUT, F_KERNEL, NF };

static ctrl_page *ctrl_of(unsigned char *base) { return (ctrl_page *)(void *)base; }

spmd__arena *spmd__arena_alloc(spmd__mesh *g, size_t bytes) {
    if (!g) return NULL;
    spmd__arena *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->g = g;
    s->bytes = bytes;
    s->map_len = CTRL_BYTES + ((bytes + 4095) & ~(size_t)4095);
    s->peer = calloc((size_t)g->world, sizeof *s->peer);
    s->gather = malloc(sizeof(int64_t) * NF * (size_t)g->world);
    s->conn = malloc(sizeof(int) * (size_t)g->world);
    s->pids = malloc(sizeof(int) * (size_t)g->world);
    s->fd = -1;
    if (!s->peer || !s->gather || !s->conn || !s->pids) goto fail;
    for (int r = 0; r < g->world; r++) s->conn[r] = -1;
    s->fd = memfd_create("spmd-shared", MFD_CLOEXEC);
    if (s->fd < 0 || ftruncate(s->fd, (off_t)s->map_len) != 0) goto fail;
    void *p = mmap(NULL, s->map_len, PROT_READ | PROT_WRITE, MAP_SHARED, s->fd, 0);
    if (p == MAP_FAILED) goto fail;
    s->base = p;
    ctrl_page *c = ctrl_of(s->base);   /* a new memfd reads as zeros */
    c->magic = SHM_MAGIC;
    c->rank = (uint32_t)g->rank;
    return s;
fail:
    if (s->fd >= 0) close(s->fd);
    free(s->peer);
    free(s->gather);
    free(s->conn);
    free(s->pids);
    free(s);
    return NULL;
}

void *spmd__arena_data(spmd__arena *s) { return s ? s->base + CTRL_BYTES : NULL; }

void *spmd__arena_peer(spmd__arena *s, int r) {
    if (!s || r < 0 || r >= s->g->world) return NULL;
    if (r == s->g->rank) return spmd__arena_data(s);
    return s->peer[r] ? s->peer[r] + CTRL_BYTES : NULL;
}

static void unmap_peers(spmd__arena *s) {
    for (int r = 0; r < s->g->world; r++) {
        if (s->peer[r] && s->peer[r] != s->base) munmap(s->peer[r], s->map_len);
        s->peer[r] = NULL;
    }
}

void spmd__arena_free(spmd__arena *s) {
    if (!s) return;
    unmap_peers(s);
    if (s->fd >= 0) close(s->fd);
    munmap(s->base, s->map_len);
    free(s->peer);
    free(s->gather);
    free(s->conn);
    free(s->pids);
    free(s);
}

/* This kernel, as a number (0 when unknown): ranks share only under one. */
static uint64_t kernel_id(void) {
    char boot[SPMD__BOOT_ID_LEN];
    uint64_t pidns = 0, h;
    if (!spmd__kernel_identity(boot, &pidns)) return 0;
    h = spmd__fnv1a64(SPMD__FNV64_OFFSET, boot, strnlen(boot, SPMD__BOOT_ID_LEN));
    return h ? h : 1;
}

/* Map rank r's arena from a descriptor it sent; 1 on success. */
static int map_peer(spmd__arena *s, int r, int fd) {
    struct stat st;
    void *p = MAP_FAILED;
    if (fstat(fd, &st) == 0 && (size_t)st.st_size == s->map_len)
        p = mmap(NULL, s->map_len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) return 0;
    const ctrl_page *c = ctrl_of(p);
    if (c->magic != SHM_MAGIC || c->rank != (uint32_t)r) { /* not the arena we were told of */
        munmap(p, s->map_len);
        return 0;
    }
    s->peer[r] = p;
    return 1;
}

/* Every rank hands its memfd to every other (fdpass.h): connect to all,
 * agree that all connections stand, then serve and receive.  1 when this
 * rank mapped every peer's arena. */
static int exchange(spmd__arena *s, const spmd__arena_colls *cl, int lfd, int all_ok, char *err, size_t errlen,
                    spmd_status *st) {
    spmd__mesh *g = s->g;
    const int64_t *all = s->gather;
    int32_t ok = all_ok, connected = 0;
    for (int r = 0; r < g->world && ok; r++)
        if (r != g->rank && (s->conn[r] = spmd__fdpass_connect((int)all[r * NF + F_PID], (uint64_t)all[r * NF + F_NONCE])) < 0)
            ok = 0;
    /* every connection is queued at its listener before anyone serves */
    *st = cl->all_min(cl->ctx, ok, &connected, err, errlen);
    if (*st) return 0;
    if (!connected) return 0;
    int64_t deadline = spmd__mesh_deadline(g);
    int npids = 0;
    for (int r = 0; r < g->world; r++)
        if (r != g->rank) s->pids[npids++] = (int)all[r * NF + F_PID];
    if (!spmd__fdpass_serve(lfd, s->fd, (uint32_t)g->rank, s->pids, npids, deadline)) return 0;
    for (int r = 0; r < g->world; r++) {
        if (r == g->rank) continue;
        uint32_t tag = 0;
        int fd = spmd__fdpass_receive(s->conn[r], &tag, deadline);
        int mapped = fd >= 0 && tag == (uint32_t)r && map_peer(s, r, fd);
        if (fd >= 0) close(fd);
        if (!mapped) return 0;
    }
    return 1;
}

spmd_status spmd__arena_connect(spmd__arena *s, const spmd__arena_colls *cl, uint64_t layout, int *shared, char *err,
                              size_t errlen) {
    if (!s || !shared) return SPMD_ERR_INVALID;
    spmd__mesh *g = s->g;
    *shared = 0;
    if (g->world == 1) return SPMD_OK;
    if (s->fd < 0) return SPMD_ERR_INVALID; /* connected already */
    uint64_t nonce = 0;
    if (getrandom(&nonce, sizeof nonce, 0) != (ssize_t)sizeof nonce) nonce = spmd__now_ns() ^ (uint64_t)getpid() << 32;
    uint64_t kid = kernel_id();
    int lfd = layout && kid && spmd__transport_wants_shm() ? spmd__fdpass_listen(nonce, g->world) : -1;
    int64_t mine[NF] = {lfd >= 0, getpid(), (int64_t)nonce, (int64_t)s->map_len, (int64_t)layout, (int64_t)kid};
    int64_t *all = s->gather;
    spmd_status st = cl->all_gather(cl->ctx, mine, all, NF, err, errlen);
    if (st) {
        if (lfd >= 0) close(lfd);
        return st;
    }
    int all_ok = 1;
    for (int r = 0; r < g->world; r++) {
        const int64_t *a = all + (size_t)r * NF;
        if (!a[F_OK_] || a[F_BYTES] != all[F_BYTES] || a[F_LAYOUT] != all[F_LAYOUT] || a[F_KERNEL] != all[F_KERNEL])
            all_ok = 0;
    }
    s->peer[g->rank] = s->base;
    int32_t ok = exchange(s, cl, lfd, all_ok, err, errlen, &st);
    for (int r = 0; r < g->world; r++)
        if (s->conn[r] >= 0) { close(s->conn[r]); s->conn[r] = -1; }
    if (lfd >= 0) close(lfd);
    int32_t every = 0;
    if (!st) st = cl->all_min(cl->ctx, ok, &every, err, errlen);
    /* every rank has received what it could: the memfd can go */
    close(s->fd);
    s->fd = -1;
    if (st) {
        unmap_peers(s);
        return st;
    }
    if (!every) unmap_peers(s);
    *shared = every != 0;
    return SPMD_OK;
}

static _Atomic uint32_t *counter(unsigned char *base, int k) { return &ctrl_of(base)->counter[k][0]; }

static long futex(_Atomic uint32_t *addr, int op, uint32_t val, const struct timespec *ts) {
    /* shared futex (no FUTEX_PRIVATE_FLAG): waiters sit in other processes */
    return syscall(SYS_futex, (uint32_t *)(void *)addr, op, val, ts, NULL, 0);
}

static int reached(uint32_t have, uint32_t want) { return (int32_t)(have - want) >= 0; }

void spmd__arena_post(spmd__arena *s, int k, uint32_t v) {
    _Atomic uint32_t *c = counter(s->base, k);
    atomic_store_explicit(c, v, memory_order_release);
    futex(c, FUTEX_WAKE, INT_MAX, NULL);
}

int spmd__arena_all_reached(spmd__arena *s, int k, uint32_t v) {
    for (int r = 0; r < s->g->world; r++)
        if (!reached(atomic_load_explicit(counter(s->peer[r], k), memory_order_acquire), v)) return 0;
    return 1;
}

spmd_status spmd__arena_wait_all(spmd__arena *s, int k, uint32_t v, const char *what, char *err, size_t errlen) {
    spmd__mesh *g = s->g;
    int64_t deadline = spmd__mesh_deadline(g);
    for (int r = 0; r < g->world; r++) {
        _Atomic uint32_t *c = counter(s->peer[r], k);
        for (int spins = 0;; spins++) {
            uint32_t have = atomic_load_explicit(c, memory_order_acquire);
            if (reached(have, v)) break;
            if (spins < SPIN_LIMIT) {
#if defined(__x86_64__) || defined(__i386__)
                __builtin_ia32_pause();
#endif
                continue;
            }
            char msg[SPMD__ERRLEN];
            if (g->ext) spmd__p2p_poll(g, -1); /* a mesh over MPI learns of failures only when polled */
            spmd_status st = spmd__mesh_check(g, msg, sizeof msg);
            if (st) {
                snprintf(err, errlen, "rank %d: waiting for rank %d's %s: %s", g->rank, r, what, msg);
                return st;
            }
            int left = spmd__remaining_ms(deadline);
            if (left == 0) {
                snprintf(err, errlen, "rank %d: timed out after %d ms waiting for rank %d's %s", g->rank,
                         g->timeout_ms, r, what);
                spmd__mesh_fail(g, SPMD_ERR_TIMEOUT, 1, "%s", err);
                return SPMD_ERR_TIMEOUT;
            }
            int ms = left < 0 || left > SLICE_MS ? SLICE_MS : left;
            struct timespec ts = {0, (long)ms * 1000000L};
            futex(c, FUTEX_WAIT, have, &ts);
        }
    }
    return SPMD_OK;
}
