/* elastic.c — the training side of recovery in place (spmd/elastic.h,
 * docs/RELIABILITY.md "Training on top"): the commit rule, the agreement on
 * the committed step after a shrink, the state sent to survivors and
 * joiners, the reset callback.
 *
 * One agreement, for a recovery and for a grow: every rank contributes
 *   key  = commits * 2^20 + (2^20 - 1 - rank)   (MAX: most commits, then lowest rank)
 *   -commits                                    (MAX: minus the fewest)
 *   h, ~h                                       (MAX of both: the registrations agree iff max == ~max(~h))
 *   in_step                                     (MAX: a step was in flight somewhere)
 * in one all_reduce(MAX) of five int64, so the source of the state, the
 * spread of the counts and the check of the registrations cost one small
 * collective; then each state is broadcast from the source. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "common/common.h"
#include "common/fnv.h"
#include "common/seconds.h"
#include "common/test_die.h"
#include "spmd/elastic.h"

#define RANK_BITS 20

typedef struct {
    char *name;
    void *buf;
    size_t bytes;
    void *kept; /* SPMD_ELASTIC_KEEP: the copy taken at begin_step */
} state;

struct spmd_elastic {
    spmd_group *g;
    state *states;
    int nstates, cap;
    int64_t commits;
    int in_step; /* begin_step called, commit not yet */
    spmd_elastic_reset_fn reset;
    void *reset_ctx;
    spmd_elastic_info last;
    char err[512];
};

static spmd_status fail(spmd_elastic *e, spmd_status st, const char *fmt, ...) SPMD__PRINTF(3, 4);
static spmd_status fail(spmd_elastic *e, spmd_status st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    spmd__vfail(e->err, sizeof e->err, st, fmt, ap);
    va_end(ap);
    return st;
}

spmd_status spmd_elastic_create(spmd_group *g, spmd_elastic **out, char *err, size_t errlen) {
    if (!g || !out) return spmd__fail(err, errlen, SPMD_ERR_INVALID, "spmd_elastic_create: NULL group or out");
    spmd_elastic *e = calloc(1, sizeof *e);
    if (!e) return spmd__fail(err, errlen, SPMD_ERR_NOMEM, "spmd_elastic_create: out of memory");
    e->g = g;
    *out = e;
    return SPMD_OK;
}

void spmd_elastic_free(spmd_elastic *e) {
    if (!e) return;
    for (int i = 0; i < e->nstates; i++) {
        free(e->states[i].name);
        free(e->states[i].kept);
    }
    free(e->states);
    free(e);
}

const char *spmd_elastic_errmsg(const spmd_elastic *e) { return e ? e->err : "NULL spmd_elastic"; }
spmd_group *spmd_elastic_group(const spmd_elastic *e) { return e ? e->g : NULL; }
int64_t spmd_elastic_commits(const spmd_elastic *e) { return e ? e->commits : 0; }
spmd_elastic_info spmd_elastic_last(const spmd_elastic *e) {
    spmd_elastic_info z;
    memset(&z, 0, sizeof z);
    return e ? e->last : z;
}

spmd_status spmd_elastic_add_state(spmd_elastic *e, const char *name, void *buf, size_t bytes, int flags) {
    if (!e) return SPMD_ERR_INVALID;
    if (!name || (!buf && bytes) || (flags & ~SPMD_ELASTIC_KEEP))
        return fail(e, SPMD_ERR_INVALID, "spmd_elastic_add_state: a NULL name or buffer, or unknown flags %#x", flags);
    if (e->nstates == e->cap) {
        int cap = e->cap ? 2 * e->cap : 8;
        state *p = realloc(e->states, sizeof *p * (size_t)cap);
        if (!p) return fail(e, SPMD_ERR_NOMEM, "spmd_elastic_add_state: out of memory");
        e->states = p;
        e->cap = cap;
    }
    state s = {strdup(name), buf, bytes, NULL};
    if (!s.name || ((flags & SPMD_ELASTIC_KEEP) && bytes && !(s.kept = malloc(bytes)))) {
        free(s.name);
        return fail(e, SPMD_ERR_NOMEM, "spmd_elastic_add_state: out of memory for '%s' (%zu bytes)", name, bytes);
    }
    e->states[e->nstates++] = s;
    return SPMD_OK;
}

void spmd_elastic_set_reset(spmd_elastic *e, spmd_elastic_reset_fn fn, void *ctx) {
    if (!e) return;
    e->reset = fn;
    e->reset_ctx = ctx;
}

void spmd_elastic_begin_step(spmd_elastic *e) {
    if (!e) return;
    for (int i = 0; i < e->nstates; i++)
        if (e->states[i].kept) memcpy(e->states[i].kept, e->states[i].buf, e->states[i].bytes);
    e->in_step = 1;
}

void spmd_elastic_commit(spmd_elastic *e) {
    if (!e) return;
    e->commits++;
    e->in_step = 0;
}

/* The registrations' fingerprint: names and sizes, in order. */
static uint64_t fingerprint(const spmd_elastic *e) {
    uint64_t h = SPMD__FNV64_OFFSET;
    for (int i = 0; i < e->nstates; i++) {
        uint64_t n = e->states[i].bytes;
        h = spmd__fnv1a64(h, e->states[i].name, strlen(e->states[i].name) + 1); /* with the NUL */
        h = spmd__fnv1a64(h, &n, sizeof n);
    }
    return h;
}

/* A failure of g itself (a rank died or aborted), after which the survivors
 * shrink again, as opposed to an error of this rank's own. */
static int group_failed(spmd_group *g, spmd_status st) {
    /* A verdict every rank reaches alike (a ZeRO shard lost with both its
     * holders, states that do not match) is no failure of g, even when a
     * rank that reached it first has already left: shrinking again would
     * only name the wrong cause. */
    if (st == SPMD_ERR_NOTFOUND || st == SPMD_ERR_MISMATCH || st == SPMD_ERR_INVALID || st == SPMD_ERR_UNSUPPORTED)
        return 0;
    return st == SPMD_ERR_REMOTE || st == SPMD_ERR_ABORTED || spmd_group_failed_ranks(g, NULL, 0) > 0;
}

/* The agreement and the transfer on g (see the top of the file). */
static spmd_status agree_and_send(spmd_elastic *e, spmd_group *g) {
    int rank = spmd_group_rank(g);
    if (spmd_group_size(g) >= (1 << RANK_BITS))
        return fail(e, SPMD_ERR_UNSUPPORTED, "elastic: a world of %d ranks is too large", spmd_group_size(g));
    uint64_t h = fingerprint(e);
    int64_t v[5] = {e->commits * (1 << RANK_BITS) + ((1 << RANK_BITS) - 1 - rank), -e->commits, (int64_t)h,
                    (int64_t)~h, e->in_step};
    spmd__test_die_at("elastic-agree", rank, spmd_group_epoch(g));
    spmd_status st = spmd_all_reduce(g, v, v, 5, SPMD_I64, SPMD_MAX);
    if (st) return fail(e, st, "elastic: agreeing on the committed step: %s", spmd_group_errmsg(g));
    if ((uint64_t)v[2] != ~(uint64_t)v[3])
        return fail(e, SPMD_ERR_MISMATCH,
                    "elastic: the ranks registered different states (fingerprint here %016llx): every rank must "
                    "call spmd_elastic_add_state with the same names and sizes in the same order",
                    (unsigned long long)h);
    int64_t agreed = v[0] >> RANK_BITS; /* an arithmetic shift: a joiner's -1 stays -1 */
    int64_t fewest = -v[1];
    int source = (1 << RANK_BITS) - 1 - (int)(v[0] & ((1 << RANK_BITS) - 1));
    /* members differ by one at most (the step in flight); a joiner (-1)
     * has nothing and takes everything */
    if (agreed < 0) /* (not a failure of g: shrinking again would not help) */
        return fail(e, SPMD_ERR_MISMATCH,
                    "elastic: no rank of the group holds a whole replica (the ranks that did died during its "
                    "transfer, or only joiners are left)");
    if (fewest >= 0 && agreed - fewest > 1)
        return fail(e, SPMD_ERR_MISMATCH,
                    "elastic: the ranks' committed steps range from %lld to %lld: not one training run",
                    (long long)fewest, (long long)agreed);
    /* A rank behind the source is overwritten state by state: if the
     * transfer breaks, what it holds is no replica of any step any more. */
    int behind = e->commits < agreed;
    for (int i = 0; i < e->nstates; i++) {
        if (!e->states[i].bytes) continue;
        if ((st = spmd_broadcast(g, e->states[i].buf, e->states[i].bytes, SPMD_U8, source)) && behind)
            e->commits = -1; /* takes everything from a whole replica next time */
        if (st)
            return fail(e, st, "elastic: sending '%s' from rank %d: %s", e->states[i].name, source,
                        spmd_group_errmsg(g));
        /* a test's death between the first state and the rest */
        if (i == 0) spmd__test_die_at("elastic-transfer", rank, spmd_group_epoch(g));
    }
    e->last.commits_here = e->commits;
    e->last.commits_agreed = agreed;
    e->last.steps_lost = v[4] && agreed == fewest;
    e->last.source_rank = source;
    e->commits = agreed;
    e->in_step = 0;
    return SPMD_OK;
}

/* After the state of g agrees: the callback, then the old group goes. */
static spmd_status settle(spmd_elastic *e, spmd_group *g, int world_before, double t0) {
    spmd_status st = agree_and_send(e, g);
    if (!st && e->reset && (st = e->reset(e->reset_ctx, g, world_before, spmd_group_size(g))) != SPMD_OK &&
        !e->err[0])
        fail(e, st, "elastic: the reset callback failed at world %d: %s", spmd_group_size(g),
             spmd_status_str(st));
    e->last.world_before = world_before;
    e->last.world_after = spmd_group_size(g);
    e->last.epoch = spmd_group_epoch(g);
    e->last.seconds = spmd__seconds() - t0;
    return st;
}

/* Shrink from `cur` until a group's state agrees; cur becomes e's group. */
static spmd_status shrink_until_settled(spmd_elastic *e, int world_before, double t0) {
    for (;;) {
        spmd_group *s = NULL;
        char msg[400];
        spmd_status st = spmd_group_shrink(e->g, &s, msg, sizeof msg);
        if (st) return fail(e, st, "elastic: shrink after a failure at world %d: %s", spmd_group_size(e->g), msg);
        e->err[0] = '\0';
        st = settle(e, s, world_before, t0);
        /* the callback dropped what was bound to the old group */
        spmd_group_destroy(e->g);
        e->g = s;
        if (st == SPMD_OK) return SPMD_OK;
        if (!group_failed(s, st)) return st;
        spmd__log(SPMD__LOG_WARN, "%s; shrinking again", e->err);
    }
}

spmd_status spmd_elastic_recover(spmd_elastic *e) {
    if (!e) return SPMD_ERR_INVALID;
    double t0 = spmd__seconds();
    memset(&e->last, 0, sizeof e->last);
    /* the step did not commit here: back to the state before it */
    if (e->in_step)
        for (int i = 0; i < e->nstates; i++)
            if (e->states[i].kept) memcpy(e->states[i].buf, e->states[i].kept, e->states[i].bytes);
    return shrink_until_settled(e, spmd_group_size(e->g), t0);
}

spmd_status spmd_elastic_grow(spmd_elastic *e, int njoin) {
    if (!e) return SPMD_ERR_INVALID;
    double t0 = spmd__seconds();
    memset(&e->last, 0, sizeof e->last);
    e->in_step = 0; /* a step boundary */
    spmd_group *s = NULL;
    char msg[400];
    int world_before = spmd_group_size(e->g);
    spmd_status st = spmd_group_grow(e->g, njoin, &s, msg, sizeof msg);
    if (st) return fail(e, st, "elastic: grow by %d at world %d: %s", njoin, world_before, msg);
    e->err[0] = '\0';
    st = settle(e, s, world_before, t0);
    spmd_group_destroy(e->g);
    e->g = s;
    if (st == SPMD_OK || !group_failed(s, st)) return st;
    /* a joiner (or a member) died during the transfer: go on without it */
    spmd__log(SPMD__LOG_WARN, "%s; shrinking back", e->err);
    return shrink_until_settled(e, world_before, t0);
}

spmd_status spmd_elastic_join_sync(spmd_elastic *e) {
    if (!e) return SPMD_ERR_INVALID;
    double t0 = spmd__seconds();
    memset(&e->last, 0, sizeof e->last);
    e->commits = -1; /* nothing here: the members' state wins */
    e->in_step = 0;
    e->err[0] = '\0';
    spmd_status st = settle(e, e->g, 0, t0);
    if (st == SPMD_OK || !group_failed(e->g, st)) return st;
    /* A member died during the transfer: the members shrink, and so does
     * this rank (else they would wait for it in the shrink until their
     * deadline); still holding -1 committed steps unless the state had
     * arrived whole, it takes the state again from a survivor. */
    spmd__log(SPMD__LOG_WARN, "%s; shrinking with the members", e->err);
    return shrink_until_settled(e, 0, t0);
}

spmd_status spmd_elastic_joiners_waiting(spmd_elastic *e, int *njoin) {
    if (!e || !njoin) return SPMD_ERR_INVALID;
    int32_t n = 0;
    spmd_status st = SPMD_OK;
    if (spmd_group_rank(e->g) == 0) {
        int k = 0;
        char msg[300];
        st = spmd_group_joiners_waiting(e->g, &k, msg, sizeof msg);
        /* rank 0 cannot read the store: say none, and say why on rank 0 */
        if (st) spmd__log(SPMD__LOG_WARN, "elastic: cannot count the joiners: %s", msg);
        n = st ? 0 : k;
    }
    if ((st = spmd_broadcast(e->g, &n, 1, SPMD_I32, 0)))
        return fail(e, st, "elastic: counting the joiners: %s", spmd_group_errmsg(e->g));
    *njoin = n;
    return SPMD_OK;
}
