/* dispatch.c — what a received frame means: an answer completes its
 * future, a request becomes a call (served at once, or queued for the pool),
 * a shutdown frame moves the shutdown exchange on.  The receive role
 * (rx.c) reaches it through the agent's on_frame hook. */
#include <stdlib.h>
#include <string.h>
#include "rpc_internal.h"

/* A request that cannot be served: answer it with an error at once. */
static void reject(spmd_rpc *r, int src, const rpc_frame *f, spmd_status st, const char *why) {
    SPMD_LOGW("rpc: rank %d: bad request from rank %d: %s", r->rank, src, why);
    if (f->h.magic != RPC_MAGIC || f->h.kind == RPC_K_RESP || f->h.kind >= RPC_K_SD_READY) return;
    atomic_fetch_add(&r->recv_req, 1);
    spmd_rpc_call *c = spmd__rpc_call_new(r, src, RPC_K_CALL, f->h.id, f->h.name);
    if (!c) return;
    snprintf(c->err, sizeof c->err, "%s", why);
    atomic_fetch_add(&r->active, 1);
    spmd__rpc_reply(c, st);
}

static void on_response(spmd_rpc *r, int src, const rpc_frame *f, spmd_rpc_msg *m) {
    spmd_rpc_future *fut = spmd__rpc_pending_take(r, f->h.id);
    if (!fut) {
        /* A late answer to a call that timed out. */
        SPMD_LOGI("rpc: rank %d: answer %llu from rank %d matches no pending call", r->rank,
                  (unsigned long long)f->h.id, src);
        spmd_rpc_msg_free(m);
        return;
    }
    if (f->h.status != SPMD_OK) {
        size_t len = 0;
        const char *txt = m ? spmd_rpc_msg_payload(m, &len) : NULL;
        char err[SPMD__ERRLEN];
        snprintf(err, sizeof err, "%.*s", (int)(txt ? strnlen(txt, len) : 0), txt ? txt : "");
        spmd_status st = f->h.status < 0 && f->h.status > -100 ? (spmd_status)f->h.status : SPMD_ERR_REMOTE;
        spmd__rpc_future_complete(fut, st, NULL, err);
        spmd_rpc_msg_free(m);
    } else {
        spmd__rpc_future_complete(fut, SPMD_OK, m, NULL);
    }
    spmd_rpc_future_free(fut);
}

static void on_request(spmd_rpc *r, int src, const rpc_frame *f, spmd_rpc_msg *m) {
    atomic_fetch_add(&r->recv_req, 1);
    int kind = f->h.kind;
    spmd_rpc_call *c = spmd__rpc_call_new(r, src, kind, f->h.id, f->h.name);
    if (!c) {
        spmd_rpc_msg_free(m);
        return;
    }
    c->args = m;
    c->rref_id = f->h.rref_id;
    c->fork_id = f->h.fork_id;
    atomic_fetch_add(&r->active, 1);
    if (spmd__rpc_serve_inline(c)) return;
    if (kind == RPC_K_REMOTE) {
        /* Registered before anything later from any worker can ask for it. */
        c->entry = spmd__rpc_entry_create(r, c->rref_id, c->fork_id);
        if (!c->entry) {
            spmd__rpc_reply(c, SPMD_ERR_NOMEM);
            return;
        }
    }
    if (kind == RPC_K_CALL && spmd__rpc_handler_is_inline(r, c->name)) spmd__rpc_execute(c);
    else spmd__rpc_enqueue(r, c);
}

static void on_shutdown_frame(spmd_rpc *r, int src, const rpc_frame *f) {
    switch (f->h.kind) {
    case RPC_K_SD_READY:
        pthread_mutex_lock(&r->mu);
        r->sd_ready++;
        pthread_cond_broadcast(&r->scv);
        pthread_mutex_unlock(&r->mu);
        break;
    case RPC_K_SD_QUERY: {
        uint64_t aux[4] = {f->h.aux[0], (uint64_t)atomic_load(&r->active), atomic_load(&r->sent_req),
                           atomic_load(&r->recv_req)};
        spmd__rpc_send_small(r, src, RPC_K_SD_STATE, aux);
        break;
    }
    case RPC_K_SD_STATE:
        pthread_mutex_lock(&r->mu);
        if (f->h.aux[0] == r->sd_round) {
            r->sd_states++;
            for (int i = 0; i < 3; i++) r->sd_sum[i] += f->h.aux[i + 1];
            pthread_cond_broadcast(&r->scv);
        }
        pthread_mutex_unlock(&r->mu);
        break;
    case RPC_K_SD_FIN: {
        pthread_mutex_lock(&r->mu);
        if (r->rank == 0) r->sd_fin_acks++;
        else r->sd_fin = 1;
        int over = r->rank == 0 ? r->sd_fin_acks == r->world - 1 : 1;
        pthread_cond_broadcast(&r->scv);
        pthread_mutex_unlock(&r->mu);
        if (r->rank != 0) spmd__rpc_send_small(r, 0, RPC_K_SD_FIN, NULL);
        if (over) spmd__rpc_rx_stop(r);   /* the exchange is over: the dispatcher leaves */
        break;
    }
    }
}

void spmd__rpc_on_frame(spmd_rpc *r, int src, const rpc_frame *f, size_t room) {
    if (f->h.magic != RPC_MAGIC || f->h.version != RPC_VERSION || f->h.kind == 0 || f->h.kind >= RPC_K_LAST) {
        reject(r, src, f, SPMD_ERR_PROTOCOL, "not an rpc frame (bad magic, version or kind)");
        return;
    }
    if (f->h.kind >= RPC_K_SD_READY) {
        on_shutdown_frame(r, src, f);
        return;
    }
    spmd_rpc_msg *m = NULL;
    char err[SPMD__ERRLEN];
    spmd_status st = spmd__rpc_recv_body(r, src, f, room, &m, err, sizeof err);
    if (st != SPMD_OK) {
        char why[SPMD__ERRLEN + 32];
        snprintf(why, sizeof why, "malformed frame: %s", err);
        if (f->h.kind == RPC_K_RESP) {
            spmd_rpc_future *fut = spmd__rpc_pending_take(r, f->h.id);
            SPMD_LOGW("rpc: rank %d: %s", r->rank, why);
            if (fut) {
                spmd__rpc_future_complete(fut, SPMD_ERR_PROTOCOL, NULL, why);
                spmd_rpc_future_free(fut);
            }
        } else {
            reject(r, src, f, SPMD_ERR_PROTOCOL, why);
        }
        return;
    }
    if (f->h.kind == RPC_K_RESP) on_response(r, src, f, m);
    else on_request(r, src, f, m);
}
