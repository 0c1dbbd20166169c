/* state.c — the agent's shared state that every other file of src/rpc uses:
 * its error text, the broken flag, the users and references that keep it
 * alive, and the accessors of the public API.  It calls nothing of the
 * folder but the memory caches (bufcache.c). */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
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

void spmd__rpc_agent_live(void) { atomic_fetch_add(&live_agents, 1); }

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
