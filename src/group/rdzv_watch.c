/* rdzv_watch.c — a rendezvous whose store refused a client ends in seconds,
 * on every rank, naming the refused client and the cause, instead of waiting
 * out SPMD_TIMEOUT (issue 23).
 *
 * The mesh asks this about once a second while it waits for higher ranks
 * (mesh.h, spmd__rdzv_watch):
 *   - the rank that hosts the store (rank 0 under env://, tcp://, file://)
 *     looks at the server's refusals; when the server refused a client and
 *     ranks are still missing REFUSAL_GRACE_MS after rank 0 noticed it, the
 *     rendezvous fails.  Rank 0 publishes the reason as "rdzv_failed" and as
 *     the address of every missing rank ("!reason": ranks waiting for that
 *     address wake at once with it), waits (at most ACK_MS) until the ranks
 *     below the first missing one have read it, then fails itself;
 *   - every other rank fails when it finds "rdzv_failed", or when the store
 *     went away (rank 0 failed).
 * A stranger without the secret can therefore end a rendezvous — only one
 * that is still waiting for a rank REFUSAL_GRACE_MS after the stranger was
 * refused, and never a formed group (docs/SECURITY.md has the trade-off). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "group_internal.h"
#include "store/store_internal.h"

#define REFUSAL_GRACE_MS 3000
#define ACK_MS 3000

static void list_ranks(const int *r, int n, char *out, size_t len) {
    size_t used = 0;
    out[0] = 0;
    for (int i = 0; i < n && used + 16 < len; i++)
        used += (size_t)snprintf(out + used, len - used, "%s%d", i ? "," : "", r[i]);
}

static int host_check(spmd_group *g, const int *missing, int nmissing, char *why, size_t len) {
    uint64_t at = 0;
    char last[320], ranks[200];
    unsigned n = spmd__store_server_refusals(g->store_server, &at, last, sizeof last);
    if (n == 0) return 0;
    int64_t now = spmd__now_ms();
    if (!g->refusal_seen_ms) g->refusal_seen_ms = now;
    if (now - g->refusal_seen_ms < REFUSAL_GRACE_MS) return 0;
    list_ranks(missing, nmissing, ranks, sizeof ranks);
    snprintf(why, len,
             "the store refused %u client(s) during the rendezvous (the last: %s) and rank(s) %s "
             "never connected: was a rank started with another job secret (SPMD_AUTH_TOKEN, "
             "SPMD_AUTH_FILE, or another user's or host's per-user secret file)?",
             n, last, ranks);
    /* Tell the others: the waiters on a missing rank's address wake now. */
    char val[SPMD__ERRLEN];
    int vl = snprintf(val, sizeof val, "!rank 0 reports: %s", why);
    size_t vlen = vl < 0 ? 0 : (size_t)vl < sizeof val ? (size_t)vl : sizeof val - 1;
    (void)spmd_store_set(g->store, "rdzv_failed", val + 1, vlen - 1);
    for (int i = 0; i < nmissing; i++) {
        char key[32];
        snprintf(key, sizeof key, "addr/%d", missing[i]);
        (void)spmd_store_set(g->store, key, val, vlen);
    }
    /* The ranks below the first missing one wait in their own accept loops
     * and look once a second: keep the store up until they have read the
     * reason (at most ACK_MS; after that they learn only that it went away). */
    int below = missing[0] - 1; /* ranks 1 .. missing[0]-1 */
    if (below > 0) {
        char (*names)[24] = calloc((size_t)below, sizeof *names);
        const char **keys = calloc((size_t)below, sizeof *keys);
        if (names && keys) {
            for (int r = 1; r <= below; r++) {
                snprintf(names[r - 1], sizeof names[r - 1], "rdzv_ack/%d", r);
                keys[r - 1] = names[r - 1];
            }
            (void)spmd_store_wait(g->store, keys, (size_t)below, ACK_MS);
        }
        free(names);
        free(keys);
    }
    return 1;
}

static int rdzv_check(void *arg, const int *missing, int nmissing, char *why, size_t len) {
    spmd_group *g = arg;
    if (g->store_server) return host_check(g, missing, nmissing, why, len);
    void *v = NULL;
    size_t vl = 0;
    spmd_status st = spmd_store_try_get(g->store, "rdzv_failed", &v, &vl);
    if (st == SPMD_OK) {
        snprintf(why, len, "the rendezvous failed: %.*s", (int)vl, (const char *)v);
        free(v);
        char key[32];
        snprintf(key, sizeof key, "rdzv_ack/%d", g->rank);
        (void)spmd_store_set(g->store, key, "1", 1);
        return 1;
    }
    if (st == SPMD_ERR_REMOTE) {
        snprintf(why, len, "the store went away during the rendezvous (its host, rank 0 or the "
                           "launcher, failed; its error says why): %s", spmd_store_errmsg(g->store));
        return 1;
    }
    return 0;
}

void spmd__group_watch_rdzv(spmd_group *g) {
    g->refusal_seen_ms = 0;
    g->t.watch = (spmd__rdzv_watch){.check = rdzv_check, .arg = g};
}
