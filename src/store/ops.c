/* ops.c — the store's operations on its key table (SET, GET, WAIT, ADD, CAS,
 * DELETE, NUM_KEYS), the byte and key limits they enforce, and parked
 * requests.  A GET/WAIT on absent keys is parked: a `watch` node per missing
 * key hangs on that key's table entry (a placeholder entry when the key does
 * not exist), and setting the key wakes exactly its watchers — no polling.
 * Parked requests also have a deadline (server.c sleeps until the earliest);
 * when it passes the client gets SPMD_ERR_TIMEOUT and stays in step. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "store/server_internal.h"

/* Printable, bounded rendering of a key for messages. */
static void fmt_key(char *out, size_t outlen, const unsigned char *k, size_t n) {
    size_t j = 0, lim = outlen > 4 ? outlen - 4 : 0;
    for (size_t i = 0; i < n && j < lim; i++) out[j++] = (k[i] >= 32 && k[i] < 127) ? (char)k[i] : '?';
    if (n > lim && outlen >= 4) { out[j++] = '.'; out[j++] = '.'; out[j++] = '.'; }
    if (outlen) out[j < outlen ? j : outlen - 1] = 0;
}

/* ---- values ---------------------------------------------------------------- */
/* A key became present: wake its watchers. */
static void fire(spmd_store_server *s, entry *e) {
    while (e->watchers) {
        watch *w = e->watchers;
        conn *c = w->c;
        e->watchers = w->next;
        if (w->next) w->next->prev = NULL;
        w->e = NULL;
        w->prev = w->next = NULL;
        if (--c->missing == 0) spmd__store_enqueue(s, c);
    }
}

/* Charge (or refund) a present entry's bytes to the store and its owner. */
static void account(spmd_store_server *s, entry *e, int sign) {
    size_t n = e->klen + e->vbytes;
    if (sign > 0) {
        spmd__store_charge(s, n, 0);
        if (e->owner) e->owner->owned += n;
    } else {
        spmd__store_charge(s, 0, n);
        if (e->owner) e->owner->owned -= n;
    }
}

/* -1: out of memory; -2: over a limit (s->limit_msg says which).  With
 * take_input, a large value is not copied: the entry takes c's input buffer
 * (which holds just this request) and points into it. */
static int set_value_from(spmd_store_server *s, conn *c, entry *e, const void *val, size_t vlen,
                          int take_input) {
    const spmd__store_limits *l = &s->lim;
    size_t vbytes = take_input ? c->in_cap : vlen;
    size_t old = e->present ? e->klen + e->vbytes : 0, add = e->klen + vbytes;
    size_t mine = c->owned - (e->present && e->owner == c ? old : 0);
    if (e->klen > l->max_key || vlen > l->max_value) {
        snprintf(s->limit_msg, sizeof s->limit_msg,
                 "key of %u bytes / value of %zu bytes over the store's limit (%zu / %zu: "
                 "SPMD_STORE_MAX_KEY_BYTES, SPMD_STORE_MAX_VALUE_BYTES)", e->klen, vlen,
                 l->max_key, l->max_value);
        return -2;
    }
    if (!e->present && s->table.npresent >= l->max_keys) {
        snprintf(s->limit_msg, sizeof s->limit_msg,
                 "the store holds %zu keys, its limit (SPMD_STORE_MAX_KEYS)", s->table.npresent);
        return -2;
    }
    if (s->bytes - old + add > l->max_bytes) {
        snprintf(s->limit_msg, sizeof s->limit_msg,
                 "the store holds %zu bytes; %zu more would pass its limit of %zu "
                 "(SPMD_STORE_MAX_BYTES)", s->bytes, add, l->max_bytes);
        return -2;
    }
    if (mine + add > l->max_client_bytes) { /* (its input buffer is bounded on arrival) */
        snprintf(s->limit_msg, sizeof s->limit_msg,
                 "this client's keys and values hold %zu bytes; %zu more would pass the "
                 "per-client limit of %zu (SPMD_STORE_MAX_CLIENT_BYTES)", mine, add,
                 l->max_client_bytes);
        return -2;
    }
    unsigned char *copy = NULL;
    if (!take_input) {
        copy = malloc(vlen + 1);
        if (!copy) return -1;
        if (vlen) memcpy(copy, val, vlen);
        copy[vlen] = 0;
    }
    if (e->present) account(s, e, -1);
    spmd__store_table_free_value(e);
    if (take_input) {
        e->block = c->in;
        e->val = (unsigned char *)val;
        spmd__store_charge(s, 0, c->in_cap); /* now charged as the entry's */
        c->in = NULL;
        c->in_cap = c->in_len = c->in_off = 0;
        c->stolen = 1;
    } else {
        e->val = copy;
    }
    e->vlen = vlen;
    e->vbytes = vbytes;
    e->owner = c;
    account(s, e, +1);
    if (!e->present) {
        e->present = 1;
        s->table.npresent++;
        fire(s, e);
    }
    return 0;
}

static int set_value(spmd_store_server *s, conn *c, entry *e, const void *val, size_t vlen) {
    return set_value_from(s, c, e, val, vlen, 0);
}

/* Strict decimal int64: optional '-', 1..19 digits, nothing else. */
static int parse_i64(const unsigned char *p, size_t n, int64_t *out) {
    size_t i = 0;
    int neg = 0;
    if (n && (p[0] == '-' || p[0] == '+')) { neg = p[0] == '-'; i = 1; }
    if (i == n || n - i > 19) return -1;
    uint64_t v = 0;
    for (; i < n; i++) {
        if (p[i] < '0' || p[i] > '9') return -1;
        v = v * 10 + (uint64_t)(p[i] - '0');
    }
    if (v > (uint64_t)INT64_MAX + (uint64_t)neg) return -1;
    *out = neg ? (int64_t)(0 - v) : (int64_t)v;
    return 0;
}

/* ---- parked requests --------------------------------------------------------
 * Look at every key of c's parked request: watch the absent ones; when none
 * is absent, answer.  Run at park time and whenever the last watched key of c
 * appears (the keys are looked at again: one may have been deleted since). */
void spmd__store_evaluate_park(spmd_store_server *s, conn *c) {
    const unsigned char *p = c->park_keys;
    c->missing = 0;
    for (uint32_t i = 0; i < c->park_nkeys; i++) {
        const unsigned char *k;
        uint32_t kl;
        p = spmd__store_next_key(p, &k, &kl);
        watch *w = &c->watches[i];
        if (w->e) { c->missing++; continue; } /* still watching an absent key */
        entry *e = spmd__store_table_find_or_create(&s->table, k, kl);
        if (!e) {
            uint32_t seq = c->park_seq;
            spmd__store_unpark(s, c);
            spmd__store_reply_err(s, c, seq, SPMD_ERR_NOMEM, "store server out of memory");
            spmd__store_enqueue(s, c);
            return;
        }
        if (e->present) continue;
        w->c = c;
        w->e = e;
        w->prev = NULL;
        w->next = e->watchers;
        if (e->watchers) e->watchers->prev = w;
        e->watchers = w;
        c->missing++;
    }
    if (c->missing) return;
    uint32_t seq = c->park_seq;
    if (c->park_op == SPMD__STORE_OP_GET) {
        const unsigned char *k;
        uint32_t kl;
        spmd__store_next_key(c->park_keys, &k, &kl);
        entry *e = spmd__store_table_lookup(&s->table, k, kl);
        int room = spmd__store_reply_room(s, c, e->vlen);
        if (room == 0) return; /* answered when memory comes free */
        spmd__store_unpark(s, c);
        if (room < 0)
            spmd__store_reply_err(s, c, seq, SPMD_ERR_NOMEM, "store server: %s", s->limit_msg);
        else
            spmd__store_reply(s, c, seq, SPMD_OK, 0, e->val, e->vlen);
    } else {
        spmd__store_unpark(s, c);
        spmd__store_reply(s, c, seq, SPMD_OK, 0, NULL, 0);
    }
    spmd__store_enqueue(s, c); /* flush, then look at the next request */
}

static void park(spmd_store_server *s, conn *c, const spmd__store_req *r) {
    const unsigned char *p = r->keys;
    for (uint32_t i = 0; i < r->nkeys; i++) {
        const unsigned char *k;
        uint32_t kl;
        p = spmd__store_next_key(p, &k, &kl);
    }
    size_t klen = (size_t)(p - r->keys);
    c->park_keys = malloc(klen ? klen : 1);
    c->watches = calloc(r->nkeys, sizeof *c->watches);
    if (!c->park_keys || !c->watches) {
        free(c->park_keys);
        free(c->watches);
        c->park_keys = NULL;
        c->watches = NULL;
        spmd__store_reply_err(s, c, r->seq, SPMD_ERR_NOMEM, "store server out of memory");
        return;
    }
    memcpy(c->park_keys, r->keys, klen);
    c->parked = 1;
    c->park_op = r->op;
    c->park_seq = r->seq;
    c->park_nkeys = r->nkeys;
    c->park_timeout_ms = r->timeout_ms;
    c->park_deadline_ns = spmd__now_ns() + (uint64_t)r->timeout_ms * 1000000ull;
    c->pprev = NULL;
    c->pnext = s->parked;
    if (s->parked) s->parked->pprev = c;
    s->parked = c;
    atomic_fetch_add(&s->nparked, 1);
    spmd__store_evaluate_park(s, c);
}

void spmd__store_expire_parked(spmd_store_server *s, uint64_t now) {
    conn *c = s->parked;
    while (c) {
        conn *next = c->pnext;
        if (now >= c->park_deadline_ns) {
            /* Name the first key still missing: that is what a rendezvous
             * debugger wants to know. */
            char key[160] = "?";
            for (uint32_t i = 0; i < c->park_nkeys; i++)
                if (c->watches[i].e) {
                    fmt_key(key, sizeof key, c->watches[i].e->key, c->watches[i].e->klen);
                    break;
                }
            uint32_t seq = c->park_seq, tmo = c->park_timeout_ms, nk = c->park_nkeys;
            uint32_t missing = c->missing;
            int op = c->park_op;
            spmd__store_unpark(s, c);
            if (!missing) /* the key came, but its reply waited for memory */
                spmd__store_reply_err(s, c, seq, SPMD_ERR_TIMEOUT,
                                      "the value was set but the store had no room for the reply "
                                      "within %u ms (SPMD_STORE_MAX_BYTES %zu; other clients' "
                                      "replies are not being read)", tmo, s->lim.max_bytes);
            else if (op == SPMD__STORE_OP_GET)
                spmd__store_reply_err(s, c, seq, SPMD_ERR_TIMEOUT, "key '%s' not set within %u ms", key, tmo);
            else
                spmd__store_reply_err(s, c, seq, SPMD_ERR_TIMEOUT,
                          "%u of %u keys still missing after %u ms (first: '%s')", missing, nk,
                          tmo, key);
            spmd__store_enqueue(s, c);
        }
        c = next;
    }
}

/* ---- requests -------------------------------------------------------------- */
size_t spmd__store_reply_bound(spmd_store_server *s, const spmd__store_req *r) {
    entry *e;
    switch (r->op) {
    case SPMD__STORE_OP_GET:
    case SPMD__STORE_OP_TRY_GET:
        e = spmd__store_table_lookup(&s->table, r->key, r->klen);
        return e && e->present ? e->vlen : 0; /* an absent key parks: checked when it comes */
    case SPMD__STORE_OP_CAS: {
        size_t n = r->vlen[0] > r->vlen[1] ? r->vlen[0] : r->vlen[1];
        e = spmd__store_table_lookup(&s->table, r->key, r->klen);
        if (e && e->present && e->vlen > n) n = e->vlen;
        return n;
    }
    default:
        return 0;
    }
}

static void set_failed(spmd_store_server *s, conn *c, uint32_t seq, int rc) {
    if (rc == -2) spmd__store_reply_err(s, c, seq, SPMD_ERR_NOMEM, "store server: %s", s->limit_msg);
    else spmd__store_reply_err(s, c, seq, SPMD_ERR_NOMEM, "store server out of memory");
}

void spmd__store_execute(spmd_store_server *s, conn *c, const spmd__store_req *r) {
    char key[160];
    entry *e = NULL;
    int rc = -1;
    switch (r->op) {
    case SPMD__STORE_OP_SET:
        e = spmd__store_table_find_or_create(&s->table, r->key, r->klen);
        if (!e || (rc = set_value_from(s, c, e, r->val[0], r->vlen[0],
                                       r->vlen[0] >= TAKE_MIN && c->in_off == 0 &&
                                           r->frame_len == c->in_len))) {
            if (e) spmd__store_table_reap(&s->table, e);
            set_failed(s, c, r->seq, rc);
            return;
        }
        spmd__store_reply(s, c, r->seq, SPMD_OK, 0, NULL, 0);
        return;
    case SPMD__STORE_OP_GET:
    case SPMD__STORE_OP_TRY_GET:
        e = spmd__store_table_lookup(&s->table, r->key, r->klen);
        if (e && e->present) {
            spmd__store_reply(s, c, r->seq, SPMD_OK, 0, e->val, e->vlen);
        } else if (r->op == SPMD__STORE_OP_TRY_GET) {
            fmt_key(key, sizeof key, r->key, r->klen);
            spmd__store_reply_err(s, c, r->seq, SPMD_ERR_NOTFOUND, "key '%s' not found", key);
        } else if (r->timeout_ms == 0) {
            fmt_key(key, sizeof key, r->key, r->klen);
            spmd__store_reply_err(s, c, r->seq, SPMD_ERR_TIMEOUT, "key '%s' not set within 0 ms", key);
        } else {
            park(s, c, r);
        }
        return;
    case SPMD__STORE_OP_WAIT: {
        const unsigned char *p = r->keys, *k = NULL;
        uint32_t kl = 0, i;
        for (i = 0; i < r->nkeys; i++) {
            p = spmd__store_next_key(p, &k, &kl);
            e = spmd__store_table_lookup(&s->table, k, kl);
            if (!e || !e->present) break;
        }
        if (i == r->nkeys) {
            spmd__store_reply(s, c, r->seq, SPMD_OK, 0, NULL, 0);
        } else if (r->timeout_ms == 0) {
            fmt_key(key, sizeof key, k, kl);
            spmd__store_reply_err(s, c, r->seq, SPMD_ERR_TIMEOUT, "key '%s' missing (timeout 0 ms)", key);
        } else {
            park(s, c, r);
        }
        return;
    }
    case SPMD__STORE_OP_ADD: {
        int64_t cur = 0, sum;
        e = spmd__store_table_lookup(&s->table, r->key, r->klen);
        if (e && e->present && parse_i64(e->val, e->vlen, &cur)) {
            fmt_key(key, sizeof key, r->key, r->klen);
            spmd__store_reply_err(s, c, r->seq, SPMD_ERR_INVALID, "value of key '%s' is not a decimal integer",
                      key);
            return;
        }
        if (__builtin_add_overflow(cur, r->num, &sum)) {
            fmt_key(key, sizeof key, r->key, r->klen);
            spmd__store_reply_err(s, c, r->seq, SPMD_ERR_INVALID,
                      "add %" PRId64 " to key '%s' (%" PRId64 ") overflows int64", r->num, key, cur);
            return;
        }
        char text[24];
        int n = snprintf(text, sizeof text, "%" PRId64, sum);
        if (!e) e = spmd__store_table_find_or_create(&s->table, r->key, r->klen);
        if (!e || (rc = set_value(s, c, e, text, (size_t)n))) {
            if (e) spmd__store_table_reap(&s->table, e);
            set_failed(s, c, r->seq, rc);
            return;
        }
        spmd__store_reply(s, c, r->seq, SPMD_OK, sum, NULL, 0);
        return;
    }
    case SPMD__STORE_OP_CAS: {
        /* torch's compareSet: absent + empty expected sets; absent + other
         * expected answers `expected`; present answers the value after. */
        const unsigned char *exp = r->val[0], *des = r->val[1];
        size_t elen = r->vlen[0], dlen = r->vlen[1];
        e = spmd__store_table_lookup(&s->table, r->key, r->klen);
        if (!e || !e->present) {
            if (elen != 0) {
                spmd__store_reply(s, c, r->seq, SPMD_OK, 0, exp, elen);
                return;
            }
        } else if (e->vlen != elen || (elen && memcmp(e->val, exp, elen) != 0)) {
            spmd__store_reply(s, c, r->seq, SPMD_OK, 0, e->val, e->vlen);
            return;
        }
        if (!e) e = spmd__store_table_find_or_create(&s->table, r->key, r->klen);
        if (!e || (rc = set_value(s, c, e, des, dlen))) {
            if (e) spmd__store_table_reap(&s->table, e);
            set_failed(s, c, r->seq, rc);
            return;
        }
        spmd__store_reply(s, c, r->seq, SPMD_OK, 0, e->val, e->vlen);
        return;
    }
    case SPMD__STORE_OP_DELETE:
        e = spmd__store_table_lookup(&s->table, r->key, r->klen);
        if (e && e->present) {
            account(s, e, -1);
            e->owner = NULL;
            spmd__store_table_free_value(e);
            e->vlen = 0;
            e->present = 0;
            s->table.npresent--;
            spmd__store_table_reap(&s->table, e);
            spmd__store_reply(s, c, r->seq, SPMD_OK, 1, NULL, 0);
        } else {
            spmd__store_reply(s, c, r->seq, SPMD_OK, 0, NULL, 0);
        }
        return;
    case SPMD__STORE_OP_NUM_KEYS:
        spmd__store_reply(s, c, r->seq, SPMD_OK, (int64_t)s->table.npresent, NULL, 0);
        return;
    default: /* the decoder let through only known ops */
        spmd__store_reply_err(s, c, r->seq, SPMD_ERR_PROTOCOL, "unknown op %u", r->op);
        return;
    }
}
