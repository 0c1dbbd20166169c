/* mpi_p2p.c — a group's point-to-point messages over MPI (mpi_internal.h).
 *
 * The MPI tag carries the spmd tag and the sender's dtype (tag·8 + dtype), so
 * spmd's rules hold unchanged: a receive's count and dtype are checked
 * against the send's, and a mismatch fails that receive with a message naming
 * both sides (the pair stays usable; the refused message is received into a
 * scratch buffer and dropped).  Spmd tags go up to MPI_TAG_UB / 8 (2^28 - 1
 * with Open MPI).
 *
 * Matching is spmd's own (p2p_match.h, shared with p2p_engine.c): incoming messages are claimed with
 * MPI_Improbe(ANY_SOURCE, ANY_TAG) in MPI's arrival order and matched
 * against the posted receives in post order (else kept, as MPI_Message
 * handles, until a receive comes); MPI_Imrecv then lands the payload straight
 * in the receive's buffer, so a large message is still copied once, by MPI.
 * A send is one MPI_Isend.
 *
 * Progress happens in the calling threads (post, test, wait): MPI moves bytes
 * only when called.  One mutex guards the lists and the active requests. */
#define _GNU_SOURCE
#include <limits.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "mpi_internal.h"
#include "p2p_match.h"

#define DT_BITS 3
_Static_assert(SPMD_DTYPE_COUNT <= (1 << DT_BITS), "the MPI tag has 3 bits for the dtype");

/* A message claimed by MPI_Improbe that no receive wanted yet. */
typedef struct unexp {
    MPI_Message msg;
    int src, tag, dt, bytes;
    struct unexp *next;
} unexp;

/* What an active MPI request is for. */
typedef struct {
    spmd__preq *r; /* NULL: nobody waits any more (refused, cancelled or failed) */
    char *drain;   /* landing place of a refused message, freed when it lands */
} act;

struct spmd__mpi_p2p {
    pthread_mutex_t mu;
    spmd__preq *posted, *posted_tail; /* receives not matched yet, in post order */
    unexp *ux, *ux_tail;              /* claimed messages, in arrival order */
    MPI_Request *reqs;                /* [nact] */
    act *acts;                        /* [nact] */
    int nact, cap;
    int *idx;                         /* [cap] MPI_Testsome's output */
    MPI_Status *st;                   /* [cap] */
};

int spmd__mpi_max_tag(const spmd__mpi_link *l) { return l->tag_ub >> DT_BITS; }

spmd_status spmd__mpi_p2p_init(spmd__mpi_link *l) {
    spmd__mpi_p2p *p = calloc(1, sizeof *p);
    if (!p) return SPMD_ERR_NOMEM;
    pthread_mutex_init(&p->mu, NULL);
    l->p2p_state = p;
    return SPMD_OK;
}

/* Room for one more active request (mu held). */
static int grow(spmd__mpi_p2p *p) {
    if (p->nact < p->cap) return 1;
    int cap = p->cap ? 2 * p->cap : 16;
    MPI_Request *r = realloc(p->reqs, sizeof *r * (size_t)cap);
    if (r) p->reqs = r;
    act *a = realloc(p->acts, sizeof *a * (size_t)cap);
    if (a) p->acts = a;
    int *ix = realloc(p->idx, sizeof *ix * (size_t)cap);
    if (ix) p->idx = ix;
    MPI_Status *s = realloc(p->st, sizeof *s * (size_t)cap);
    if (s) p->st = s;
    if (!r || !a || !ix || !s) return 0;
    p->cap = cap;
    return 1;
}

static void add_act(spmd__mpi_p2p *p, MPI_Request req, spmd__preq *r, char *drain) {
    p->reqs[p->nact] = req;
    p->acts[p->nact].r = r;
    p->acts[p->nact].drain = drain;
    p->nact++;
}

/* Receive r meets a claimed message: land it in r's buffer, or refuse it
 * (scratch buffer, r fails with a mismatch naming both sides).  mu held. */
static void start_recv(spmd__mpi_link *l, spmd__preq *r, MPI_Message msg, int src, int tag, int dt, int bytes) {
    spmd__mpi_p2p *p = l->p2p_state;
    r->source = src;
    r->tag = tag;
    int fits = spmd__p2p_fits((uint64_t)bytes, dt, r->len, r->dtype);
    char *drain = NULL;
    if (!fits && bytes > 0 && !(drain = malloc((size_t)bytes))) {
        r->complete(r, SPMD_ERR_NOMEM, "out of memory for a refused message");
        return; /* the message stays claimed and unread: MPI frees it with the communicator */
    }
    if (!grow(p)) {
        free(drain);
        r->complete(r, SPMD_ERR_NOMEM, "out of memory");
        return;
    }
    MPI_Request req;
    spmd__mpi_lock();
    int rc = MPI_Imrecv(fits ? r->buf : drain, bytes, MPI_BYTE, &msg, &req);
    spmd__mpi_unlock();
    if (rc != MPI_SUCCESS) {
        char e[256], m2[SPMD__ERRLEN];
        spmd__mpi_errstr(rc, e, sizeof e);
        snprintf(m2, sizeof m2, "receive from rank %d: MPI_Imrecv: %s", src, e);
        free(drain);
        r->complete(r, SPMD_ERR_SYSTEM, m2);
        return;
    }
    if (fits) {
        add_act(p, req, r, NULL);
        return;
    }
    add_act(p, req, NULL, drain);
    char m2[SPMD__ERRLEN];
    spmd__p2p_mismatch_msg(m2, sizeof m2, l->m->rank, src, (uint32_t)tag, (uint64_t)bytes, dt, r->len, r->dtype);
    r->complete(r, SPMD_ERR_MISMATCH, m2);
}

/* Claim what has arrived and finish what MPI completed.  mu held.  Returns
 * 1 when something happened. */
static int progress(spmd__mpi_link *l) {
    spmd__mpi_p2p *p = l->p2p_state;
    int moved = 0;
    for (int k = 0; k < 64; k++) {
        int flag = 0;
        MPI_Message msg;
        MPI_Status s;
        spmd__mpi_lock();
        int rc = MPI_Improbe(MPI_ANY_SOURCE, MPI_ANY_TAG, l->p2p, &flag, &msg, &s);
        int bytes = 0;
        if (rc == MPI_SUCCESS && flag) MPI_Get_count(&s, MPI_BYTE, &bytes);
        spmd__mpi_unlock();
        if (rc != MPI_SUCCESS || !flag) break;
        moved = 1;
        const int tag = s.MPI_TAG >> DT_BITS, dt = s.MPI_TAG & ((1 << DT_BITS) - 1);
        spmd__preq *r = spmd__p2p_take_posted(&p->posted, &p->posted_tail, s.MPI_SOURCE, (uint32_t)tag);
        if (r) {
            start_recv(l, r, msg, s.MPI_SOURCE, tag, dt, bytes);
            continue;
        }
        unexp *u = malloc(sizeof *u);
        if (!u) {
            SPMD_LOGW("rank %d: out of memory holding a message from rank %d: dropped", l->m->rank, s.MPI_SOURCE);
            spmd__mpi_lock();
            MPI_Mrecv(NULL, 0, MPI_BYTE, &msg, MPI_STATUS_IGNORE); /* truncates: frees MPI's copy */
            spmd__mpi_unlock();
            continue;
        }
        *u = (unexp){msg, s.MPI_SOURCE, tag, dt, bytes, NULL};
        if (p->ux_tail) p->ux_tail->next = u;
        else p->ux = u;
        p->ux_tail = u;
    }
    if (!p->nact) return moved;
    int n = 0;
    spmd__mpi_lock();
    int rc = MPI_Testsome(p->nact, p->reqs, &n, p->idx, p->st);
    spmd__mpi_unlock();
    if ((rc != MPI_SUCCESS && rc != MPI_ERR_IN_STATUS) || n == MPI_UNDEFINED || n <= 0) return moved;
    for (int k = 0; k < n; k++) {
        act *a = &p->acts[p->idx[k]];
        free(a->drain);
        a->drain = NULL;
        spmd__preq *r = a->r;
        a->r = NULL;
        if (!r) continue;
        int err = rc == MPI_ERR_IN_STATUS ? p->st[k].MPI_ERROR : MPI_SUCCESS, cancelled = 0;
        if (r->send) r->source = r->peer;
        if (err == MPI_SUCCESS) MPI_Test_cancelled(&p->st[k], &cancelled);
        if (cancelled) {
            r->complete(r, SPMD_ERR_ABORTED, "operation cancelled before the peer was ready");
        } else if (err == MPI_SUCCESS) {
            r->complete(r, SPMD_OK, NULL);
        } else {
            char e[256], m2[SPMD__ERRLEN];
            spmd__mpi_errstr(err, e, sizeof e);
            snprintf(m2, sizeof m2, "%s rank %d: MPI reports: %s", r->send ? "send to" : "receive from",
                     r->send ? r->peer : r->source, e);
            r->complete(r, SPMD_ERR_REMOTE, m2);
        }
    }
    /* drop the finished requests (MPI set them to MPI_REQUEST_NULL) */
    int j = 0;
    for (int i = 0; i < p->nact; i++)
        if (p->reqs[i] != MPI_REQUEST_NULL) {
            p->reqs[j] = p->reqs[i];
            p->acts[j++] = p->acts[i];
        }
    p->nact = j;
    return 1;
}

static spmd_status checks(spmd__mesh *m, const spmd__preq *r, char *err, size_t errlen) {
    spmd__mpi_link *l = spmd__mpi_of(m);
    char msg[SPMD__ERRLEN];
    spmd_status st = spmd__mpi_check(l, 0, msg, sizeof msg);
    if (st) return spmd__fail(err, errlen, st, "%s", msg);
    const char *verb = r->send ? "send" : "recv";
    if (r->tag != SPMD_ANY_TAG && r->tag > spmd__mpi_max_tag(l))
        return spmd__fail(err, errlen, SPMD_ERR_INVALID, "%s: tag %d is above %d, the largest the MPI backend carries (MPI_TAG_UB / 8)",
                          verb, r->tag, spmd__mpi_max_tag(l));
    if (r->len > INT_MAX)
        return spmd__fail(err, errlen, SPMD_ERR_INVALID, "%s: %zu bytes: the MPI backend carries at most %d bytes per message",
                          verb, r->len, INT_MAX);
    return SPMD_OK;
}

spmd_status spmd__mpi_post_send(spmd__mesh *m, spmd__preq *r, char *err, size_t errlen) {
    spmd__mpi_link *l = spmd__mpi_of(m);
    spmd__mpi_p2p *p = l->p2p_state;
    spmd_status st = checks(m, r, err, errlen);
    if (st) return st;
    pthread_mutex_lock(&p->mu);
    if (!grow(p)) {
        pthread_mutex_unlock(&p->mu);
        return spmd__fail(err, errlen, SPMD_ERR_NOMEM, "send to rank %d: out of memory", r->peer);
    }
    MPI_Request req;
    spmd__mpi_lock();
    int rc = MPI_Isend(r->buf, (int)r->len, MPI_BYTE, r->peer, (r->tag << DT_BITS) | r->dtype, l->p2p, &req);
    spmd__mpi_unlock();
    if (rc != MPI_SUCCESS) {
        pthread_mutex_unlock(&p->mu);
        char e[256];
        spmd__mpi_errstr(rc, e, sizeof e);
        return spmd__fail(err, errlen, SPMD_ERR_SYSTEM, "send to rank %d: MPI_Isend: %s", r->peer, e);
    }
    add_act(p, req, r, NULL);
    progress(l); /* a small message is usually out at once */
    pthread_mutex_unlock(&p->mu);
    return SPMD_OK;
}

spmd_status spmd__mpi_post_recv(spmd__mesh *m, spmd__preq *r, char *err, size_t errlen) {
    spmd__mpi_link *l = spmd__mpi_of(m);
    spmd__mpi_p2p *p = l->p2p_state;
    spmd_status st = checks(m, r, err, errlen);
    if (st) return st;
    pthread_mutex_lock(&p->mu);
    /* An earlier claimed message that matches wins (arrival order). */
    unexp *prev = NULL;
    for (unexp *u = p->ux; u; prev = u, u = u->next) {
        if (!spmd__p2p_matches(r, u->src, (uint32_t)u->tag)) continue;
        if (prev) prev->next = u->next;
        else p->ux = u->next;
        if (p->ux_tail == u) p->ux_tail = prev;
        start_recv(l, r, u->msg, u->src, u->tag, u->dt, u->bytes);
        free(u);
        pthread_mutex_unlock(&p->mu);
        return SPMD_OK;
    }
    spmd__p2p_post(&p->posted, &p->posted_tail, r);
    progress(l);
    pthread_mutex_unlock(&p->mu);
    return SPMD_OK;
}

void spmd__mpi_poll(spmd__mesh *m, int peer) {
    (void)peer;
    spmd__mpi_link *l = spmd__mpi_of(m);
    if (!l) return;
    spmd__mpi_p2p *p = l->p2p_state;
    if (pthread_mutex_trylock(&p->mu)) return; /* another thread is progressing */
    progress(l);
    pthread_mutex_unlock(&p->mu);
    char msg[SPMD__ERRLEN];
    spmd__mpi_check(l, 0, msg, sizeof msg);
}

/* Stop waiting for r through MPI (mu held): a posted receive is withdrawn;
 * an active request is cancelled when MPI can, else left to MPI (which may
 * still complete it).  r is completed with st/msg unless MPI completed it
 * first. */
static void withdraw(spmd__mpi_p2p *p, spmd__preq *r, spmd_status st, const char *msg) {
    if (spmd__p2p_unpost(&p->posted, &p->posted_tail, r)) {
        r->complete(r, st, msg);
        return;
    }
    for (int i = 0; i < p->nact; i++) {
        if (p->acts[i].r != r) continue;
        spmd__mpi_lock();
        MPI_Cancel(&p->reqs[i]);
        spmd__mpi_unlock();
        p->acts[i].r = NULL;
        r->complete(r, st, msg);
        return;
    }
}

spmd_status spmd__mpi_wait(spmd__mesh *m, spmd__preq *r, const atomic_int *state, int done_bit, int64_t deadline) {
    (void)r; /* progress is for every request alike */
    spmd__mpi_link *l = spmd__mpi_of(m);
    spmd__mpi_p2p *p = l->p2p_state;
    spmd__mpi_idle idle;
    spmd__mpi_idle_init(&idle, m);
    char msg[SPMD__ERRLEN];
    for (unsigned it = 0;; it++) {
        if (atomic_load_explicit(state, memory_order_acquire) & done_bit) return SPMD_OK;
        int moved = 0;
        if (!pthread_mutex_trylock(&p->mu)) {
            moved = progress(l);
            pthread_mutex_unlock(&p->mu);
        }
        if (atomic_load_explicit(state, memory_order_acquire) & done_bit) return SPMD_OK;
        spmd__mpi_check(l, 0, msg, sizeof msg); /* a failure completes r through fail_all */
        if ((it & 63) == 63 && spmd__remaining_ms(deadline) == 0) return SPMD_ERR_TIMEOUT;
        if (moved) spmd__mpi_idle_reset(&idle);
        else spmd__mpi_idle_step(&idle, m);
    }
}

static int active_index(const spmd__mpi_p2p *p, const spmd__preq *r) {
    for (int i = 0; i < p->nact; i++)
        if (p->acts[i].r == r) return i;
    return -1;
}

/* spmd_work_free of an unfinished operation: a receive not matched yet is
 * withdrawn; a send MPI can still cancel is; a transfer under way is waited
 * for (MPI writes the receive's buffer until it ends), up to the group's
 * deadline — then left to MPI, the work failing. */
void spmd__mpi_cancel(spmd__mesh *m, spmd__preq *r) {
    spmd__mpi_link *l = spmd__mpi_of(m);
    if (!l) return;
    spmd__mpi_p2p *p = l->p2p_state;
    pthread_mutex_lock(&p->mu);
    progress(l); /* it may have just finished */
    if (spmd__p2p_unpost(&p->posted, &p->posted_tail, r)) {
        r->complete(r, SPMD_ERR_ABORTED, "operation cancelled before the peer was ready");
        pthread_mutex_unlock(&p->mu);
        return;
    }
    int i = active_index(p, r);
    if (i >= 0) {
        spmd__mpi_lock();
        MPI_Cancel(&p->reqs[i]); /* a send not matched yet; a matched transfer goes on */
        spmd__mpi_unlock();
    }
    int64_t deadline = spmd__mesh_deadline(m);
    spmd__mpi_idle idle;
    spmd__mpi_idle_init(&idle, m);
    while (active_index(p, r) >= 0 && spmd__remaining_ms(deadline) != 0) {
        if (progress(l)) continue;
        pthread_mutex_unlock(&p->mu);
        spmd__mpi_idle_step(&idle, m);
        pthread_mutex_lock(&p->mu);
    }
    withdraw(p, r, SPMD_ERR_TIMEOUT, "operation abandoned: MPI did not finish it within the deadline");
    pthread_mutex_unlock(&p->mu);
}

void spmd__mpi_fail_all(spmd__mesh *m, spmd_status st, const char *msg) {
    spmd__mpi_link *l = spmd__mpi_of(m);
    if (!l) return;
    spmd__mpi_p2p *p = l->p2p_state;
    pthread_mutex_lock(&p->mu);
    while (p->posted) {
        spmd__preq *r = p->posted;
        p->posted = r->next;
        r->next = NULL;
        r->complete(r, st, msg);
    }
    p->posted_tail = NULL;
    int fin = 0;
    MPI_Finalized(&fin);
    for (int i = 0; i < p->nact; i++) {
        spmd__preq *r = p->acts[i].r;
        if (!r) continue;
        if (!fin) {
            spmd__mpi_lock();
            MPI_Cancel(&p->reqs[i]);
            spmd__mpi_unlock();
        }
        p->acts[i].r = NULL;
        r->complete(r, st, msg);
    }
    pthread_mutex_unlock(&p->mu);
}

void spmd__mpi_p2p_stop(spmd__mpi_link *l) {
    spmd__mpi_p2p *p = l->p2p_state;
    if (!p) return;
    spmd__mesh *m = l->m;
    int fin = 0;
    MPI_Finalized(&fin);
    pthread_mutex_lock(&p->mu);
    /* sends already posted go out first (as the TCP engine flushes its queues) */
    int64_t until = spmd__now_ms() + 5000;
    spmd__mpi_idle idle;
    spmd__mpi_idle_init(&idle, m);
    while (!fin && !atomic_load(&m->failed) && spmd__now_ms() < until) {
        int sending = 0;
        for (int i = 0; i < p->nact; i++)
            if (p->acts[i].r && p->acts[i].r->send) sending = 1;
        if (!sending) break;
        progress(l);
        pthread_mutex_unlock(&p->mu);
        spmd__mpi_idle_step(&idle, m);
        pthread_mutex_lock(&p->mu);
    }
    pthread_mutex_unlock(&p->mu);
    char msg[SPMD__ERRLEN];
    snprintf(msg, sizeof msg, "group %s destroyed while the operation was pending", m->name);
    spmd__mpi_fail_all(m, SPMD_ERR_ABORTED, msg);
    pthread_mutex_lock(&p->mu);
    /* claimed messages nobody received: receive and drop them */
    while (p->ux) {
        unexp *u = p->ux;
        p->ux = u->next;
        char *drain = !fin && u->bytes > 0 ? malloc((size_t)u->bytes) : NULL;
        MPI_Request req = MPI_REQUEST_NULL;
        if (!fin && (drain || u->bytes == 0) && grow(p)) {
            spmd__mpi_lock();
            int rc = MPI_Imrecv(drain, u->bytes, MPI_BYTE, &u->msg, &req);
            spmd__mpi_unlock();
            if (rc == MPI_SUCCESS) {
                add_act(p, req, NULL, drain);
                drain = NULL;
            }
        }
        free(drain);
        free(u);
    }
    if (!fin && p->nact) {
        until = spmd__now_ms() + 100;
        while (p->nact && spmd__now_ms() < until) {
            progress(l);
            if (p->nact) sched_yield();
        }
        /* still running (a peer that never sends the rest): MPI keeps them;
         * their scratch buffers go with them */
        spmd__mpi_lock();
        for (int i = 0; i < p->nact; i++) MPI_Request_free(&p->reqs[i]);
        spmd__mpi_unlock();
    } else {
        for (int i = 0; i < p->nact; i++) free(p->acts[i].drain);
    }
    pthread_mutex_unlock(&p->mu);
}

void spmd__mpi_p2p_free(spmd__mpi_link *l) {
    spmd__mpi_p2p *p = l->p2p_state;
    if (!p) return;
    while (p->ux) {
        unexp *u = p->ux;
        p->ux = u->next;
        free(u);
    }
    pthread_mutex_destroy(&p->mu);
    free(p->reqs);
    free(p->acts);
    free(p->idx);
    free(p->st);
    free(p);
    l->p2p_state = NULL;
}
