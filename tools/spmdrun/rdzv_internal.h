/* tools/spmdrun/rdzv_internal.h — what rendezvous.c (joining rounds) and
 * membership.c (the nodes of a running round: keep-alive ring, lost and
 * joining nodes, exit barrier) share.  Private to spmdrun. */
#ifndef SPMDRUN_RDZV_INTERNAL_H
#define SPMDRUN_RDZV_INTERNAL_H

#include <stdint.h>

#include "common/common.h"
#include "spmdrun.h"

#define RZ_SLICE_MS 200

/* One node of the running round, as this agent knows it. */
typedef struct {
    char host[SR_HOST_MAX];
    int lost;                  /* declared lost (lost/<rank>), or withdrew */
    int joined;                /* joined the running round (not in its member list) */
    int done;                  /* its workers all exited 0 (done/<rank> seen) */
    char when[32];             /* when it was lost or joined, wall clock */
    char why[256];             /* why it was lost */
    int nproc;                 /* its workers (joiners: from slot/<rank>) */
    char standby[SR_HOST_MAX + 8]; /* its standby store "host:port", "store" (it hosts the store), "-" none */
} rz_node;

struct sr_rdzv {
    sr_agent *a;
    const sr_config *cfg;
    spmd_store_server *server; /* when this agent hosts the store */
    spmd_store *st;
    char ep_host[SR_HOST_MAX];
    int ep_port;
    char pfx[160];
    int round;                 /* current round, -1 before the first */
    int arrival;
    int node_rank, nnodes;     /* nnodes: the node ranks handed out in this round (members + joiners) */
    rz_node *nodes;            /* [nodes_cap] */
    int nodes_cap;
    int inplace;               /* the round runs in place (--on-failure shrink|replace) */
    int64_t nlost_seen;        /* the round's nlost counter when last read */
    int self_lost;             /* the others declared this node lost: say nothing more */
    int64_t next_hb_ms;
    int watched;               /* the node rank whose keep-alive we watch, -1 none */
    int64_t watch_val, watch_changed_ms;
    int store_lost;            /* the connection failed: say nothing more through it */
    /* the store moving when its host is lost (store_failover.c) */
    spmd_store_server *standby; /* in place, not hosting: this agent's standby store, until it hosts */
    char standby_ep[SR_HOST_MAX + 8]; /* its "host:port", "" none */
    char *members_text;        /* the round's member list as read (re-posted by a successor) */
    int store_node;            /* the node rank hosting the store, -1 unknown */
    int tried_past;            /* stand-ins of node ranks <= this were tried already */
    int moving, closing;       /* a move under way (no nested one); leaving (no move) */
    char *posted_end;          /* the end record this agent posted (re-posted after a move) */
    char moved[SR_HOST_MAX * 2 + 256]; /* "the store moved ..." for the summary, "" when it did not */
};

/* ---- rendezvous.c: store helpers; every failure becomes "store at H:P: ..." */
int rz_store_fail(sr_rdzv *r, const char *what, const char *key, spmd_status st, char *err, size_t errlen);
/* P"r<round>/"fmt (round -1: P fmt) */
void rz_key(const sr_rdzv *r, int round, char *out, size_t outlen, const char *fmt, ...) SPMD__PRINTF(5, 6);
int rz_add(sr_rdzv *r, const char *k, int64_t d, int64_t *res, char *err, size_t errlen);
int rz_set(sr_rdzv *r, const char *k, const char *v, char *err, size_t errlen);
/* 1 and *val (malloc()ed, NUL-terminated) when the key exists, 0 when not, -1 error. */
int rz_try_get(sr_rdzv *r, const char *k, char **val, char *err, size_t errlen);
/* compare-and-set of an absent key: 1 we set it, 0 it existed, -1 error. */
int rz_create(sr_rdzv *r, const char *k, const char *v, char *err, size_t errlen);
int rz_interrupted(sr_rdzv *r, char *err, size_t errlen);
/* Wait until every key exists: 0 yes, 1 the deadline passed, -1 error or (when
 * stoppable) a stop signal. */
int rz_wait_keys(sr_rdzv *r, const char *const *keys, size_t n, int64_t deadline, int stoppable, char *err,
                 size_t errlen);
int rz_wait_key(sr_rdzv *r, const char *k, int64_t deadline, char *err, size_t errlen);

/* ---- membership.c ------------------------------------------------------------ */
/* The leader, before it writes round rd's members: record the round's mode
 * and its first n node ranks.  0 or -1. */
int rz_round_opened(sr_rdzv *r, int rd, int n, char *err, size_t errlen);
/* Entering round rd as one of its nnodes members (hosts[] by node rank,
 * taken over).  0 or -1 (out of memory). */
int rz_round_entered(sr_rdzv *r, int rd, char **hosts, int nnodes);
/* A running round rd without us (members head: nnodes, world): join it in
 * place when both it and we run in place.  1 joined (*as filled), 0 not
 * possible now (why says so; wait for the round's end), -1 error (err). */
int rz_join_running(sr_rdzv *r, int rd, int nnodes, int world, sr_assignment *as, char *why, size_t whylen,
                    char *err, size_t errlen);

/* ---- store_failover.c: the store moves when its host is lost ---------------- */
/* In place, not hosting: start this agent's standby store (an empty store on
 * the address this node reaches the store from, a free port).  0 or -1. */
int rz_standby_start(sr_rdzv *r, char *err, size_t errlen);
/* This node's standby field of its node/slot record: "host:port", "store" or "-". */
const char *rz_standby_field(const sr_rdzv *r);
/* Take the round's member list (text: its 9th field per member is the
 * standby) into r: members_text, each node's standby, store_node. */
void rz_members_taken(sr_rdzv *r, const char *text);
/* A node joining a running round: if the store moved already (`moved`),
 * take its new host from there.  0 or -1. */
int rz_moved_taken(sr_rdzv *r, char *err, size_t errlen);
/* The stand-ins, in the order to try them ("host:port,..."), for the
 * workers' SPMD_STORE_STANDBY. */
void rz_standby_list(const sr_rdzv *r, char *out, size_t outlen);
/* The store failed (r->store_lost): in place, move to the first stand-in
 * that answers; as its host, post the round's state there; else wait for
 * it and re-post this node's own.  0 moved (retry the call), -1 not (err). */
int rz_failover(sr_rdzv *r, char *err, size_t errlen);

#endif
