/* store_failover.c — in place, the rendezvous store outlives the agent that
 * hosts it (issue 25: the store's host is not special).
 *
 * Every agent of an in-place job (--on-failure shrink|replace) that does not
 * host the store keeps a standby store from the start: an empty store server
 * on the address this node reaches the store from, on a free port.  Its
 * "host:port" goes into the node's record (node/<a>, then the member list;
 * slot/<r> for a node that joined), so every agent knows every node's, and
 * the workers get them as SPMD_STORE_STANDBY (the stand-ins after the store's
 * node, in node-rank order, known-lost nodes left out).
 *
 * When a call on the store fails with the connection (its host, node h, was
 * SIGKILLed or its machine went away), every agent and every worker group
 * tries the stand-ins in that order and meets on the first that answers: a
 * standby is up from the start, so a refused connection means its node is
 * gone too, and the choice is the same everywhere without any agreement
 * round.  The agent whose standby it is (the lowest live node rank after h)
 * now hosts the store: it posts what it knows of the round there — the round
 * number, the member list, `inplace`, `slots`, the lost nodes and h itself
 * (lost/<h>: "hosted the rendezvous store, which closed its connections"),
 * joined nodes' slot/<r>, done/<r>, the end it posted — and last `moved`.
 * The others wait for `moved`, then post their own part again (the losses
 * they know, their done/<r> and slot/<r>, the end they posted) and go on:
 * keep-alives restart from zero on the new store and every watcher re-links.
 * The workers' groups meet on the same store (group/standby.c), so a node
 * started later is given its endpoint and finds both the agents' round and
 * the workers' group there.  The job secret is the store's as before: the
 * standby servers check it like the first one.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rdzv_internal.h"
#include "store/store_internal.h"

#define STANDBY_CALL_TIMEOUT_MS 30000

int rz_standby_start(sr_rdzv *r, char *err, size_t errlen) {
    if (!r->cfg->on_failure_shrink || r->server) return 0;
    char addr[SR_HOST_MAX], e[512];
    if (spmd__local_addr_towards(r->ep_host, addr, sizeof addr) != SPMD_OK) {
        snprintf(err, errlen, "no address of this node reaches the rendezvous store at %s", r->ep_host);
        return -1;
    }
    if (spmd_store_server_start(addr, 0, &r->standby, e, sizeof e) != SPMD_OK) {
        snprintf(err, errlen, "cannot start this node's standby rendezvous store on %s: %s", addr, e);
        return -1;
    }
    snprintf(r->standby_ep, sizeof r->standby_ep, "%s:%d", addr, spmd_store_server_port(r->standby));
    return 0;
}

const char *rz_standby_field(const sr_rdzv *r) {
    return r->server ? "store" : r->standby_ep[0] ? r->standby_ep : "-";
}

int rz_moved_taken(sr_rdzv *r, char *err, size_t errlen) {
    char k[256], *v = NULL;
    rz_key(r, r->round, k, sizeof k, "moved");
    int g = rz_try_get(r, k, &v, err, errlen);
    int old, to;
    if (g == 1 && sscanf(v, "%d %d", &old, &to) == 2 && to >= 0 && to < r->nnodes)
        r->store_node = r->tried_past = to; /* the stand-ins up to it are gone */
    free(v);
    return g < 0 ? -1 : 0;
}

void rz_members_taken(sr_rdzv *r, const char *text) {
    free(r->members_text);
    r->members_text = strdup(text);
    r->store_node = r->tried_past = -1;
    for (const char *line = strchr(text, '\n'); line && *++line; line = strchr(line, '\n')) {
        int nr, nproc;
        char sb[SR_HOST_MAX + 8] = "-";
        if (sscanf(line, "%*d %d %d %*d %*d %*d %*s %*s %263s", &nr, &nproc, sb) < 2 || nr < 0 || nr >= r->nnodes)
            continue;
        r->nodes[nr].nproc = nproc;
        snprintf(r->nodes[nr].standby, sizeof r->nodes[nr].standby, "%s", sb);
        if (!strcmp(sb, "store")) r->store_node = nr;
    }
}

/* Node i is a stand-in still to try. */
static int candidate(const sr_rdzv *r, int i) {
    return i > r->tried_past && i != r->store_node && !r->nodes[i].lost && strchr(r->nodes[i].standby, ':');
}

void rz_standby_list(const sr_rdzv *r, char *out, size_t outlen) {
    size_t o = 0;
    out[0] = 0;
    for (int i = 0; i < r->nnodes && o < outlen; i++)
        if (candidate(r, i)) o += (size_t)snprintf(out + o, outlen - o, "%s%s", o ? "," : "", r->nodes[i].standby);
    if (o >= outlen) out[0] = 0; /* too many to list: none rather than a cut one */
}

static void split_ep(const char *ep, char *host, size_t hostlen, int *port) {
    const char *colon = strrchr(ep, ':');
    snprintf(host, hostlen, "%.*s", colon ? (int)(colon - ep) : (int)strlen(ep), ep);
    *port = colon ? atoi(colon + 1) : 0;
}

/* lost/<i> = text unless set: 1 we set it, 0 it was, -1 error. */
static int post_lost(sr_rdzv *r, int i, const char *when, const char *why, char *err, size_t errlen) {
    char k[256], v[600];
    rz_key(r, r->round, k, sizeof k, "lost/%d", i);
    snprintf(v, sizeof v, "%s\n%s", when, why);
    return rz_create(r, k, v, err, errlen);
}

/* What this node knows that the others may not: the losses, its slot (a
 * joiner), its done/<r>, the end it posted.  *created counts new lost/<i>. */
static int post_own(sr_rdzv *r, int *created, char *err, size_t errlen) {
    char k[256], v[2 * SR_HOST_MAX + 32];
    for (int i = 0; i < r->nnodes; i++) {
        int c = r->nodes[i].lost ? post_lost(r, i, r->nodes[i].when, r->nodes[i].why, err, errlen) : 0;
        if (c < 0) return -1;
        *created += c;
    }
    rz_node *me = &r->nodes[r->node_rank];
    if (me->joined) {
        rz_key(r, r->round, k, sizeof k, "slot/%d", r->node_rank);
        snprintf(v, sizeof v, "%d %s %s", me->nproc, me->host, rz_standby_field(r));
        if (rz_set(r, k, v, err, errlen)) return -1;
    }
    if (me->done) {
        rz_key(r, r->round, k, sizeof k, "done/%d", r->node_rank);
        if (rz_set(r, k, "1", err, errlen)) return -1;
    }
    rz_key(r, r->round, k, sizeof k, "end");
    return r->posted_end && rz_create(r, k, r->posted_end, err, errlen) < 0 ? -1 : 0;
}

/* The new host: the round's state as this agent knows it, then `moved`. */
static int post_round(sr_rdzv *r, int old, const char *when, char *err, size_t errlen) {
    char k[256], v[2 * SR_HOST_MAX + 64];
    int64_t n;
    int created = 0;
    rz_key(r, -1, k, sizeof k, "round");
    snprintf(v, sizeof v, "%d", r->round);
    if (rz_set(r, k, v, err, errlen)) return -1;
    rz_key(r, r->round, k, sizeof k, "members");
    if (r->members_text && rz_set(r, k, r->members_text, err, errlen)) return -1;
    rz_key(r, r->round, k, sizeof k, "inplace");
    if (rz_set(r, k, r->cfg->on_failure_shrink == SR_ON_FAILURE_REPLACE ? "replace" : "shrink", err, errlen))
        return -1;
    rz_key(r, r->round, k, sizeof k, "slots");
    if (rz_add(r, k, r->nnodes, &n, err, errlen)) return -1;
    for (int i = 0; i < r->nnodes; i++) { /* the joined nodes' records, for newcomers */
        const rz_node *x = &r->nodes[i];
        if (!x->joined || x->lost || i == r->node_rank) continue;
        rz_key(r, r->round, k, sizeof k, "slot/%d", i);
        snprintf(v, sizeof v, "%d %s %s", x->nproc, x->host, x->standby);
        if (rz_set(r, k, v, err, errlen)) return -1;
    }
    if (old >= 0 && !r->nodes[old].lost) {
        char why[128];
        snprintf(why, sizeof why, "hosted the rendezvous store, which closed its connections (seen by node %d)",
                 r->node_rank);
        int c = post_lost(r, old, when, why, err, errlen);
        if (c < 0) return -1;
        created += c;
    }
    for (int i = 0; i < r->nnodes; i++) {
        if (!r->nodes[i].done || i == r->node_rank) continue;
        rz_key(r, r->round, k, sizeof k, "done/%d", i);
        if (rz_set(r, k, "1", err, errlen)) return -1;
    }
    if (post_own(r, &created, err, errlen)) return -1;
    rz_key(r, r->round, k, sizeof k, "nlost");
    if (created && rz_add(r, k, created, &n, err, errlen)) return -1;
    rz_key(r, r->round, k, sizeof k, "moved");
    snprintf(v, sizeof v, "%d %d %s", old, r->node_rank, when);
    return rz_set(r, k, v, err, errlen);
}

/* Another node hosts the store now: wait until it posted the round, then
 * post this node's part. */
static int rejoin_round(sr_rdzv *r, char *err, size_t errlen) {
    char k[256];
    int64_t n;
    int created = 0;
    rz_key(r, r->round, k, sizeof k, "moved");
    int w = rz_wait_key(r, k, spmd__now_ms() + r->cfg->join_timeout_ms, err, errlen);
    if (w == 1) snprintf(err, errlen, "the store's new host, node %d, never posted the round", r->store_node);
    if (w) return -1;
    if (post_own(r, &created, err, errlen)) return -1;
    rz_key(r, r->round, k, sizeof k, "nlost");
    return created && rz_add(r, k, created, &n, err, errlen) ? -1 : 0;
}

int rz_failover(sr_rdzv *r, char *err, size_t errlen) {
    if (!r->inplace || r->round < 0 || r->moving || r->closing || r->self_lost) return -1;
    char cause[1024], tried[1024] = "", old_ep[SR_HOST_MAX + 16];
    snprintf(cause, sizeof cause, "%s", err);
    snprintf(old_ep, sizeof old_ep, "%s:%d", r->ep_host, r->ep_port);
    int old = r->store_node, to = -1;
    spmd_store *st = NULL;
    size_t o = 0;
    for (int i = r->tried_past + 1; i < r->nnodes && to < 0; i++) {
        if (!candidate(r, i)) continue;
        r->tried_past = i;
        char host[SR_HOST_MAX], e[512];
        int port;
        split_ep(r->nodes[i].standby, host, sizeof host, &port);
        if (spmd__store_connect_up(host, port, STANDBY_CALL_TIMEOUT_MS, &st, e, sizeof e) == SPMD_OK) to = i;
        else if (o < sizeof tried)
            o += (size_t)snprintf(tried + o, sizeof tried - o, "%snode %d's at %s: %s", o ? "; " : "", i,
                                  r->nodes[i].standby, e);
    }
    if (to < 0) {
        snprintf(err, errlen, "%s; no other node's standby store answers%s%s%s", cause, o ? " (" : "", tried,
                 o ? ")" : "");
        return -1;
    }
    r->moving = 1;
    spmd_store_close(r->st);
    r->st = st;
    spmd_store_set_timeout(r->st, STANDBY_CALL_TIMEOUT_MS);
    r->store_lost = 0;
    r->store_node = to;
    split_ep(r->nodes[to].standby, r->ep_host, sizeof r->ep_host, &r->ep_port);
    r->watched = -1;     /* keep-alives restart from zero there: re-link */
    r->nlost_seen = -1;  /* read every lost/<r> again */
    char when[32], oldname[SR_HOST_MAX + 32];
    sr_now_text(when, sizeof when);
    if (old >= 0) snprintf(oldname, sizeof oldname, "node %d (%s)", old, r->nodes[old].host);
    else snprintf(oldname, sizeof oldname, "its host");
    int rc;
    if (to == r->node_rank) {
        r->server = r->standby;
        r->standby = NULL;
        r->standby_ep[0] = 0;
        snprintf(r->nodes[to].standby, sizeof r->nodes[to].standby, "store");
        rc = post_round(r, old, when, err, errlen);
        if (!rc) /* said once the round is there: a node started on this line finds it */
            fprintf(stderr, "spmdrun: the rendezvous store at %s is gone with %s (%s); this node (node %d) hosts "
                            "it now at %s:%d: start nodes that join later with --rdzv-endpoint %s:%d\n",
                    old_ep, oldname, cause, to, r->ep_host, r->ep_port, r->ep_host, r->ep_port);
    } else {
        fprintf(stderr, "spmdrun: the rendezvous store at %s is gone with %s (%s); it moved to node %d (%s) at "
                        "%s:%d\n", old_ep, oldname, cause, to, r->nodes[to].host, r->ep_host, r->ep_port);
        rc = rejoin_round(r, err, errlen);
    }
    snprintf(r->moved, sizeof r->moved, "the store's host, %s, was lost at %s; the store moved to node %d (%s) at "
             "%s:%d", oldname, when, to, r->nodes[to].host, r->ep_host, r->ep_port);
    r->moving = 0;
    return rc;
}
