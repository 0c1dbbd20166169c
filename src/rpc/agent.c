/* agent.c — the RPC agent: init, the dispatcher thread, calls. */
#define _GNU_SOURCE /* pthread_setname_np */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "rpc_internal.h"

spmd_status spmd__rpc_error(spmd_rpc *r, spmd_status st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    spmd__vfail_locked(&r->mu, r->errmsg, sizeof r->errmsg, st, fmt, ap);
    va_end(ap);
    return st;
}

/* The first cause wins; broken_msg never changes once broken is set, so
 * readers that saw broken == 1 may read it without the lock. */
void spmd__rpc_set_broken(spmd_rpc *r, const char *why) {
    pthread_mutex_lock(&r->mu);
    if (!atomic_load(&r->broken)) {
        snprintf(r->broken_msg, sizeof r->broken_msg, "%s", why);
        atomic_store(&r->broken, 1);
    }
    pthread_mutex_unlock(&r->mu);
}

int spmd__rpc_enter(spmd_rpc *r) {
    atomic_fetch_add(&r->users, 1);
    if (!atomic_load(&r->broken)) return 1;
    atomic_fetch_sub(&r->users, 1);
    return 0;
}

void spmd__rpc_leave(spmd_rpc *r) { atomic_fetch_sub(&r->users, 1); }

void spmd__rpc_ref(spmd_rpc *r) { atomic_fetch_add(&r->refs, 1); }

static atomic_int live_agents;   /* the last one to go empties the buffer cache */

void spmd__rpc_unref(spmd_rpc *r) {
    if (atomic_fetch_sub(&r->refs, 1) != 1) return;
    if (atomic_fetch_sub(&live_agents, 1) == 1) {
        spmd__rpc_data_trim();
        spmd__rpc_msg_trim();
    }
    pthread_mutex_destroy(&r->mu);
    pthread_mutex_destroy(&r->fmu);
    pthread_mutex_destroy(&r->qmu);
    pthread_cond_destroy(&r->qcv);
    pthread_mutex_destroy(&r->rxmu);
    pthread_cond_destroy(&r->dcv);
    free(r->rx);
    pthread_cond_destroy(&r->wcv);
    pthread_cond_destroy(&r->scv);
    free(r->names);
    free(r);
}

const char *spmd_rpc_errmsg(const spmd_rpc *r) { return r ? r->errmsg : "no rpc agent"; }
int spmd_rpc_rank(const spmd_rpc *r) { return r ? r->rank : -1; }
int spmd_rpc_world_size(const spmd_rpc *r) { return r ? r->world : 0; }
spmd_group *spmd_rpc_group(spmd_rpc *r) { return r ? r->g : NULL; }

spmd_status spmd_rpc_worker_by_name(spmd_rpc *r, const char *name, spmd_rpc_worker_info *out) {
    if (!r || !name || !out) return SPMD_ERR_INVALID;
    for (int i = 0; i < r->world; i++)
        if (strcmp(r->names[i], name) == 0) return spmd_rpc_worker_by_rank(r, i, out);
    return spmd__rpc_error(r, SPMD_ERR_NOTFOUND, "rpc: no worker named '%s'", name);
}

spmd_status spmd_rpc_worker_by_rank(spmd_rpc *r, int rank, spmd_rpc_worker_info *out) {
    if (!r || !out) return SPMD_ERR_INVALID;
    if (rank < 0 || rank >= r->world)
        return spmd__rpc_error(r, SPMD_ERR_INVALID, "rpc: rank %d out of range (world %d)", rank, r->world);
    snprintf(out->name, sizeof out->name, "%s", r->names[rank]);
    out->rank = rank;
    return SPMD_OK;
}

/* ---- the dispatcher -------------------------------------------------------- */
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

/* ---- init ------------------------------------------------------------------ */
static spmd_status start(spmd_group *g, spmd_group *env_group, const spmd_rpc_opts *o,
                         spmd_rpc **out, char *err, size_t errlen) {
    spmd_rpc_opts def = SPMD_RPC_OPTS_DEFAULT;
    if (!o) o = &def;
    int world = spmd_group_size(g), rank = spmd_group_rank(g);
    int *all = malloc(sizeof(int) * (size_t)world);
    if (!all) return spmd__fail(err, errlen, SPMD_ERR_NOMEM, "out of memory");
    for (int i = 0; i < world; i++) all[i] = i;
    spmd_group *pg = NULL;
    spmd_status st = spmd_group_new_subgroup(g, all, world, &pg);
    free(all);
    if (st != SPMD_OK)
        return spmd__fail(err, errlen, st, "rpc init: private group: %s", spmd_group_errmsg(g));
    spmd_rpc *r = calloc(1, sizeof *r);
    char (*names)[SPMD_RPC_MAX_NAME] = calloc((size_t)world, SPMD_RPC_MAX_NAME);
    if (!r || !names) {
        free(r);
        free(names);
        spmd_group_destroy(pg);
        return spmd__fail(err, errlen, SPMD_ERR_NOMEM, "out of memory");
    }
    r->g = pg;
    r->env_group = env_group;
    r->rank = rank;
    r->world = world;
    r->names = names;
    long env_threads = 0;
    int threads = o->threads > 0 ? o->threads
                  : spmd__env_int("SPMD_RPC_THREADS", 1, 1024, &env_threads) == SPMD_OK ? (int)env_threads : 4;
    r->timeout_ms = o->timeout_ms > 0 ? o->timeout_ms : 60000;
    pthread_mutex_init(&r->mu, NULL);
    pthread_mutex_init(&r->fmu, NULL);
    pthread_mutex_init(&r->qmu, NULL);
    pthread_cond_init(&r->qcv, NULL);
    pthread_cond_init(&r->wcv, NULL);
    pthread_cond_init(&r->scv, NULL);
    pthread_mutex_init(&r->rxmu, NULL);
    pthread_cond_init(&r->dcv, NULL);
    atomic_init(&r->next_fork, 1);
    atomic_init(&r->refs, 1);

    char mine[SPMD_RPC_MAX_NAME] = {0};
    if (o->name && (!*o->name || strlen(o->name) >= SPMD_RPC_MAX_NAME))
        snprintf(mine, sizeof mine, "%s", "");   /* reported after the exchange, by every rank */
    else if (o->name) snprintf(mine, sizeof mine, "%s", o->name);
    else snprintf(mine, sizeof mine, "worker%d", rank);
    st = spmd_all_gather(pg, mine, names, SPMD_RPC_MAX_NAME, SPMD_U8);
    if (st != SPMD_OK) {
        spmd__fail(err, errlen, st, "rpc init: exchanging names: %s", spmd_group_errmsg(pg));
        goto fail;
    }
    for (int i = 0; i < world; i++) {
        names[i][SPMD_RPC_MAX_NAME - 1] = 0;
        if (!names[i][0]) {
            st = spmd__fail(err, errlen, SPMD_ERR_INVALID, "rpc init: rank %d's worker name is empty or longer than %d",
                            i, SPMD_RPC_MAX_NAME - 1);
            goto fail;
        }
        for (int j = 0; j < i; j++)
            if (strcmp(names[i], names[j]) == 0) {
                st = spmd__fail(err, errlen, SPMD_ERR_INVALID, "rpc init: ranks %d and %d are both named '%s'", j, i,
                                names[i]);
                goto fail;
            }
    }
    st = spmd__rpc_pool_start(r, threads);
    if (st != SPMD_OK) {
        spmd__fail(err, errlen, st, "rpc init: starting %d handler threads failed", threads);
        goto fail;
    }
    if (world > 1 && (st = spmd__rpc_rx_start(r, err, errlen)) != SPMD_OK) goto fail;
    atomic_fetch_add(&live_agents, 1);   /* from here on the agent goes by spmd__rpc_unref */
    if (pthread_create(&r->watchdog, NULL, spmd__rpc_watchdog, r) == 0) r->have_watchdog = 1;
    if (world > 1 && pthread_create(&r->dispatcher, NULL, spmd__rpc_dispatcher_main, r) == 0) r->have_dispatcher = 1;
    if (r->have_watchdog) pthread_setname_np(r->watchdog, "rpc-watchdog"); /* top -H, perf, gdb */
    if (r->have_dispatcher) pthread_setname_np(r->dispatcher, "rpc-dispatch");
    if (r->have_dispatcher) atomic_store(&r->rx_live, 1);
    if (!r->have_watchdog || (world > 1 && !r->have_dispatcher)) {
        st = spmd__fail(err, errlen, SPMD_ERR_SYSTEM, "rpc init: starting threads failed");
        spmd_rpc_shutdown(r, 0);
        return st;
    }
    *out = r;
    return SPMD_OK;
fail:
    spmd__rpc_pool_stop(r);
    spmd_group_destroy(pg);   /* completes a posted receive: r->rx goes after */
    free(r->rx);
    free(names);
    free(r);
    return st;
}

spmd_status spmd_rpc_init(spmd_group *g, const spmd_rpc_opts *o, spmd_rpc **out, char *err,
                          size_t errlen) {
    if (!g || !out) return spmd__fail(err, errlen, SPMD_ERR_INVALID, "rpc init: NULL group or output");
    return start(g, NULL, o, out, err, errlen);
}

spmd_status spmd_rpc_init_env(const spmd_group_opts *go, const spmd_rpc_opts *o, spmd_rpc **out,
                              char *err, size_t errlen) {
    if (!out) return spmd__fail(err, errlen, SPMD_ERR_INVALID, "rpc init: NULL output");
    spmd_group *g = NULL;
    spmd_status st = spmd_group_init(go, &g, err, errlen);
    if (st != SPMD_OK) return st;
    st = start(g, g, o, out, err, errlen);
    if (st != SPMD_OK) spmd_group_destroy(g);
    return st;
}

/* ---- calls ----------------------------------------------------------------- */
spmd_status spmd_rpc_async(spmd_rpc *r, int dst, const char *fn, const spmd_rpc_msg *args,
                           int timeout_ms, spmd_rpc_future **out) {
    if (!r || !fn || !out) return SPMD_ERR_INVALID;
    *out = NULL;
    if (!*fn || strlen(fn) >= SPMD_RPC_MAX_NAME)
        return spmd__rpc_error(r, SPMD_ERR_INVALID, "rpc: handler name '%s' must have 1-%d characters", fn,
                               SPMD_RPC_MAX_NAME - 1);
    spmd_rpc_future *f = NULL;
    spmd_status st = spmd__rpc_request(r, dst, RPC_K_CALL, fn, 0, 0, args, timeout_ms, &f);
    if (st != SPMD_OK) {
        spmd_rpc_future_free(f);
        return st;
    }
    *out = f;
    return SPMD_OK;
}

spmd_status spmd_rpc_sync(spmd_rpc *r, int dst, const char *fn, const spmd_rpc_msg *args,
                          int timeout_ms, spmd_rpc_msg **result) {
    spmd_rpc_future *f = NULL;
    if (r && dst != r->rank) spmd__rpc_hold(r); /* the reply may come before we poll for it */
    spmd_status st = spmd_rpc_async(r, dst, fn, args, timeout_ms, &f);
    if (st != SPMD_OK) {
        spmd__rpc_unhold();
        return st;
    }
    st = spmd_rpc_future_wait(f, -1);
    spmd__rpc_unhold();
    if (st == SPMD_OK && result) st = spmd_rpc_future_take(f, result);
    if (st != SPMD_OK) spmd__rpc_error(r, st, "%s", f->err);
    spmd_rpc_future_free(f);
    return st;
}

