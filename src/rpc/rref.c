/* rref.c — remote references: the handles, and the messages that register
 * and release their users with the owner (whose table is rref_owner.c's).
 *
 * The owner keeps one entry per value with the set of users ("forks")
 * registered for it; the value is freed when the set becomes empty and no
 * call is using it.  Every handle anywhere, the owner's own included, is one
 * registered fork.  Sharing a handle registers the new fork with the owner
 * BEFORE the message carrying it leaves (one round trip), so the owner can
 * never free a value a message in flight refers to — torch reaches the same
 * guarantee asynchronously with fork confirmations; see docs/RPC.md. */
#include <stdlib.h>
#include <string.h>
#include "rpc_internal.h"

struct spmd_rref {
    spmd_rpc *r;
    int owner;
    uint64_t rref_id, fork_id;
    spmd_rpc_future *created;   /* remote(): the creation ack (NULL when adopted) */
};

static void free_on_done(spmd_rpc_future *f, void *ctx) {
    (void)ctx;
    if (f->st != SPMD_OK) SPMD_LOGW("rpc: releasing an RRef: %s", f->err);
    spmd_rpc_future_free(f);
}

/* Release one user: locally, or by a message whose ack frees its future. */
void spmd__rpc_release_desc(spmd_rpc *r, int owner, uint64_t rref_id, uint64_t fork_id) {
    char err[SPMD__ERRLEN];
    if (atomic_load(&r->broken)) return;   /* shut down or broken: nothing left to tell */
    if (owner == r->rank) {
        if (spmd__rpc_fork_del(r, rref_id, fork_id, err, sizeof err) != SPMD_OK) SPMD_LOGW("rpc: %s", err);
        return;
    }
    spmd_rpc_future *f = NULL;
    if (spmd__rpc_request(r, owner, RPC_K_DELETE, NULL, rref_id, fork_id, NULL, 0, &f) != SPMD_OK) {
        if (f) spmd_rpc_future_free(f);
        return;
    }
    spmd_rpc_future_then(f, free_on_done, NULL);
}

/* Register a new user with the owner and wait for its ack. */
spmd_status spmd__rpc_fork_add_remote(spmd_rpc *r, int owner, uint64_t rref_id, uint64_t fork_id,
                                      char *err, size_t errlen) {
    if (owner == r->rank) return spmd__rpc_fork_add(r, rref_id, fork_id, err, errlen);
    spmd_rpc_future *f = NULL;
    spmd_status st = spmd__rpc_request(r, owner, RPC_K_FORK, NULL, rref_id, fork_id, NULL, -1, &f);
    if (st == SPMD_OK) st = spmd_rpc_future_wait(f, -1);
    if (st != SPMD_OK) snprintf(err, errlen, "%s", f ? f->err : spmd_rpc_errmsg(r));
    spmd_rpc_future_free(f);
    return st;
}

/* ---- public ------------------------------------------------------------- */
static uint64_t new_id(spmd_rpc *r) {
    return ((uint64_t)(r->rank + 1) << 40) | (atomic_fetch_add(&r->next_fork, 1) & ((1ull << 40) - 1));
}

static spmd_rref *handle(spmd_rpc *r, int owner, uint64_t rref_id, uint64_t fork_id) {
    spmd_rref *h = calloc(1, sizeof *h);
    if (!h) return NULL;
    h->r = r;
    spmd__rpc_ref(r);
    h->owner = owner;
    h->rref_id = rref_id;
    h->fork_id = fork_id;
    return h;
}

spmd_status spmd_rpc_remote(spmd_rpc *r, int dst, const char *fn, const spmd_rpc_msg *args,
                            int timeout_ms, spmd_rref **out) {
    if (!r || !fn || !out) return SPMD_ERR_INVALID;
    uint64_t id = new_id(r), fork = new_id(r);
    spmd_rref *h = handle(r, dst, id, fork);
    if (!h) return SPMD_ERR_NOMEM;
    spmd_status st = spmd__rpc_request(r, dst, RPC_K_REMOTE, fn, id, fork, args, timeout_ms, &h->created);
    if (st != SPMD_OK) {
        spmd_rpc_future_free(h->created);
        free(h);
        return st;
    }
    *out = h;
    return SPMD_OK;
}

int spmd_rref_owner(const spmd_rref *ref) { return ref ? ref->owner : -1; }
int spmd_rref_is_owner(const spmd_rref *ref) { return ref && ref->owner == ref->r->rank; }

spmd_status spmd_rref_to_here(spmd_rref *ref, int timeout_ms, spmd_rpc_msg **out) {
    if (!ref || !out) return SPMD_ERR_INVALID;
    spmd_rpc_future *f = NULL;
    spmd_status st = spmd__rpc_request(ref->r, ref->owner, RPC_K_TO_HERE, NULL, ref->rref_id, 0, NULL,
                                       timeout_ms, &f);
    if (st == SPMD_OK) st = spmd_rpc_future_wait(f, -1);
    if (st == SPMD_OK) st = spmd_rpc_future_take(f, out);
    if (st != SPMD_OK && f) spmd__rpc_error(ref->r, st, "%s", f->err);
    spmd_rpc_future_free(f);
    return st;
}

spmd_rpc_msg *spmd_rref_local_value(spmd_rref *ref) {
    if (!ref || ref->owner != ref->r->rank) return NULL;
    return spmd__rpc_entry_value(ref->r, ref->rref_id);
}

spmd_status spmd_rref_call_async(spmd_rref *ref, const char *fn, const spmd_rpc_msg *args,
                                 int timeout_ms, spmd_rpc_future **out) {
    if (!ref || !fn || !out) return SPMD_ERR_INVALID;
    spmd_status st = spmd__rpc_request(ref->r, ref->owner, RPC_K_RREF_CALL, fn, ref->rref_id, 0, args,
                                       timeout_ms, out);
    if (st != SPMD_OK && *out) {
        spmd_rpc_future_free(*out);
        *out = NULL;
    }
    return st;
}

spmd_status spmd_rpc_msg_add_rref(spmd_rpc_msg *m, spmd_rref *ref) {
    if (!m || !ref) return SPMD_ERR_INVALID;
    if (m->nrrefs >= RPC_MAX_RREFS) return spmd__rpc_error(ref->r, SPMD_ERR_INVALID, "rpc: a message carries at most %d RRefs", RPC_MAX_RREFS);
    uint64_t fork = new_id(ref->r);
    char err[SPMD__ERRLEN];
    spmd_status st = spmd__rpc_fork_add_remote(ref->r, ref->owner, ref->rref_id, fork, err, sizeof err);
    if (st != SPMD_OK) return spmd__rpc_error(ref->r, st, "rpc: sharing an RRef: %s", err);
    return spmd__rpc_msg_add_desc(m, ref->r, ref->owner, ref->rref_id, fork);
}

spmd_status spmd_rpc_msg_take_rref(spmd_rpc_msg *m, int i, spmd_rref **out) {
    if (!m || !out || i < 0 || i >= m->nrrefs || m->rr[i].taken || !m->agent) return SPMD_ERR_INVALID;
    spmd_rref *h = handle(m->agent, m->rr[i].owner, m->rr[i].rref_id, m->rr[i].fork_id);
    if (!h) return SPMD_ERR_NOMEM;
    m->rr[i].taken = 1;
    *out = h;
    return SPMD_OK;
}

void spmd_rref_release(spmd_rref *ref) {
    if (!ref) return;
    if (ref->created) {
        /* The value must exist before its last user can go: the DELETE
         * would otherwise race the creation (both are ordered on the wire,
         * but a local creation runs on the pool). */
        spmd_rpc_future_wait(ref->created, -1);
        spmd_rpc_future_free(ref->created);
    }
    spmd__rpc_release_desc(ref->r, ref->owner, ref->rref_id, ref->fork_id);
    spmd__rpc_unref(ref->r);
    free(ref);
}
