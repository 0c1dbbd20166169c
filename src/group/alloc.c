/* src/group/alloc.c — a group's memory: a bare group with its mesh and flight
 * recorder (init.c forms the world, subgroup.c and mpi_group.c the others),
 * and freeing one. */
#include <stdlib.h>
#include "group_internal.h"

spmd_group *spmd__group_alloc(int rank, int world) {
    spmd_group *g = calloc(1, sizeof *g);
    if (!g) return NULL;
    g->rank = rank;
    g->world = world;
    g->local_world = 1;
    g->store_host = -1;
    pthread_mutex_init(&g->err_mu, NULL);
    if (spmd__mesh_init(&g->t, rank, world) != SPMD_OK) {
        pthread_mutex_destroy(&g->err_mu);
        free(g);
        return NULL;
    }
    g->rec = spmd__rec_new();
    spmd__rec_attach(g);
    return g;
}

void spmd__group_free(spmd_group *g) {
    spmd__mesh_close(&g->t);
    spmd__rec_free(g->rec);
    if (g->store) spmd_store_close(g->store);
    if (g->own_store_client && g->store_root) spmd_store_close(g->store_root);
    spmd_store_server_stop(g->store_server);
    spmd_store_server_stop(g->standby_server);
    free(g->parent_ranks);
    pthread_mutex_destroy(&g->err_mu);
    free(g);
}
