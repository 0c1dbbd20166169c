/* src/transport/liveness.h — what this rank can tell, without asking anyone,
 * about which peers are gone (the local failure detector recovery uses). */
#ifndef SPMD_TRANSPORT_LIVENESS_H
#define SPMD_TRANSPORT_LIVENESS_H

#include "mesh.h"

/* 1 when `peer`'s process is known gone: it said goodbye, or its kernel
 * closed its end of our p2p connection (it died or left).  0 when it may
 * be alive, or cannot be told (a mesh over MPI).  No lock, no blocking. */
int spmd__mesh_peer_gone(spmd__mesh *m, int peer);

/* The rank the failure blamed for a death or a silence, or -1 (none yet, or
 * a failure that blames a live rank: a mismatch, an abort). */
int spmd__mesh_blamed_dead(spmd__mesh *m);

/* The ranks this rank knows to have failed, ascending, into ranks[0..max):
 * the rank the failure blamed (a death or a silence) and every peer gone.
 * Returns how many there are (may exceed max). */
int spmd__mesh_failed_ranks(spmd__mesh *m, int *ranks, int max);

#endif
