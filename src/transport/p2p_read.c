/* p2p_read.c — the p2p engine (p2p_internal.h): reading frames from a peer,
 * giving what arrives to the receive it matches (p2p_match.h) or keeping it
 * unexpected, and the cross-memory reads of matched RGETs, done outside the
 * engine's lock. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>
#include "p2p_internal.h"

/* ---- delivering ------------------------------------------------------------- */

/* A receive w meets a message from src: an eager payload in `data` (already
 * complete), or an RTS.  Complete or advance w accordingly. */
void spmd__p2p_deliver_unexpected(spmd__p2p *p, spmd__preq *w, unexp *u) {
    char msg[SPMD__ERRLEN];
    w->source = u->src;
    w->tag = (int)u->tag;
    if (!spmd__p2p_fits(u->len, u->dt, w->len, w->dtype)) {
        spmd__p2p_mismatch_msg(msg, sizeof msg, p->m->rank, u->src, u->tag, u->len, u->dt, w->len, w->dtype);
        if (u->type != F_EAGER) spmd__p2p_enqueue(p, u->src, with_dt(F_NACK, w->dtype), u->tag, w->len, u->id, NULL, 0, 0, NULL);
        else spmd__p2p_enqueue(p, u->src, with_dt(F_REFUSED, w->dtype), u->tag, w->len, 0, NULL, 0, 0, NULL);
        fail_work(w, SPMD_ERR_MISMATCH, msg);
        return;
    }
    if (u->type == F_EAGER) {
        if (u->len) memcpy(w->buf, u->data, u->len);
        complete_req(w, SPMD_OK, NULL);
        return;
    }
    if (u->type == F_RGET) { /* read it from the sender's memory once the lock is released */
        w->id = u->id;
        w->peer = u->src;
        memcpy(w->cma, u->cma, sizeof w->cma);
        w->next = p->copies;
        p->copies = w;
        return;
    }
    /* RTS: ask for the data, which lands straight into w->buf. */
    w->id = u->id;
    w->peer = u->src;
    peer *pe = &p->peers[u->src];
    w->next = pe->data_wait;
    pe->data_wait = w;
    spmd__p2p_enqueue(p, u->src, F_CTS, u->tag, u->len, u->id, NULL, 0, 0, NULL);
}

/* A complete unexpected entry: give it to a posted receive or queue it. */
static void arrived(spmd__p2p *p, unexp *u) {
    spmd__preq *w = spmd__p2p_take_posted(&p->posted, &p->posted_tail, u->src, u->tag);
    if (w) {
        spmd__p2p_deliver_unexpected(p, w, u);
        free(u->data);
        free(u);
        return;
    }
    u->next = NULL;
    if (p->ux_tail) p->ux_tail->next = u;
    else p->ux = u;
    p->ux_tail = u;
}

/* ---- reading ------------------------------------------------------------- */

/* A header is complete: decide where its payload goes.  Returns -1 on a
 * protocol violation. */
static int on_header(spmd__p2p *p, int i, char *why, size_t whylen) {
    peer *pe = &p->peers[i];
    uint32_t word = spmd__get_u32(pe->hdr);
    pe->type = word & 0xff;
    pe->dt = (int)((word >> 8) & 0xff) - 1;
    if ((word >> 16) || pe->dt >= SPMD_DTYPE_COUNT) {
        snprintf(why, whylen, "bad frame type word 0x%08x", word);
        return -1;
    }
    pe->tag = spmd__get_u32(pe->hdr + 4);
    pe->len = spmd__get_u64(pe->hdr + 8);
    pe->id = spmd__get_u64(pe->hdr + 16);
    pe->plen = pe->len;
    pe->dst = NULL;
    pe->rw = NULL;
    pe->ux = NULL;
    pe->got = 0;
    pe->in_payload = 0;
    char msg[SPMD__ERRLEN];
    switch (pe->type) {
    case F_EAGER: {
        if (pe->len > EAGER_MAX) {
            snprintf(why, whylen, "eager frame of %llu bytes exceeds %u", (unsigned long long)pe->len, EAGER_MAX);
            return -1;
        }
        spmd__preq *w = spmd__p2p_take_posted(&p->posted, &p->posted_tail, i, pe->tag);
        if (w) {
            w->source = i;
            w->tag = (int)pe->tag;
            if (!spmd__p2p_fits(pe->len, pe->dt, w->len, w->dtype)) {
                spmd__p2p_mismatch_msg(msg, sizeof msg, p->m->rank, i, pe->tag, pe->len, pe->dt, w->len, w->dtype);
                spmd__p2p_enqueue(p, i, with_dt(F_REFUSED, w->dtype), pe->tag, w->len, 0, NULL, 0, 0, NULL);
                fail_work(w, SPMD_ERR_MISMATCH, msg);
            } else {
                pe->rw = w;
                pe->dst = w->buf;
            }
        } else {
            unexp *u = calloc(1, sizeof *u);
            char *data = pe->len ? malloc(pe->len) : NULL;
            if (!u || (pe->len && !data)) {
                free(u);
                free(data);
                snprintf(why, whylen, "out of memory buffering a %llu-byte message", (unsigned long long)pe->len);
                return -1;
            }
            u->src = i;
            u->dt = pe->dt;
            u->type = F_EAGER;
            u->tag = pe->tag;
            u->len = pe->len;
            u->data = data;
            pe->ux = u;
            pe->dst = data;
        }
        pe->in_payload = 1;
        return 0;
    }
    case F_RTS: {
        spmd__preq *w = spmd__p2p_take_posted(&p->posted, &p->posted_tail, i, pe->tag);
        unexp u = {.src = i, .dt = pe->dt, .type = F_RTS, .tag = pe->tag, .len = pe->len, .id = pe->id};
        if (w) {
            spmd__p2p_deliver_unexpected(p, w, &u);
        } else {
            unexp *q = malloc(sizeof *q);
            if (!q) { snprintf(why, whylen, "out of memory"); return -1; }
            *q = u;
            arrived(p, q);
        }
        return 0;
    }
    case F_CTS: {
        spmd__preq *w = list_take_id(&pe->rts_wait, pe->id);
        if (!w) { /* the send was cancelled (its caller timed out): nothing to send */
            SPMD_LOGW("rank %d: rank %d is ready for message %llu, which was cancelled", p->m->rank, i,
                      (unsigned long long)pe->id);
            return 0;
        }
        return spmd__p2p_enqueue(p, i, F_DATA, (uint32_t)w->tag, w->len, w->id, w->buf, w->len, 0, w) ? -1 : 0;
    }
    case F_DATA: {
        spmd__preq *w = list_take_id(&pe->data_wait, pe->id);
        if (!w || w->len != pe->len) {
            snprintf(why, whylen, "DATA for unknown message %llu", (unsigned long long)pe->id);
            if (w) fail_work(w, SPMD_ERR_PROTOCOL, why);
            return -1;
        }
        pe->rw = w;
        pe->dst = w->buf;
        pe->in_payload = 1;
        return 0;
    }
    case F_NACK: {
        spmd__preq *w = list_take_id(&pe->rts_wait, pe->id);
        if (!w) return 0; /* cancelled meanwhile */
        char a[96], b[96];
        spmd__p2p_describe(a, sizeof a, w->len, w->dtype);
        spmd__p2p_describe(b, sizeof b, pe->len, pe->dt);
        snprintf(msg, sizeof msg, "%s mismatch: this send of %s with tag %d was refused by rank %d, whose receive expects %s",
                 w->len == pe->len ? "type" : "size", a, w->tag, i, b);
        fail_work(w, SPMD_ERR_MISMATCH, msg);
        return 0;
    }
    case F_REFUSED: {
        /* Our small send completed when it was written; the receive that
         * refused it failed with both sides' sizes.  Nothing else is owed. */
        char b[96];
        spmd__p2p_describe(b, sizeof b, pe->len, pe->dt);
        SPMD_LOGW("rank %d: rank %d refused a message with tag %u: its receive expected %s", p->m->rank, i, pe->tag, b);
        return 0;
    }
    case F_RGET:
        pe->plen = RGET_LEN;
        pe->dst = (char *)pe->rget;
        pe->in_payload = 1;
        return 0;
    case F_FIN: {
        spmd__preq *w = list_take_id(&pe->rts_wait, pe->id);
        if (!w) return 0; /* cancelled meanwhile (the reader found the seal changed) */
        w->source = i;
        int code = (int32_t)pe->tag;
        if (!code) {
            complete_req(w, SPMD_OK, NULL);
            return 0;
        }
        char a[96];
        spmd__p2p_describe(a, sizeof a, w->len, w->dtype);
        snprintf(msg, sizeof msg, "send of %s with tag %d: rank %d could not read it from this process (%s)", a,
                 w->tag, i, spmd_status_str(code < 0 && code > -100 ? (spmd_status)code : SPMD_ERR_SYSTEM));
        fail_work(w, code < 0 && code > -100 ? (spmd_status)code : SPMD_ERR_SYSTEM, msg);
        return 0;
    }
    case F_BYE:
        pe->left = 1;
        atomic_store(&p->m->peer_left[i], 1);
        return 0;
    case F_PING:
        return 0;
    case F_ABORT:
        if (pe->len > ABORT_MAX) { snprintf(why, whylen, "abort text too long"); return -1; }
        pe->abort_text = calloc(1, pe->len + 1);
        if (!pe->abort_text) { snprintf(why, whylen, "out of memory"); return -1; }
        pe->dst = pe->abort_text;
        pe->in_payload = 1;
        return 0;
    }
    snprintf(why, whylen, "unknown frame type %u", pe->type);
    return -1;
}

/* An RGET's payload is in: match it like an RTS. */
static int on_rget(spmd__p2p *p, int i, char *why, size_t whylen) {
    peer *pe = &p->peers[i];
    unexp u = {.src = i, .dt = pe->dt, .type = F_RGET, .tag = pe->tag, .len = pe->len, .id = pe->id};
    for (int k = 0; k < 3; k++) u.cma[k] = spmd__get_u64(pe->rget + 8 * k);
    if (!p->m->cma || !p->m->cma[i].ok) {
        snprintf(why, whylen, "RGET from a rank this one may not read");
        return -1;
    }
    spmd__preq *w = spmd__p2p_take_posted(&p->posted, &p->posted_tail, i, pe->tag);
    if (w) {
        spmd__p2p_deliver_unexpected(p, w, &u);
        return 0;
    }
    unexp *q = malloc(sizeof *q);
    if (!q) {
        snprintf(why, whylen, "out of memory");
        return -1;
    }
    *q = u;
    arrived(p, q);
    return 0;
}

static void on_payload_done(spmd__p2p *p, int i) {
    peer *pe = &p->peers[i];
    pe->in_payload = 0;
    if (pe->type == F_RGET) {
        char why[SPMD__ERRLEN], msg[SPMD__ERRLEN];
        pe->dst = NULL;
        if (on_rget(p, i, why, sizeof why) < 0) {
            snprintf(msg, sizeof msg, "protocol error from rank %d: %s", i, why);
            pe->left = 0;
            spmd__p2p_peer_died(p, i, msg);
        }
        return;
    }
    if (pe->rw) {
        spmd__preq *w = pe->rw;
        pe->rw = NULL;
        w->source = i;
        w->tag = (int)pe->tag;
        complete_req(w, SPMD_OK, NULL);
    } else if (pe->ux) {
        unexp *u = pe->ux;
        pe->ux = NULL;
        arrived(p, u);
    } else if (pe->type == F_ABORT && pe->abort_text) {
        char *text = pe->abort_text;
        pe->abort_text = NULL;
        int code = (int32_t)pe->tag;
        int blame = pe->id >= 1 && pe->id <= (uint64_t)p->m->world ? (int)pe->id - 1 : -1;
        spmd__elock_unlock(&p->mu);
        spmd_status st = code < 0 && code > -100 ? (spmd_status)code : SPMD_ERR_ABORTED;
        spmd__mesh_fail_by(p->m, st, blame, 0, "rank %d reported: %s", i, text);
        spmd__elock_lock(&p->mu);
        free(text);
    }
    pe->dst = NULL;
}

/* Read everything available from peer i. */
void spmd__p2p_read_peer(spmd__p2p *p, int i) {
    peer *pe = &p->peers[i];
    char why[SPMD__ERRLEN];
    while (!pe->dead) {
        ssize_t n;
        if (!pe->in_payload) {
            n = spmd__path_read(pe->path, pe->hdr + pe->hdr_got, HDR - pe->hdr_got);
        } else {
            uint64_t want = pe->plen - pe->got;
            if (want > (1u << 30)) want = 1u << 30;
            if (pe->dst) {
                n = spmd__path_read(pe->path, pe->dst + pe->got, (size_t)want);
            } else { /* discard */
                char sink[4096];
                n = spmd__path_read(pe->path, sink, want < sizeof sink ? (size_t)want : sizeof sink);
            }
        }
        if (n == 0) {
            spmd__p2p_peer_died(p, i, "connection closed");
            return;
        }
        if (n < 0) {
            if (errno == EINTR) continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) return;
            spmd__p2p_peer_died(p, i, spmd__path_strerror(errno));
            return;
        }
        pe->rx += (uint64_t)n;
        if (!pe->in_payload) {
            pe->hdr_got += (size_t)n;
            if (pe->hdr_got < HDR) continue;
            pe->hdr_got = 0;
            if (on_header(p, i, why, sizeof why) < 0) {
                char msg[SPMD__ERRLEN];
                snprintf(msg, sizeof msg, "protocol error from rank %d: %s", i, why);
                pe->left = 0;
                spmd__p2p_peer_died(p, i, msg);
                return;
            }
            if (pe->in_payload && pe->plen == 0) on_payload_done(p, i);
        } else {
            pe->got += (uint64_t)n;
            if (pe->got == pe->plen) on_payload_done(p, i);
        }
    }
}

/* ---- cross-memory reads, outside the lock ------------------------------- */

/* Release the engine's lock, first reading every matched RGET message out
 * of its sender's memory (the lock is dropped around each copy, so other
 * peers' traffic goes on meanwhile), then telling the sender with FIN. */
void spmd__p2p_unlock_engine(spmd__p2p *p) {
    while (p->copies) {
        spmd__preq *w = p->copies;
        p->copies = w->next;
        w->next = NULL;
        spmd__elock_unlock(&p->mu);
        char why[SPMD__ERRLEN];
        /* one copy at a time, as when payloads were read under the lock:
         * a window of receives into one buffer (osu_bw's) stays race-free */
        pthread_mutex_lock(&p->copy_mu);
        spmd_status st =
            p->par && p->m->p2p_parallel_min && w->len >= p->m->p2p_parallel_min && spmd__idle_core()
                ? spmd__cma_read_parallel(p->par, p->m, w->peer, w->buf, w->cma[0], w->len, w->cma[1], w->cma[2],
                                          why, sizeof why)
                : spmd__cma_read_sealed(p->m, w->peer, w->buf, w->cma[0], w->len, w->cma[1], w->cma[2], why,
                                        sizeof why);
        pthread_mutex_unlock(&p->copy_mu);
        spmd__elock_lock(&p->mu);
        /* the receive completes before its sender hears of it */
        const int src = w->peer;
        const uint64_t len = w->len, id = w->id;
        if (st) {
            char msg[SPMD__ERRLEN];
            snprintf(msg, sizeof msg, "receive from rank %d with tag %d: %s", w->peer, w->tag, why);
            fail_work(w, st, msg);
        } else {
            complete_req(w, SPMD_OK, NULL);
        }
        if (!p->peers[src].dead) spmd__p2p_enqueue(p, src, F_FIN, (uint32_t)(int32_t)st, len, id, NULL, 0, 0, NULL);
    }
    spmd__elock_unlock(&p->mu);
}
