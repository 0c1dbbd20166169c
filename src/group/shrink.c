/* shrink.c — recovery in place: the survivors of a failed group agree on who
 * is gone and form a new group of themselves (docs/RELIABILITY.md, "Recovery
 * in place").
 *
 *   1. register    each survivor sets shrink<e>/alive/<rank> under the old
 *                  group's prefix, then waits until every other rank has
 *                  registered or is seen gone by the local detector
 *                  (transport/liveness.c: its connection closed, or the
 *                  failure blamed it for a death or a silence)
 *   2. agree       the first survivor done proposes the registered set with
 *                  one compare-and-set on shrink<e>/members; the store orders
 *                  proposals, so everyone reads the same decision
 *   3. ready       members announce shrink<e>/ready/<rank> and wait for each
 *                  other, failing at once naming a member that died meanwhile
 *   4. form        a fresh mesh under <prefix>e<e>/ with a new job id: every
 *                  hello carries it, so nothing of an older epoch gets in
 *
 * e counts the attempts on the old group.  An attempt a member died in, or
 * whose store died (its host was a member: the survivors move to the standby
 * store, standby.c), or that another survivor already left for the next one,
 * is followed by the next attempt, until one forms or the deadline passes. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "common/test_die.h"
#include "group_internal.h"
#include "transport/liveness.h"

enum { R_UNKNOWN = 0, R_IN, R_GONE };

#define SHRINK_POLL_MS 100 /* how often a wait on the store looks at the detector */

/* One attempt: the old group, the store the survivors meet in (the group's,
 * or the standby when the group's is gone), and whether a failure of this
 * attempt is worth the next one. */
typedef struct {
    spmd_group *g;
    spmd_store *rv, *rv_root;
    int on_standby;
    char *standby_rest;       /* [1024]: a launcher's stand-ins after the one met on (the new group's) */
    int epoch;
    int64_t deadline;
    int retry;
} attempt;

static spmd_status store_gone(attempt *a, char *err, size_t errlen) {
    a->retry = 1; /* the next attempt looks for the standby */
    return spmd__fail(err, errlen, SPMD_ERR_REMOTE, "rank %d: the store is unreachable: %s", a->g->rank,
                      spmd_store_errmsg(a->rv));
}

int spmd_group_failed_ranks(const spmd_group *g, int *ranks, int max) {
    if (!g) return 0;
    return spmd__mesh_failed_ranks((spmd__mesh *)&g->t, ranks, max);
}

int spmd_group_epoch(const spmd_group *g) { return g ? g->epoch : -1; }
int spmd_group_was_excluded(const spmd_group *g) { return g ? g->excluded : 0; }

/* "0,1,3" for the ranks marked R_IN. */
static void format_set(const char *state, int world, char *out, size_t outlen) {
    size_t used = 0;
    out[0] = 0;
    for (int r = 0; r < world && used + 12 < outlen; r++)
        if (state[r] == R_IN) used += (size_t)snprintf(out + used, outlen - used, "%s%d", used ? "," : "", r);
}

/* Parse a decision written by some survivor: ascending ranks of the old
 * group.  Returns how many, or -1 when it is not one. */
static int parse_set(const char *s, size_t len, int world, int *out) {
    int n = 0, prev = -1;
    const char *p = s, *end = s + len;
    while (p < end) {
        char *e = NULL;
        long v = strtol(p, &e, 10);
        if (e == p || v <= prev || v >= world || n >= world) return -1;
        out[n++] = prev = (int)v;
        p = e;
        if (p < end && *p++ != ',') return -1;
    }
    return n;
}

/* Wait until every rank r with state[r] == R_UNKNOWN has set key
 * "shrink<e>/<what>/<r>" (then R_IN) or is gone (R_GONE; so is `blamed`,
 * -1 for none, unless it set its key).  A key set wins over the detector: a
 * member that went on and left the old group had set it first. */
static spmd_status await_keys(attempt *a, const char *what, char *state, int blamed, char *err, size_t errlen) {
    spmd_group *g = a->g;
    char key[64];
    for (;;) {
        int pending = -1;
        for (int r = 0; r < g->world; r++) {
            if (state[r] != R_UNKNOWN) continue;
            snprintf(key, sizeof key, "shrink%d/%s/%d", a->epoch, what, r);
            void *v = NULL;
            size_t vl = 0;
            spmd_status st = spmd_store_try_get(a->rv, key, &v, &vl);
            free(v);
            if (st == SPMD_OK) state[r] = R_IN;
            else if (st != SPMD_ERR_NOTFOUND) return store_gone(a, err, errlen);
            else if (r == blamed || spmd__mesh_peer_gone(&g->t, r)) state[r] = R_GONE;
            else if (pending < 0) pending = r;
        }
        if (pending < 0) return SPMD_OK;
        /* a survivor already in the next attempt will not come to this one */
        snprintf(key, sizeof key, "shrink%d/alive/%d", a->epoch + 1, pending);
        void *v = NULL;
        size_t vl = 0;
        spmd_status st = spmd_store_try_get(a->rv, key, &v, &vl);
        free(v);
        if (st == SPMD_OK) {
            a->retry = 1;
            return spmd__fail(err, errlen, SPMD_ERR_AGAIN, "rank %d went on to the next attempt", pending);
        }
        int left = spmd__remaining_ms(a->deadline);
        if (left == 0)
            return spmd__fail(err, errlen, SPMD_ERR_TIMEOUT,
                              "rank %d timed out waiting for rank %d to join the shrink (alive, but not calling "
                              "spmd_group_shrink?)", g->rank, pending);
        snprintf(key, sizeof key, "shrink%d/%s/%d", a->epoch, what, pending);
        const char *keys[1] = {key};
        int slice = left > 0 && left < SHRINK_POLL_MS ? left : SHRINK_POLL_MS;
        st = spmd_store_wait(a->rv, keys, 1, slice);
        if (st && st != SPMD_ERR_TIMEOUT) return store_gone(a, err, errlen);
    }
}

/* Steps 1 and 2: the members of this attempt, ascending, into members[];
 * their number, or -1 (*stp says why). */
static int agree_members(attempt *a, int *members, spmd_status *stp, char *err, size_t errlen) {
    spmd_group *g = a->g;
    char key[64];
    char *state = calloc((size_t)g->world, 1);
    char *set = malloc((size_t)g->world * 12 + 1);
    int n = -1;
    if (!state || !set) {
        *stp = spmd__fail(err, errlen, SPMD_ERR_NOMEM, "out of memory");
        goto out;
    }
    /* the rank blamed for a death or a silence is not waited for */
    int blamed = spmd__mesh_blamed_dead(&g->t);
    state[g->rank] = R_IN;
    snprintf(key, sizeof key, "shrink%d/alive/%d", a->epoch, g->rank);
    if (spmd_store_set(a->rv, key, "1", 1)) {
        *stp = store_gone(a, err, errlen);
        goto out;
    }
    spmd__test_die_at("shrink-registered", g->rank, a->epoch);
    if ((*stp = await_keys(a, "alive", state, blamed == g->rank ? -1 : blamed, err, errlen))) goto out;
    format_set(state, g->world, set, (size_t)g->world * 12 + 1);
    snprintf(key, sizeof key, "shrink%d/members", a->epoch);
    void *cur = NULL;
    size_t curlen = 0;
    if (spmd_store_compare_set(a->rv, key, NULL, 0, set, strlen(set), &cur, &curlen)) {
        *stp = store_gone(a, err, errlen);
        goto out;
    }
    n = parse_set(cur, curlen, g->world, members);
    if (n < 1) {
        *stp = spmd__fail(err, errlen, SPMD_ERR_PROTOCOL, "rank %d: the store holds a bad shrink decision '%.*s'",
                          g->rank, (int)(curlen > 60 ? 60 : curlen), (const char *)cur);
        n = -1;
    }
    free(cur);
out:
    free(state);
    free(set);
    return n;
}

/* Step 3: every member announces itself ready and waits for the others; a
 * member gone meanwhile ends the attempt at once, naming it. */
static spmd_status await_ready(attempt *a, const int *members, int n, char *err, size_t errlen) {
    spmd_group *g = a->g;
    char key[64];
    char *state = malloc((size_t)g->world);
    if (!state) return spmd__fail(err, errlen, SPMD_ERR_NOMEM, "out of memory");
    memset(state, R_IN, (size_t)g->world); /* non-members: nothing to wait for */
    for (int i = 0; i < n; i++) state[members[i]] = R_UNKNOWN;
    state[g->rank] = R_IN;
    snprintf(key, sizeof key, "shrink%d/ready/%d", a->epoch, g->rank);
    spmd_status st = spmd_store_set(a->rv, key, "1", 1) ? store_gone(a, err, errlen) : SPMD_OK;
    if (!st) st = await_keys(a, "ready", state, -1, err, errlen);
    for (int r = 0; !st && r < g->world; r++)
        if (state[r] == R_GONE) {
            a->retry = 1;
            st = spmd__fail(err, errlen, SPMD_ERR_REMOTE, "rank %d died during the shrink to epoch %d", r, a->epoch);
        }
    free(state);
    return st;
}

void spmd__group_base_prefix(const spmd_group *g, char *out, size_t outlen) {
    snprintf(out, outlen, "%s", g->store_prefix);
    if (g->epoch <= 0) return;
    size_t n = strlen(out);
    if (n < 3 || out[n - 1] != '/') return;
    size_t i = n - 1;
    while (i > 0 && out[i - 1] >= '0' && out[i - 1] <= '9') i--;
    if (i > 0 && i < n - 1 && out[i - 1] == 'e') out[i - 1] = 0;
}

/* Step 4 runs on a thread of its own while the caller watches the members:
 * the mesh's formation waits for every member until the deadline, and a
 * member that dies in it would otherwise hold everyone there.  The caller
 * then gives up at once, naming it; the thread ends by itself at the
 * deadline and frees what it built (the `abandoned` side frees `f`). */
typedef struct {
    spmd_group *s;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int done, abandoned;
    spmd_status st;
    char err[SPMD__ERRLEN];
} formation;

static void formation_free(formation *f) {
    pthread_mutex_destroy(&f->mu);
    pthread_cond_destroy(&f->cv);
    free(f);
}

static void unbuilt_free(spmd_group *s) {
    spmd__exec_stop(s);
    spmd__p2p_stop(&s->t);
    spmd__group_free(s);
}

static void *formation_main(void *arg) {
    formation *f = arg;
    char err[SPMD__ERRLEN] = "";
    spmd__test_die_at("shrink-form", f->s->parent_ranks[f->s->rank], f->s->epoch); /* its old rank */
    spmd_status st = spmd__group_connect(f->s, f->s->bind_host, err, sizeof err);
    if (!st) st = spmd__group_standby_start(f->s, err, sizeof err); /* the new group's own standby */
    pthread_mutex_lock(&f->mu);
    int abandoned = f->abandoned;
    f->st = st;
    snprintf(f->err, sizeof f->err, "%s", err);
    f->done = 1;
    pthread_cond_signal(&f->cv);
    pthread_mutex_unlock(&f->mu);
    if (abandoned) { /* nobody waits for it any more */
        unbuilt_free(f->s);
        formation_free(f);
    }
    return NULL;
}

/* Wait for the formation; SPMD_OK with f done, or the error naming a member
 * gone meanwhile (then f is the thread's to free). */
static spmd_status await_formation(attempt *a, formation *f, const int *members, int n, char *err, size_t errlen) {
    pthread_mutex_lock(&f->mu);
    while (!f->done) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += SHRINK_POLL_MS * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&f->cv, &f->mu, &ts);
        if (f->done) break;
        for (int i = 0; i < n; i++)
            if (members[i] != a->g->rank && spmd__mesh_peer_gone(&a->g->t, members[i])) {
                f->abandoned = 1;
                pthread_mutex_unlock(&f->mu);
                a->retry = 1;
                return spmd__fail(err, errlen, SPMD_ERR_REMOTE,
                                  "rank %d died during the shrink to epoch %d (while the survivors formed it)",
                                  members[i], a->epoch);
            }
    }
    pthread_mutex_unlock(&f->mu);
    return SPMD_OK;
}

/* The rank of the members hosting the store the new group meets in. */
static int new_store_host(const attempt *a, const int *members, int n) {
    const spmd_group *g = a->g;
    int old = g->store_host < 0 ? -1 : a->on_standby ? (g->store_host + 1) % g->world : g->store_host;
    for (int i = 0; old >= 0 && i < n; i++)
        if (members[i] == old) return i;
    return -1;
}

spmd_group *spmd__group_successor(const spmd_group *g, int rank, int n, int epoch, int *parent_ranks,
                                  spmd_store *root, char *err, size_t errlen) {
    spmd_group *s = spmd__group_alloc(rank, n);
    if (!s) {
        free(parent_ranks);
        spmd__fail(err, errlen, SPMD_ERR_NOMEM, "out of memory");
        return NULL;
    }
    s->parent_ranks = parent_ranks;
    s->epoch = epoch;
    s->timeout_ms = g->timeout_ms;
    s->local_rank = g->local_rank;
    s->local_world = g->local_world < n ? g->local_world : n;
    snprintf(s->name, sizeof s->name, "%s", g->name);
    snprintf(s->bind_host, sizeof s->bind_host, "%s", g->bind_host);
    snprintf(s->launcher_standby, sizeof s->launcher_standby, "%s", g->launcher_standby);
    char base[sizeof g->store_prefix];
    spmd__group_base_prefix(g, base, sizeof base);
    snprintf(s->store_prefix, sizeof s->store_prefix, "%.180se%d/", base, epoch);
    if (root) {
        /* A connection of its own: the old group may go first, and a
         * formation given up on (shrink.c) blocks no one else's store calls. */
        char inner[SPMD__ERRLEN] = "out of memory";
        spmd_status st = spmd_store_reconnect(root, &s->store_root, inner, sizeof inner);
        if (!st) s->own_store_client = 1;
        if (!st) st = spmd_store_prefixed(s->store_root, s->store_prefix, &s->store);
        if (st) {
            unbuilt_free(s);
            spmd__fail(err, errlen, st, "rank %d: the store is unreachable: %s", g->rank, inner);
            return NULL;
        }
    }
    return s;
}

/* Step 4: the new group of the members, this rank being members[me]. */
static spmd_status form(attempt *a, int *members, int n, int me, spmd_group **out, char *err, size_t errlen) {
    spmd_group *g = a->g;
    spmd_group *s = spmd__group_successor(g, me, n, a->epoch, members, a->rv_root, err, errlen);
    if (!s) {
        a->retry = 1; /* the store may have gone with its host */
        return SPMD_ERR_REMOTE;
    }
    s->store_host = new_store_host(a, members, n);
    if (a->on_standby && g->store_host < 0) /* met on a launcher's stand-in: the ones after it remain */
        snprintf(s->launcher_standby, sizeof s->launcher_standby, "%s", a->standby_rest);
    formation *f = calloc(1, sizeof *f);
    pthread_t th;
    if (!f) {
        unbuilt_free(s);
        return spmd__fail(err, errlen, SPMD_ERR_NOMEM, "out of memory");
    }
    f->s = s;
    pthread_mutex_init(&f->mu, NULL);
    pthread_cond_init(&f->cv, NULL);
    if (pthread_create(&th, NULL, formation_main, f) != 0) {
        formation_free(f);
        unbuilt_free(s);
        return spmd__fail(err, errlen, SPMD_ERR_SYSTEM, "cannot start a thread");
    }
    spmd_status st = await_formation(a, f, s->parent_ranks, n, err, errlen);
    if (st) {
        pthread_detach(th);
        return st;
    }
    pthread_join(th, NULL);
    st = f->st;
    if (st) {
        spmd__fail(err, errlen, st, "forming epoch %d (rank %d of %d): %s", a->epoch, me, n, f->err);
        formation_free(f);
        unbuilt_free(s);
        return st;
    }
    formation_free(f);
    /* the rank hosting the store the group met in keeps serving it */
    if (a->on_standby) {
        s->store_server = g->standby_server;
        g->standby_server = NULL;
    } else {
        s->store_server = g->store_server;
        g->store_server = NULL;
    }
    *out = s;
    return SPMD_OK;
}

/* Where this attempt meets: the group's store, or the standby when the
 * group's store is gone (its host died). */
static spmd_status choose_store(attempt *a, spmd_store **sb_root, spmd_store **sb, char *err, size_t errlen) {
    spmd_group *g = a->g;
    a->rv = g->store;
    a->rv_root = g->store_root;
    if (*sb) { /* an earlier attempt moved already */
        a->rv = *sb;
        a->rv_root = *sb_root;
        a->on_standby = 1;
        return SPMD_OK;
    }
    /* The store's host blamed for a death or a silence (stopped: its store
     * would not answer either) is not asked; else a closed connection says
     * the store is gone.  The abort notice carries the blamed rank, so the
     * survivors choose alike. */
    spmd_status st = SPMD_ERR_REMOTE;
    if (g->store_host < 0 || spmd__mesh_blamed_dead(&g->t) != g->store_host) {
        void *v = NULL;
        size_t vl = 0;
        st = spmd_store_try_get(g->store, "standby", &v, &vl);
        free(v);
        if (st == SPMD_OK || st == SPMD_ERR_NOTFOUND) return SPMD_OK;
    }
    char inner[SPMD__ERRLEN];
    if (g->store_host < 0 && g->launcher_standby[0]) { /* the launcher's store moved with its host's successor */
        if ((st = spmd__group_launcher_standby_connect(g, sb_root, sb, a->standby_rest, 1024, inner, sizeof inner)))
            return spmd__fail(err, errlen, st, "rank %d: the launcher's store is gone (%s), and %s", g->rank,
                              spmd_store_errmsg(g->store), inner);
        a->rv = *sb;
        a->rv_root = *sb_root;
        a->on_standby = 1;
        return SPMD_OK;
    }
    if (!g->standby_addr[0])
        return spmd__fail(err, errlen, SPMD_ERR_REMOTE, "rank %d: the store is unreachable (%s), and the group has no standby",
                          g->rank, spmd_store_errmsg(g->store));
    if ((st = spmd__group_standby_connect(g, sb_root, sb, inner, sizeof inner)))
        return spmd__fail(err, errlen, st, "rank %d: the store (on rank %d) is gone, and %s", g->rank, g->store_host,
                          inner);
    SPMD_LOGI("group %s rank %d: the store (on rank %d) is gone; the survivors meet on the standby", g->name, g->rank,
              g->store_host);
    a->rv = *sb;
    a->rv_root = *sb_root;
    a->on_standby = 1;
    return SPMD_OK;
}

/* One attempt at epoch a->epoch. */
static spmd_status shrink_once(attempt *a, spmd_store **sb_root, spmd_store **sb, spmd_group **out, char *err,
                               size_t errlen) {
    spmd_group *g = a->g;
    spmd_status st = g->world > 1 ? choose_store(a, sb_root, sb, err, errlen) : SPMD_OK;
    if (st) return st;
    int *members = malloc(sizeof(int) * (size_t)g->world);
    if (!members) return spmd__fail(err, errlen, SPMD_ERR_NOMEM, "out of memory");
    int n = 1;
    members[0] = 0;
    if (g->world > 1 && (n = agree_members(a, members, &st, err, errlen)) < 0) {
        free(members);
        return st;
    }
    int me = -1;
    for (int i = 0; i < n; i++)
        if (members[i] == g->rank) me = i;
    if (me < 0) {
        free(members);
        g->excluded = 1;
        return spmd__fail(err, errlen, SPMD_ERR_REMOTE,
                          "rank %d was excluded from epoch %d: the other survivors found it gone and went on "
                          "without it", g->rank, a->epoch);
    }
    spmd__test_die_at("shrink-agreed", g->rank, a->epoch);
    if (n > 1 && (st = await_ready(a, members, n, err, errlen))) {
        free(members);
        return st;
    }
    return form(a, members, n, me, out, err, errlen);
}

spmd_status spmd_group_shrink(spmd_group *g, spmd_group **out, char *err, size_t errlen) {
    if (!g || !out) return spmd__fail(err, errlen, SPMD_ERR_INVALID, "spmd_group_shrink: NULL group or out");
    if (g->t.ext)
        return spmd__fail(err, errlen, SPMD_ERR_UNSUPPORTED,
                          "spmd_group_shrink: a group over MPI cannot shrink (use ULFM's MPIX_Comm_shrink)");
    if (g->world > 1 && !g->store) return spmd__fail(err, errlen, SPMD_ERR_INVALID, "spmd_group_shrink: the group has no store");
    /* Revoke first: every survivor still using g is sent here too. */
    if (!atomic_load(&g->t.failed))
        spmd__group_fail(g, SPMD_ERR_ABORTED, 1, "rank %d is shrinking the group", g->rank);
    spmd_store *sb_root = NULL, *sb = NULL; /* the standby, once moved to */
    char rest[1024] = "";
    int64_t deadline = spmd__group_deadline(g);
    spmd_status st;
    for (;;) {
        attempt a = {.g = g, .epoch = g->epoch + ++g->shrink_attempts, .deadline = deadline, .standby_rest = rest};
        st = shrink_once(&a, &sb_root, &sb, out, err, errlen);
        if (!st || !a.retry || spmd__remaining_ms(deadline) == 0) break;
        SPMD_LOGI("group %s rank %d: shrink to epoch %d failed (%s); trying the next", g->name, g->rank, a.epoch,
                  err ? err : "");
    }
    spmd_store_close(sb);
    spmd_store_close(sb_root);
    return st;
}
