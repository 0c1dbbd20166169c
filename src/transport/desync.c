/* desync.c — ranks that disagree about the collective they run (xfer.h).
 *
 * A rank runs (kind, sequence number, descriptor); the descriptor hashes the
 * arguments, the algorithm and the segment size (coll/agree.c).  Disagreement
 * shows in three places:
 *   - a header that arrives (xfer.c checks every one; the slow path is here);
 *   - a shared-slot flag (shm_coll.c);
 *   - nowhere, when ranks that disagree each wait for a message the other
 *     never sends: a rank running the naive all_reduce waits to receive while
 *     its peers wait on the shared slots, say.  Hence the watch: a rank that
 *     has made no progress for SPMD__DESYNC_WATCH_MS reads what its peers
 *     under this kernel announced in their segments, and peeks at the headers
 *     waiting unread on its other connections.
 * Every way ends in one message naming both ranks and what differs, so the
 * abort notice the failing rank sends tells every other rank the same.
 *
 * A peek is judged leniently: a header of this collective with our
 * descriptor is a later message of the same call (a peer ahead of us), and
 * one of the next collective is a peer that finished this one first. */
#define _GNU_SOURCE
#include <ctype.h>
#include <stdio.h>
#include "path.h"
#include "shm_internal.h"
#include "xhdr.h"

/* The announcement's second word: algorithm | kind << 8 | segment / 64 << 16,
 * and whether this collective runs the agreement step (coll/agree.c) first:
 * ranks that both do let that step judge them. */
#define INFO_AGREES (1ull << 63)

void spmd__desync_announce(spmd__coll_ctx *c, int agrees) {
    spmd__shm_link *l = c->m->shm;
    if (!l) return;
    seg_header *h = spmd__shm_header(l->own);
    uint64_t info = (uint64_t)(c->algo & 0xff) | (uint64_t)(c->kind & 0xff) << 8 |
                    (uint64_t)(c->segment_bytes / 64) << 16 | (agrees ? INFO_AGREES : 0);
    atomic_store_explicit(&h->coll_info, info, memory_order_relaxed);
    atomic_store_explicit(&h->coll_id, (uint64_t)c->seq << 32 | c->desc, memory_order_release);
}

static const char *algo_name(const spmd__coll_ctx *c, int algo) {
    const char *n = c->algo_name && algo != SPMD__ALGO_NONE ? c->algo_name((int)c->kind, algo) : NULL;
    return n ? n : "?";
}

/* "SPMD_ALGO_ALL_REDUCE" for the running collective. */
static void algo_var(const spmd__coll_ctx *c, char *out, size_t len) {
    const char *k = spmd__coll_kind_name(c->kind);
    size_t i = (size_t)snprintf(out, len, "SPMD_ALGO_");
    for (; *k && i + 1 < len; k++) out[i++] = (char)toupper((unsigned char)*k);
    out[i < len ? i : len - 1] = 0;
}

/* The peer runs this collective with another descriptor: say what differs. */
static spmd_status differ(spmd__coll_ctx *c, int peer, int palgo, size_t pseg) {
    const char *k = spmd__coll_kind_name(c->kind);
    const int me = c->m->rank;
    char var[48];
    algo_var(c, var, sizeof var);
    if (palgo != c->algo && palgo == SPMD__ALGO_NONE)
        return spmd__coll_fail(c, SPMD_ERR_MISMATCH,
                               "%s #%u: rank %d could not choose an algorithm (its %s or option is invalid "
                               "there) while rank %d runs '%s'",
                               k, c->seq, peer, var, me, algo_name(c, c->algo));
    if (palgo != c->algo && c->algo == SPMD__ALGO_NONE)
        return spmd__coll_fail(c, SPMD_ERR_MISMATCH,
                               "%s #%u: rank %d runs algorithm '%s' while rank %d could not choose one (its %s "
                               "or option is invalid here)",
                               k, c->seq, peer, algo_name(c, palgo), me, var);
    if (palgo != c->algo)
        return spmd__coll_fail(c, SPMD_ERR_MISMATCH,
                               "%s #%u: rank %d runs algorithm '%s' while rank %d runs '%s' (%s or "
                               "spmd_coll_opts.algo differ across ranks)",
                               k, c->seq, peer, algo_name(c, palgo), me, algo_name(c, c->algo), var);
    if (pseg != c->segment_bytes)
        return spmd__coll_fail(c, SPMD_ERR_MISMATCH,
                               "%s #%u: rank %d pipelines in %zu-byte segments while rank %d uses %zu "
                               "(SPMD_SEGMENT_BYTES differs across ranks)",
                               k, c->seq, peer, pseg, me, c->segment_bytes);
    return spmd__coll_fail(c, SPMD_ERR_MISMATCH,
                           "%s #%u: rank %d and rank %d passed different arguments (count, dtype, reduce op "
                           "or root differ)",
                           k, c->seq, peer, me);
}

static spmd_status out_of_order(spmd__coll_ctx *c, int peer, uint32_t kind, uint32_t seq) {
    return spmd__coll_fail(c, SPMD_ERR_MISMATCH,
                           "collective mismatch: rank %d is in %s #%u while rank %d is in %s #%u "
                           "(collectives called in a different order on different ranks?)",
                           peer, spmd__coll_kind_name((spmd__coll_kind)kind), seq, c->m->rank,
                           spmd__coll_kind_name(c->kind), c->seq);
}

spmd_status spmd__desync_header(spmd__coll_ctx *c, int peer, const spmd__xhdr *h, int expected) {
    if (!expected && h->seq == c->seq + 1) return SPMD_OK; /* it finished this collective first */
    if (h->kind != (uint32_t)c->kind || h->seq != c->seq) return out_of_order(c, peer, h->kind, h->seq);
    const char *k = spmd__coll_kind_name(c->kind);
    const int agree = h->mode == SPMD__XM_AGREE;
    if (agree && c->agreeing) return SPMD_OK; /* the payload tells (coll/agree.c) */
    if (!agree && h->desc == c->desc) {
        if (!c->agreeing || !expected) return SPMD_OK; /* a peer past the agreement step: fine */
        return spmd__coll_fail(c, SPMD_ERR_MISMATCH,
                               "%s #%u: rank %d sent data while rank %d waits for its agreement message", k,
                               c->seq, peer, c->m->rank);
    }
    if (h->desc == c->desc)
        return spmd__coll_fail(c, SPMD_ERR_MISMATCH,
                               "%s #%u: rank %d is still in the agreement step while rank %d is past it", k,
                               c->seq, peer, c->m->rank);
    return differ(c, peer, (int)h->algo, h->seg);
}

/* What a peer under this kernel announced.  flag_differs: its slot flag for
 * our step disagrees with ours (so something is wrong); else SPMD_OK unless
 * the announcement shows a disagreement. */
static spmd_status judge_announced(spmd__coll_ctx *c, int peer, int flag_differs) {
    seg_header *h = spmd__shm_header(c->m->shm->peer[peer]);
    uint64_t id = atomic_load_explicit(&h->coll_id, memory_order_acquire);
    uint64_t info = atomic_load_explicit(&h->coll_info, memory_order_relaxed);
    const uint32_t seq = (uint32_t)(id >> 32), desc = (uint32_t)id, kind = (uint32_t)(info >> 8) & 0xff;
    const int agrees = (info & INFO_AGREES) != 0;
    if (seq != c->seq && !flag_differs) return SPMD_OK; /* not started yet, or finished first */
    if (seq != c->seq || kind != (uint32_t)c->kind) return out_of_order(c, peer, kind, seq);
    if (!flag_differs && (desc == c->desc || (agrees && c->agreeing))) return SPMD_OK;
    if (desc == c->desc)
        return spmd__coll_fail(c, SPMD_ERR_MISMATCH, "%s #%u: rank %d is in another step of it than rank %d",
                               spmd__coll_kind_name(c->kind), c->seq, peer, c->m->rank);
    return differ(c, peer, (int)(info & 0xff), (size_t)((info & ~INFO_AGREES) >> 16) * 64);
}

spmd_status spmd__desync_peer(spmd__coll_ctx *c, int peer, int certain) {
    if (c->m->shm && c->m->shm->peer[peer]) return judge_announced(c, peer, certain);
    if (!certain) return SPMD_OK;
    return spmd__coll_fail(c, SPMD_ERR_MISMATCH, "%s #%u: rank %d is in another collective, or passed other "
                           "arguments, than rank %d", spmd__coll_kind_name(c->kind), c->seq, peer, c->m->rank);
}

spmd_status spmd__desync_watch(spmd__coll_ctx *c, const unsigned char *reading) {
    spmd__mesh *m = c->m;
    for (int p = 0; p < m->world; p++) {
        if (p == m->rank || (reading && reading[p])) continue;
        spmd__path *path = m->path[SPMD__CH_COLL][p];
        if (!path) continue;
        spmd_status st = SPMD_OK;
        if (spmd__path_is_shm(path)) {
            if (m->shm && m->shm->peer[p]) st = judge_announced(c, p, 0);
        } else {
            unsigned char raw[SPMD__XHDR];
            spmd__xhdr h;
            if (spmd__path_peek(path, raw, sizeof raw) != (ssize_t)sizeof raw) continue;
            if (!spmd__xhdr_get(raw, &h))
                st = spmd__coll_fail(c, SPMD_ERR_PROTOCOL, "%s #%u: garbage on the collective channel from rank %d",
                                     spmd__coll_kind_name(c->kind), c->seq, p);
            else
                st = spmd__desync_header(c, p, &h, 0);
        }
        if (st) return st;
    }
    return SPMD_OK;
}
