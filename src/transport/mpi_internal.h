/* src/transport/mpi_internal.h — a mesh over MPI (compiled only with
 * SPMD_WITH_MPI): the group's ranks are the ranks of an MPI communicator,
 * and every byte moves through MPI, so the cluster's fabric (InfiniBand,
 * Omni-Path, EFA, shared memory) carries it.
 *
 * A group on MPI owns three duplicates of its communicator, so its traffic
 * never mixes with the application's or another group's:
 *   p2p    the group's point-to-point messages (mpi_p2p.c): the tag carries
 *          the spmd tag and the dtype, matching is spmd's (MPI_Improbe)
 *   coll   the collective wire (mpi_xfer.c: spmd's algorithms over MPI
 *          point-to-point) and MPI's own collectives (coll/mpi_native.c)
 *   ctrl   notices ("my group failed, here is why") and the base of
 *          subgroups (MPI_Comm_create_group)
 *
 * Nothing blocks inside MPI: every operation is non-blocking and waited for
 * by polling (mpi_watch.c), which checks the group's failure state, the
 * notices, whether same-host peers are still alive, and the deadline.
 *
 * Threads: with MPI_THREAD_MULTIPLE every thread may call in; below it,
 * spmd's own MPI calls take one process-wide lock and the group runs no
 * thread of its own (mesh.caller_thread_only), so async work runs when it
 * is waited for or tested. */
#ifndef SPMD_TRANSPORT_MPI_INTERNAL_H
#define SPMD_TRANSPORT_MPI_INTERNAL_H

#include <mpi.h>
#include <pthread.h>
#include <stdint.h>
#include "mesh.h"
#include "xfer.h"

typedef struct spmd__mpi_p2p spmd__mpi_p2p; /* mpi_p2p.c */

/* A notice on the ctrl communicator: header, then the text. */
#define SPMD__MPI_NOTICE_BYTES 1024
#define SPMD__MPI_NOTICE_TAG 1

typedef struct {
    MPI_Request req;
    char *buf;
} spmd__mpi_out;

typedef struct spmd__mpi_link {
    spmd__mesh *m;
    MPI_Comm p2p, coll, ctrl;
    int tag_ub;                 /* MPI_TAG_UB of this MPI */
    int wide_tags;              /* tag_ub >= 2^31-1: the collective wire's tags carry kind, seq, args */
    uint64_t instance;          /* rank 0's random number: notices of other groups are ignored */
    int local_rank;             /* among the ranks under this kernel (same boot id and pid namespace) */

    /* notices: one standing receive, our own in flight */
    pthread_mutex_t ctrl_mu;
    MPI_Request ctrl_req;
    char ctrl_in[SPMD__MPI_NOTICE_BYTES];
    spmd__mpi_out *out;
    int nout, capout;

    /* same-host peers' processes: a death without a goodbye fails the group */
    int *pid;                   /* [world] 0 when not under this kernel */
    int *pidfd;                 /* [world] -1 when none (then kill(pid, 0)) */
    int64_t *exit_seen_ms;      /* [world] when the process was first seen gone, 0 */
    uint64_t next_check_ns;

    spmd__mpi_p2p *p2p_state;
} spmd__mpi_link;

static inline spmd__mpi_link *spmd__mpi_of(const spmd__mesh *m) { return (spmd__mpi_link *)m->ext_state; }

/* ---- the process's MPI (mpi_watch.c) ---------------------------------------- */
/* The thread level MPI provides to this process (recorded once by the group
 * layer after MPI_Init_thread / MPI_Query_thread). */
void spmd__mpi_set_level(int provided);
int spmd__mpi_level(void);
const char *spmd__mpi_level_name(int level);
/* Around every MPI call of spmd's: a process-wide lock below
 * MPI_THREAD_MULTIPLE, nothing at MULTIPLE. */
void spmd__mpi_lock(void);
void spmd__mpi_unlock(void);
/* MPI's text for an error code. */
void spmd__mpi_errstr(int rc, char *out, size_t len);
/* 1 once a rank of the job died (seen by a group here, or told by another
 * rank): MPI_Finalize would then wait for it forever (Open MPI 4.1's
 * finalize fences with every process of the job).  A rank that merely timed
 * out does not count: it may still come, and a process that skips
 * MPI_Finalize is an abnormal end to mpirun. */
int spmd__mpi_rank_lost(void);

/* ---- a group's link: attaching and leaving (mpi_link.c) ------------------------ */
/* Collective over comm (its ranks are the mesh's): duplicate it three times,
 * learn which ranks share this kernel, post the notice receive, and make the
 * mesh an MPI mesh.  m->rank/world must be comm's; m->name and timeout set. */
spmd_status spmd__mpi_attach(spmd__mesh *m, MPI_Comm comm, int64_t deadline, char *err, size_t errlen);
extern const spmd__mesh_ext spmd__mpi_ext;

/* ---- failure notices and waiting (mpi_watch.c) -------------------------------- */
/* The notice receive on the ctrl communicator (again after each notice). */
int spmd__mpi_post_notice_recv(spmd__mpi_link *l);
/* Finish the notices we sent that MPI has delivered (ctrl_mu held). */
void spmd__mpi_reap_notices(spmd__mpi_link *l);
/* The mesh's tell_peers hook: a notice of this group's failure to every
 * rank not seen dead. */
void spmd__mpi_tell_peers(spmd__mesh *m, spmd_status st, const char *msg);
/* SPMD_OK, or the group's failure with its message in msg.  Looks at the
 * notices and the same-host peers every few milliseconds (now when `force`);
 * a failure found there fails the mesh first. */
spmd_status spmd__mpi_check(spmd__mpi_link *l, int force, char *msg, size_t msglen);

/* Waiting without blocking in MPI: poll (yielding when ranks outnumber
 * cores), then sleep in growing slices up to a millisecond. */
typedef struct {
    uint64_t since;  /* start of the current idle stretch, 0 */
    int yield;       /* ranks outnumber cores */
    unsigned polls;  /* steps in this stretch (the clock is read every SPMD__MPI_CLOCK_EVERY) */
    long sleep_ns;
} spmd__mpi_idle;
/* Polls between clock reads while spinning: a read costs 20-35 ns under a
 * hypervisor, as much as a failed MPI_Testsome, and twice per poll it was a
 * third of a small all_reduce on a group over MPI (issue 28). */
#define SPMD__MPI_CLOCK_EVERY 16u
void spmd__mpi_idle_init(spmd__mpi_idle *s, const spmd__mesh *m);
void spmd__mpi_idle_step(spmd__mpi_idle *s, const spmd__mesh *m);
static inline void spmd__mpi_idle_reset(spmd__mpi_idle *s) {
    s->since = 0;
    s->polls = 0;
    s->sleep_ns = 0;
}

/* Wait for n requests of the running collective (c->deadline, the group's
 * failure): SPMD_OK when all completed; statuses (may be NULL) receive
 * theirs.  `what` names the operation in messages.  On failure the requests
 * that can be are cancelled, the others abandoned (the group has failed). */
spmd_status spmd__mpi_wait_coll(spmd__coll_ctx *c, MPI_Request *reqs, int n, const char *what);
/* Give up on requests after a failure: cancel what can be, wait a moment for
 * the rest, free (and so abandon) what is still running. */
void spmd__mpi_abandon(MPI_Request *reqs, int n);

/* The collective wire over MPI point-to-point (mpi_xfer.c). */
spmd_status spmd__mpi_xfer(spmd__coll_ctx *c, const spmd__xfer_op *sends, int nsends, const spmd__xfer_op *recvs,
                           int nrecvs);

/* ---- point-to-point (mpi_p2p.c) ------------------------------------------------ */
spmd_status spmd__mpi_p2p_init(spmd__mpi_link *l);
/* Let pending sends finish (bounded), fail what is left, receive and drop
 * the messages nobody wanted; then free the memory (p2p_free, also after
 * MPI was finalized). */
void spmd__mpi_p2p_stop(spmd__mpi_link *l);
void spmd__mpi_p2p_free(spmd__mpi_link *l);
spmd_status spmd__mpi_post_send(spmd__mesh *m, spmd__preq *r, char *err, size_t errlen);
spmd_status spmd__mpi_post_recv(spmd__mesh *m, spmd__preq *r, char *err, size_t errlen);
void spmd__mpi_poll(spmd__mesh *m, int peer);
spmd_status spmd__mpi_wait(spmd__mesh *m, spmd__preq *r, const atomic_int *state, int done_bit, int64_t deadline);
void spmd__mpi_cancel(spmd__mesh *m, spmd__preq *r);
void spmd__mpi_fail_all(spmd__mesh *m, spmd_status st, const char *msg);
/* The largest spmd tag the p2p channel carries (MPI_TAG_UB / 8). */
int spmd__mpi_max_tag(const spmd__mpi_link *l);

#endif
