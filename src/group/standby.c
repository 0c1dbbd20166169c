/* standby.c — the store must not die with the rank that hosts it.  When a
 * rank of the group hosts the group's store (rank 0 under a plain
 * MASTER_ADDR/MASTER_PORT, tcp:// or file://), the next rank starts a
 * second, empty store server at formation and every rank learns its
 * address; a shrink that finds the first store gone meets the survivors on
 * the standby instead (shrink.c), which then becomes the new group's store.
 * A launcher's store (spmdrun's agent, spmd_spawn) needs none of these; a
 * launcher that moves its store when its host is lost (spmdrun --nnodes
 * MIN:MAX in place: each other node's agent keeps a standby store) names
 * the stand-ins in SPMD_STORE_STANDBY, "host:port,..." in the order every
 * rank and agent tries them: the first that answers is where everyone
 * meets (a refused connection means that node is gone too). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "group_internal.h"
#include "store/store_internal.h"

spmd_status spmd__group_standby_start(spmd_group *g, char *err, size_t errlen) {
    if (g->store_host < 0 || g->world < 2 || !g->store) return SPMD_OK;
    int host = (g->store_host + 1) % g->world;
    spmd_status st;
    if (g->rank == host) {
        if ((st = spmd_store_server_start(g->bind_host, 0, &g->standby_server, err, errlen))) return st;
        char val[300];
        snprintf(val, sizeof val, "%d %s", spmd_store_server_port(g->standby_server), g->bind_host);
        if ((st = spmd_store_set(g->store, "standby", val, strlen(val))))
            return spmd__fail(err, errlen, st, "rank %d: publishing the standby store: %s", g->rank,
                              spmd_store_errmsg(g->store));
    }
    void *v = NULL;
    size_t vl = 0;
    if ((st = spmd_store_get(g->store, "standby", &v, &vl)))
        return spmd__fail(err, errlen, st, "rank %d: waiting for rank %d's standby store: %s", g->rank, host,
                          spmd_store_errmsg(g->store));
    snprintf(g->standby_addr, sizeof g->standby_addr, "%.*s", (int)(vl < 299 ? vl : 299), (const char *)v);
    free(v);
    return SPMD_OK;
}

spmd_status spmd__group_standby_connect(spmd_group *g, spmd_store **root, spmd_store **store, char *err,
                                        size_t errlen) {
    int port = 0;
    char host[256];
    if (!g->standby_addr[0] || sscanf(g->standby_addr, "%d %255s", &port, host) != 2)
        return spmd__fail(err, errlen, SPMD_ERR_REMOTE, "the group has no standby store");
    char inner[SPMD__ERRLEN];
    spmd_status st = spmd_store_connect(host, port, g->timeout_ms, root, inner, sizeof inner);
    if (st) return spmd__fail(err, errlen, st, "the standby store is unreachable too: %s", inner);
    if ((st = spmd_store_prefixed(*root, g->store_prefix, store))) {
        spmd_store_close(*root);
        *root = NULL;
        return spmd__fail(err, errlen, st, "out of memory");
    }
    return SPMD_OK;
}

void spmd__group_launcher_standby(spmd_group *g) {
    const char *v = getenv("SPMD_STORE_STANDBY");
    if (g->store_host < 0 && v && strlen(v) < sizeof g->launcher_standby)
        snprintf(g->launcher_standby, sizeof g->launcher_standby, "%s", v);
}

spmd_status spmd__group_launcher_standby_connect(spmd_group *g, spmd_store **root, spmd_store **store, char *rest,
                                                 size_t restlen, char *err, size_t errlen) {
    char tried[SPMD__ERRLEN] = "";
    size_t used = 0;
    for (const char *p = g->launcher_standby; *p;) {
        size_t n = strcspn(p, ",");
        char ep[300], inner[SPMD__ERRLEN];
        snprintf(ep, sizeof ep, "%.*s", (int)(n < sizeof ep - 1 ? n : sizeof ep - 1), p);
        p += n + (p[n] == ',');
        char *colon = strrchr(ep, ':');
        int port = colon ? atoi(colon + 1) : 0;
        if (!colon || port <= 0) continue;
        *colon = 0;
        spmd_status st = spmd__store_connect_up(ep, port, g->timeout_ms, root, inner, sizeof inner);
        if (st) {
            if (used < sizeof tried)
                used += (size_t)snprintf(tried + used, sizeof tried - used, "%s%s:%d: %s", used ? "; " : "", ep,
                                         port, inner);
            continue;
        }
        if ((st = spmd_store_prefixed(*root, g->store_prefix, store))) {
            spmd_store_close(*root);
            *root = NULL;
            return spmd__fail(err, errlen, st, "out of memory");
        }
        snprintf(rest, restlen, "%s", p);
        SPMD_LOGI("group %s rank %d: the launcher's store is gone; the survivors meet on its successor at %s:%d",
                  g->name, g->rank, ep, port);
        return SPMD_OK;
    }
    return spmd__fail(err, errlen, SPMD_ERR_REMOTE, "none of the launcher's standby stores answers (%s)",
                      tried[0] ? tried : "none named");
}
