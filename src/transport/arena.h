/* src/transport/arena.h — memory the ranks of one host share: every rank's arena
 * mapped into every rank, with sequence counters to wait on.  The DDP reducer
 * keeps gradients in it and sums them in place, with no sockets and no copies
 * beyond the sum itself.
 *
 *   spmd__arena_alloc(g, bytes)      each rank, alone: a zero-filled arena (memfd)
 *   spmd__arena_connect(s, layout)   collective: map every rank's arena, or agree
 *                                  on every rank that this group cannot share
 *   spmd__arena_peer(s, r)           rank r's data, in this process
 *   spmd__arena_post / _wait_all     counter k of this rank := v;
 *                                  wait until every rank's counter k reached v
 *
 * Sharing needs every rank of the group under one kernel, in one network
 * namespace (the memfds travel over abstract Unix sockets, fdpass.h) and
 * one pid namespace (a listener serves only the pids it was told of);
 * SPMD_TRANSPORT=tcp or SPMD_SHM=0 on any rank turns it off for all.  Counters are 32-bit sequence
 * numbers compared modulo 2^32. */
#ifndef SPMD_TRANSPORT_ARENA_H
#define SPMD_TRANSPORT_ARENA_H

#include <stddef.h>
#include <stdint.h>
#include "mesh.h"

typedef struct spmd__arena spmd__arena;

enum { SPMD__SHM_COUNTERS = 2 };

/* NULL when out of memory (or memfd is unavailable). */
spmd__arena *spmd__arena_alloc(spmd__mesh *m, size_t bytes);
void spmd__arena_free(spmd__arena *s);
/* This rank's data (bytes long, 64-byte aligned). */
void *spmd__arena_data(spmd__arena *s);

/* The two collectives connecting needs, provided by the layer above (the
 * group's all_gather and all_reduce, run in its issue order): each returns
 * an error status with a message for a broken group. */
typedef struct {
    void *ctx;
    spmd_status (*all_gather)(void *ctx, const int64_t *mine, int64_t *all, size_t n, char *err, size_t errlen);
    spmd_status (*all_min)(void *ctx, int32_t mine, int32_t *min, char *err, size_t errlen);
} spmd__arena_colls;

/* Collective over the mesh.  layout: a value every rank must agree on for
 * sharing to make sense (the caller's description of what it keeps there;
 * 0: this rank cannot share).
 * *shared = 1 when every rank mapped every other rank's arena, 0 (on every
 * rank) when any could not; an error status only for a broken group. */
spmd_status spmd__arena_connect(spmd__arena *s, const spmd__arena_colls *cl, uint64_t layout, int *shared, char *err,
                              size_t errlen);
/* Rank r's data as mapped here (r = own rank: spmd__arena_data). */
void *spmd__arena_peer(spmd__arena *s, int r);

/* Publish value v in this rank's counter k (release), waking waiters. */
void spmd__arena_post(spmd__arena *s, int k, uint32_t v);
/* 1 when every rank's counter k has reached v (acquire). */
int spmd__arena_all_reached(spmd__arena *s, int k, uint32_t v);
/* Wait until every rank's counter k has reached v.  Fails, naming the rank
 * waited for, when the group fails (a dead peer, an abort) or its timeout
 * passes (which then fails the group on every rank). */
spmd_status spmd__arena_wait_all(spmd__arena *s, int k, uint32_t v, const char *what, char *err, size_t errlen);

#endif
