/* p2p.c — the public point-to-point calls: validate, make a work handle,
 * post it to the transport's p2p engine (transport/p2p_engine.c).  Blocking calls are the async
 * call plus a wait with the group's deadline. */
#include <stdio.h>
#include "group_internal.h"

static spmd_status make(spmd_group *g, spmd__work_kind kind, const void *buf, size_t count,
                        spmd_dtype dt, int peer, int tag, spmd_work **out) {
    const char *what = kind == SPMD__W_SEND ? "send" : "recv";
    if (!g || !out) return SPMD_ERR_INVALID;
    size_t es = spmd_dtype_size(dt);
    if (!es) return spmd__group_error(g, SPMD_ERR_INVALID, "%s: unknown dtype %d", what, (int)dt);
    if (count && !buf) return spmd__group_error(g, SPMD_ERR_INVALID, "%s: NULL buffer with count %zu", what, count);
    if (count > SIZE_MAX / es) return spmd__group_error(g, SPMD_ERR_INVALID, "%s: count %zu overflows", what, count);
    int any_ok = kind == SPMD__W_RECV;
    if (!(any_ok && peer == SPMD_ANY_SOURCE) && (peer < 0 || peer >= g->world))
        return spmd__group_error(g, SPMD_ERR_INVALID, "%s: rank %d out of range [0, %d) on rank %d", what, peer,
                                 g->world, g->rank);
    if (peer == g->rank)
        return spmd__group_error(g, SPMD_ERR_INVALID, "%s: rank %d cannot %s itself", what, peer,
                                 kind == SPMD__W_SEND ? "send to" : "receive from");
    if (tag < 0 && !(any_ok && tag == SPMD_ANY_TAG))
        return spmd__group_error(g, SPMD_ERR_INVALID, "%s: tag %d must be >= 0", what, tag);
    spmd_work *w = spmd__work_new(g, kind);
    if (!w) return spmd__group_error(g, SPMD_ERR_NOMEM, "%s: out of memory", what);
    w->req.buf = (void *)buf;
    w->req.len = count * es;
    w->req.peer = peer;
    w->req.poll_peer = peer;
    w->req.tag = tag;
    w->req.dtype = (int)dt;
    char err[SPMD__ERRLEN];
    spmd_status st = kind == SPMD__W_SEND ? spmd__p2p_post_send(&g->t, &w->req, err, sizeof err)
                                          : spmd__p2p_post_recv(&g->t, &w->req, err, sizeof err);
    if (st) {
        spmd__rec_p2p_end(g->rec, w->rec_ticket, st);
        spmd__work_complete(w, st, NULL);
        spmd_work_free(w);
        return spmd__group_error(g, st, "%s", err);
    }
    *out = w;
    return SPMD_OK;
}

spmd_status spmd_isend(spmd_group *g, const void *buf, size_t count, spmd_dtype dt, int dst, int tag,
                       spmd_work **work) {
    return make(g, SPMD__W_SEND, buf, count, dt, dst, tag, work);
}

spmd_status spmd_irecv(spmd_group *g, void *buf, size_t count, spmd_dtype dt, int src, int tag,
                       spmd_work **work) {
    return make(g, SPMD__W_RECV, buf, count, dt, src, tag, work);
}

static spmd_status finish(spmd_group *g, spmd_work *w, const char *what, int peer, int *source) {
    spmd_status st = spmd_work_wait(w, -1);
    if (st == SPMD_ERR_TIMEOUT) {
        spmd__group_error(g, st, "%s with rank %d: no progress within %d ms", what, peer, g->timeout_ms);
        spmd__rec_timeout(g, spmd_group_errmsg(g));
    }
    else if (st)
        spmd__group_error(g, st, "%s", spmd_work_errmsg(w));
    if (!st && source) *source = spmd_work_source(w);
    spmd_work_free(w); /* cancels a receive that timed out */
    return st;
}

spmd_status spmd_send(spmd_group *g, const void *buf, size_t count, spmd_dtype dt, int dst, int tag) {
    spmd_work *w = NULL;
    spmd_status st = spmd_isend(g, buf, count, dt, dst, tag, &w);
    if (st) return st;
    return finish(g, w, "send", dst, NULL);
}

spmd_status spmd_recv(spmd_group *g, void *buf, size_t count, spmd_dtype dt, int src, int tag, int *source) {
    spmd_work *w = NULL;
    spmd_status st = spmd_irecv(g, buf, count, dt, src, tag, &w);
    if (st) return st;
    return finish(g, w, "recv", src, source);
}
