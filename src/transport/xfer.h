/* src/transport/xfer.h — the collective wire: framed transfers between the
 * ranks of a mesh for the collective now running, and that collective's
 * context.
 *
 * Every message carries a header naming the collective (kind, sequence
 * number, descriptor hash) checked on arrival, so ranks that disagree get
 * SPMD_ERR_MISMATCH instead of a hang or an overrun.  Every call honours the
 * context's deadline and the mesh's failure state.  The collective kinds and
 * their names live here because the wire carries them. */
#ifndef SPMD_TRANSPORT_XFER_H
#define SPMD_TRANSPORT_XFER_H

#include <stddef.h>
#include <stdint.h>
#include "common/common.h"
#include "mesh.h"

typedef enum {
    SPMD__C_BARRIER = 1,
    SPMD__C_BROADCAST,
    SPMD__C_REDUCE,
    SPMD__C_ALL_REDUCE,
    SPMD__C_GATHER,
    SPMD__C_ALL_GATHER,      /* flat buffer, or a list when recvbufs != NULL */
    SPMD__C_SCATTER,
    SPMD__C_REDUCE_SCATTER,
    SPMD__C_ALL_TO_ALL,      /* equal splits, or uneven when sendcounts != NULL */
    SPMD__C_KIND_COUNT
} spmd__coll_kind;

const char *spmd__coll_kind_name(spmd__coll_kind k); /* "all_reduce", ... */

#define SPMD__SCRATCH_SLOTS 4

/* An algorithm id (coll/select.c's table) meaning "none could be chosen". */
#define SPMD__ALGO_NONE 0xff

/* coll/select.c's last choice from its table (the row as an opaque
 * pointer: the table is select.c's own). */
typedef struct {
    spmd__coll_kind kind;
    size_t count;
    spmd_dtype dt;
    spmd_op op;
    int root, paths;
    const void *row; /* NULL: nothing kept */
    int algo;
    uint32_t desc;
} spmd__coll_memo;

/* coll/trial.c's measured choice between two rows of select.c's table, one
 * per size class: the first calls run the one, then the other, timed, then the
 * ranks settle on the faster (zeroed: still trying). */
#define SPMD__TRIAL_CLASSES 8 /* 128-256 KiB, 256-512 KiB, ..., 16 MiB and up */
#define SPMD__TRIAL_TIMED 5    /* timed calls of each candidate */
typedef struct {
    uint32_t calls;   /* calls the trial has seen */
    int decided;      /* 1: winner holds */
    int winner;       /* 0 or 1 */
    int n[2];         /* timed calls of each candidate so far */
    double rate[2][SPMD__TRIAL_TIMED]; /* their ns per KiB */
} spmd__coll_trial;

/* The collective running on a mesh: set by the group's executor and by
 * coll/select.c before each collective, read by the algorithms through
 * coll.h's accessors. */
typedef struct spmd__coll_ctx {
    spmd__mesh *m;
    spmd__coll_kind kind;  /* the collective running now */
    uint32_t seq;          /* collectives run so far on this group (same on every rank) */
    uint32_t desc;         /* hash of everything every rank must agree on: the arguments,
                              the algorithm and the segment size (coll/agree.c) */
    int algo;              /* the algorithm's id, SPMD__ALGO_NONE when none could be chosen */
    int agreeing;          /* in the agreement step (coll/agree.c): messages and slot flags
                              say so instead of carrying the descriptor */
    int unanimous;         /* the call failed the same way on every rank, with the channels
                              in step: the group stays usable */
    const char *(*algo_name)(int kind, int algo); /* for messages (set by coll/select.c) */
    int64_t deadline;      /* 0 until a wait first needs it: spmd__ctx_left_ms */
    size_t segment_bytes;
    uint64_t spin_ns;      /* busy-poll budget before sleeping in poll() */
    int yield_in_spin;     /* yield the core while spinning (oversubscribed, or a background collective) */
    int use_cma;           /* large sends may go by cross-memory attach */
    void *scratch[SPMD__SCRATCH_SLOTS];
    size_t scratch_len[SPMD__SCRATCH_SLOTS];
    spmd__coll_memo memo;
    spmd__coll_trial trial[SPMD__TRIAL_CLASSES];
    char err[SPMD__ERRLEN];
} spmd__coll_ctx;

/* One message to or from a peer (a rank of this mesh, never ourselves). */
typedef struct spmd__xfer_op {
    int peer;
    void *buf;
    size_t len;
} spmd__xfer_op;

/* Milliseconds left before the collective's deadline (0: passed, -1: none).
 * The first call starts the clock: the group's timeout counts from the first
 * wait, which keeps a clock read off collectives that never wait. */
int spmd__ctx_left_ms(spmd__coll_ctx *c);

/* Progress all sends and receives together until every one is complete
 * (sends and receives to the same peer are fine; a ring where everyone sends
 * first does not deadlock).  Messages between a pair of ranks are matched in
 * order.  A received header that does not match (other collective, other
 * sequence number, other descriptor, other length) fails with
 * SPMD_ERR_MISMATCH naming both ranks. */
spmd_status spmd__xfer(spmd__coll_ctx *c, const spmd__xfer_op *sends, int nsends,
                       const spmd__xfer_op *recvs, int nrecvs);
spmd_status spmd__xsend(spmd__coll_ctx *c, int peer, const void *buf, size_t len);
spmd_status spmd__xrecv(spmd__coll_ctx *c, int peer, void *buf, size_t len);
spmd_status spmd__xsendrecv(spmd__coll_ctx *c, int speer, const void *sbuf, size_t slen,
                            int rpeer, void *rbuf, size_t rlen);

/* ---- shared collective slots (shm_coll.c) ---------------------------------
 * Usable when every pair of the mesh is on shared-memory rings (the same
 * answer on every rank).  The step protocol: write your slot of the current
 * step, spmd__shm_coll_sync, then read anyone's slot of that step (pointers
 * taken before the sync).  Data of a step stays readable until the sync
 * after next. */
int spmd__shm_coll_usable(const spmd__coll_ctx *c);
size_t spmd__shm_coll_slot_bytes(const spmd__coll_ctx *c);
void *spmd__shm_coll_slot(spmd__coll_ctx *c, int rank);
/* The same for a step of at most `bytes`: up to 24 bytes travel on the
 * cache line of the rank's flag (a reader fetches both at once), more in the
 * slot. */
void *spmd__shm_coll_small(spmd__coll_ctx *c, int rank, size_t bytes);
spmd_status spmd__shm_coll_sync(spmd__coll_ctx *c);
/* Hierarchical collectives: hosts of equal size, 2 or more (c->m->topo),
 * with slots shared within each host; the step's sync then waits only for
 * the ranks of this host. */
int spmd__shm_coll_hier_usable(const spmd__coll_ctx *c);
spmd_status spmd__shm_coll_sync_host(spmd__coll_ctx *c);
/* Single copy: every rank may read every other's memory (cross-memory
 * attach, cma.c; settled pairwise at connect time, so every rank gives the
 * same answer, whether or not its caller waits on the collective).  A rank
 * publishes its buffers' addresses in its slot; peers read them with
 * spmd__shm_coll_read while it stays inside the collective (a sync after the
 * last read keeps it there).  A read checks the peer's token afterwards, so
 * a peer whose group failed (and may reuse the buffer) is never read as
 * data. */
int spmd__shm_coll_cma_usable(const spmd__coll_ctx *c);
spmd_status spmd__shm_coll_read(spmd__coll_ctx *c, int peer, void *dst, uint64_t addr, size_t len);

/* ---- ranks that disagree (desync.c) -----------------------------------------
 * What a rank runs is (kind, sequence number, descriptor).  Every header and
 * every slot flag carries it; besides, a rank announces it in its shared
 * segment (peers under this kernel) when a collective starts, and a rank that
 * has waited a while without progress looks at what its peers run: their
 * announcements, and the headers waiting unread on its TCP connections.  So
 * ranks that disagree and wait for each other (each for a message the other
 * never sends) still find out, in well under a second. */
/* agrees: this collective runs the agreement step first (coll/agree.c). */
void spmd__desync_announce(spmd__coll_ctx *c, int agrees);
/* Look at every peer not listed in `reading` (1: this rank is reading that
 * peer's stream now; NULL: none is).  SPMD_OK, or SPMD_ERR_MISMATCH naming
 * the peer and what differs. */
spmd_status spmd__desync_watch(spmd__coll_ctx *c, const unsigned char *reading);
/* What peer (under this kernel) announced, judged: certain = something is
 * wrong with it (its slot flag differs from ours): always a failure, naming
 * what differs when the announcement tells; else SPMD_OK unless the
 * announcement shows a disagreement (shm_coll.c). */
spmd_status spmd__desync_peer(spmd__coll_ctx *c, int peer, int certain);
/* Wait this long without progress before watching (and between looks). */
#define SPMD__DESYNC_WATCH_MS 50

/* Record a detailed message for the current collective and return st. */
spmd_status spmd__coll_fail(spmd__coll_ctx *c, spmd_status st, const char *fmt, ...)
    SPMD__PRINTF(3, 4);

#endif
