/* src/transport/heartbeat.h — liveness between the ranks of a mesh, driven
 * by the p2p progress thread (p2p_progress.c), never by the user's threads: a
 * rank computing for an hour between collectives still answers.
 *
 * Each rank is watched by its successor on the ring of ranks (O(1) per rank):
 *   - over TCP, the progress thread sends a tiny PING frame to its successor
 *     every interval; the successor counts the bytes that arrive from it
 *     (any traffic proves life: a PING queued behind a 1 GiB message is not
 *     needed);
 *   - over shared memory no message moves: each progress thread bumps a
 *     counter in its own segment (shm_internal.h), and every shared-memory
 *     peer reads it (free, so all of them watch all of them).
 * A watched peer whose count has not moved for SPMD_HEARTBEAT_TIMEOUT fails
 * the group naming it (SPMD_ERR_REMOTE).  On TCP, kernel keepalive with
 * TCP_USER_TIMEOUT set to the same timeout also ends any p2p connection whose
 * link stopped answering (a half-open connection the ring does not cover).
 * A rank that leaves (BYE) stops being watched; the ring closes over it.
 */
#ifndef SPMD_TRANSPORT_HEARTBEAT_H
#define SPMD_TRANSPORT_HEARTBEAT_H

#include <stddef.h>
#include <stdint.h>
#include "mesh.h"

/* Default SPMD_HEARTBEAT_TIMEOUT (docs/API.md). */
#define SPMD__HEARTBEAT_DEFAULT_MS 5000

typedef struct spmd__hb spmd__hb;

/* What the heartbeat needs of the p2p engine (called with the engine's lock held). */
typedef struct {
    void *arg;
    uint64_t (*rx)(void *arg, int peer); /* bytes received from peer so far */
    int (*gone)(void *arg, int peer);    /* peer dead or departed: not watched */
    void (*ping)(void *arg, int peer);   /* queue a PING frame to peer */
} spmd__hb_ops;

/* SPMD_HEARTBEAT_TIMEOUT in ms (0: off), as documented; the default when unset
 * or invalid (an invalid value is logged). */
int spmd__hb_timeout_ms(void);
/* Start watching (after the mesh is connected): NULL when heartbeats are off
 * or there is nobody to watch. */
spmd__hb *spmd__hb_start(spmd__mesh *m, const spmd__hb_ops *ops);
void spmd__hb_free(spmd__hb *h);
/* Monotonic ms when the next tick is due. */
int64_t spmd__hb_due(const spmd__hb *h);
/* The tick (the engine's lock held), when due: publish our beat, ping the
 * successor, check the watched peers.  Returns the rank found silent, with
 * the group's failure message in msg, or -1. */
int spmd__hb_tick(spmd__hb *h, int64_t now_ms, char *msg, size_t msglen);

#endif
