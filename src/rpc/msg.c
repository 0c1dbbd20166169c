/* msg.c — the message container: typed tensors, a byte payload, RRefs. */
#include <stdlib.h>
#include <string.h>
#include "rpc_internal.h"

spmd_rpc_msg *spmd_rpc_msg_new(void) {
    spmd_rpc_msg *m = spmd__rpc_msg_alloc();
    if (!m) return NULL;
    m->n = 0;
    m->payload = NULL;
    m->plen = 0;
    m->nrrefs = 0;
    m->agent = NULL;
    return m;
}

void spmd_rpc_msg_free(spmd_rpc_msg *m) {
    if (!m) return;
    for (int i = 0; i < m->n; i++)
        if (m->owned[i]) spmd__rpc_data_free(m->t[i].data, spmd__rpc_tensor_bytes(&m->t[i]));
    for (int i = 0; i < m->nrrefs; i++)
        if (!m->rr[i].taken && m->agent)
            m->agent->release_user(m->agent, m->rr[i].owner, m->rr[i].rref_id, m->rr[i].fork_id);
    if (m->agent) spmd__rpc_unref(m->agent);
    free(m->payload);
    spmd__rpc_msg_dealloc(m);
}

void spmd__rpc_msg_release_rrefs(spmd_rpc_msg *m) {
    if (!m || !m->agent) return;
    for (int i = 0; i < m->nrrefs; i++)
        if (!m->rr[i].taken) {
            m->rr[i].taken = 1;
            m->agent->release_user(m->agent, m->rr[i].owner, m->rr[i].rref_id, m->rr[i].fork_id);
        }
}

size_t spmd_rpc_tensor_numel(const spmd_rpc_tensor *t) {
    size_t n = 1;
    for (int d = 0; d < t->ndim; d++) n *= (size_t)t->shape[d];
    return n;
}

size_t spmd__rpc_tensor_bytes(const spmd_rpc_tensor *t) {
    return spmd_rpc_tensor_numel(t) * spmd_dtype_size(t->dtype);
}

static spmd_status add(spmd_rpc_msg *m, spmd_dtype dt, int ndim, const int64_t *shape,
                       const void *data, int copy) {
    if (!m || ndim < 0 || ndim > SPMD_RPC_MAX_DIMS || (ndim && !shape) || !spmd_dtype_size(dt))
        return SPMD_ERR_INVALID;
    if (m->n >= SPMD_RPC_MAX_TENSORS) return SPMD_ERR_INVALID;
    spmd_rpc_tensor *t = &m->t[m->n];
    memset(t, 0, sizeof *t);
    t->dtype = dt;
    t->ndim = ndim;
    for (int d = 0; d < ndim; d++) {
        if (shape[d] < 0 || shape[d] > ((int64_t)1 << 40)) return SPMD_ERR_INVALID;
        t->shape[d] = shape[d];
    }
    size_t bytes = spmd__rpc_tensor_bytes(t);
    if (copy) {
        t->data = spmd__rpc_data_alloc(bytes);
        if (!t->data) return SPMD_ERR_NOMEM;
        if (data) memcpy(t->data, data, bytes);
        else memset(t->data, 0, bytes);
        m->owned[m->n] = 1;
    } else {
        if (!data && bytes) return SPMD_ERR_INVALID;
        t->data = (void *)data;
        m->owned[m->n] = 0;
    }
    m->n++;
    return SPMD_OK;
}

spmd_status spmd_rpc_msg_add_tensor(spmd_rpc_msg *m, spmd_dtype dt, int ndim, const int64_t *shape,
                                    const void *data) {
    return add(m, dt, ndim, shape, data, 1);
}

spmd_status spmd_rpc_msg_add_tensor_ref(spmd_rpc_msg *m, spmd_dtype dt, int ndim,
                                        const int64_t *shape, const void *data) {
    return add(m, dt, ndim, shape, data, 0);
}

spmd_status spmd_rpc_msg_set_payload(spmd_rpc_msg *m, const void *bytes, size_t len) {
    if (!m || (len && !bytes) || len > SPMD_RPC_MAX_PAYLOAD) return SPMD_ERR_INVALID;
    unsigned char *p = NULL;
    if (len) {
        p = malloc(len);
        if (!p) return SPMD_ERR_NOMEM;
        memcpy(p, bytes, len);
    }
    free(m->payload);
    m->payload = p;
    m->plen = len;
    return SPMD_OK;
}

int spmd_rpc_msg_ntensors(const spmd_rpc_msg *m) { return m ? m->n : 0; }

const spmd_rpc_tensor *spmd_rpc_msg_tensor(const spmd_rpc_msg *m, int i) {
    return m && i >= 0 && i < m->n ? &m->t[i] : NULL;
}

const void *spmd_rpc_msg_payload(const spmd_rpc_msg *m, size_t *len) {
    if (len) *len = m ? m->plen : 0;
    return m ? m->payload : NULL;
}

int spmd_rpc_msg_nrrefs(const spmd_rpc_msg *m) { return m ? m->nrrefs : 0; }

spmd_status spmd__rpc_msg_add_desc(spmd_rpc_msg *m, spmd_rpc *r, int owner, uint64_t rref_id,
                                   uint64_t fork_id) {
    if (m->nrrefs >= RPC_MAX_RREFS) return SPMD_ERR_INVALID;
    m->rr[m->nrrefs++] = (rpc_rref_desc){owner, rref_id, fork_id, 0};
    if (!m->agent) {
        m->agent = r;
        spmd__rpc_ref(r);
    }
    return SPMD_OK;
}

/* Sending a message hands its RRef users over to the receiver. */
void spmd__rpc_msg_handover(const spmd_rpc_msg *m) {
    spmd_rpc_msg *w = (spmd_rpc_msg *)m;   /* the flags only: the caller's view is unchanged */
    for (int i = 0; w && i < w->nrrefs; i++) w->rr[i].taken = 1;
}

spmd_status spmd__rpc_msg_copy(spmd_rpc *r, const spmd_rpc_msg *m, int handover, spmd_rpc_msg **out) {
    if (!m || !out) return SPMD_ERR_INVALID;
    spmd_rpc_msg *c = spmd_rpc_msg_new();
    if (!c) return SPMD_ERR_NOMEM;
    spmd_status st = SPMD_OK;
    for (int i = 0; i < m->n && st == SPMD_OK; i++)
        st = spmd_rpc_msg_add_tensor(c, m->t[i].dtype, m->t[i].ndim, m->t[i].shape, m->t[i].data);
    if (st == SPMD_OK) st = spmd_rpc_msg_set_payload(c, m->payload, m->plen);
    for (int i = 0; i < m->nrrefs && st == SPMD_OK; i++) {
        if (m->rr[i].taken) continue;
        if (!r) { st = SPMD_ERR_INVALID; break; }
        if (handover) {
            st = spmd__rpc_msg_add_desc(c, r, m->rr[i].owner, m->rr[i].rref_id, m->rr[i].fork_id);
            continue;
        }
        uint64_t fork = atomic_fetch_add(&r->next_fork, 1);
        char err[SPMD__ERRLEN];
        st = r->add_user(r, m->rr[i].owner, m->rr[i].rref_id, fork, err, sizeof err);
        if (st == SPMD_OK) st = spmd__rpc_msg_add_desc(c, r, m->rr[i].owner, m->rr[i].rref_id, fork);
    }
    if (st != SPMD_OK) {
        spmd_rpc_msg_free(c);
        return st;
    }
    if (handover) spmd__rpc_msg_handover(m);
    *out = c;
    return SPMD_OK;
}

spmd_status spmd_rpc_msg_copy(spmd_rpc *r, const spmd_rpc_msg *m, spmd_rpc_msg **out) {
    return spmd__rpc_msg_copy(r, m, 0, out);
}
