/* agent.c — the RPC agent: init (threads, names, the hooks that the lower
 * files call up through) and the calls of the public API. */
#define _GNU_SOURCE /* pthread_setname_np */
#include <stdlib.h>
#include <string.h>
#include "rpc_internal.h"

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
    r->on_frame = spmd__rpc_on_frame;
    r->release_user = spmd__rpc_release_desc;
    r->add_user = spmd__rpc_fork_add_remote;
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
    spmd__rpc_agent_live();   /* from here on the agent goes by spmd__rpc_unref */
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

