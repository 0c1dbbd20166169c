/* grow.c — recovery in place, the other way: new processes join a running
 * group at a point its members choose (docs/RELIABILITY.md, "Grow").
 *
 * Keys live under the lineage's prefix (the group's without "e<N>/"), which a
 * joiner computes as spmd_group_init would:
 *   join/count           a joiner takes its ticket t with an atomic add
 *   join/ticket/<t>      ...and announces it
 *   join/admitted        how many tickets the members have admitted so far
 *   join/admit/<t>       "<epoch> <rank> <world> <old world> <store host>": the joiner's place
 * The members' rank 0 admits the next `njoin` tickets in ticket order; then
 * everyone forms the group of the next epoch: the members keep their ranks,
 * the joiners follow. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "envinfo.h"
#include "group_internal.h"

/* The members' rank 0: wait for the next njoin joiners and give them ranks. */
static spmd_status admit(spmd_group *g, spmd_store *lineage, int njoin, int epoch, char *err, size_t errlen) {
    char key[64], val[96];
    void *v = NULL;
    size_t vl = 0;
    long admitted = 0;
    spmd_status st = spmd_store_try_get(lineage, "join/admitted", &v, &vl);
    if (st == SPMD_OK) admitted = strtol((const char *)v, NULL, 10);
    free(v);
    if (st && st != SPMD_ERR_NOTFOUND)
        return spmd__fail(err, errlen, st, "grow: the store is unreachable: %s", spmd_store_errmsg(lineage));
    for (int i = 0; i < njoin; i++) {
        long t = admitted + 1 + i;
        snprintf(key, sizeof key, "join/ticket/%ld", t);
        v = NULL;
        if ((st = spmd_store_get(lineage, key, &v, &vl))) /* blocks until the joiner comes, or the deadline */
            return spmd__fail(err, errlen, st, "grow: waiting for joiner %d of %d: %s", i + 1, njoin,
                              spmd_store_errmsg(lineage));
        free(v);
        snprintf(key, sizeof key, "join/admit/%ld", t);
        snprintf(val, sizeof val, "%d %d %d %d %d", epoch, g->world + i, g->world + njoin, g->world, g->store_host);
        if ((st = spmd_store_set(lineage, key, val, strlen(val))))
            return spmd__fail(err, errlen, st, "grow: the store is unreachable: %s", spmd_store_errmsg(lineage));
    }
    snprintf(val, sizeof val, "%ld", admitted + njoin);
    if ((st = spmd_store_set(lineage, "join/admitted", val, strlen(val))))
        return spmd__fail(err, errlen, st, "grow: the store is unreachable: %s", spmd_store_errmsg(lineage));
    return SPMD_OK;
}

/* Connect a successor group and give it its own standby store. */
static spmd_status connect_successor(spmd_group *s, char *err, size_t errlen) {
    spmd_status st = spmd__group_connect(s, s->bind_host, err, errlen);
    if (!st) st = spmd__group_standby_start(s, err, errlen);
    if (st) {
        spmd__exec_stop(s);
        spmd__p2p_stop(&s->t);
        spmd__group_free(s);
    }
    return st;
}

spmd_status spmd_group_grow(spmd_group *g, int njoin, spmd_group **out, char *err, size_t errlen) {
    if (!g || !out || njoin < 1)
        return spmd__fail(err, errlen, SPMD_ERR_INVALID, "spmd_group_grow: NULL group or out, or %d joiners", njoin);
    if (g->t.ext)
        return spmd__fail(err, errlen, SPMD_ERR_UNSUPPORTED, "spmd_group_grow: a group over MPI cannot grow");
    if (!g->store_root) return spmd__fail(err, errlen, SPMD_ERR_INVALID, "spmd_group_grow: the group has no store");
    char msg[SPMD__ERRLEN];
    spmd_status st = spmd__group_check(g, msg, sizeof msg);
    if (st) return spmd__fail(err, errlen, st, "spmd_group_grow: %s (shrink it first)", msg);
    int epoch = g->epoch + ++g->shrink_attempts;
    char base[sizeof g->store_prefix];
    spmd__group_base_prefix(g, base, sizeof base);
    if (g->rank == 0) {
        spmd_store *lineage = NULL;
        if ((st = spmd_store_prefixed(g->store_root, base, &lineage)))
            return spmd__fail(err, errlen, st, "out of memory");
        spmd_store_set_timeout(lineage, g->timeout_ms);
        st = admit(g, lineage, njoin, epoch, err, errlen);
        spmd_store_close(lineage);
        if (st) return st;
    }
    int n = g->world + njoin;
    int *parents = malloc(sizeof(int) * (size_t)n);
    if (!parents) return spmd__fail(err, errlen, SPMD_ERR_NOMEM, "out of memory");
    for (int r = 0; r < n; r++) parents[r] = r < g->world ? r : -1;
    spmd_group *s = spmd__group_successor(g, g->rank, n, epoch, parents, g->store_root, err, errlen);
    if (!s) return SPMD_ERR_NOMEM;
    s->store_host = g->store_host;
    char inner[SPMD__ERRLEN] = "";
    if ((st = connect_successor(s, inner, sizeof inner)))
        return spmd__fail(err, errlen, st, "grow to epoch %d (%d ranks): %s", epoch, n, inner);
    s->store_server = g->store_server; /* the store's host keeps serving it */
    g->store_server = NULL;
    *out = s;
    return SPMD_OK;
}

spmd_status spmd_group_joiners_waiting(spmd_group *g, int *n, char *err, size_t errlen) {
    if (!g || !n) return spmd__fail(err, errlen, SPMD_ERR_INVALID, "spmd_group_joiners_waiting: NULL argument");
    if (!g->store_root) return spmd__fail(err, errlen, SPMD_ERR_INVALID, "spmd_group_joiners_waiting: no store");
    char base[sizeof g->store_prefix];
    spmd__group_base_prefix(g, base, sizeof base);
    spmd_store *lineage = NULL;
    spmd_status st = spmd_store_prefixed(g->store_root, base, &lineage);
    if (st) return spmd__fail(err, errlen, st, "out of memory");
    spmd_store_set_timeout(lineage, g->timeout_ms);
    int64_t count = 0;
    long admitted = 0;
    void *v = NULL;
    size_t vl = 0;
    if ((st = spmd_store_add(lineage, "join/count", 0, &count)) == SPMD_OK) {   /* adding 0 reads it */
        st = spmd_store_try_get(lineage, "join/admitted", &v, &vl);
        if (st == SPMD_OK) admitted = strtol((const char *)v, NULL, 10);
        if (st == SPMD_ERR_NOTFOUND) st = SPMD_OK;
        free(v);
    }
    if (st) spmd__fail(err, errlen, st, "the store is unreachable: %s", spmd_store_errmsg(lineage));
    else *n = count > admitted ? (int)(count - admitted) : 0;
    spmd_store_close(lineage);
    return st;
}

spmd_status spmd_group_join(const spmd_group_opts *opts, spmd_group **out, char *err, size_t errlen) {
    static const spmd_group_opts dflt = SPMD_GROUP_OPTS_DEFAULT;
    if (!out) return spmd__fail(err, errlen, SPMD_ERR_INVALID, "spmd_group_join: out is NULL");
    if (!opts) opts = &dflt;
    if (opts->init_method && strcmp(opts->init_method, "env://") != 0)
        return spmd__fail(err, errlen, SPMD_ERR_UNSUPPORTED,
                          "spmd_group_join: only env:// (MASTER_ADDR/MASTER_PORT) or an existing store, not '%s'",
                          opts->init_method);
    spmd__envinfo env;
    spmd_status st = spmd__env_read(&env, err, errlen);
    if (st) return st;
    int timeout_ms = opts->timeout_ms > 0 ? opts->timeout_ms : SPMD_DEFAULT_TIMEOUT_MS;
    const char *t = getenv("SPMD_TIMEOUT");
    long ms;
    if (opts->timeout_ms <= 0 && t && *t && spmd__parse_duration_ms(t, &ms) == SPMD_OK && ms > 0) timeout_ms = (int)ms;
    spmd_store *root = opts->store;
    int own = 0;
    if (!root) {
        if (!env.master_addr[0] || env.master_port <= 0)
            return spmd__fail(err, errlen, SPMD_ERR_INVALID, "spmd_group_join: MASTER_ADDR and MASTER_PORT must be set");
        char cerr[SPMD__ERRLEN];
        if ((st = spmd_store_connect(env.master_addr, env.master_port, timeout_ms, &root, cerr, sizeof cerr)))
            return spmd__fail(err, errlen, st, "joiner: cannot reach the store at %s:%d: %s", env.master_addr,
                              env.master_port, cerr);
        own = 1;
    }
    /* the lineage's prefix, as spmd_group_init makes it */
    char base[200], key[64];
    snprintf(base, sizeof base, "spmd/%s/%d/%s/", env.run_id, env.restart_count, opts->name ? opts->name : "default");
    spmd_store *lineage = NULL;
    int64_t ticket = 0;
    void *v = NULL;
    size_t vl = 0;
    int epoch = 0, rank = -1, world = 0, old_world = 0, store_host = -1;
    if ((st = spmd_store_prefixed(root, base, &lineage))) {
        spmd__fail(err, errlen, st, "out of memory");
        goto out;
    }
    spmd_store_set_timeout(lineage, timeout_ms);
    if ((st = spmd_store_add(lineage, "join/count", 1, &ticket))) goto store_err;
    snprintf(key, sizeof key, "join/ticket/%lld", (long long)ticket);
    if ((st = spmd_store_set(lineage, key, "1", 1))) goto store_err;
    SPMD_LOGI("joiner: ticket %lld taken; waiting to be admitted at the group's next grow", (long long)ticket);
    snprintf(key, sizeof key, "join/admit/%lld", (long long)ticket);
    if ((st = spmd_store_get(lineage, key, &v, &vl))) { /* until a member admits us */
        spmd__fail(err, errlen, st, "joiner %lld: not admitted (no member called spmd_group_grow?): %s",
                   (long long)ticket, spmd_store_errmsg(lineage));
        goto out;
    }
    if (sscanf((const char *)v, "%d %d %d %d %d", &epoch, &rank, &world, &old_world, &store_host) != 5 ||
        old_world < 1 || rank < old_world || rank >= world) {
        st = spmd__fail(err, errlen, SPMD_ERR_PROTOCOL, "joiner: a bad admission '%.40s'", (const char *)v);
        goto out;
    }
    spmd_group *s = spmd__group_alloc(rank, world);
    int *parents = s ? malloc(sizeof(int) * (size_t)world) : NULL;
    if (!parents) {
        if (s) spmd__group_free(s);
        st = spmd__fail(err, errlen, SPMD_ERR_NOMEM, "out of memory");
        goto out;
    }
    for (int r = 0; r < world; r++) parents[r] = r < old_world ? r : -1;
    s->parent_ranks = parents;
    s->epoch = epoch;
    s->store_host = store_host;
    if (!opts->store) spmd__group_launcher_standby(s);
    s->timeout_ms = timeout_ms;
    s->local_rank = env.local_rank;
    s->local_world = env.local_world;
    snprintf(s->name, sizeof s->name, "%s", opts->name ? opts->name : "default");
    const char *addr = getenv("SPMD_SOCKET_ADDR");
    if (addr && *addr) snprintf(s->bind_host, sizeof s->bind_host, "%s", addr);
    else if (env.master_addr[0]) spmd__local_addr_towards(env.master_addr, s->bind_host, sizeof s->bind_host);
    else snprintf(s->bind_host, sizeof s->bind_host, "127.0.0.1");
    snprintf(s->store_prefix, sizeof s->store_prefix, "%.180se%d/", base, epoch);
    s->store_root = root;
    s->own_store_client = own;
    own = 0;
    root = NULL;
    if ((st = spmd_store_prefixed(s->store_root, s->store_prefix, &s->store))) {
        spmd__group_free(s);
        spmd__fail(err, errlen, st, "out of memory");
        goto out;
    }
    char inner[SPMD__ERRLEN] = "";
    if ((st = connect_successor(s, inner, sizeof inner))) {
        spmd__fail(err, errlen, st, "joiner (rank %d of %d, epoch %d): %s", rank, world, epoch, inner);
        goto out;
    }
    *out = s;
    goto out;
store_err:
    spmd__fail(err, errlen, st, "joiner: the store is unreachable: %s", spmd_store_errmsg(lineage));
out:
    free(v);
    spmd_store_close(lineage);
    if (own) spmd_store_close(root);
    return st;
}
