/* shutdown.c — graceful shutdown (rank 0 polls every worker's counters until
 * nothing is in flight, then a FIN exchange stops the dispatchers together)
 * and the non-graceful kind (abort the agent's private group). */
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "rpc_internal.h"

/* ---- shutdown ------------------------------------------------------------- */
/* Rank 0: rounds of counters until two rounds in a row show nothing in
 * flight and no request sent in between (torch's graceful shutdown does
 * the same with its all-worker counts). */
static spmd_status leader_wait_quiet(spmd_rpc *r, int64_t deadline) {
    pthread_mutex_lock(&r->mu);
    while (r->sd_ready < r->world - 1 && !atomic_load(&r->broken) && spmd__now_ms() < deadline) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 20 * 1000000L;
        if (ts.tv_nsec >= 1000000000L) { ts.tv_sec++; ts.tv_nsec -= 1000000000L; }
        pthread_cond_timedwait(&r->scv, &r->mu, &ts);
    }
    pthread_mutex_unlock(&r->mu);
    uint64_t prev_sent = UINT64_MAX;
    int backoff_us = 0;
    while (!atomic_load(&r->broken) && spmd__now_ms() < deadline) {
        pthread_mutex_lock(&r->mu);
        r->sd_round++;
        r->sd_states = 0;
        memset(r->sd_sum, 0, sizeof r->sd_sum);
        uint64_t round = r->sd_round;
        pthread_mutex_unlock(&r->mu);
        uint64_t aux[4] = {round, 0, 0, 0};
        for (int i = 1; i < r->world; i++) spmd__rpc_send_small(r, i, RPC_K_SD_QUERY, aux);
        pthread_mutex_lock(&r->mu);
        while (r->sd_states < r->world - 1 && !atomic_load(&r->broken) && spmd__now_ms() < deadline) {
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_nsec += 20 * 1000000L;
            if (ts.tv_nsec >= 1000000000L) { ts.tv_sec++; ts.tv_nsec -= 1000000000L; }
            pthread_cond_timedwait(&r->scv, &r->mu, &ts);
        }
        uint64_t active = r->sd_sum[0] + (uint64_t)atomic_load(&r->active);
        uint64_t sent = r->sd_sum[1] + atomic_load(&r->sent_req);
        uint64_t recvd = r->sd_sum[2] + atomic_load(&r->recv_req);
        int complete = r->sd_states == r->world - 1;
        pthread_mutex_unlock(&r->mu);
        (void)recvd;   /* raw frames from non-agents count as received: not compared */
        if (complete && active == 0 && sent == prev_sent) return SPMD_OK;
        prev_sent = complete && active == 0 ? sent : UINT64_MAX;
        if (prev_sent == UINT64_MAX) {
            struct timespec ts = {0, (long)backoff_us * 1000};
            if (backoff_us) nanosleep(&ts, NULL);
            backoff_us = backoff_us ? (backoff_us < 20000 ? backoff_us * 2 : 20000) : 100;
        }
    }
    return atomic_load(&r->broken) ? SPMD_ERR_ABORTED : SPMD_ERR_TIMEOUT;
}

static void local_wait_quiet(spmd_rpc *r, int64_t deadline) {
    while (atomic_load(&r->active) > 0 && spmd__now_ms() < deadline) {
        struct timespec ts = {0, 200000};
        nanosleep(&ts, NULL);
    }
}

static void free_agent(spmd_rpc *r) {
    pthread_mutex_lock(&r->fmu);
    r->wstop = 1;
    pthread_cond_broadcast(&r->wcv);
    pthread_mutex_unlock(&r->fmu);
    if (r->have_watchdog) pthread_join(r->watchdog, NULL);
    spmd__rpc_pool_stop(r);
    /* From here on every call fails at once (the memory stays while futures,
     * RRef handles or messages refer to it). */
    char why[64];
    snprintf(why, sizeof why, "the rpc agent of rank %d has shut down", r->rank);
    spmd__rpc_set_broken(r, why);
    spmd__rpc_fail_all(r, SPMD_ERR_ABORTED, "the rpc agent shut down");
    while (atomic_load(&r->users)) {   /* threads still sending or receiving leave first */
        struct timespec ts = {0, 100000};
        nanosleep(&ts, NULL);
    }
    spmd_group_destroy(r->g);
    spmd_group_destroy(r->env_group);
    spmd__rpc_entries_free(r);
    while (r->handlers) {
        rpc_handler *n = r->handlers->next;
        free(r->handlers->shapes);
        free(r->handlers);
        r->handlers = n;
    }
    spmd__rpc_unref(r);
}

spmd_status spmd_rpc_shutdown(spmd_rpc *r, int graceful) {
    if (!r) return SPMD_ERR_INVALID;
    spmd_status st = SPMD_OK;
    int64_t deadline = spmd__now_ms() + r->timeout_ms;
    if (graceful && atomic_load(&r->broken)) st = spmd__rpc_error(r, SPMD_ERR_ABORTED, "rpc shutdown: %s", r->broken_msg);
    if (graceful && !atomic_load(&r->broken)) {
        if (r->world == 1) {
            local_wait_quiet(r, deadline);
        } else if (r->rank == 0) {
            st = leader_wait_quiet(r, deadline);
            if (st == SPMD_OK) {
                pthread_mutex_lock(&r->mu);
                r->sd_fin = 1;
                pthread_mutex_unlock(&r->mu);
                for (int i = 1; i < r->world; i++) spmd__rpc_send_small(r, i, RPC_K_SD_FIN, NULL);
            }
        } else {
            spmd__rpc_send_small(r, 0, RPC_K_SD_READY, NULL);
        }
        if (st == SPMD_OK && r->have_dispatcher) {
            /* The dispatcher stops once the FIN exchange is over (or the group breaks). */
            pthread_join(r->dispatcher, NULL);
            r->have_dispatcher = 0;
            if (atomic_load(&r->broken)) st = SPMD_ERR_ABORTED;
        }
    }
    if (!graceful || st != SPMD_OK) {
        if (graceful && st != SPMD_ERR_ABORTED) spmd__rpc_error(r, st, "rpc: graceful shutdown failed (%s); stopped at once", spmd_status_str(st));
        char why[64];
        snprintf(why, sizeof why, "the rpc agent of rank %d shut down", r->rank);
        spmd__rpc_set_broken(r, why);
        spmd_group_abort(r->g, "rpc agent shut down without waiting (non-graceful)");
    }
    if (r->have_dispatcher) pthread_join(r->dispatcher, NULL);
    free_agent(r);
    return st;
}
