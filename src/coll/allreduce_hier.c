/* src/coll/allreduce_hier.c — hierarchical all_reduce for a group spanning
 * hosts with several ranks each (transport/mesh.h's topology: H hosts of L
 * ranks; rank i of a host is its "index").  Per slot-sized chunk:
 *
 *   host A: a0 a1      host B: b0 b1
 *    1. reduce-scatter within each host through the shared slots:
 *       index i reduces part i of the chunk over its host (rank order)
 *    2. all_reduce of part i over the H ranks of index i (a0-b0, a1-b1), a
 *       ring over TCP: reduce-scatter then all-gather of its H pieces
 *    3. all-gather within each host through the slots
 *
 * Cost per chunk of n bytes: 2 host-local flag exchanges; on the network
 * each rank moves 2(H-1)/H · n/L bytes in 2(H-1) steps — every host's link
 * carries each byte once per direction instead of once per rank.  Every
 * rank ends with the same bits: part i is reduced in one fixed order by
 * index i's ring and copied everywhere.
 */
#include "coll/algos.h"

/* Ring all_reduce of buf (n elements) over the H ranks peers[0..H) (my place
 * `me`), in place, with tmp of ceil(n/H) elements. */
static spmd_status ring_over(spmd__coll_ctx *c, const int *peers, int H, int me, char *buf, char *tmp, size_t n,
                             const spmd__coll_args *a) {
    const size_t es = spmd_dtype_size(a->dt);
    const int next = peers[(me + 1) % H], prev = peers[(me - 1 + H) % H];
    for (int s = 0; s < H - 1; s++) { /* reduce-scatter: piece (me - s) goes on */
        const size_t so = (size_t)((me - s + H) % H), ro = (size_t)((me - s - 1 + H) % H);
        const size_t sl = spmd__chunk_len(n, (size_t)H, so), rl = spmd__chunk_len(n, (size_t)H, ro);
        spmd_status st = spmd__xsendrecv(c, next, buf + spmd__chunk_off(n, (size_t)H, so) * es, sl * es, prev, tmp,
                                         rl * es);
        if (st) return st;
        spmd__reduce(buf + spmd__chunk_off(n, (size_t)H, ro) * es, tmp, rl, a->dt, a->op);
    }
    for (int s = 0; s < H - 1; s++) { /* all-gather: piece (me + 1 - s) is complete here */
        const size_t so = (size_t)((me + 1 - s + H) % H), ro = (size_t)((me - s + H) % H);
        spmd_status st = spmd__xsendrecv(c, next, buf + spmd__chunk_off(n, (size_t)H, so) * es,
                                         spmd__chunk_len(n, (size_t)H, so) * es, prev,
                                         buf + spmd__chunk_off(n, (size_t)H, ro) * es,
                                         spmd__chunk_len(n, (size_t)H, ro) * es);
        if (st) return st;
    }
    return SPMD_OK;
}

spmd_status spmd__allreduce_hier(spmd__coll_ctx *c, const spmd__coll_args *a) {
    if (!spmd__shm_coll_hier_usable(c))
        return spmd__coll_fail(c, SPMD_ERR_INVALID, "all_reduce hier: needs hosts of equal size sharing memory");
    const spmd__topology *t = &c->m->topo;
    const int H = t->hosts, L = t->per_host, me = t->my_index, r = spmd__ctx_rank(c);
    const size_t es = spmd_dtype_size(a->dt), n = a->count;
    const size_t chunk = spmd__shm_coll_slot_bytes(c) / es;
    const int *host = t->member + (size_t)t->my_host * (size_t)L;
    char **slot = spmd__tmp(c, 0, 2 * sizeof(char *) * (size_t)L + sizeof(int) * (size_t)H);
    char *tmp = spmd__tmp(c, 1, ((chunk / (size_t)L) / (size_t)H + 2) * es);
    if (!slot || !tmp) return SPMD__NOMEM(c, "hierarchical all_reduce", chunk * es);
    char **part = slot + L;
    int *peers = (int *)(void *)(part + L);
    for (int h = 0; h < H; h++) peers[h] = t->member[(size_t)h * (size_t)L + (size_t)me];
    const char *src = a->sendbuf;
    char *dst = a->recvbuf;
    for (size_t o = 0; o < n; o += chunk) {
        const size_t cn = n - o < chunk ? n - o : chunk;
        /* 1. reduce-scatter within the host */
        for (int i = 0; i < L; i++) slot[i] = spmd__shm_coll_slot(c, host[i]);
        memcpy(slot[me], src + o * es, cn * es);
        spmd_status st = spmd__shm_coll_sync_host(c);
        if (st) return st;
        const size_t po = spmd__chunk_off(cn, (size_t)L, (size_t)me), pl = spmd__chunk_len(cn, (size_t)L, (size_t)me);
        for (int i = 0; i < L; i++) part[i] = spmd__shm_coll_slot(c, host[i]);
        memcpy(part[me], slot[0] + po * es, pl * es);
        for (int i = 1; i < L; i++) spmd__reduce(part[me], slot[i] + po * es, pl, a->dt, a->op);
        /* 2. across hosts, my part with the ranks of my index */
        if ((st = ring_over(c, peers, H, t->my_host, part[me], tmp, pl, a))) return st;
        /* 3. all-gather within the host */
        if ((st = spmd__shm_coll_sync_host(c))) return st;
        for (int i = 0; i < L; i++) {
            const size_t io = spmd__chunk_off(cn, (size_t)L, (size_t)i), il = spmd__chunk_len(cn, (size_t)L, (size_t)i);
            memcpy(dst + (o + io) * es, part[i], il * es);
        }
    }
    (void)r;
    return SPMD_OK;
}
