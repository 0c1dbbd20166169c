/* mpi_xfer.c — the collective wire (xfer.h) over MPI point-to-point, so
 * every spmd algorithm of src/coll runs over MPI unchanged.
 *
 * Each message is one MPI_Isend on the group's coll communicator whose tag
 * names the collective: kind (4 bits), sequence number (11 bits) and the
 * descriptor hash (16 bits) when MPI_TAG_UB allows 31 bits (Open MPI does),
 * else a hash of the three folded into the tags MPI has.  Receives take
 * MPI_ANY_TAG from their peer (MPI keeps a pair's messages in order) and
 * check the tag and the length on arrival, so ranks in different collectives,
 * in a different order or with different arguments fail with
 * SPMD_ERR_MISMATCH naming both ranks, as over spmd's own transport.
 * Messages over 1 GiB go in 1 GiB pieces (MPI counts are ints).
 *
 * All requests of one call progress together (MPI_Testsome), so a ring where
 * everyone sends first cannot deadlock; waiting polls (mpi_watch.c) with the
 * group's deadline, failure state and notices. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "mpi_internal.h"

#define PIECE ((size_t)1 << 30)

typedef struct {
    int op;       /* index into sends then recvs */
    int recv;
    int peer;
    int len;      /* bytes of this piece */
} piece;

/* The descriptor's part of the tag.  In the agreement step (coll/agree.c)
 * the ranks' descriptors may differ, and comparing them is that step's job:
 * its messages carry 0 there, which no descriptor maps to. */
static uint32_t tag_desc(const spmd__coll_ctx *c) {
    if (c->agreeing) return 0;
    uint32_t d = c->desc & 0xffff;
    return d ? d : 1;
}

static int wire_tag(const spmd__mpi_link *l, const spmd__coll_ctx *c) {
    if (l->wide_tags)
        return (int)((((uint32_t)c->kind & 0xf) << 27) | ((c->seq & 0x7ff) << 16) | tag_desc(c));
    uint32_t h = 2166136261u;
    uint32_t v[3] = {(uint32_t)c->kind, c->seq, c->agreeing ? 0 : c->desc | 1u << 31};
    const unsigned char *b = (const unsigned char *)v;
    for (size_t i = 0; i < sizeof v; i++) h = (h ^ b[i]) * 16777619u;
    return (int)(h % ((uint32_t)l->tag_ub + 1u));
}

/* A message from `peer` carried tag `got` where `want` was expected. */
static spmd_status tag_mismatch(spmd__coll_ctx *c, const spmd__mpi_link *l, int peer, int got) {
    const char *mine = spmd__coll_kind_name(c->kind);
    const int me = c->m->rank;
    if (!l->wide_tags)
        return spmd__coll_fail(c, SPMD_ERR_MISMATCH,
                               "collective mismatch: rank %d sent rank %d a message of another collective than "
                               "%s #%u (different collectives, order or arguments)",
                               peer, me, mine, c->seq);
    uint32_t kind = ((uint32_t)got >> 27) & 0xf, seq11 = ((uint32_t)got >> 16) & 0x7ff;
    if (kind != ((uint32_t)c->kind & 0xf) || seq11 != (c->seq & 0x7ff)) {
        /* the sequence number nearest ours with those low 11 bits */
        uint32_t diff = (seq11 - c->seq) & 0x7ff;
        uint32_t theirs = diff < 0x400 ? c->seq + diff : c->seq - (0x800 - diff);
        return spmd__coll_fail(c, SPMD_ERR_MISMATCH,
                               "collective mismatch: rank %d is in %s #%u while rank %d is in %s #%u "
                               "(collectives called in a different order on different ranks?)",
                               peer, spmd__coll_kind_name((spmd__coll_kind)kind), theirs, me, mine, c->seq);
    }
    return spmd__coll_fail(c, SPMD_ERR_MISMATCH,
                           "%s #%u: rank %d and rank %d passed different arguments "
                           "(count, dtype, reduce op or root differ)",
                           mine, c->seq, peer, me);
}

/* Check a completed receive's status. */
static spmd_status check_recv(spmd__coll_ctx *c, const spmd__mpi_link *l, const piece *pc, const MPI_Status *s,
                              int err, int tag) {
    const char *mine = spmd__coll_kind_name(c->kind);
    if (err == MPI_ERR_TRUNCATE)
        return spmd__coll_fail(c, SPMD_ERR_MISMATCH,
                               "%s #%u: rank %d sent more than the %d bytes rank %d expected "
                               "(count or dtype differ across ranks?)",
                               mine, c->seq, pc->peer, pc->len, c->m->rank);
    if (err != MPI_SUCCESS) {
        char e[256];
        spmd__mpi_errstr(err, e, sizeof e);
        return spmd__coll_fail(c, SPMD_ERR_REMOTE, "%s #%u: receiving from rank %d: MPI reports: %s", mine, c->seq,
                               pc->peer, e);
    }
    if (s->MPI_TAG != tag) return tag_mismatch(c, l, pc->peer, s->MPI_TAG);
    int n = 0;
    MPI_Get_count(s, MPI_BYTE, &n);
    if (n != pc->len)
        return spmd__coll_fail(c, SPMD_ERR_MISMATCH,
                               "%s #%u: rank %d sent %d bytes where rank %d expected %d "
                               "(count or dtype differ across ranks?)",
                               mine, c->seq, pc->peer, n, c->m->rank, pc->len);
    return SPMD_OK;
}

static spmd_status timed_out(spmd__coll_ctx *c, const piece *pcs, const MPI_Request *reqs, int n) {
    char who[200] = "";
    size_t used = 0;
    for (int k = 0; k < n && used + 40 < sizeof who; k++) {
        if (reqs[k] == MPI_REQUEST_NULL) continue;
        used += (size_t)snprintf(who + used, sizeof who - used, " %s rank %d (%d bytes)",
                                 pcs[k].recv ? "receiving from" : "sending to", pcs[k].peer, pcs[k].len);
    }
    return spmd__coll_fail(c, SPMD_ERR_TIMEOUT, "%s #%u timed out on rank %d,%s", spmd__coll_kind_name(c->kind),
                           c->seq, c->m->rank, who);
}

static spmd_status run(spmd__coll_ctx *c, spmd__mpi_link *l, piece *pcs, MPI_Request *reqs, int *idx,
                       MPI_Status *sts, int n, int tag) {
    spmd__mpi_idle idle;
    spmd__mpi_idle_init(&idle, c->m);
    int left = n;
    char msg[SPMD__ERRLEN];
    for (unsigned it = 0;; it++) {
        int got = 0;
        spmd__mpi_lock();
        int rc = MPI_Testsome(n, reqs, &got, idx, sts);
        spmd__mpi_unlock();
        if (rc != MPI_SUCCESS && rc != MPI_ERR_IN_STATUS) {
            spmd__mpi_errstr(rc, msg, sizeof msg);
            return spmd__coll_fail(c, SPMD_ERR_SYSTEM, "%s #%u: MPI_Testsome: %s", spmd__coll_kind_name(c->kind),
                                   c->seq, msg);
        }
        if (got != MPI_UNDEFINED && got > 0) {
            for (int k = 0; k < got; k++) {
                const piece *pc = &pcs[idx[k]];
                int err = rc == MPI_ERR_IN_STATUS ? sts[k].MPI_ERROR : MPI_SUCCESS;
                spmd_status st = pc->recv ? check_recv(c, l, pc, &sts[k], err, tag) : SPMD_OK;
                if (!pc->recv && err != MPI_SUCCESS) {
                    spmd__mpi_errstr(err, msg, sizeof msg);
                    st = spmd__coll_fail(c, SPMD_ERR_REMOTE, "%s #%u: sending to rank %d: MPI reports: %s",
                                         spmd__coll_kind_name(c->kind), c->seq, pc->peer, msg);
                }
                if (st) return st;
            }
            left -= got;
            if (left <= 0) return SPMD_OK;
            spmd__mpi_idle_reset(&idle);
            continue;
        }
        spmd_status st = spmd__mpi_check(l, 0, msg, sizeof msg);
        if (st) return spmd__coll_fail(c, st, "%s", msg);
        if ((it & 63) == 63 && spmd__ctx_left_ms(c) == 0) return timed_out(c, pcs, reqs, n);
        spmd__mpi_idle_step(&idle, c->m);
    }
}

spmd_status spmd__mpi_xfer(spmd__coll_ctx *c, const spmd__xfer_op *sends, int nsends, const spmd__xfer_op *recvs,
                           int nrecvs) {
    spmd__mesh *m = c->m;
    spmd__mpi_link *l = spmd__mpi_of(m);
    int n = 0;
    for (int k = 0; k < nsends + nrecvs; k++) {
        const spmd__xfer_op *o = k < nsends ? &sends[k] : &recvs[k - nsends];
        if (o->peer < 0 || o->peer >= m->world || o->peer == m->rank)
            return spmd__coll_fail(c, SPMD_ERR_INVALID, "internal: transfer with rank %d", o->peer);
        n += o->len ? (int)((o->len + PIECE - 1) / PIECE) : 1;
    }
    if (n == 0) return SPMD_OK;
    enum { STACK = 16 };
    piece stack_pcs[STACK];
    MPI_Request stack_reqs[STACK];
    int stack_idx[STACK];
    MPI_Status stack_sts[STACK];
    piece *pcs = stack_pcs;
    MPI_Request *reqs = stack_reqs;
    int *idx = stack_idx;
    MPI_Status *sts = stack_sts;
    if (n > STACK) {
        pcs = malloc(sizeof *pcs * (size_t)n);
        reqs = malloc(sizeof *reqs * (size_t)n);
        idx = malloc(sizeof *idx * (size_t)n);
        sts = malloc(sizeof *sts * (size_t)n);
        if (!pcs || !reqs || !idx || !sts) {
            free(pcs);
            free(reqs);
            free(idx);
            free(sts);
            return spmd__coll_fail(c, SPMD_ERR_NOMEM, "out of memory");
        }
    }
    const int tag = wire_tag(l, c);
    spmd_status st = SPMD_OK;
    int posted = 0;
    /* receives first, so MPI can land early arrivals in place */
    spmd__mpi_lock();
    for (int pass = 0; pass < 2 && !st; pass++) {
        const int recv = pass == 0;
        const spmd__xfer_op *ops = recv ? recvs : sends;
        const int nops = recv ? nrecvs : nsends;
        for (int k = 0; k < nops && !st; k++) {
            size_t off = 0;
            do {
                size_t len = ops[k].len - off < PIECE ? ops[k].len - off : PIECE;
                piece *pc = &pcs[posted];
                *pc = (piece){k, recv, ops[k].peer, (int)len};
                char *b = (char *)ops[k].buf + off;
                int rc = recv ? MPI_Irecv(b, (int)len, MPI_BYTE, pc->peer, MPI_ANY_TAG, l->coll, &reqs[posted])
                              : MPI_Isend(b, (int)len, MPI_BYTE, pc->peer, tag, l->coll, &reqs[posted]);
                if (rc != MPI_SUCCESS) {
                    char e[256];
                    spmd__mpi_errstr(rc, e, sizeof e);
                    st = spmd__coll_fail(c, SPMD_ERR_SYSTEM, "%s #%u: %s rank %d: %s", spmd__coll_kind_name(c->kind),
                                         c->seq, recv ? "MPI_Irecv from" : "MPI_Isend to", pc->peer, e);
                    break;
                }
                posted++;
                off += len;
            } while (off < ops[k].len);
        }
    }
    spmd__mpi_unlock();
    if (!st) st = run(c, l, pcs, reqs, idx, sts, posted, tag);
    if (st) spmd__mpi_abandon(reqs, posted); /* the group fails: nothing more comes for these */
    if (pcs != stack_pcs) {
        free(pcs);
        free(reqs);
        free(idx);
        free(sts);
    }
    return st;
}
