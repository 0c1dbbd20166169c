/* flight_diag.c — from the flight records of a job's ranks to one sentence
 * per group: which collective the job is stuck in, who never entered it
 * (and what it did last), who waits in it, who is past it, who left no
 * record.  Collectives are numbered alike on every rank (#N is the N-th
 * collective issued on the group), so the lowest number some rank has not
 * finished is where the job stands. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "flight_record.h"

typedef struct {
    const spmd__flight_record *r;   /* newest record of this rank, NULL: none */
    const spmd__flight_op *pending; /* lowest collective not finished */
    const spmd__flight_op *last;    /* highest collective finished */
    const spmd__flight_op *p2p;     /* oldest unfinished point-to-point op */
} rank_view;

typedef struct {
    char *out;
    size_t len, cap;
} sink;

static void put(sink *s, const char *fmt, ...) SPMD__PRINTF(2, 3);
static void put(sink *s, const char *fmt, ...) {
    if (s->cap == 0 || s->len + 1 >= s->cap) return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(s->out + s->len, s->cap - s->len, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    s->len += (size_t)n;
    if (s->len >= s->cap) s->len = s->cap - 1;
}

static int unfinished(const spmd__flight_op *o) { return o->state != SPMD__FLIGHT_DONE; }

static void view_of(const spmd__flight_record *r, rank_view *v) {
    v->r = r;
    v->pending = v->last = v->p2p = NULL;
    for (int i = 0; i < r->nops; i++) {
        const spmd__flight_op *o = &r->ops[i];
        if (o->cls == 'p') {
            if (unfinished(o) && (!v->p2p || o->seq < v->p2p->seq)) v->p2p = o;
        } else if (unfinished(o)) {
            if (!v->pending || o->seq < v->pending->seq) v->pending = o;
        } else if (!v->last || o->seq > v->last->seq) {
            v->last = o;
        }
    }
}

/* "rank 3" or "ranks 0-4, 6-7" for the ranks whose mark equals `want`. */
static void put_ranks(sink *s, const int *mark, int world, int want) {
    int count = 0;
    for (int i = 0; i < world; i++) count += mark[i] == want;
    put(s, count == 1 ? "rank " : "ranks ");
    int first = 1;
    for (int i = 0; i < world; i++) {
        if (mark[i] != want) continue;
        int j = i;
        while (j + 1 < world && mark[j + 1] == want) j++;
        put(s, "%s%d", first ? "" : ", ", i);
        if (j > i) put(s, "-%d", j);
        first = 0;
        i = j;
    }
}

static int count_of(const int *mark, int world, int want) {
    int c = 0;
    for (int i = 0; i < world; i++) c += mark[i] == want;
    return c;
}

static double since(const rank_view *v, double t) { return t > 0 && v->r->time > t ? v->r->time - t : 0.0; }

/* "; in recv from rank 0 (tag 99) for 3.0 s" */
static void put_p2p(sink *s, const rank_view *v) {
    const spmd__flight_op *o = v->p2p;
    if (!o) return;
    const char *dir = !strcmp(o->kind, "send") ? "to" : "from";
    if (o->peer >= 0) put(s, "; in %s %s rank %d", o->kind, dir, o->peer);
    else put(s, "; in %s %s any rank", o->kind, dir);
    if (o->tag >= 0) put(s, " (tag %d)", o->tag);
    put(s, " for %.1f s", since(v, o->t_issue));
}

enum { M_NONE = 0, M_ABSENT, M_WAITING, M_MISSING, M_AHEAD };

static void diagnose_group(sink *s, const spmd__flight_record *recs, int n, const char *group) {
    int world = 0;
    for (int i = 0; i < n && !world; i++)
        if (!strcmp(recs[i].group, group)) world = recs[i].world;
    rank_view *v = calloc((size_t)world, sizeof *v);
    int *mark = calloc((size_t)world, sizeof *mark);
    if (!v || !mark) {
        free(v);
        free(mark);
        return;
    }
    for (int i = 0; i < n; i++) {
        const spmd__flight_record *r = &recs[i];
        if (strcmp(r->group, group) || r->world != world) continue;
        if (!v[r->rank].r || r->time >= v[r->rank].r->time) view_of(r, &v[r->rank]);
    }
    /* where the job stands: the lowest collective someone has not finished */
    const spmd__flight_op *stuck = NULL;
    for (int i = 0; i < world; i++)
        if (v[i].r && v[i].pending && (!stuck || v[i].pending->seq < stuck->seq)) stuck = v[i].pending;
    for (int i = 0; i < world; i++) {
        if (!v[i].r) mark[i] = M_ABSENT;
        else if (!stuck) mark[i] = M_NONE;
        else if (v[i].pending && v[i].pending->seq == stuck->seq) mark[i] = M_WAITING;
        else if (v[i].r->issued < stuck->seq) mark[i] = M_MISSING;
        else mark[i] = M_AHEAD;
    }
    put(s, "group %s (%d rank%s): ", group, world, world == 1 ? "" : "s");
    const char *sep = "";
    if (!stuck) {
        put(s, "no rank is inside a collective");
        for (int i = 0; i < world; i++) {
            if (!v[i].r) continue;
            put(s, "; rank %d's last: ", i);
            if (v[i].last) put(s, "%s #%llu, completed %.1f s ago", v[i].last->kind, (unsigned long long)v[i].last->seq,
                               since(&v[i], v[i].last->t_end));
            else put(s, "no collective");
            put_p2p(s, &v[i]);
        }
        sep = "; ";
    }
    unsigned long long S = stuck ? (unsigned long long)stuck->seq : 0;
    /* Those that never entered it, one clause per rank: their last ops differ. */
    for (int i = 0; stuck && i < world; i++) {
        if (mark[i] != M_MISSING) continue;
        put(s, "%srank %d never entered %s #%llu (its last op: ", sep, i, stuck->kind, S);
        if (v[i].last) put(s, "%s #%llu, completed %.1f s ago", v[i].last->kind, (unsigned long long)v[i].last->seq,
                           since(&v[i], v[i].last->t_end));
        else put(s, "none");
        put_p2p(s, &v[i]);
        put(s, ")");
        sep = "; ";
    }
    if (stuck && count_of(mark, world, M_WAITING)) {
        double longest = 0;
        for (int i = 0; i < world; i++)
            if (mark[i] == M_WAITING) {
                double t = since(&v[i], v[i].pending->t_start > 0 ? v[i].pending->t_start : v[i].pending->t_issue);
                if (t > longest) longest = t;
            }
        put(s, "%s", sep);
        put_ranks(s, mark, world, M_WAITING);
        put(s, " waiting in %s #%llu (for %.1f s)", stuck->kind, S, longest);
        sep = "; ";
    }
    if (count_of(mark, world, M_AHEAD)) {
        put(s, "%s", sep);
        put_ranks(s, mark, world, M_AHEAD);
        put(s, " finished %s #%llu", stuck->kind, S);
        sep = "; ";
    }
    if (count_of(mark, world, M_ABSENT)) {
        put(s, "%sno record from ", sep);
        put_ranks(s, mark, world, M_ABSENT);
        put(s, " (stopped, dead, or not in this group yet)");
    }
    put(s, "\n");
    /* The first failure, in the words of the rank that saw it first (the
     * others' messages say "rank N reported: ..."). */
    const spmd__flight_record *why = NULL;
    for (int i = 0; i < world; i++) {
        const spmd__flight_record *r = v[i].r;
        if (!r || !r->status) continue;
        if (!why || (strstr(why->error, " reported: ") && !strstr(r->error, " reported: "))) why = r;
    }
    if (why) put(s, "group %s failed: %s\n", group, why->error);
    free(v);
    free(mark);
}

size_t spmd__flight_diagnose(const spmd__flight_record *recs, int n, char *out, size_t outlen) {
    sink s = {.out = out, .len = 0, .cap = outlen};
    if (outlen) out[0] = 0;
    /* every group once, "default" first */
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < n; i++) {
            const char *g = recs[i].group;
            if ((pass == 0) != !strcmp(g, "default")) continue;
            int seen = 0;
            for (int j = 0; j < i && !seen; j++) seen = !strcmp(recs[j].group, g);
            if (!seen) diagnose_group(&s, recs, n, g);
        }
    return s.len;
}
