/* shm_link.c — shared-memory paths between ranks under one kernel: the
 * set-up.
 *
 * Every rank owns one memfd holding its *inbound* rings: for each peer p and
 * channel c, a single-producer/single-consumer ring (shm_ring.c) that p
 * writes and this rank reads, then two collective slots (shm_coll.c).  Peers
 * under the same kernel (cma.c's probe: same boot id and pid namespace) hand
 * each other these memfds over abstract Unix sockets (fdpass.h: only the
 * peers' pids are served), map them, and close the fd: the memory lives
 * exactly as long as the mappings, so a killed job leaves nothing in
 * /dev/shm or anywhere else.  The same exchange settles whether a pair's
 * fences may be asymmetric (both registered for membarrier) and which ranks
 * share a host (for the hierarchical collectives).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>
#include "fdpass.h"
#include "mesh.h"
#include "path.h"
#include "shm_internal.h"

#define XCHG_MAGIC 0x4c4e4b31u          /* "LNK1" */
#define DEFAULT_RING_BYTES (128u * 1024u)
#define DEFAULT_SLOT_BYTES (256u * 1024u)

ring *spmd__shm_ring_at(const spmd__shm_link *l, unsigned char *seg, int from, int chan) {
    return (ring *)(void *)(seg + HDR_BYTES + ((size_t)from * SPMD__NCHAN + (size_t)chan) * l->ring_stride);
}

seg_header *spmd__shm_header(unsigned char *seg) { return (seg_header *)(void *)seg; }

/* ---- set-up ---------------------------------------------------------------- */

static size_t slot_bytes_wanted(void) {
    long v = DEFAULT_SLOT_BYTES;
    if (spmd__env_int("SPMD_SHM_SLOT_BYTES", 4096, 1L << 30, &v) != SPMD_OK) v = DEFAULT_SLOT_BYTES;
    return ((size_t)v + 4095) & ~(size_t)4095;
}

static uint32_t ring_bytes_wanted(void) {
    long v = DEFAULT_RING_BYTES;
    if (spmd__env_int("SPMD_SHM_RING_BYTES", 4096, 64L << 20, &v) != SPMD_OK) v = DEFAULT_RING_BYTES;
    uint32_t p = 4096;
    while (p < (uint64_t)v) p <<= 1; /* a power of two: offsets are masks */
    return p;
}

void spmd__shm_link_free(spmd__shm_link *l) {
    if (!l) return;
    for (int r = 0; l->peer && r < l->world; r++)
        if (l->peer[r]) munmap(l->peer[r], l->seg_len);
    if (l->own) munmap(l->own, l->seg_len);
    for (int c = 0; c < SPMD__NCHAN; c++) free(l->paths[c]);
    free(l->peer);
    free(l);
}

int spmd__shm_link_peers(const spmd__shm_link *l) { return l ? l->npeers : 0; }

size_t spmd__shm_ring_bytes(const spmd__shm_link *l) { return l ? l->ring_bytes : 0; }

int spmd__shm_shares_cpu(spmd__shm_link *l, int peer) {
    if (!l) return 0;
    int me = sched_getcpu(); /* a read of the rseq area with glibc >= 2.35 */
    if (me < 0) return 0;
    seg_header *own = spmd__shm_header(l->own);
    if (atomic_load_explicit(&own->cpu, memory_order_relaxed) != me)
        atomic_store_explicit(&own->cpu, me, memory_order_relaxed);
    for (int r = 0; r < l->world; r++) {
        if (r == l->rank || !l->peer[r] || (peer >= 0 && r != peer)) continue;
        if (atomic_load_explicit(&spmd__shm_header(l->peer[r])->cpu, memory_order_relaxed) == me) return 1;
    }
    return 0;
}

/* Write then read `len` bytes with each listed peer over its idle
 * collective connection (everything fits any socket buffer). */
static spmd_status swap_all(spmd__mesh *m, const char *want, unsigned char (*out)[16], unsigned char (*in)[16],
                            int64_t deadline, char *err, size_t errlen) {
    char why[SPMD__ERRLEN];
    spmd_status st;
    for (int p = 0; p < m->world; p++)
        if (want[p] && (st = spmd__write_full(m->fd[SPMD__CH_COLL][p], out[p], 16, deadline, NULL, why, sizeof why)))
            return spmd__fail(err, errlen, st, "rank %d: shared-memory set-up with rank %d: %s", m->rank, p, why);
    for (int p = 0; p < m->world; p++)
        if (want[p] && (st = spmd__read_full(m->fd[SPMD__CH_COLL][p], in[p], 16, deadline, NULL, why, sizeof why)))
            return spmd__fail(err, errlen, st, "rank %d: shared-memory set-up with rank %d: %s", m->rank, p, why);
    for (int p = 0; p < m->world; p++)
        if (want[p] && spmd__get_u32(in[p]) != XCHG_MAGIC)
            return spmd__fail(err, errlen, SPMD_ERR_PROTOCOL, "rank %d: garbled shared-memory set-up from rank %d",
                              m->rank, p);
    return SPMD_OK;
}

/* Map the pages of a ring or slot now rather than on first use: a ring is
 * walked from end to end, so a run of small messages otherwise meets a page
 * fault every few messages on both sides until the first lap is done (a
 * third of a 256-byte ping-pong's time over its first 200 round trips).
 * The contents are left alone, so a peer may already be writing there. */
static void prefault(void *addr, size_t len) {
#ifdef MADV_POPULATE_WRITE
    (void)madvise(addr, len, MADV_POPULATE_WRITE); /* best effort: before Linux 5.14 pages fault in as used */
#else
    (void)addr;
    (void)len;
#endif
}

static int map_peer_seg(spmd__shm_link *l, int r, int fd) {
    struct stat st;
    void *p = MAP_FAILED;
    if (fstat(fd, &st) == 0 && (size_t)st.st_size == l->seg_len)
        p = mmap(NULL, l->seg_len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) return 0;
    const seg_header *h = p;
    if (h->magic != SEG_MAGIC || h->rank != (uint32_t)r || h->world != (uint32_t)l->world ||
        h->ring_bytes != l->ring_bytes || h->slot_bytes != l->slot_bytes) {
        munmap(p, l->seg_len);
        return 0;
    }
    l->peer[r] = p;
    return 1;
}

static spmd_status link_pairs(spmd__mesh *m, int mode, int64_t deadline, char *err, size_t errlen) {
    if (mode == 0 || m->world == 1 || !m->cma) return SPMD_OK;
    int world = m->world;
    char *local = calloc((size_t)world, 1);
    unsigned char(*out)[16] = calloc((size_t)world, 16);
    unsigned char(*in)[16] = calloc((size_t)world, 16);
    int *conn = malloc(sizeof(int) * (size_t)world);
    int *pids = malloc(sizeof(int) * (size_t)world);
    spmd__shm_link *l = calloc(1, sizeof *l);
    int lfd = -1, segfd = -1;
    char *asym = NULL; /* [world] the pair's fences may be asymmetric */
    spmd_status st = SPMD_OK;
    if (!local || !out || !in || !conn || !pids || !l) {
        st = spmd__fail(err, errlen, SPMD_ERR_NOMEM, "out of memory");
        goto done;
    }
    for (int p = 0; p < world; p++) conn[p] = -1;
    int nlocal = 0;
    for (int p = 0; p < world; p++)
        if (p != m->rank && m->cma[p].local) local[p] = 1, nlocal++;
    if (!nlocal) goto done;

    l->world = world;
    l->rank = m->rank;
    l->ring_bytes = ring_bytes_wanted();
    l->ring_stride = ((sizeof(ring) + l->ring_bytes + 4095) / 4096) * 4096;
    l->slot_bytes = slot_bytes_wanted();
    l->slots_off = HDR_BYTES + (size_t)world * SPMD__NCHAN * l->ring_stride;
    l->seg_len = l->slots_off + 2 * l->slot_bytes;
    l->peer = calloc((size_t)world, sizeof *l->peer);
    for (int c = 0; c < SPMD__NCHAN; c++) l->paths[c] = calloc((size_t)world, sizeof(shm_path *));
    if (!l->peer || !l->paths[0] || !l->paths[1]) {
        st = spmd__fail(err, errlen, SPMD_ERR_NOMEM, "out of memory");
        goto done;
    }
    /* our segment: header + inbound rings (pages touched only for local peers) */
    int ready = 0;
    uint64_t nonce = 0;
    segfd = memfd_create("spmd-link", MFD_CLOEXEC);
    if (segfd >= 0 && ftruncate(segfd, (off_t)l->seg_len) == 0) {
        void *p = mmap(NULL, l->seg_len, PROT_READ | PROT_WRITE, MAP_SHARED, segfd, 0);
        if (p != MAP_FAILED) {
            l->own = p;
            seg_header *h = p;
            h->magic = SEG_MAGIC;
            h->rank = (uint32_t)m->rank;
            h->world = (uint32_t)world;
            h->ring_bytes = l->ring_bytes;
            h->nchan = SPMD__NCHAN;
            h->slot_bytes = l->slot_bytes;
            atomic_store_explicit(&h->cpu, -1, memory_order_relaxed);
            if (getrandom(&nonce, sizeof nonce, 0) != (ssize_t)sizeof nonce) nonce = spmd__now_ns() ^ (uint64_t)getpid();
            lfd = spmd__fdpass_listen(nonce, world);
            ready = lfd >= 0 ? 1 | (spmd__shm_membarrier_register() ? 2 : 0) : 0;
        }
    }
    /* 1: listening?  2: connected to your listener?  3: mapped your segment? */
    for (int p = 0; p < world; p++) {
        spmd__put_u32(out[p], XCHG_MAGIC);
        spmd__put_u32(out[p] + 4, (uint32_t)ready);
        spmd__put_u64(out[p] + 8, nonce);
    }
    if ((st = swap_all(m, local, out, in, deadline, err, errlen))) goto done;
    int npids = 0;
    /* asymmetric fences between two ranks need both registered; the
     * collective slots need every rank under this kernel registered (the same
     * answer on every rank that shares memory with all the others) */
    asym = calloc((size_t)world, 1);
    if (!asym) {
        st = spmd__fail(err, errlen, SPMD_ERR_NOMEM, "out of memory");
        goto done;
    }
    l->asym = (ready & 2) != 0;
    for (int p = 0; p < world; p++) {
        if (!local[p]) continue;
        uint32_t theirs = spmd__get_u32(in[p] + 4);
        asym[p] = (ready & 2) && (theirs & 2);
        if (!asym[p]) l->asym = 0;
        int ok = ready && (theirs & 1);
        if (ok) conn[p] = spmd__fdpass_connect(m->cma[p].pid, spmd__get_u64(in[p] + 8));
        spmd__put_u32(out[p] + 4, (uint32_t)(conn[p] >= 0));
    }
    if ((st = swap_all(m, local, out, in, deadline, err, errlen))) goto done;
    for (int p = 0; p < world; p++)
        if (local[p] && spmd__get_u32(in[p] + 4) == 1) pids[npids++] = m->cma[p].pid;
    if (npids && !spmd__fdpass_serve(lfd, segfd, (uint32_t)m->rank, pids, npids, deadline)) {
        st = spmd__fail(err, errlen, SPMD_ERR_TIMEOUT, "rank %d: handing shared memory to its peers failed", m->rank);
        goto done;
    }
    for (int p = 0; p < world; p++) {
        int mapped = 0;
        if (local[p] && conn[p] >= 0) {
            uint32_t tag = 0;
            int fd = spmd__fdpass_receive(conn[p], &tag, deadline);
            mapped = fd >= 0 && tag == (uint32_t)p && map_peer_seg(l, p, fd);
            if (fd >= 0) close(fd);
        }
        spmd__put_u32(out[p] + 4, (uint32_t)mapped);
    }
    if ((st = swap_all(m, local, out, in, deadline, err, errlen))) goto done;
    for (int p = 0; p < world; p++) {
        if (!local[p]) continue;
        int both = l->peer[p] && spmd__get_u32(in[p] + 4) == 1;
        if (!both) {
            if (mode == 2) {
                st = spmd__fail(err, errlen, SPMD_ERR_SYSTEM,
                                "rank %d: SPMD_TRANSPORT=shm but no shared memory with rank %d (same host)", m->rank, p);
                goto done;
            }
            SPMD_LOGI("rank %d: rank %d runs under this kernel but shares no memory: TCP", m->rank, p);
            continue;
        }
        for (int c = 0; c < SPMD__NCHAN; c++) {
            shm_path *sp = calloc(1, sizeof *sp);
            if (!sp) {
                st = spmd__fail(err, errlen, SPMD_ERR_NOMEM, "out of memory");
                goto done;
            }
            sp->base.ops = &spmd__shm_ring_ops;
            sp->base.fd = m->fd[c][p];
            sp->base.peer = p;
            sp->size = l->ring_bytes;
            sp->asym = asym[p];
            sp->in_seq = sp->out_seq = 1; /* stamps start at 1: fresh memory reads 0 */
            atomic_init(&sp->in_next, (uint64_t)1 << 32);
            sp->in = spmd__shm_ring_at(l, l->own, p, c);
            sp->out = spmd__shm_ring_at(l, l->peer[p], m->rank, c);
            prefault(sp->in, l->ring_stride);
            prefault(sp->out, l->ring_stride);
            l->paths[c][p] = sp;
        }
        l->npeers++;
    }
    /* every pair has settled: switch the channels (nothing is in flight) */
    for (int p = 0; p < world; p++)
        for (int c = 0; c < SPMD__NCHAN; c++)
            if (l->paths[c][p]) {
                spmd__path_free(m->path[c][p]);
                m->path[c][p] = &l->paths[c][p]->base;
            }
done:
    for (int p = 0; p < world && conn; p++)
        if (conn[p] >= 0) close(conn[p]);
    if (lfd >= 0) close(lfd);
    if (segfd >= 0) close(segfd);
    if (l && (st || !l->npeers)) { /* nothing was handed to the mesh */
        for (int c = 0; c < SPMD__NCHAN; c++)
            for (int p = 0; p < world && l->paths[c]; p++) free(l->paths[c][p]);
        spmd__shm_link_free(l);
        l = NULL;
    }
    if (l) m->shm = l;
    free(local);
    free(out);
    free(in);
    free(conn);
    free(pids);
    free(asym);
    return st;
}

/* Hosts as every rank sees them: rank r's host is the smallest rank it
 * shares rings with (or itself).  Usable for hierarchical collectives when
 * every rank's view is the same partition into equal hosts, 2 or more. */
static void make_topology(spmd__mesh *m, const int32_t *host_of, int all_consistent) {
    int world = m->world, hosts = 0, per = 0;
    for (int r = 0; r < world; r++)
        if (host_of[r] == r) hosts++;
    if (!all_consistent || hosts < 2 || world % hosts) return;
    per = world / hosts;
    int *member = malloc(sizeof(int) * (size_t)world);
    int *fill = calloc((size_t)hosts, sizeof(int));
    if (!member || !fill) {
        free(member);
        free(fill);
        return;
    }
    int h = 0, ok = 1;
    for (int root = 0; root < world && ok; root++) {
        if (host_of[root] != root) continue;
        for (int r = 0; r < world; r++)
            if (host_of[r] == root) {
                if (fill[h] == per) { ok = 0; break; }
                if (r == m->rank) {
                    m->topo.my_host = h;
                    m->topo.my_index = fill[h];
                }
                member[h * per + fill[h]++] = r;
            }
        ok = ok && fill[h] == per;
        h++;
    }
    free(fill);
    if (!ok) {
        free(member);
        return;
    }
    m->topo.hosts = hosts;
    m->topo.per_host = per;
    m->topo.member = member;
}

spmd_status spmd__shm_link_setup(spmd__mesh *m, int mode, int64_t deadline, char *err, size_t errlen) {
    spmd_status st = link_pairs(m, mode, deadline, err, errlen);
    if (st || m->world == 1) return st;
    /* Collectives over shared slots need every pair of the mesh on rings, and
     * every rank must know it alike (they choose algorithms by it): two more
     * words to every peer over the collective connections, still idle —
     * "I share with everybody" and my host (the smallest rank I share with);
     * then "your hosts agree with mine" for the hierarchical algorithms. */
    int world = m->world, mine = m->shm && m->shm->npeers == world - 1;
    int32_t my_host = m->rank;
    for (int p = 0; p < m->rank; p++)
        if (m->path[SPMD__CH_COLL][p] && spmd__path_is_shm(m->path[SPMD__CH_COLL][p])) {
            my_host = p;
            break;
        }
    int32_t *host_of = calloc((size_t)world, sizeof *host_of);
    char *all = calloc((size_t)world, 1);
    unsigned char(*out)[16] = calloc((size_t)world, 16);
    unsigned char(*in)[16] = calloc((size_t)world, 16);
    if (!all || !out || !in || !host_of) {
        st = spmd__fail(err, errlen, SPMD_ERR_NOMEM, "out of memory");
    } else {
        for (int p = 0; p < world; p++) {
            all[p] = p != m->rank;
            spmd__put_u32(out[p], XCHG_MAGIC);
            spmd__put_u32(out[p] + 4, (uint32_t)mine);
            spmd__put_u32(out[p] + 8, (uint32_t)my_host);
        }
        st = swap_all(m, all, out, in, deadline, err, errlen);
        host_of[m->rank] = my_host;
        for (int p = 0; p < world && !st; p++) {
            if (!all[p]) continue;
            if (spmd__get_u32(in[p] + 4) != 1) mine = 0;
            host_of[p] = (int32_t)spmd__get_u32(in[p] + 8);
        }
        if (!st && m->shm) m->shm->all_shm = mine;
        /* my view is consistent when my ring peers are exactly the ranks
         * that named my host */
        int consistent = 1;
        for (int p = 0; p < world && !st; p++) {
            if (p == m->rank) continue;
            if (host_of[p] < 0 || host_of[p] >= world) {
                consistent = 0;
                continue;
            }
            int ringed = m->path[SPMD__CH_COLL][p] && spmd__path_is_shm(m->path[SPMD__CH_COLL][p]);
            if (ringed != (host_of[p] == my_host)) consistent = 0;
        }
        if (!st) {
            for (int p = 0; p < world; p++) spmd__put_u32(out[p] + 4, (uint32_t)consistent);
            st = swap_all(m, all, out, in, deadline, err, errlen);
            for (int p = 0; p < world && !st; p++)
                if (all[p] && spmd__get_u32(in[p] + 4) != 1) consistent = 0;
        }
        if (!st) make_topology(m, host_of, consistent);
    }
    free(host_of);
    free(all);
    free(out);
    free(in);
    return st;
}
