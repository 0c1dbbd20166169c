/* p2p.c — the public point-to-point calls: validate, fill a work handle,
 * post it to the transport's p2p engine (transport/p2p_engine.c and its parts, p2p_internal.h).  Blocking
 * calls post a handle on their own stack (no allocation) and wait for it with
 * the group's deadline; a small one with a peer that shares memory is first
 * tried without any handle (the engine's quick path, p2p_quick.c). */
#include <stdio.h>
#include <stdlib.h>
#include "group_internal.h"

/* SPMD_OK when the arguments make a send or receive, else the error's text
 * in err. */
static spmd_status check_args(const spmd_group *g, spmd__work_kind kind, const void *buf, size_t count,
                              spmd_dtype dt, int peer, int tag, char *err, size_t errlen) {
    const char *what = kind == SPMD__W_SEND ? "send" : "recv";
    size_t es = spmd_dtype_size(dt);
    spmd_status st = SPMD_ERR_INVALID;
    int any_ok = kind == SPMD__W_RECV;
    if (!es) snprintf(err, errlen, "%s: unknown dtype %d", what, (int)dt);
    else if (count && !buf) snprintf(err, errlen, "%s: NULL buffer with count %zu", what, count);
    else if (count > SIZE_MAX / es) snprintf(err, errlen, "%s: count %zu overflows", what, count);
    else if (!(any_ok && peer == SPMD_ANY_SOURCE) && (peer < 0 || peer >= g->world))
        snprintf(err, errlen, "%s: rank %d out of range [0, %d) on rank %d", what, peer, g->world, g->rank);
    else if (peer == g->rank)
        snprintf(err, errlen, "%s: rank %d cannot %s itself", what, peer,
                 kind == SPMD__W_SEND ? "send to" : "receive from");
    else if (tag < 0 && !(any_ok && tag == SPMD_ANY_TAG))
        snprintf(err, errlen, "%s: tag %d must be >= 0", what, tag);
    else
        st = SPMD_OK;
    return st;
}

/* Check the arguments, fill *w and post it.  waiting: the caller waits for
 * it at once (blocking call) and drives the engine itself meanwhile, so the
 * engine need not arrange to be woken.  On failure *w is released. */
static spmd_status post(spmd_group *g, spmd__work_kind kind, const void *buf, size_t count, spmd_dtype dt,
                        int peer, int tag, int waiting, spmd_work *w) {
    char err[SPMD__ERRLEN];
    spmd_status st = check_args(g, kind, buf, count, dt, peer, tag, err, sizeof err);
    size_t es = spmd_dtype_size(dt);
    spmd__work_init(w, g, kind);
    if (waiting) {
        w->blocking = 1;
        w->owner = pthread_self();
    }
    if (!st) {
        w->req.buf = (void *)buf;
        w->req.len = count * es;
        w->req.peer = peer;
        w->req.poll_peer = peer;
        w->req.tag = tag;
        w->req.dtype = (int)dt;
        w->req.waiting = waiting;
        w->req.will_spin = waiting; /* spmd_work_wait's spin_p2p, next */
        w->req.recorded = 1;
        st = kind == SPMD__W_SEND ? spmd__p2p_post_send(&g->t, &w->req, err, sizeof err)
                                  : spmd__p2p_post_recv(&g->t, &w->req, err, sizeof err);
    }
    if (st) {
        spmd__rec_p2p_end(g->rec, w->rec_ticket, st);
        spmd__work_complete(w, st, NULL);
        spmd__work_release(w);
        return spmd__group_error(g, st, "%s", err);
    }
    return SPMD_OK;
}

static spmd_status post_async(spmd_group *g, spmd__work_kind kind, const void *buf, size_t count, spmd_dtype dt,
                              int peer, int tag, spmd_work **out) {
    if (!g || !out) return SPMD_ERR_INVALID;
    spmd_work *w = malloc(sizeof *w);
    if (!w) return spmd__group_error(g, SPMD_ERR_NOMEM, "%s: out of memory", kind == SPMD__W_SEND ? "send" : "recv");
    spmd_status st = post(g, kind, buf, count, dt, peer, tag, 0, w);
    if (st) free(w);
    else *out = w;
    return st;
}

spmd_status spmd_isend(spmd_group *g, const void *buf, size_t count, spmd_dtype dt, int dst, int tag,
                       spmd_work **work) {
    return post_async(g, SPMD__W_SEND, buf, count, dt, dst, tag, work);
}

spmd_status spmd_irecv(spmd_group *g, void *buf, size_t count, spmd_dtype dt, int src, int tag,
                       spmd_work **work) {
    return post_async(g, SPMD__W_RECV, buf, count, dt, src, tag, work);
}

/* A small message with a peer that shares memory, done in its ring without
 * a work handle (transport/p2p_quick.c): 1 when done, 0 when the general
 * path must take it (*spun_ns: how long a receive already spun). */
static int quick(spmd_group *g, spmd__work_kind kind, const void *buf, size_t count, spmd_dtype dt, int peer,
                 int tag, int *source, uint64_t *spun_ns) {
    char err[SPMD__ERRLEN];
    size_t es = spmd_dtype_size(dt);
    if (!g->t.p2p || !es || count > SPMD__P2P_QUICK_MAX / es ||
        check_args(g, kind, buf, count, dt, peer, tag, err, sizeof err) != SPMD_OK)
        return 0;
    if (kind == SPMD__W_SEND) return spmd__p2p_quick_send(&g->t, peer, tag, (int)dt, buf, count * es) == SPMD__QUICK_DONE;
    spmd__quick_recv q = {.peer = peer, .tag = tag, .dt = (int)dt, .buf = (void *)buf, .len = count * es};
    if (spmd__work_quick_recv(g, &q, spun_ns) != SPMD__QUICK_DONE) return 0;
    if (source) *source = peer;
    return 1;
}

static spmd_status blocking(spmd_group *g, spmd__work_kind kind, const void *buf, size_t count, spmd_dtype dt,
                            int peer, int tag, int *source) {
    if (!g) return SPMD_ERR_INVALID;
    uint64_t spun_ns = 0;
    if (quick(g, kind, buf, count, dt, peer, tag, source, &spun_ns)) return SPMD_OK;
    spmd_work w;
    spmd_status st = post(g, kind, buf, count, dt, peer, tag, 1, &w);
    if (st) return st;
    w.spun_ns = spun_ns;
    st = spmd_work_wait(&w, -1);
    if (st == SPMD_ERR_TIMEOUT) {
        spmd__group_error(g, st, "%s with rank %d: no progress within %d ms", kind == SPMD__W_SEND ? "send" : "recv",
                          peer, g->timeout_ms);
        spmd__rec_timeout(g, spmd_group_errmsg(g));
    }
    else if (st)
        spmd__group_error(g, st, "%s", spmd_work_errmsg(&w));
    if (!st && source) *source = spmd_work_source(&w);
    spmd__work_release(&w); /* cancels a receive that timed out */
    return st;
}

spmd_status spmd_send(spmd_group *g, const void *buf, size_t count, spmd_dtype dt, int dst, int tag) {
    return blocking(g, SPMD__W_SEND, buf, count, dt, dst, tag, NULL);
}

spmd_status spmd_recv(spmd_group *g, void *buf, size_t count, spmd_dtype dt, int src, int tag, int *source) {
    return blocking(g, SPMD__W_RECV, buf, count, dt, src, tag, source);
}
