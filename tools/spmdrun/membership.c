/* membership.c — the nodes of a running round: the keep-alive ring, lost and
 * joining nodes, the exit barrier, and how an agent leaves.
 *
 * Every agent bumps its hb/<node rank> counter every keep-alive interval and
 * watches the next node rank's.  Without --on-failure shrink|replace a
 * counter that stands still for the keep-alive timeout ends the round
 * ("lost").  In place (--on-failure shrink|replace, the round's leader
 * wrote `inplace`) the round instead goes on without that node, as long as
 * at least --nnodes MIN are left:
 *
 *   slots        ADD: node ranks handed out (the members, then each joiner's)
 *   slot/<r>     "nproc host" of a node that joined the running round
 *   lost/<r>     compare-and-set once: "<when>\n<why>" (lost, or withdrew)
 *   nlost        ADD: how many lost/<r> exist (read every interval; the
 *                lost/<r> keys are only read when it moves)
 *   done/<r>     the node's workers all exited 0
 *
 * The watcher of a silent node marks it lost, and every agent re-links to
 * the next live node rank.  The lost node's workers are lost ranks to the
 * others' group (spmd-train --elastic shrinks it away by itself: its
 * connections to them closed); the agents only stop waiting for it: the exit
 * barrier completes once every node rank is done or lost.  Fewer than MIN
 * live nodes end the round ("lost", naming them).  A new agent finding the
 * round running in place takes the next slot (within MAX live nodes) and
 * starts its workers with SPMD_JOIN=1: the group admits them at a step
 * boundary (spmd_group_join / spmd_elastic_grow).
 */
#define _GNU_SOURCE
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rdzv_internal.h"

#define EXIT_ACK_MS 10000

static int in_place_asked(const sr_config *cfg) { return cfg->on_failure_shrink != 0; }

/* The node of rank i, the table grown as needed; NULL when out of memory. */
static rz_node *node_at(sr_rdzv *r, int i) {
    if (i >= r->nodes_cap) {
        int cap = r->nodes_cap ? r->nodes_cap : 4;
        while (cap <= i) cap *= 2;
        rz_node *n = realloc(r->nodes, (size_t)cap * sizeof *n);
        if (!n) return NULL;
        memset(n + r->nodes_cap, 0, (size_t)(cap - r->nodes_cap) * sizeof *n);
        r->nodes = n;
        r->nodes_cap = cap;
    }
    return &r->nodes[i];
}

static int live_nodes(const sr_rdzv *r) {
    int live = 0;
    for (int i = 0; i < r->nnodes; i++) live += !r->nodes[i].lost;
    return live;
}

/* "node 1 (hostb) at <when>: <why>; node 2 ..." for every lost node. */
static size_t lost_list(const sr_rdzv *r, char *out, size_t len) {
    size_t o = 0;
    out[0] = 0;
    for (int i = 0; i < r->nnodes && o < len; i++)
        if (r->nodes[i].lost)
            o += (size_t)snprintf(out + o, len - o, "%snode %d (%s) at %s: %s", o ? "; " : "", i,
                                  r->nodes[i].host, r->nodes[i].when, r->nodes[i].why);
    return o;
}

int rz_round_opened(sr_rdzv *r, int rd, int n, char *err, size_t errlen) {
    if (!in_place_asked(r->cfg)) return 0;
    char k[256];
    int64_t v;
    rz_key(r, rd, k, sizeof k, "slots");
    if (rz_add(r, k, n, &v, err, errlen)) return -1;
    rz_key(r, rd, k, sizeof k, "inplace");
    return rz_set(r, k, r->cfg->on_failure_shrink == SR_ON_FAILURE_REPLACE ? "replace" : "shrink", err, errlen);
}

static void round_reset(sr_rdzv *r, int nnodes) {
    memset(r->nodes, 0, (size_t)r->nodes_cap * sizeof *r->nodes);
    r->nnodes = nnodes;
    r->nlost_seen = 0;
    r->self_lost = 0;
    r->next_hb_ms = 0;
    r->watched = -1;
    free(r->posted_end);
    r->posted_end = NULL;
    r->moved[0] = 0;
}

int rz_round_entered(sr_rdzv *r, int rd, char **hosts, int nnodes) {
    int ok = nnodes < 1 || node_at(r, nnodes - 1) != NULL;
    if (ok) round_reset(r, nnodes);
    for (int i = 0; i < nnodes; i++) {
        if (ok) snprintf(r->nodes[i].host, sizeof r->nodes[i].host, "%s", hosts[i] ? hosts[i] : "?");
        free(hosts[i]);
    }
    free(hosts);
    if (!ok) return -1;
    char k[256], *v = NULL, e[256];
    rz_key(r, rd, k, sizeof k, "inplace");
    int g = rz_try_get(r, k, &v, e, sizeof e);
    free(v);
    r->inplace = g == 1 && in_place_asked(r->cfg);
    if (g == 1 && !r->inplace)
        fprintf(stderr, "spmdrun: round %d runs in place (--on-failure shrink|replace) but this node was started "
                        "without it: a lost node ends the round here\n", rd);
    return 0;
}

/* Mark node i lost with why (first writer wins).  0 or -1. */
static int mark_lost(sr_rdzv *r, int i, const char *why, char *err, size_t errlen) {
    char k[256], v[600], when[32];
    sr_now_text(when, sizeof when);
    snprintf(v, sizeof v, "%s\n%s (seen by node %d)", when, why, r->node_rank);
    rz_key(r, r->round, k, sizeof k, "lost/%d", i);
    int mine = rz_create(r, k, v, err, errlen);
    if (mine < 0) return -1;
    int64_t n;
    rz_key(r, r->round, k, sizeof k, "nlost");
    return mine && rz_add(r, k, 1, &n, err, errlen) ? -1 : 0;
}

/* Round rd runs without us: join it in place (see the file comment). */
int rz_join_running(sr_rdzv *r, int rd, int nnodes, int world, sr_assignment *as, char *why, size_t whylen,
                    char *err, size_t errlen) {
    const sr_config *cfg = r->cfg;
    char k[256], *v = NULL;
    rz_key(r, rd, k, sizeof k, "inplace");
    int g = rz_try_get(r, k, &v, err, errlen);
    free(v);
    v = NULL;
    if (g < 0) return -1;
    if (g == 1 && !in_place_asked(cfg)) {
        snprintf(err, errlen, "round %d runs in place (--on-failure shrink|replace): start this node with "
                              "--on-failure shrink or replace to join it", rd);
        return -1;
    }
    if (!in_place_asked(cfg)) return 0; /* torchrun's way: ask for a new round */
    if (g == 0) {
        snprintf(err, errlen, "round %d runs with %d node(s), not in place (its nodes were started without "
                              "--on-failure shrink|replace): this node cannot join it without a restart, which "
                              "--on-failure %s rules out; start every node with the same --on-failure", rd, nnodes,
                 cfg->on_failure_shrink == SR_ON_FAILURE_REPLACE ? "replace" : "shrink");
        return -1;
    }
    int64_t slots, nlost, me;
    char nk[256], sk[256], ek[256];
    rz_key(r, rd, nk, sizeof nk, "nlost");
    rz_key(r, rd, sk, sizeof sk, "slots");
    rz_key(r, rd, ek, sizeof ek, "end");
    if (rz_add(r, nk, 0, &nlost, err, errlen) || rz_add(r, sk, 0, &slots, err, errlen)) return -1;
    if (slots - nlost >= cfg->max_nodes) {
        snprintf(why, whylen, "round %d runs in place with %" PRId64 " node(s), the maximum (--nnodes %d:%d)", rd,
                 slots - nlost, cfg->min_nodes, cfg->max_nodes);
        return 0;
    }
    if (rz_add(r, sk, 1, &me, err, errlen) || rz_add(r, nk, 0, &nlost, err, errlen)) return -1;
    r->round = rd;
    r->node_rank = (int)(me - 1);
    int late = rz_try_get(r, ek, &v, err, errlen);
    free(v);
    v = NULL;
    if (late < 0) return -1;
    if (late || me - nlost > cfg->max_nodes) { /* another joiner was faster, or the round ended */
        snprintf(why, whylen, late ? "round %d ended as this node joined it"
                                   : "round %d reached its maximum of %d node(s) as this node joined it",
                 rd, cfg->max_nodes);
        return mark_lost(r, r->node_rank, "withdrew: no room", err, errlen) ? -1 : 0;
    }
    /* the running nodes' hosts from the member list; joiners' from slot/<r> */
    if (!node_at(r, (int)me - 1)) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    round_reset(r, (int)me);
    r->inplace = 1;
    rz_key(r, rd, k, sizeof k, "members");
    if (rz_try_get(r, k, &v, err, errlen) != 1) return -1;
    for (const char *line = strchr(v, '\n'); line && *++line; line = strchr(line, '\n')) {
        int nr;
        char host[SR_HOST_MAX];
        if (sscanf(line, "%*d %d %*d %*d %*d %*d %*s %255s", &nr, host) == 2 && nr >= 0 && nr < r->nnodes)
            snprintf(r->nodes[nr].host, sizeof r->nodes[nr].host, "%s", host);
    }
    rz_members_taken(r, v); /* the members' standby stores, who hosts the store */
    free(v);
    if (rz_moved_taken(r, err, errlen)) return -1;
    snprintf(r->nodes[r->node_rank].host, sizeof r->nodes[0].host, "%s", r->a->host);
    snprintf(r->nodes[r->node_rank].standby, sizeof r->nodes[0].standby, "%s", rz_standby_field(r));
    r->nodes[r->node_rank].joined = 1;
    r->nodes[r->node_rank].nproc = cfg->nproc;
    char info[2 * SR_HOST_MAX + 32];
    snprintf(info, sizeof info, "%d %s %s", cfg->nproc, r->a->host, rz_standby_field(r));
    rz_key(r, rd, k, sizeof k, "slot/%d", r->node_rank);
    if (rz_set(r, k, info, err, errlen)) return -1;
    rz_key(r, rd, k, sizeof k, "hb/%d", r->node_rank);
    if (rz_add(r, k, 1, &slots, err, errlen)) return -1;
    /* The environment of a joiner: the round's restart count (its group's
     * lineage), SPMD_JOIN=1; RANK/WORLD_SIZE are placeholders the group
     * replaces with what it admits. */
    memset(as, 0, sizeof *as);
    as->restart_count = rd;
    as->node_rank = r->node_rank;
    as->nnodes = (int)(me - nlost);
    as->world_size = as->role_world_size = world + cfg->nproc;
    as->rank_offset = as->role_rank_offset = world;
    as->local_world_size = cfg->nproc;
    as->joining = 1;
    snprintf(as->master_addr, sizeof as->master_addr, "%s", r->ep_host);
    as->master_port = r->ep_port;
    rz_standby_list(r, as->standby, sizeof as->standby);
    fprintf(stderr, "spmdrun: joining round %d in place as node %d (%d node(s) with this one): the workers start "
                    "with SPMD_JOIN=1 and the group takes them in at a step boundary\n", rd, r->node_rank,
            as->nnodes);
    return 1;
}

/* In place: the lost/<r> records, when nlost moved.  1 it moved, 0 not, -1 error. */
static int read_losses(sr_rdzv *r, char *err, size_t errlen) {
    char k[256], *v = NULL;
    int64_t nlost;
    rz_key(r, r->round, k, sizeof k, "nlost");
    if (rz_add(r, k, 0, &nlost, err, errlen)) return -1;
    if (nlost == r->nlost_seen) return 0;
    r->nlost_seen = nlost;
    for (int i = 0; i < r->nnodes; i++) {
        rz_node *n = &r->nodes[i];
        if (n->lost) continue;
        rz_key(r, r->round, k, sizeof k, "lost/%d", i);
        int g = rz_try_get(r, k, &v, err, errlen);
        if (g < 0) return -1;
        if (g == 0) continue;
        n->lost = 1;
        const char *nl = strchr(v, '\n');
        snprintf(n->when, sizeof n->when, "%.*s", nl ? (int)(nl - v) : 0, v);
        snprintf(n->why, sizeof n->why, "%s", nl ? nl + 1 : v);
        free(v);
        if (i == r->node_rank) {
            r->self_lost = 1;
            continue;
        }
        if (!strncmp(n->why, "withdrew", 8)) continue; /* a joiner that found no room */
        fprintf(stderr, "spmdrun: node %d (%s) lost at %s: %s; %d node(s) go on (--nnodes %d:%d)\n", i, n->host,
                n->when, n->why, live_nodes(r), r->cfg->min_nodes, r->cfg->max_nodes);
    }
    return 1;
}

/* In place: learn the round's joiners and losses (the losses first, so the
 * counts said with a joiner are right).  0, 1 the round ended (fewer than
 * MIN nodes left), -1 error. */
static int refresh(sr_rdzv *r, char *err, size_t errlen) {
    char k[256], *v = NULL;
    int64_t slots;
    rz_key(r, r->round, k, sizeof k, "slots");
    if (rz_add(r, k, 0, &slots, err, errlen)) return -1;
    for (int i = r->nnodes; i < slots; i++) {
        rz_node *n = node_at(r, i);
        if (!n) {
            snprintf(err, errlen, "out of memory");
            return -1;
        }
        n->joined = 1;
        snprintf(n->host, sizeof n->host, "?");
        sr_now_text(n->when, sizeof n->when);
    }
    if (slots > r->nnodes) r->nnodes = (int)slots;
    int moved = read_losses(r, err, errlen);
    if (moved < 0) return -1;
    for (int i = 0; i < r->nnodes; i++) { /* a joiner's host, once it said */
        rz_node *n = &r->nodes[i];
        if (!n->joined || strcmp(n->host, "?") || n->lost) continue;
        rz_key(r, r->round, k, sizeof k, "slot/%d", i);
        int g = rz_try_get(r, k, &v, err, errlen);
        if (g < 0) return -1;
        if (g == 0) continue;
        int nproc = 0;
        snprintf(n->standby, sizeof n->standby, "-");
        if (sscanf(v, "%d %255s %263s", &nproc, n->host, n->standby) < 2) snprintf(n->host, sizeof n->host, "?");
        n->nproc = nproc;
        free(v);
        if (i != r->node_rank)
            fprintf(stderr, "spmdrun: node %d (%s, %d worker(s)) joined round %d at %s; %d node(s) now\n", i,
                    n->host, nproc, r->round, n->when, live_nodes(r));
    }
    int live = live_nodes(r);
    if (!moved || live >= r->cfg->min_nodes || r->self_lost) return 0;
    char list[1500], text[1800];
    lost_list(r, list, sizeof list);
    snprintf(text, sizeof text, "%d node(s) left, fewer than the minimum %d (--nnodes %d:%d); lost: %s", live,
             r->cfg->min_nodes, r->cfg->min_nodes, r->cfg->max_nodes, list);
    fprintf(stderr, "spmdrun: %s; ending round %d\n", text, r->round);
    sr_rdzv_post_change(r, "lost", text);
    return 1;
}

/* The next live node rank after ours (the one we watch), -1 none. */
static int successor(const sr_rdzv *r) {
    for (int d = 1; d < r->nnodes; d++) {
        int i = (r->node_rank + d) % r->nnodes;
        if (!r->nodes[i].lost) return i;
    }
    return -1;
}

void sr_rdzv_post_change(sr_rdzv *r, const char *kind, const char *text) {
    if (r->round < 0 || r->store_lost || r->self_lost) return;
    char k[256], e[256];
    rz_key(r, r->round, k, sizeof k, "end");
    size_t len = strlen(kind) + 1 + strlen(text) + 1;
    char *v = malloc(len);
    if (!v) return;
    snprintf(v, len, "%s\n%s", kind, text);
    if (rz_create(r, k, v, e, sizeof e) < 0) fprintf(stderr, "spmdrun: could not tell the other nodes (%s)\n", e);
    if (!r->posted_end) r->posted_end = v; /* a successor of the store's host posts it again */
    else free(v);
}

char *sr_rdzv_change_text(sr_rdzv *r) {
    char k[256], *v = NULL, e[256];
    if (r->store_lost) return NULL;
    rz_key(r, r->round, k, sizeof k, "end");
    return rz_try_get(r, k, &v, e, sizeof e) == 1 ? v : NULL;
}

int sr_rdzv_tick(void *arg, char *err, size_t errlen) {
    sr_rdzv *r = arg;
    char k[256], *v = NULL;
    rz_key(r, r->round, k, sizeof k, "end");
    int g = rz_try_get(r, k, &v, err, errlen);
    if (g < 0) return -1;
    if (g == 1) {
        free(v);
        return 1;
    }
    int64_t now = spmd__now_ms();
    if ((!r->inplace && r->nnodes < 2) || now < r->next_hb_ms) return 0;
    r->next_hb_ms = now + r->cfg->keepalive_interval_ms;
    int64_t val;
    rz_key(r, r->round, k, sizeof k, "hb/%d", r->node_rank);
    if (rz_add(r, k, 1, &val, err, errlen)) return -1;
    if (r->inplace) {
        int t = refresh(r, err, errlen);
        if (t) return t;
        if (r->self_lost) {
            snprintf(err, errlen, "the other nodes declared this node (node %d) lost at %s (%s); its workers are "
                     "out of the job", r->node_rank, r->nodes[r->node_rank].when, r->nodes[r->node_rank].why);
            return -1;
        }
    }
    int succ = successor(r);
    if (succ < 0) return 0;
    if (succ != r->watched) { /* (re-)linked: give it a whole timeout */
        r->watched = succ;
        r->watch_val = -1;
    }
    rz_key(r, r->round, k, sizeof k, "hb/%d", succ);
    if (rz_add(r, k, 0, &val, err, errlen)) return -1;
    if (val != r->watch_val) {
        r->watch_val = val;
        r->watch_changed_ms = now;
        return 0;
    }
    if (now - r->watch_changed_ms <= r->cfg->keepalive_timeout_ms) return 0;
    char why[SR_HOST_MAX + 128];
    snprintf(why, sizeof why, "node %d (%s) sent no keep-alive for %ld s", succ, r->nodes[succ].host,
             (long)((now - r->watch_changed_ms) / 1000));
    if (!r->inplace) {
        fprintf(stderr, "spmdrun: %s; ending round %d\n", why, r->round);
        sr_rdzv_post_change(r, "lost", why);
        return 1;
    }
    snprintf(why, sizeof why, "sent no keep-alive for %ld s", (long)((now - r->watch_changed_ms) / 1000));
    if (mark_lost(r, succ, why, err, errlen)) return -1;
    return refresh(r, err, errlen);
}

/* In place: is every node rank done or lost?  1 yes, 0 no, -1 error. */
static int all_done(sr_rdzv *r, char *err, size_t errlen) {
    char k[256], *v = NULL;
    for (int i = 0; i < r->nnodes; i++) {
        if (r->nodes[i].lost || r->nodes[i].done) continue;
        rz_key(r, r->round, k, sizeof k, "done/%d", i);
        int g = rz_try_get(r, k, &v, err, errlen);
        free(v);
        v = NULL;
        if (g <= 0) return g;
        r->nodes[i].done = 1;
    }
    return 1;
}

int sr_rdzv_exit_barrier(sr_rdzv *r, char *err, size_t errlen) {
    char k[256], ek[256];
    int64_t n = 0;
    rz_key(r, r->round, ek, sizeof ek, "end");
    if (r->inplace) {
        rz_key(r, r->round, k, sizeof k, "done/%d", r->node_rank);
        if (rz_set(r, k, "1", err, errlen)) return -1;
        r->nodes[r->node_rank].done = 1; /* posted again if the store moves */
    } else {
        rz_key(r, r->round, k, sizeof k, "done");
        if (rz_add(r, k, 1, &n, err, errlen)) return -1;
        /* the last one: the round is complete, unless it ended already */
        if (n == r->nnodes && rz_create(r, ek, "complete", err, errlen) < 0) return -1;
    }
    int64_t deadline = spmd__now_ms() + r->cfg->exit_barrier_ms;
    for (;;) {
        if (r->inplace) {
            int d = all_done(r, err, errlen);
            if (d < 0 || (d == 1 && rz_create(r, ek, "complete", err, errlen) < 0)) return -1;
        }
        int64_t slice = spmd__now_ms() + r->cfg->monitor_interval_ms;
        int w = rz_wait_key(r, ek, slice < deadline ? slice : deadline, err, errlen);
        if (w < 0) return -1;
        if (w == 0) {
            char *v = NULL;
            if (rz_try_get(r, ek, &v, err, errlen) != 1) return -1;
            int complete = !strcmp(v, "complete");
            free(v);
            return complete ? 0 : 1;
        }
        if (spmd__now_ms() >= deadline) {
            snprintf(err, errlen, "timed out after %ld s waiting for the other nodes' workers "
                     "to finish", r->cfg->exit_barrier_ms / 1000);
            return -1;
        }
        if (sr_rdzv_tick(r, err, errlen) < 0) return -1; /* keep-alives go on */
    }
}

void sr_rdzv_node_stopped(sr_rdzv *r, const char *why) {
    if (!r || r->round < 0 || r->store_lost || r->self_lost) return;
    char e[256];
    if (!r->inplace) {
        sr_rdzv_post_change(r, "lost", why);
        return;
    }
    /* in place: leave; the others go on while at least MIN are left */
    if (mark_lost(r, r->node_rank, why, e, sizeof e) == 0) refresh(r, e, sizeof e);
    r->self_lost = 1;
}

void sr_rdzv_summary(const sr_rdzv *r) {
    if (!r || !r->inplace) return;
    for (int i = 0; i < r->nnodes; i++) {
        const rz_node *n = &r->nodes[i];
        if (n->joined && i != r->node_rank && (!n->lost || strncmp(n->why, "withdrew", 8)))
            fprintf(stderr, "spmdrun: round %d: node %d (%s) joined at %s\n", r->round, i, n->host, n->when);
        if (n->lost && strncmp(n->why, "withdrew", 8))
            fprintf(stderr, "spmdrun: round %d: node %d (%s) was lost at %s: %s\n", r->round, i, n->host, n->when,
                    n->why);
    }
    if (r->moved[0]) fprintf(stderr, "spmdrun: round %d: %s\n", r->round, r->moved);
    fprintf(stderr, "spmdrun: round %d complete with %d node(s) of the %d that took part (--nnodes %d:%d)\n",
            r->round, live_nodes(r), r->nnodes, r->cfg->min_nodes, r->cfg->max_nodes);
}

void sr_rdzv_close(sr_rdzv *r) {
    if (!r) return;
    char k[256], e[256];
    r->closing = 1; /* the outcome is known: a store lost now is not followed */
    if (r->round >= 0 && r->st && !r->store_lost && !r->self_lost) {
        int64_t one;
        rz_key(r, r->round, k, sizeof k, "exit/%d", r->node_rank);
        if (!rz_add(r, k, 1, &one, e, sizeof e) && r->server) {
            /* The host keeps the store up until everyone (not lost) has read the outcome. */
            char **keys = calloc((size_t)r->nnodes + 1, sizeof *keys);
            size_t nk = 0;
            int ok = keys != NULL;
            for (int i = 0; ok && i < r->nnodes; i++) {
                if (r->nodes[i].lost) continue;
                if (!(keys[nk] = malloc(256))) ok = 0;
                else rz_key(r, r->round, keys[nk++], 256, "exit/%d", i);
            }
            if (ok) rz_wait_keys(r, (const char *const *)keys, nk, spmd__now_ms() + EXIT_ACK_MS, 0, e, sizeof e);
            for (size_t i = 0; i < nk; i++) free(keys[i]);
            free(keys);
        }
    }
    if (r->st) spmd_store_close(r->st);
    spmd_store_server_stop(r->server);
    spmd_store_server_stop(r->standby);
    free(r->members_text);
    free(r->posted_end);
    free(r->nodes);
    free(r);
}
