/* subgroup.c — new groups made of some ranks of a parent group.  Every rank
 * of the parent calls with the same list; members meet through the parent's
 * store under a fresh prefix and build their own mesh, so the subgroup's
 * traffic and failures never mix with the parent's.  (A group over MPI makes
 * its subgroups with MPI_Comm_create_group: mpi_group.c.) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "backend.h"
#include "group_internal.h"

static int cmp_int(const void *a, const void *b) {
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

spmd_status spmd_group_new_subgroup(spmd_group *g, const int *ranks, int nranks, spmd_group **out) {
    if (!g || !out) return SPMD_ERR_INVALID;
    if (!ranks || nranks < 1 || nranks > g->world)
        return spmd__group_error(g, SPMD_ERR_INVALID, "new_subgroup: %d ranks requested from a group of %d",
                                 nranks, g->world);
    int *sorted = malloc(sizeof(int) * (size_t)nranks);
    if (!sorted) return spmd__group_error(g, SPMD_ERR_NOMEM, "out of memory");
    memcpy(sorted, ranks, sizeof(int) * (size_t)nranks);
    qsort(sorted, (size_t)nranks, sizeof(int), cmp_int);
    for (int i = 0; i < nranks; i++) {
        if (sorted[i] < 0 || sorted[i] >= g->world || (i && sorted[i] == sorted[i - 1])) {
            int bad = sorted[i];
            free(sorted);
            return spmd__group_error(g, SPMD_ERR_INVALID,
                                     "new_subgroup: rank %d is %s", bad,
                                     bad < 0 || bad >= g->world ? "out of range" : "listed twice");
        }
    }
    int id = ++g->subgroup_counter; /* same on every rank: calls are collective */
    int me = -1;
    for (int i = 0; i < nranks; i++)
        if (sorted[i] == g->rank) me = i;
#ifdef SPMD_HAVE_MPI
    if (g->t.ext) return spmd__group_mpi_subgroup(g, sorted, nranks, me, id, out); /* MPI_Comm_create_group */
#endif
    if (me < 0) {
        free(sorted);
        *out = NULL;
        return SPMD_OK;
    }
    spmd_group *s = spmd__group_alloc(me, nranks);
    if (!s) {
        free(sorted);
        return spmd__group_error(g, SPMD_ERR_NOMEM, "out of memory");
    }
    s->parent = g;
    s->parent_ranks = sorted;
    s->timeout_ms = g->timeout_ms;
    s->local_rank = g->local_rank;
    s->local_world = g->local_world < nranks ? g->local_world : nranks;
    snprintf(s->name, sizeof s->name, "%.40s.sub%d", g->name, id);
    snprintf(s->bind_host, sizeof s->bind_host, "%s", g->bind_host);
    char err[SPMD__ERRLEN] = "";
    spmd_status st = SPMD_OK;
    if (nranks > 1) {
        if (!g->store_root) {
            spmd__group_free(s);
            return spmd__group_error(g, SPMD_ERR_INVALID, "new_subgroup: the parent group has no store");
        }
        s->store_root = g->store_root; /* shared, owned by the parent */
        snprintf(s->store_prefix, sizeof s->store_prefix, "%.150ssub%d/", g->store_prefix, id);
        st = spmd_store_prefixed(g->store_root, s->store_prefix, &s->store);
        if (st) snprintf(err, sizeof err, "out of memory");
    }
    if (!st) st = spmd__group_connect(s, s->bind_host, err, sizeof err);
    if (st) {
        spmd__exec_stop(s);
        spmd__p2p_stop(&s->t);
        spmd__group_free(s);
        return spmd__group_error(g, st, "new_subgroup: %s", err);
    }
    *out = s;
    return SPMD_OK;
}

int spmd_group_parent_rank(const spmd_group *sub, int r) {
    if (!sub || r < 0 || r >= sub->world) return -1;
    return sub->parent_ranks ? sub->parent_ranks[r] : r;
}
