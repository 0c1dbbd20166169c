/* src/group/recorder.h — a group's flight recorder: its last operations in
 * two ring buffers (collectives, point-to-point), filled as they are issued,
 * started and finished, at the cost of a few stores each (times come from the
 * progress thread's clock; docs/performance-log.md has the measurement).
 *
 * The record is written (flight_record.h's format) to
 * $SPMD_RECORDER_DIR/<group>.<rank>.rec
 *   - when the group fails, by the thread that records the failure, before
 *     any waiter sees it (mesh.h's on_fail), and when a blocking p2p call
 *     times out (which leaves the group usable);
 *   - when asked: spmd_request_record_dump() (async-signal-safe) or a new
 *     generation number in $SPMD_RECORDER_DIR/request (how spmdrun relays
 *     its SIGUSR1), noticed by the progress thread's tick; without
 *     SPMD_RECORDER_DIR a requested record goes to stderr;
 *   - by spmd_group_dump_record().
 * The library installs no signal handler (docs/API.md).
 */
#ifndef SPMD_GROUP_RECORDER_H
#define SPMD_GROUP_RECORDER_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include "coll/coll.h"

typedef struct spmd__rec spmd__rec;
struct spmd_group;

/* SPMD_RECORDER_ENTRIES (default 256 per ring, 0: off): NULL when off or out of memory. */
spmd__rec *spmd__rec_new(void);
void spmd__rec_free(spmd__rec *r);
/* Take times from *clock (CLOCK_MONOTONIC ms kept fresh by someone else)
 * instead of reading a clock; NULL: read one. */
void spmd__rec_set_clock(spmd__rec *r, _Atomic int64_t *clock);
/* Hook the recorder into g's mesh (failure and tick, its progress thread's
 * clock); before the progress thread starts. */
void spmd__rec_attach(struct spmd_group *g);
/* A blocking call timed out without failing the group (a p2p call): write
 * the record too (reason "timeout", msg as its error, status 0). */
void spmd__rec_timeout(struct spmd_group *g, const char *msg);

/* Collectives, by their number a->seq: issued (queued, or running when it
 * runs at once on the caller's thread), started, finished. */
void spmd__rec_coll_issue(spmd__rec *r, const spmd__coll_args *a, int running);
void spmd__rec_coll_start(spmd__rec *r, uint32_t seq);
void spmd__rec_coll_end(spmd__rec *r, uint32_t seq, spmd_status st);
/* Point-to-point: posted (returns the ticket to end it with; the caller
 * serialises the posts: the group's hook runs under the p2p engine's lock),
 * finished. */
uint64_t spmd__rec_p2p_post(spmd__rec *r, int send, int peer, int tag, size_t bytes, int dtype);
void spmd__rec_p2p_end(spmd__rec *r, uint64_t ticket, spmd_status st);
/* A send or receive that completed as it was posted (the engine's lock held). */
void spmd__rec_p2p_done(spmd__rec *r, int send, int peer, int tag, size_t bytes, int dtype);

#endif
