/* rendezvous.c — how the agents of several nodes agree, through the store.
 *
 * Every key lives under P = "spmdrun/<run-id>/", so jobs sharing a store stay
 * apart.  The job is a sequence of rounds; round k is the k-th (re)start of
 * the worker group and its number is the restart count every node puts in
 * TORCHELASTIC_RESTART_COUNT.  Keys of round k (prefix P"r<k>/"):
 *
 *   count        ADD: an agent joins and learns its arrival number a (1, 2, ...)
 *   node/<a>     "claim nproc role host" of arrival a (claim -1: no --node-rank)
 *   members      written once by arrival 1, the round's leader:
 *                "ok <k> <nnodes> <world>\n" + per member
 *                "<a> <node_rank> <nproc> <rank_offset> <role_offset> <role_world> <host>\n",
 *                or "error <why>\n"
 *   end          how the round ended, set once by compare-and-set (first wins):
 *                "complete" (every node's workers succeeded), or
 *                "fail\n<summary>\n<report entry>", "lost\n<why>", "join\n<who>"
 *   hb/<rank>    ADD counter each agent bumps every keep-alive interval
 *   done/<rank>  the node's workers all exited 0;  exit/<rank>  the agent left
 *   P"round"     the latest round anyone entered (where newcomers start looking)
 *
 * The leader closes the round when max nodes have arrived, or min nodes have
 * arrived and the last-call window passed since; node ranks are --node-rank
 * claims first, then the others in arrival order.  An agent that finds the
 * round already running without it is late: a round that runs in place
 * (--on-failure shrink|replace) it joins as it runs (membership.c); else, if
 * the round has room and the restart budget allows, it ends the round with
 * "join" and everyone meets in round k+1; otherwise it waits for the round
 * to end.  While the workers run, each agent looks at `end` every monitor
 * interval, bumps its heartbeat and watches its successor's (membership.c:
 * the keep-alive ring, lost nodes, the exit barrier).  Every wait has a
 * deadline (join timeout, exit-barrier timeout) and is sliced so a stop
 * signal is seen.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/common.h"
#include "store/store_internal.h"
#include "rdzv_internal.h"

#define STORE_CALL_TIMEOUT_MS 30000

typedef struct {
    int arrival, claim, nproc, node_rank, offset, role_offset, role_world;
    char role[72];
    char host[SR_HOST_MAX];
    char standby[SR_HOST_MAX + 8];
} member;


/* ---- small store helpers: every failure becomes "store at H:P: ..." ---- */

int rz_store_fail(sr_rdzv *r, const char *what, const char *key, spmd_status st, char *err,
                      size_t errlen) {
    if (st == SPMD_ERR_REMOTE || st == SPMD_ERR_SYSTEM || st == SPMD_ERR_TIMEOUT) r->store_lost = 1;
    snprintf(err, errlen, "rendezvous store at %s:%d: %s %s: %s", r->ep_host, r->ep_port, what,
             key, spmd_store_errmsg(r->st)[0] ? spmd_store_errmsg(r->st) : spmd_status_str(st));
    return -1;
}

void rz_key(const sr_rdzv *r, int round, char *out, size_t outlen, const char *fmt, ...) {
    int n = round >= 0 ? snprintf(out, outlen, "%sr%d/", r->pfx, round)
                       : snprintf(out, outlen, "%s", r->pfx);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(out + n, outlen - (size_t)n, fmt, ap);
    va_end(ap);
}

/* A call failed: 1 when the store moved (store_failover.c) and the call is
 * to be made again there, else -1 with err filled. */
static int failed(sr_rdzv *r, const char *what, const char *key, spmd_status st, char *err, size_t errlen) {
    rz_store_fail(r, what, key, st, err, errlen);
    return r->store_lost && rz_failover(r, err, errlen) == 0 ? 1 : -1;
}

int rz_add(sr_rdzv *r, const char *k, int64_t d, int64_t *res, char *err, size_t errlen) {
    spmd_status st;
    while ((st = spmd_store_add(r->st, k, d, res)))
        if (failed(r, "add", k, st, err, errlen) < 0) return -1;
    return 0;
}

int rz_set(sr_rdzv *r, const char *k, const char *v, char *err, size_t errlen) {
    spmd_status st;
    while ((st = spmd_store_set(r->st, k, v, strlen(v))))
        if (failed(r, "set", k, st, err, errlen) < 0) return -1;
    return 0;
}

/* 1 and *val (malloc()ed, NUL-terminated) when the key exists, 0 when not, -1 error. */
int rz_try_get(sr_rdzv *r, const char *k, char **val, char *err, size_t errlen) {
    void *v = NULL;
    size_t len = 0;
    spmd_status st;
    while ((st = spmd_store_try_get(r->st, k, &v, &len)) && st != SPMD_ERR_NOTFOUND)
        if (failed(r, "get", k, st, err, errlen) < 0) return -1;
    if (st == SPMD_ERR_NOTFOUND) return 0;
    *val = v;
    return 1;
}

int rz_create(sr_rdzv *r, const char *k, const char *v, char *err, size_t errlen) {
    void *cur = NULL;
    size_t cl = 0;
    spmd_status st;
    while ((st = spmd_store_compare_set(r->st, k, NULL, 0, v, strlen(v), &cur, &cl)))
        if (failed(r, "compare_set", k, st, err, errlen) < 0) return -1;
    int mine = cl == strlen(v) && !memcmp(cur, v, cl);
    free(cur);
    return mine;
}

int rz_interrupted(sr_rdzv *r, char *err, size_t errlen) {
    int sig = sr_agent_poll_signals(r->a);
    if (!sig) return 0;
    snprintf(err, errlen, "interrupted by %s", sr_signal_name(sig));
    return 1;
}

/* Wait until every key exists: 0 yes, 1 the deadline passed, -1 error or (when
 * stoppable) a stop signal. */
int rz_wait_keys(sr_rdzv *r, const char *const *keys, size_t n, int64_t deadline,
                     int stoppable, char *err, size_t errlen) {
    for (size_t done = 0; done < n;) {
        if (stoppable && rz_interrupted(r, err, errlen)) return -1;
        int64_t left = deadline - spmd__now_ms();
        if (left <= 0) return 1;
        size_t chunk = n - done > SPMD_STORE_MAX_WAIT_KEYS ? SPMD_STORE_MAX_WAIT_KEYS : n - done;
        spmd_status st = spmd_store_wait(r->st, keys + done, chunk,
                                         (int)(left < RZ_SLICE_MS ? left : RZ_SLICE_MS));
        if (st == SPMD_OK) done += chunk;
        else if (st != SPMD_ERR_TIMEOUT && failed(r, "wait", keys[done], st, err, errlen) < 0) return -1;
    }
    return 0;
}

int rz_wait_key(sr_rdzv *r, const char *k, int64_t deadline, char *err, size_t errlen) {
    return rz_wait_keys(r, &k, 1, deadline, 1, err, errlen);
}

/* ---- opening: host the store or connect to it ---------------------------- */

sr_rdzv *sr_rdzv_open(sr_agent *a, char *err, size_t errlen) {
    const sr_config *cfg = a->cfg;
    sr_rdzv *r = calloc(1, sizeof *r);
    if (!r) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    r->a = a;
    r->cfg = cfg;
    r->round = -1;
    r->store_node = r->tried_past = -1;
    snprintf(r->pfx, sizeof r->pfx, "spmdrun/%s/", cfg->rdzv_id);
    if (cfg->rdzv_endpoint) {
        r->ep_port = 29400; /* torchrun's default rendezvous port */
        if (sr_split_endpoint(cfg->rdzv_endpoint, r->ep_host, sizeof r->ep_host, &r->ep_port,
                              err, errlen))
            goto fail;
    } else {
        snprintf(r->ep_host, sizeof r->ep_host, "%s", cfg->master_addr);
        r->ep_port = cfg->master_port;
    }

    /* Who hosts: is_host= if given; else a node that claims rank 0, or with no
     * claim the first agent that manages to bind the endpoint's address. */
    int local = sr_is_local_address(r->ep_host);
    int want = cfg->is_host >= 0 ? cfg->is_host : cfg->node_rank > 0 ? 0 : local;
    if (cfg->is_host < 0 && cfg->node_rank == 0 && !local)
        fprintf(stderr,
                "spmdrun: node rank 0, but %s is not an address of this machine: joining the "
                "store there as a client (use --rdzv-conf is_host=1 to host it anyway)\n",
                r->ep_host);
    if (want) {
        char e[512];
        spmd_status st = spmd_store_server_start(local ? r->ep_host : "", r->ep_port, &r->server,
                                                 e, sizeof e);
        if (st == SPMD_OK) {
            r->ep_port = spmd_store_server_port(r->server);
            fprintf(stderr, "spmdrun: hosting the rendezvous store at %s:%d (run id %s)\n",
                    r->ep_host, r->ep_port, cfg->rdzv_id);
        } else if (cfg->node_rank == 0 || cfg->is_host == 1 || r->ep_port == 0) {
            snprintf(err, errlen, "cannot host the rendezvous store on %s:%d: %s", r->ep_host,
                     r->ep_port, e);
            goto fail;
        }
        /* else: another agent on this machine was faster; join it as a client. */
    }
    if (r->ep_port == 0) {
        snprintf(err, errlen,
                 "port 0 (a free port) only works on the node that hosts the store; the other "
                 "nodes need the real port, which the host prints");
        goto fail;
    }
    int64_t deadline = spmd__now_ms() + cfg->join_timeout_ms;
    for (;;) {
        char e[512];
        int64_t left = deadline - spmd__now_ms();
        spmd_status st = spmd_store_connect(r->ep_host, r->ep_port,
                                            (int)(left < 1000 ? (left > 0 ? left : 1) : 1000),
                                            &r->st, e, sizeof e);
        if (st == SPMD_OK) break;
        /* A refusal (wrong secret, version) is final; an absent store is retried. */
        if (st == SPMD_ERR_INVALID || st == SPMD_ERR_PROTOCOL || st == SPMD_ERR_MISMATCH ||
            spmd__now_ms() >= deadline) {
            snprintf(err, errlen, "cannot reach the rendezvous store at %s:%d: %s", r->ep_host,
                     r->ep_port, e);
            goto fail;
        }
        int sig = sr_agent_poll_signals(a);
        if (sig) {
            snprintf(err, errlen, "rz_interrupted by %s while connecting to %s:%d",
                     sr_signal_name(sig), r->ep_host, r->ep_port);
            goto fail;
        }
    }
    spmd_store_set_timeout(r->st, STORE_CALL_TIMEOUT_MS);
    if (rz_standby_start(r, err, errlen)) goto fail;
    return r;
fail:
    if (r->st) spmd_store_close(r->st);
    spmd_store_server_stop(r->server);
    spmd_store_server_stop(r->standby);
    free(r);
    return NULL;
}

/* ---- closing a round (the leader) ----------------------------------------- */

static int set_members_error(sr_rdzv *r, int rd, const char *why, char *err, size_t errlen) {
    char k[256], v[600];
    rz_key(r, rd, k, sizeof k, "members");
    snprintf(v, sizeof v, "error %s\n", why);
    return rz_set(r, k, v, err, errlen);
}

static int parse_node(const char *text, member *m) {
    snprintf(m->standby, sizeof m->standby, "-");
    return sscanf(text, "%d %d %71s %255s %263s", &m->claim, &m->nproc, m->role, m->host, m->standby) >= 4 ? 0 : -1;
}

/* The hosting agent, while too few nodes have joined: 1 (why filled) when
 * its store refused a client and the nodes are still missing 3 s after we
 * noticed — a node started with another secret, which has given up already
 * (docs/SECURITY.md: what a stranger can trigger). */
static int refused_node(sr_rdzv *r, int rd, int64_t *seen, char *why, size_t len) {
    uint64_t at = 0;
    char last[320];
    if (!r->server || !spmd__store_server_refusals(r->server, &at, last, sizeof last)) return 0;
    int64_t now = spmd__now_ms();
    if (!*seen) *seen = now;
    if (now - *seen < 3000) return 0;
    snprintf(why, len,
             "too few nodes joined round %d, and the store refused a client (%s): was a node "
             "started with another job secret (SPMD_AUTH_TOKEN, SPMD_AUTH_FILE, or another "
             "host's per-user secret file)?",
             rd, last);
    return 1;
}

static int close_round(sr_rdzv *r, int rd, int64_t deadline, char *err, size_t errlen) {
    const sr_config *cfg = r->cfg;
    char k[256], why[512];
    rz_key(r, rd, k, sizeof k, "node/%d", cfg->min_nodes);
    int w;
    int64_t seen = 0;
    for (;;) { /* in 1 s steps, to look at the store's refusals in between */
        int64_t step = spmd__now_ms() + 1000;
        w = rz_wait_key(r, k, step < deadline ? step : deadline, err, errlen);
        if (w != 1 || spmd__now_ms() >= deadline) break;
        if (refused_node(r, rd, &seen, why, sizeof why)) return set_members_error(r, rd, why, err, errlen);
    }
    if (w < 0) return -1;
    int64_t n = 0;
    char ck[256];
    rz_key(r, rd, ck, sizeof ck, "count");
    if (w == 1) {
        if (rz_add(r, ck, 0, &n, err, errlen)) return -1;
        snprintf(why, sizeof why,
                 "only %" PRId64 " of the %d nodes needed joined round %d within the join "
                 "timeout (%ld s)",
                 n, cfg->min_nodes, rd, cfg->join_timeout_ms / 1000);
        return set_members_error(r, rd, why, err, errlen);
    }
    if (cfg->max_nodes > cfg->min_nodes) { /* last call for late nodes */
        int64_t lc = spmd__now_ms() + cfg->last_call_ms;
        rz_key(r, rd, k, sizeof k, "node/%d", cfg->max_nodes);
        if (rz_wait_key(r, k, lc < deadline ? lc : deadline, err, errlen) < 0) return -1;
    }
    if (rz_add(r, ck, 0, &n, err, errlen)) return -1;
    if (n > cfg->max_nodes) n = cfg->max_nodes;
    member *m = calloc((size_t)n, sizeof *m);
    int *by_rank = calloc((size_t)n, sizeof *by_rank);
    char *text = NULL;
    int rc = -1;
    if (!m || !by_rank) {
        snprintf(err, errlen, "out of memory");
        goto out;
    }
    for (int i = 0; i < n; i++) by_rank[i] = -1;
    for (int i = 0; i < n; i++) {
        char *v = NULL;
        rz_key(r, rd, k, sizeof k, "node/%d", i + 1);
        int g = rz_wait_key(r, k, deadline, err, errlen);
        if (g == 1) {
            snprintf(why, sizeof why, "arrival %d of round %d never described itself", i + 1, rd);
            rc = set_members_error(r, rd, why, err, errlen);
            goto out;
        }
        if (g < 0 || rz_try_get(r, k, &v, err, errlen) != 1) goto out;
        m[i].arrival = i + 1;
        int bad = parse_node(v, &m[i]);
        free(v);
        if (bad) {
            snprintf(why, sizeof why, "malformed record %s", k);
            rc = set_members_error(r, rd, why, err, errlen);
            goto out;
        }
    }
    /* Node ranks: claims first, checked; then arrival order into the gaps. */
    for (int i = 0; i < n; i++) {
        int c = m[i].claim;
        if (c < 0) continue;
        if (c >= n) {
            snprintf(why, sizeof why,
                     "node rank %d claimed by %s, but only %" PRId64 " nodes joined round %d", c,
                     m[i].host, n, rd);
            rc = set_members_error(r, rd, why, err, errlen);
            goto out;
        }
        if (by_rank[c] >= 0) {
            snprintf(why, sizeof why,
                     "node rank %d claimed by both %s and %s: give each node its own "
                     "--node-rank, or use --rdzv-backend c10d to number them by arrival",
                     c, m[by_rank[c]].host, m[i].host);
            rc = set_members_error(r, rd, why, err, errlen);
            goto out;
        }
        by_rank[c] = i;
        m[i].node_rank = c;
    }
    for (int i = 0, next = 0; i < n; i++) {
        if (m[i].claim >= 0) continue;
        while (by_rank[next] >= 0) next++;
        by_rank[next] = i;
        m[i].node_rank = next;
    }
    /* Global and role rank offsets in node-rank order. */
    int64_t world = 0;
    for (int q = 0; q < n; q++) {
        member *x = &m[by_rank[q]];
        x->offset = (int)world;
        world += x->nproc;
        x->role_offset = 0;
        x->role_world = 0;
        for (int p = 0; p < n; p++) {
            member *y = &m[by_rank[p]];
            if (strcmp(x->role, y->role)) continue;
            if (p < q) x->role_offset += y->nproc;
            x->role_world += y->nproc;
        }
    }
    size_t cap = 64 + (size_t)n * (2 * SR_HOST_MAX + 144), o = 0;
    if (!(text = malloc(cap))) {
        snprintf(err, errlen, "out of memory");
        goto out;
    }
    o += (size_t)snprintf(text + o, cap - o, "ok %d %" PRId64 " %" PRId64 "\n", rd, n, world);
    for (int i = 0; i < n; i++)
        o += (size_t)snprintf(text + o, cap - o, "%d %d %d %d %d %d %s %s %s\n", m[i].arrival,
                              m[i].node_rank, m[i].nproc, m[i].offset, m[i].role_offset,
                              m[i].role_world, m[i].role, m[i].host, m[i].standby);
    rz_key(r, rd, k, sizeof k, "members");
    if (rz_round_opened(r, rd, (int)n, err, errlen) == 0) rc = rz_set(r, k, text, err, errlen);
out:
    free(text);
    free(m);
    free(by_rank);
    return rc;
}

/* ---- joining a round --------------------------------------------------------- */

typedef struct {
    int ok, round, nnodes, world;
    char error[512];
} members_head;

static void parse_head(const char *text, members_head *h) {
    memset(h, 0, sizeof *h);
    if (!strncmp(text, "error ", 6)) {
        snprintf(h->error, sizeof h->error, "%.*s", (int)strcspn(text + 6, "\n"), text + 6);
        return;
    }
    h->ok = sscanf(text, "ok %d %d %d", &h->round, &h->nnodes, &h->world) == 3;
    if (!h->ok) snprintf(h->error, sizeof h->error, "malformed member list");
}

/* Fill r and *as from the member list; 1 when our arrival is in it. */
static int take_members(sr_rdzv *r, const char *text, const members_head *h, sr_assignment *as) {
    const char *line = strchr(text, '\n');
    int found = 0;
    char **hosts = calloc((size_t)h->nnodes, sizeof *hosts);
    if (!hosts) return 0;
    while (line && *++line) {
        member m;
        if (sscanf(line, "%d %d %d %d %d %d %71s %255s", &m.arrival, &m.node_rank, &m.nproc,
                   &m.offset, &m.role_offset, &m.role_world, m.role, m.host) != 8)
            break;
        if (m.node_rank >= 0 && m.node_rank < h->nnodes && !hosts[m.node_rank])
            hosts[m.node_rank] = strdup(m.host);
        if (m.arrival == r->arrival) {
            found = 1;
            memset(as, 0, sizeof *as);
            as->restart_count = h->round;
            as->node_rank = m.node_rank;
            as->nnodes = h->nnodes;
            as->world_size = h->world;
            as->rank_offset = m.offset;
            as->role_rank_offset = m.role_offset;
            as->role_world_size = m.role_world;
            as->local_world_size = m.nproc;
            snprintf(as->master_addr, sizeof as->master_addr, "%s", r->ep_host);
            as->master_port = r->ep_port;
        }
        line = strchr(line, '\n');
    }
    if (!found) {
        for (int i = 0; i < h->nnodes; i++) free(hosts[i]);
        free(hosts);
        return 0;
    }
    r->node_rank = as->node_rank;
    if (rz_round_entered(r, h->round, hosts, h->nnodes)) return 0;
    rz_members_taken(r, text);
    rz_standby_list(r, as->standby, sizeof as->standby);
    return 1;
}

int sr_rdzv_can_restart(const sr_rdzv *r) { return r->round + 1 <= r->cfg->max_restarts; }

int sr_rdzv_next_round(sr_rdzv *r, sr_assignment *as, char *err, size_t errlen) {
    const sr_config *cfg = r->cfg;
    int64_t deadline = spmd__now_ms() + cfg->join_timeout_ms;
    char k[256], *v = NULL;
    int rd = r->round + 1;
    rz_key(r, -1, k, sizeof k, "round");
    int g = rz_try_get(r, k, &v, err, errlen);
    if (g < 0) return -1;
    if (g == 1 && atoi(v) > rd) rd = atoi(v);
    free(v);
    int told = -1; /* round we announced waiting for */
    for (;;) {
        if (rz_interrupted(r, err, errlen)) return -1;
        if (spmd__now_ms() >= deadline) {
            snprintf(err, errlen, "could not join a round within the join timeout (%ld s)",
                     cfg->join_timeout_ms / 1000);
            return -1;
        }
        char *members = NULL, *end = NULL;
        rz_key(r, rd, k, sizeof k, "members");
        if ((g = rz_try_get(r, k, &members, err, errlen)) < 0) return -1;
        if (g == 0) { /* open: join it */
            int64_t a = 0;
            rz_key(r, rd, k, sizeof k, "count");
            if (rz_add(r, k, 1, &a, err, errlen)) return -1;
            r->arrival = (int)a;
            char info[2 * SR_HOST_MAX + 128];
            snprintf(info, sizeof info, "%d %d %s %s %s", cfg->node_rank, cfg->nproc, cfg->role,
                     r->a->host, rz_standby_field(r));
            rz_key(r, rd, k, sizeof k, "node/%d", r->arrival);
            if (rz_set(r, k, info, err, errlen)) return -1;
            if (r->arrival == 1 && close_round(r, rd, deadline, err, errlen)) {
                /* Tell the others waiting for this round instead of leaving them
                 * to their join timeout (best effort). */
                char why[SR_HOST_MAX + 600], e2[256];
                snprintf(why, sizeof why, "the round's leader on %s gave up: %s", r->a->host, err);
                if (!r->store_lost) set_members_error(r, rd, why, e2, sizeof e2);
                return -1;
            }
            rz_key(r, rd, k, sizeof k, "members");
            int w = rz_wait_key(r, k, deadline, err, errlen);
            if (w < 0) return -1;
            if (w == 1) continue; /* the deadline check above reports it */
            if (rz_try_get(r, k, &members, err, errlen) != 1) return -1;
            members_head h;
            parse_head(members, &h);
            if (!h.ok) {
                snprintf(err, errlen, "round %d failed: %s", rd, h.error);
                free(members);
                return -1;
            }
            if (take_members(r, members, &h, as)) {
                free(members);
                r->round = rd;
                rz_key(r, -1, k, sizeof k, "round");
                char num[16];
                snprintf(num, sizeof num, "%d", rd);
                if (rz_set(r, k, num, err, errlen)) return -1;
                return 0;
            }
            /* Closed just before our arrival: we are late for this round. */
        }
        members_head h;
        parse_head(members, &h);
        free(members);
        rz_key(r, rd, k, sizeof k, "end");
        if ((g = rz_try_get(r, k, &end, err, errlen)) < 0) return -1;
        if (g == 1) {
            int complete = !strcmp(end, "complete");
            free(end);
            if (complete) {
                snprintf(err, errlen, "round %d already completed: the job is over", rd);
                return -1;
            }
            rd++;
            continue;
        }
        if (!h.ok) { /* a failed round without an end record: nothing to wait for */
            snprintf(err, errlen, "round %d failed: %s", rd, h.error);
            return -1;
        }
        /* The round runs without us: join it in place when it runs in place;
         * else ask for a new one if it has room and the budget allows, then
         * wait for it to end either way. */
        char why[SR_HOST_MAX + 400] = "";
        int j = rz_join_running(r, rd, h.nnodes, h.world, as, why, sizeof why, err, errlen);
        if (j < 0) return -1;
        if (j > 0) return 0;
        if (why[0]) {
            if (told != rd) fprintf(stderr, "spmdrun: %s; waiting for room (a node lost) or its end\n", why);
            told = rd;
        } else if (told != rd) {
            told = rd;
            if (h.nnodes < cfg->max_nodes && rd + 1 <= cfg->max_restarts) {
                snprintf(why, sizeof why, "join\na node on %s asks to join", r->a->host);
                if (rz_create(r, k, why, err, errlen) < 0) return -1;
                why[0] = 0;
                fprintf(stderr, "spmdrun: round %d runs with %d node(s); asking to join it\n",
                        rd, h.nnodes);
            } else {
                fprintf(stderr,
                        "spmdrun: round %d runs with %d node(s) (max %d, restarts used %d of %d);"
                        " waiting for it to end\n",
                        rd, h.nnodes, cfg->max_nodes, rd, cfg->max_restarts);
            }
        }
        /* full in place: look again now and then, a node may be lost meanwhile */
        int64_t until = why[0] && spmd__now_ms() + 1000 < deadline ? spmd__now_ms() + 1000 : deadline;
        if (rz_wait_key(r, k, until, err, errlen) < 0) return -1;
    }
}

