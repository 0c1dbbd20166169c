/* mesh.c — a world cut into data x pipeline x tensor subgroups.
 *
 * spmd_group_new_subgroup is collective over the parent and hands NULL to
 * ranks outside the list, so every rank takes part in creating every group
 * of a dimension and keeps the one it belongs to. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "spmd/parallel.h"

/* All groups along one dimension: ranks whose other two coordinates agree. */
static spmd_status make_dim(spmd_group *g, const spmd_mesh *m, int dim, spmd_group **mine) {
    const int size[3] = {m->dp, m->pp, m->tp};
    int *ranks = malloc(sizeof(int) * (size_t)size[dim]);
    if (!ranks) return SPMD_ERR_NOMEM;
    spmd_status st = SPMD_OK;
    /* iterate over the coordinates of the two other dimensions */
    for (int a = 0; a < m->dp && st == SPMD_OK; a++)
        for (int b = 0; b < m->pp && st == SPMD_OK; b++)
            for (int c = 0; c < m->tp && st == SPMD_OK; c++) {
                int co[3] = {a, b, c};
                if (co[dim] != 0) continue;   /* one group per line */
                for (int i = 0; i < size[dim]; i++) {
                    co[dim] = i;
                    ranks[i] = (co[0] * m->pp + co[1]) * m->tp + co[2];
                }
                spmd_group *sub = NULL;
                st = spmd_group_new_subgroup(g, ranks, size[dim], &sub);
                if (sub) *mine = sub;
            }
    free(ranks);
    return st;
}

spmd_status spmd_mesh_create(spmd_group *g, int dp, int pp, int tp, spmd_mesh *out, char *err,
                             size_t errlen) {
    char e[200];
    if (!err || !errlen) err = e, errlen = sizeof e;
    if (!g || !out) {
        snprintf(err, errlen, "mesh: NULL argument");
        return SPMD_ERR_INVALID;
    }
    int world = spmd_group_size(g), rank = spmd_group_rank(g);
    if (dp < 1 || pp < 1 || tp < 1 || (long)dp * pp * tp != world) {
        snprintf(err, errlen, "mesh dp %d x pp %d x tp %d = %ld does not match the world of %d ranks",
                 dp, pp, tp, (long)dp * pp * tp, world);
        return SPMD_ERR_INVALID;
    }
    spmd_mesh m = {dp, pp, tp, rank / (pp * tp), (rank / tp) % pp, rank % tp, NULL, NULL, NULL};
    spmd_status st = make_dim(g, &m, 0, &m.dp_group);
    if (st == SPMD_OK) st = make_dim(g, &m, 1, &m.pp_group);
    if (st == SPMD_OK) st = make_dim(g, &m, 2, &m.tp_group);
    if (st != SPMD_OK) {
        snprintf(err, errlen, "mesh: creating a subgroup failed: %s", spmd_group_errmsg(g));
        spmd_mesh_destroy(&m);
        return st;
    }
    *out = m;
    return SPMD_OK;
}

void spmd_mesh_destroy(spmd_mesh *m) {
    if (!m) return;
    spmd_group_destroy(m->tp_group);
    spmd_group_destroy(m->pp_group);
    spmd_group_destroy(m->dp_group);
    m->tp_group = m->pp_group = m->dp_group = NULL;
}
