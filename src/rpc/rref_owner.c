/* rref_owner.c — the owner's side of remote references: one entry per value
 * this worker owns, with the users ("forks") registered for it; the value
 * is freed when no user is left and no call is using it.  The handles and
 * the messages that register and release users are rref.c's. */
#include <stdlib.h>
#include <string.h>
#include "rpc_internal.h"

static rpc_entry *find_locked(spmd_rpc *r, uint64_t id) {
    for (rpc_entry *e = r->entries; e; e = e->next)
        if (e->rref_id == id) return e;
    return NULL;
}

static int fork_index(const rpc_entry *e, uint64_t fork) {
    for (int i = 0; i < e->nforks; i++)
        if (e->forks[i] == fork) return i;
    return -1;
}

static int push_fork(rpc_entry *e, uint64_t fork) {
    if (e->nforks == e->capforks) {
        int cap = e->capforks ? e->capforks * 2 : 4;
        uint64_t *nf = realloc(e->forks, sizeof(uint64_t) * (size_t)cap);
        if (!nf) return 0;
        e->forks = nf;
        e->capforks = cap;
    }
    e->forks[e->nforks++] = fork;
    return 1;
}

static void entry_free(rpc_entry *e) {
    spmd_rpc_msg_free(e->value);
    free(e->forks);
    pthread_mutex_destroy(&e->vmu);
    free(e);
}

/* Unlink and free e when nothing refers to it any more (mu held). */
static rpc_entry *maybe_unlink_locked(spmd_rpc *r, rpc_entry *e) {
    if (e->nforks || e->busy || e->state == 0) return NULL;
    for (rpc_entry **pp = &r->entries; *pp; pp = &(*pp)->next)
        if (*pp == e) {
            *pp = e->next;
            return e;
        }
    return NULL;
}

rpc_entry *spmd__rpc_entry_create(spmd_rpc *r, uint64_t rref_id, uint64_t fork_id) {
    rpc_entry *e = calloc(1, sizeof *e);
    if (!e) return NULL;
    e->rref_id = rref_id;
    pthread_mutex_init(&e->vmu, NULL);
    if (!push_fork(e, fork_id)) {
        entry_free(e);
        return NULL;
    }
    e->busy = 1;   /* the creating call */
    pthread_mutex_lock(&r->mu);
    e->next = r->entries;
    r->entries = e;
    pthread_mutex_unlock(&r->mu);
    return e;
}

rpc_entry *spmd__rpc_entry_get(spmd_rpc *r, uint64_t rref_id) {
    pthread_mutex_lock(&r->mu);
    rpc_entry *e = find_locked(r, rref_id);
    if (e) e->busy++;
    pthread_mutex_unlock(&r->mu);
    return e;
}

void spmd__rpc_entry_put(spmd_rpc *r, rpc_entry *e) {
    pthread_mutex_lock(&r->mu);
    e->busy--;
    rpc_entry *dead = maybe_unlink_locked(r, e);
    pthread_mutex_unlock(&r->mu);
    if (dead) entry_free(dead);
}

void spmd__rpc_entry_set(spmd_rpc *r, rpc_entry *e, spmd_status st, spmd_rpc_msg *value,
                         const char *err) {
    pthread_mutex_lock(&r->mu);
    e->state = st == SPMD_OK ? 1 : 2;
    if (st == SPMD_OK) e->value = value;
    else {
        snprintf(e->err, sizeof e->err, "%s", err ? err : spmd_status_str(st));
        spmd_rpc_msg_free(value);
    }
    pthread_cond_broadcast(&r->scv);
    pthread_mutex_unlock(&r->mu);
}

/* Wait until the value is created (the creating handler runs ahead in FIFO order). */
spmd_status spmd__rpc_entry_wait(spmd_rpc *r, rpc_entry *e, char *err, size_t errlen) {
    pthread_mutex_lock(&r->mu);
    while (e->state == 0) pthread_cond_wait(&r->scv, &r->mu);
    spmd_status st = e->state == 1 ? SPMD_OK : SPMD_ERR_REMOTE;
    if (st != SPMD_OK) snprintf(err, errlen, "the RRef's creation failed: %s", e->err);
    pthread_mutex_unlock(&r->mu);
    return st;
}

spmd_status spmd__rpc_fork_add(spmd_rpc *r, uint64_t rref_id, uint64_t fork_id, char *err,
                               size_t errlen) {
    pthread_mutex_lock(&r->mu);
    rpc_entry *e = find_locked(r, rref_id);
    spmd_status st = SPMD_OK;
    if (!e) st = spmd__fail(err, errlen, SPMD_ERR_NOTFOUND, "fork of RRef %llx: not owned here", (unsigned long long)rref_id);
    else if (fork_index(e, fork_id) >= 0) st = spmd__fail(err, errlen, SPMD_ERR_PROTOCOL, "fork %llx registered twice", (unsigned long long)fork_id);
    else if (!push_fork(e, fork_id)) st = spmd__fail(err, errlen, SPMD_ERR_NOMEM, "out of memory");
    pthread_mutex_unlock(&r->mu);
    return st;
}

spmd_status spmd__rpc_fork_del(spmd_rpc *r, uint64_t rref_id, uint64_t fork_id, char *err,
                               size_t errlen) {
    pthread_mutex_lock(&r->mu);
    rpc_entry *e = find_locked(r, rref_id), *dead = NULL;
    int i = e ? fork_index(e, fork_id) : -1;
    spmd_status st = SPMD_OK;
    if (i < 0) {
        /* A double release, or a forged id: refused, nothing freed. */
        st = spmd__fail(err, errlen, SPMD_ERR_NOTFOUND, "release of RRef %llx user %llx: no such user",
                        (unsigned long long)rref_id, (unsigned long long)fork_id);
    } else {
        e->forks[i] = e->forks[--e->nforks];
        dead = maybe_unlink_locked(r, e);
    }
    pthread_mutex_unlock(&r->mu);
    if (dead) entry_free(dead);
    return st;
}

void spmd__rpc_entries_free(spmd_rpc *r) {
    while (r->entries) {
        rpc_entry *n = r->entries->next;
        entry_free(r->entries);
        r->entries = n;
    }
}

spmd_rpc_msg *spmd__rpc_entry_value(spmd_rpc *r, uint64_t rref_id) {
    pthread_mutex_lock(&r->mu);
    rpc_entry *e = find_locked(r, rref_id);
    spmd_rpc_msg *v = e && e->state == 1 ? e->value : NULL;
    pthread_mutex_unlock(&r->mu);
    return v;
}

void spmd_rpc_rref_counts(spmd_rpc *r, int *owned_values, int *registered_users) {
    int v = 0, u = 0;
    pthread_mutex_lock(&r->mu);
    for (rpc_entry *e = r->entries; e; e = e->next) {
        v++;
        u += e->nforks;
    }
    pthread_mutex_unlock(&r->mu);
    if (owned_values) *owned_values = v;
    if (registered_users) *registered_users = u;
}
