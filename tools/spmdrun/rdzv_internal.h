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

#endif
