/* server.c — the store server: one thread, one epoll set, many clients.
 *
 * Each connection has an input buffer (grown only as bytes arrive, never from
 * a length the peer claims) and an output buffer.  Requests of one connection
 * run one at a time, in order: the next is decoded only when the previous
 * reply has been flushed and nothing is parked.  A GET/WAIT on absent keys is
 * parked: a `watch` node per missing key hangs on that key's table entry (a
 * placeholder entry when the key does not exist), and setting the key wakes
 * exactly its watchers — no polling.  Parked requests also have a deadline;
 * the loop sleeps in epoll_wait until the earliest one and then answers
 * SPMD_ERR_TIMEOUT, so the client's connection stays in step.
 *
 * A peer that breaks the protocol (bad magic, bad length, unknown op, frame
 * cut short) is logged with SPMD_LOGW and dropped; everyone else carries on.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>
#include "auth/ratelimit.h"
#include "store/handshake.h"
#include "store/limits.h"
#include "store/store_internal.h"

#define IO_CHUNK ((size_t)64 * 1024)
/* A client may have one maximal request buffered plus a read chunk. */
#define IN_LIMIT ((size_t)SPMD__STORE_MAX_REQ_BODY + 4u + IO_CHUNK)
/* Buffers above this size are released once empty. */
#define KEEP_CAP ((size_t)1 << 20)
#define MAX_EVENTS 64
/* A value this large that arrived alone takes its input buffer rather than a copy. */
#define TAKE_MIN ((size_t)1 << 20)
/* Bytes read from one connection per wake-up: a client sending a huge value
 * shares the loop with everyone else. */
#define READ_ROUNDS 16
#define ACCEPT_PAUSE_NS (100ull * 1000000ull)

typedef struct entry entry;
typedef struct watch watch;
typedef struct conn conn;

/* One parked connection waiting for one absent key. */
struct watch {
    conn *c;
    entry *e; /* NULL when not attached */
    watch *prev, *next;
};

struct entry {
    entry *next; /* hash chain */
    uint64_t hash;
    unsigned char *val;
    size_t vlen;
    unsigned char *block; /* the allocation val points into, when it was a client's input buffer */
    size_t vbytes;        /* bytes the value occupies (charged to the limits) */
    int present; /* 0: placeholder that only exists to hold watchers */
    watch *watchers;
    conn *owner; /* the connection that set the value (NULL once it left) */
    uint32_t klen;
    unsigned char key[];
};

struct conn {
    int fd;
    int dead, hello_done, closing;
    int stolen;                /* the last SET took the input buffer as its value */
    spmd__store_hs hs;         /* until hello_done: nothing but the handshake is read */
    uint64_t hs_deadline_ns;
    size_t owned;              /* bytes of the keys and values this connection set */
    char name[64];
    unsigned char *in;
    size_t in_off, in_len, in_cap;
    unsigned char *out;
    size_t out_off, out_len, out_cap;
    uint32_t events;
    /* parked GET/WAIT */
    int parked;
    uint8_t park_op;
    uint32_t park_seq, park_timeout_ms, park_nkeys, missing;
    uint64_t park_deadline_ns;
    unsigned char *park_keys; /* copy of the request's key list */
    watch *watches;           /* park_nkeys nodes */
    conn *prev, *next;        /* all live connections */
    conn *pprev, *pnext;      /* parked connections */
    conn *qnext;              /* work queue */
    int queued;
    conn *gnext; /* graveyard */
};

struct spmd_store_server {
    pthread_mutex_t mu; /* held by the serving thread while it works (see fork below) */
    int lfd, epfd, wakefd;
    int port;
    atomic_int stop;
    pthread_t thread;
    int has_thread;
    /* the table */
    entry **buckets;
    size_t nbuckets, nentries, npresent;
    uint64_t seed;
    /* connections */
    conn *conns, *parked, *qhead, *qtail, *graveyard;
    atomic_int nconns, nparked;
    int accept_paused;
    uint64_t accept_resume_ns;
    int npending;        /* connections still in their handshake */
    size_t bytes;        /* keys and values present plus input buffers */
    spmd__auth auth;
    spmd__store_limits lim;
    spmd__ratelimit refusals; /* warnings about strangers */
    char limit_msg[256]; /* why set_value refused */
    spmd_store_server *reg_next;
};

/* ---- fork safety ------------------------------------------------------------
 * spmd_store_server_forget() frees the server in a forked child, where the
 * serving thread no longer exists.  If fork() happened while that thread was in
 * the middle of an update, the child's copy would be half-updated; so
 * pthread_atfork takes every live server's mutex before fork() (the serving
 * thread only holds it between epoll_wait calls, never while blocked). */
static pthread_mutex_t reg_mu = PTHREAD_MUTEX_INITIALIZER;
static spmd_store_server *reg_head;
static pthread_once_t reg_once = PTHREAD_ONCE_INIT;

static void fork_prepare(void) {
    pthread_mutex_lock(&reg_mu);
    for (spmd_store_server *s = reg_head; s; s = s->reg_next) pthread_mutex_lock(&s->mu);
}
static void fork_release(void) {
    for (spmd_store_server *s = reg_head; s; s = s->reg_next) pthread_mutex_unlock(&s->mu);
    pthread_mutex_unlock(&reg_mu);
}
static void reg_init(void) { pthread_atfork(fork_prepare, fork_release, fork_release); }

static void reg_add(spmd_store_server *s) {
    pthread_once(&reg_once, reg_init);
    pthread_mutex_lock(&reg_mu);
    s->reg_next = reg_head;
    reg_head = s;
    pthread_mutex_unlock(&reg_mu);
}
static void reg_remove(spmd_store_server *s) {
    pthread_mutex_lock(&reg_mu);
    for (spmd_store_server **pp = &reg_head; *pp; pp = &(*pp)->reg_next)
        if (*pp == s) {
            *pp = s->reg_next;
            break;
        }
    pthread_mutex_unlock(&reg_mu);
}

/* ---- the table: chained hash of entries ------------------------------------ */
static uint64_t hash_key(uint64_t seed, const unsigned char *k, size_t n) {
    uint64_t h = 1469598103934665603ull ^ seed; /* FNV-1a, seeded */
    for (size_t i = 0; i < n; i++) {
        h ^= k[i];
        h *= 1099511628211ull;
    }
    return h ^ (h >> 29);
}

static entry *lookup(spmd_store_server *s, const unsigned char *k, size_t n) {
    if (!s->nbuckets) return NULL;
    uint64_t h = hash_key(s->seed, k, n);
    for (entry *e = s->buckets[h & (s->nbuckets - 1)]; e; e = e->next)
        if (e->hash == h && e->klen == n && memcmp(e->key, k, n) == 0) return e;
    return NULL;
}

static int grow_table(spmd_store_server *s) {
    size_t nb = s->nbuckets ? s->nbuckets * 2 : 64;
    entry **b = calloc(nb, sizeof *b);
    if (!b) return -1;
    for (size_t i = 0; i < s->nbuckets; i++) {
        entry *e = s->buckets[i];
        while (e) {
            entry *next = e->next;
            e->next = b[e->hash & (nb - 1)];
            b[e->hash & (nb - 1)] = e;
            e = next;
        }
    }
    free(s->buckets);
    s->buckets = b;
    s->nbuckets = nb;
    return 0;
}

/* NULL only when out of memory. */
static entry *find_or_create(spmd_store_server *s, const unsigned char *k, size_t n) {
    entry *e = lookup(s, k, n);
    if (e) return e;
    if (s->nentries >= s->nbuckets && grow_table(s)) return NULL;
    e = calloc(1, sizeof *e + n + 1);
    if (!e) return NULL;
    e->hash = hash_key(s->seed, k, n);
    e->klen = (uint32_t)n;
    if (n) memcpy(e->key, k, n);
    size_t b = e->hash & (s->nbuckets - 1);
    e->next = s->buckets[b];
    s->buckets[b] = e;
    s->nentries++;
    return e;
}

static void free_value(entry *e) {
    free(e->block ? e->block : e->val);
    e->block = e->val = NULL;
}

static void remove_entry(spmd_store_server *s, entry *e) {
    for (entry **pp = &s->buckets[e->hash & (s->nbuckets - 1)]; *pp; pp = &(*pp)->next)
        if (*pp == e) {
            *pp = e->next;
            break;
        }
    s->nentries--;
    free_value(e);
    free(e);
}

/* A placeholder nobody waits on any more goes away. */
static void maybe_reap(spmd_store_server *s, entry *e) {
    if (!e->present && !e->watchers) remove_entry(s, e);
}

/* Printable, bounded rendering of a key for messages. */
static void fmt_key(char *out, size_t outlen, const unsigned char *k, size_t n) {
    size_t j = 0, lim = outlen > 4 ? outlen - 4 : 0;
    for (size_t i = 0; i < n && j < lim; i++) out[j++] = (k[i] >= 32 && k[i] < 127) ? (char)k[i] : '?';
    if (n > lim && outlen >= 4) { out[j++] = '.'; out[j++] = '.'; out[j++] = '.'; }
    if (outlen) out[j < outlen ? j : outlen - 1] = 0;
}

/* ---- connections ----------------------------------------------------------- */
static void set_events(spmd_store_server *s, conn *c, uint32_t ev) {
    if (c->dead || c->events == ev) return;
    struct epoll_event e = {.events = ev, .data.ptr = c};
    if (epoll_ctl(s->epfd, EPOLL_CTL_MOD, c->fd, &e) == 0) c->events = ev;
}

static void enqueue(spmd_store_server *s, conn *c) {
    if (c->queued || c->dead) return;
    c->queued = 1;
    c->qnext = NULL;
    if (s->qtail) s->qtail->qnext = c; else s->qhead = c;
    s->qtail = c;
}

static void detach_watch(spmd_store_server *s, watch *w) {
    entry *e = w->e;
    if (!e) return;
    if (w->prev) w->prev->next = w->next; else e->watchers = w->next;
    if (w->next) w->next->prev = w->prev;
    w->e = NULL;
    w->prev = w->next = NULL;
    maybe_reap(s, e);
}

static void unpark(spmd_store_server *s, conn *c) {
    if (!c->parked) return;
    for (uint32_t i = 0; i < c->park_nkeys; i++) detach_watch(s, &c->watches[i]);
    free(c->watches);
    free(c->park_keys);
    c->watches = NULL;
    c->park_keys = NULL;
    if (c->pprev) c->pprev->pnext = c->pnext; else s->parked = c->pnext;
    if (c->pnext) c->pnext->pprev = c->pprev;
    c->pprev = c->pnext = NULL;
    c->parked = 0;
    atomic_fetch_sub(&s->nparked, 1);
}

/* The values a leaving connection set stay; they just belong to nobody. */
static void disown(spmd_store_server *s, conn *c) {
    for (size_t i = 0; i < s->nbuckets; i++)
        for (entry *e = s->buckets[i]; e; e = e->next)
            if (e->owner == c) e->owner = NULL;
    c->owned = 0;
}

static void drop(spmd_store_server *s, conn *c, int warn, const char *fmt, ...) SPMD__PRINTF(4, 5);
static void drop(spmd_store_server *s, conn *c, int warn, const char *fmt, ...) {
    if (c->dead) return;
    /* A stranger (still in its handshake) reconnecting in a loop: rate-limited. */
    if (warn && !c->hello_done && !spmd__ratelimit_ok(&s->refusals, "store server")) warn = -1;
    if (warn >= 0 && spmd__log_enabled(warn ? SPMD__LOG_WARN : SPMD__LOG_DEBUG)) {
        char why[512];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(why, sizeof why, fmt, ap);
        va_end(ap);
        spmd__log(warn ? SPMD__LOG_WARN : SPMD__LOG_DEBUG, "store server: %s client %s: %s",
                  warn ? "dropping" : "closing", c->name, why);
    }
    unpark(s, c);
    if (c->owned) disown(s, c);
    s->bytes -= c->in_cap;
    if (!c->hello_done) s->npending--;
    epoll_ctl(s->epfd, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
    c->fd = -1;
    c->dead = 1;
    if (c->prev) c->prev->next = c->next; else s->conns = c->next;
    if (c->next) c->next->prev = c->prev;
    /* The struct and its buffers live until the end of this loop turn: events
     * already fetched and the work queue may still point at it. */
    c->gnext = s->graveyard;
    s->graveyard = c;
    atomic_fetch_sub(&s->nconns, 1);
    if (s->accept_paused) s->accept_resume_ns = 0; /* a descriptor came free */
}

static void free_conn(conn *c) {
    free(c->in);
    free(c->out);
    free(c->watches);
    free(c->park_keys);
    free(c);
}

/* Room for `more` bytes at the end of the output buffer. */
static int reserve_out(conn *c, size_t more) {
    if (c->out_off == c->out_len) c->out_off = c->out_len = 0;
    if (c->out_cap - c->out_len >= more) return 0;
    size_t need = c->out_len + more, cap = c->out_cap ? c->out_cap : 4096;
    while (cap < need) cap *= 2;
    unsigned char *p = realloc(c->out, cap);
    if (!p) return -1;
    c->out = p;
    c->out_cap = cap;
    return 0;
}

static void reply(spmd_store_server *s, conn *c, uint32_t seq, spmd_status st, int64_t num,
                  const void *val, size_t vlen) {
    if (reserve_out(c, SPMD__STORE_REP_HEAD + vlen)) {
        drop(s, c, 1, "out of memory for a %zu-byte reply", vlen);
        return;
    }
    c->out_len += spmd__store_encode_rep(c->out + c->out_len, seq, st, num, val, (uint32_t)vlen);
}

static void reply_err(spmd_store_server *s, conn *c, uint32_t seq, spmd_status st,
                      const char *fmt, ...) SPMD__PRINTF(5, 6);
static void reply_err(spmd_store_server *s, conn *c, uint32_t seq, spmd_status st,
                      const char *fmt, ...) {
    char msg[SPMD__STORE_MAX_ERRMSG];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (n < 0) n = 0;
    if ((size_t)n >= sizeof msg) n = (int)sizeof msg - 1;
    reply(s, c, seq, st, 0, msg, (size_t)n);
}

/* Send what we can; returns 1 when the output buffer is empty. */
static int flush(spmd_store_server *s, conn *c) {
    while (!c->dead && c->out_off < c->out_len) {
        ssize_t n = send(c->fd, c->out + c->out_off, c->out_len - c->out_off, MSG_NOSIGNAL);
        if (n > 0) {
            c->out_off += (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            set_events(s, c, EPOLLIN | EPOLLRDHUP | EPOLLOUT);
            return 0;
        }
        drop(s, c, 0, "send: %s", strerror(errno));
        return 0;
    }
    if (c->dead) return 0;
    c->out_off = c->out_len = 0;
    if (c->out_cap > KEEP_CAP) {
        free(c->out);
        c->out = NULL;
        c->out_cap = 0;
    }
    set_events(s, c, EPOLLIN | EPOLLRDHUP);
    if (c->closing) {
        drop(s, c, 0, "handshake refused");
        return 0;
    }
    return 1;
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
        if (--c->missing == 0) enqueue(s, c);
    }
}

/* Charge (or refund) a present entry's bytes to the store and its owner. */
static void account(spmd_store_server *s, entry *e, int sign) {
    size_t n = e->klen + e->vbytes;
    if (sign > 0) {
        s->bytes += n;
        if (e->owner) e->owner->owned += n;
    } else {
        s->bytes -= n;
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
    if (!e->present && s->npresent >= l->max_keys) {
        snprintf(s->limit_msg, sizeof s->limit_msg,
                 "the store holds %zu keys, its limit (SPMD_STORE_MAX_KEYS)", s->npresent);
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
    free_value(e);
    if (take_input) {
        e->block = c->in;
        e->val = (unsigned char *)val;
        s->bytes -= c->in_cap; /* now charged as the entry's */
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
        s->npresent++;
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
static void evaluate_park(spmd_store_server *s, conn *c) {
    const unsigned char *p = c->park_keys;
    c->missing = 0;
    for (uint32_t i = 0; i < c->park_nkeys; i++) {
        const unsigned char *k;
        uint32_t kl;
        p = spmd__store_next_key(p, &k, &kl);
        watch *w = &c->watches[i];
        if (w->e) { c->missing++; continue; } /* still watching an absent key */
        entry *e = find_or_create(s, k, kl);
        if (!e) {
            uint32_t seq = c->park_seq;
            unpark(s, c);
            reply_err(s, c, seq, SPMD_ERR_NOMEM, "store server out of memory");
            enqueue(s, c);
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
        entry *e = lookup(s, k, kl);
        unpark(s, c);
        reply(s, c, seq, SPMD_OK, 0, e->val, e->vlen);
    } else {
        unpark(s, c);
        reply(s, c, seq, SPMD_OK, 0, NULL, 0);
    }
    enqueue(s, c); /* flush, then look at the next request */
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
        reply_err(s, c, r->seq, SPMD_ERR_NOMEM, "store server out of memory");
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
    evaluate_park(s, c);
}

static void expire_parked(spmd_store_server *s, uint64_t now) {
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
            unpark(s, c);
            if (op == SPMD__STORE_OP_GET)
                reply_err(s, c, seq, SPMD_ERR_TIMEOUT, "key '%s' not set within %u ms", key, tmo);
            else
                reply_err(s, c, seq, SPMD_ERR_TIMEOUT,
                          "%u of %u keys still missing after %u ms (first: '%s')", missing, nk,
                          tmo, key);
            enqueue(s, c);
        }
        c = next;
    }
}

/* ---- requests -------------------------------------------------------------- */
static void set_failed(spmd_store_server *s, conn *c, uint32_t seq, int rc) {
    if (rc == -2) reply_err(s, c, seq, SPMD_ERR_NOMEM, "store server: %s", s->limit_msg);
    else reply_err(s, c, seq, SPMD_ERR_NOMEM, "store server out of memory");
}

static void execute(spmd_store_server *s, conn *c, const spmd__store_req *r) {
    char key[160];
    entry *e = NULL;
    int rc = -1;
    switch (r->op) {
    case SPMD__STORE_OP_SET:
        e = find_or_create(s, r->key, r->klen);
        if (!e || (rc = set_value_from(s, c, e, r->val[0], r->vlen[0],
                                       r->vlen[0] >= TAKE_MIN && c->in_off == 0 &&
                                           r->frame_len == c->in_len))) {
            if (e) maybe_reap(s, e);
            set_failed(s, c, r->seq, rc);
            return;
        }
        reply(s, c, r->seq, SPMD_OK, 0, NULL, 0);
        return;
    case SPMD__STORE_OP_GET:
    case SPMD__STORE_OP_TRY_GET:
        e = lookup(s, r->key, r->klen);
        if (e && e->present) {
            reply(s, c, r->seq, SPMD_OK, 0, e->val, e->vlen);
        } else if (r->op == SPMD__STORE_OP_TRY_GET) {
            fmt_key(key, sizeof key, r->key, r->klen);
            reply_err(s, c, r->seq, SPMD_ERR_NOTFOUND, "key '%s' not found", key);
        } else if (r->timeout_ms == 0) {
            fmt_key(key, sizeof key, r->key, r->klen);
            reply_err(s, c, r->seq, SPMD_ERR_TIMEOUT, "key '%s' not set within 0 ms", key);
        } else {
            park(s, c, r);
        }
        return;
    case SPMD__STORE_OP_WAIT: {
        const unsigned char *p = r->keys, *k = NULL;
        uint32_t kl = 0, i;
        for (i = 0; i < r->nkeys; i++) {
            p = spmd__store_next_key(p, &k, &kl);
            e = lookup(s, k, kl);
            if (!e || !e->present) break;
        }
        if (i == r->nkeys) {
            reply(s, c, r->seq, SPMD_OK, 0, NULL, 0);
        } else if (r->timeout_ms == 0) {
            fmt_key(key, sizeof key, k, kl);
            reply_err(s, c, r->seq, SPMD_ERR_TIMEOUT, "key '%s' missing (timeout 0 ms)", key);
        } else {
            park(s, c, r);
        }
        return;
    }
    case SPMD__STORE_OP_ADD: {
        int64_t cur = 0, sum;
        e = lookup(s, r->key, r->klen);
        if (e && e->present && parse_i64(e->val, e->vlen, &cur)) {
            fmt_key(key, sizeof key, r->key, r->klen);
            reply_err(s, c, r->seq, SPMD_ERR_INVALID, "value of key '%s' is not a decimal integer",
                      key);
            return;
        }
        if (__builtin_add_overflow(cur, r->num, &sum)) {
            fmt_key(key, sizeof key, r->key, r->klen);
            reply_err(s, c, r->seq, SPMD_ERR_INVALID,
                      "add %" PRId64 " to key '%s' (%" PRId64 ") overflows int64", r->num, key, cur);
            return;
        }
        char text[24];
        int n = snprintf(text, sizeof text, "%" PRId64, sum);
        if (!e) e = find_or_create(s, r->key, r->klen);
        if (!e || (rc = set_value(s, c, e, text, (size_t)n))) {
            if (e) maybe_reap(s, e);
            set_failed(s, c, r->seq, rc);
            return;
        }
        reply(s, c, r->seq, SPMD_OK, sum, NULL, 0);
        return;
    }
    case SPMD__STORE_OP_CAS: {
        /* torch's compareSet: absent + empty expected sets; absent + other
         * expected answers `expected`; present answers the value after. */
        const unsigned char *exp = r->val[0], *des = r->val[1];
        size_t elen = r->vlen[0], dlen = r->vlen[1];
        e = lookup(s, r->key, r->klen);
        if (!e || !e->present) {
            if (elen != 0) {
                reply(s, c, r->seq, SPMD_OK, 0, exp, elen);
                return;
            }
        } else if (e->vlen != elen || (elen && memcmp(e->val, exp, elen) != 0)) {
            reply(s, c, r->seq, SPMD_OK, 0, e->val, e->vlen);
            return;
        }
        if (!e) e = find_or_create(s, r->key, r->klen);
        if (!e || (rc = set_value(s, c, e, des, dlen))) {
            if (e) maybe_reap(s, e);
            set_failed(s, c, r->seq, rc);
            return;
        }
        reply(s, c, r->seq, SPMD_OK, 0, e->val, e->vlen);
        return;
    }
    case SPMD__STORE_OP_DELETE:
        e = lookup(s, r->key, r->klen);
        if (e && e->present) {
            account(s, e, -1);
            e->owner = NULL;
            free_value(e);
            e->vlen = 0;
            e->present = 0;
            s->npresent--;
            maybe_reap(s, e);
            reply(s, c, r->seq, SPMD_OK, 1, NULL, 0);
        } else {
            reply(s, c, r->seq, SPMD_OK, 0, NULL, 0);
        }
        return;
    case SPMD__STORE_OP_NUM_KEYS:
        reply(s, c, r->seq, SPMD_OK, (int64_t)s->npresent, NULL, 0);
        return;
    default: /* the decoder let through only known ops */
        reply_err(s, c, r->seq, SPMD_ERR_PROTOCOL, "unknown op %u", r->op);
        return;
    }
}

/* One step of the handshake (store/handshake.h) on what is buffered; returns
 * 1 when the connection is gone or going. */
static int handshake(spmd_store_server *s, conn *c) {
    if (c->in_len == c->in_off) return 0;
    char err[256] = "";
    unsigned char out[SPMD__STORE_SHELLO_LEN];
    size_t outlen = 0;
    int refuse = 0;
    size_t used = spmd__store_hs_server(&c->hs, &s->auth, s->nconns - s->npending >= s->lim.max_conns,
                                        c->in + c->in_off, c->in_len - c->in_off, out, &outlen,
                                        &refuse, err, sizeof err);
    if (refuse == 2) {
        drop(s, c, 1, "refused in the handshake: %s", err);
        return 1;
    }
    c->in_off += used;
    if (outlen) {
        if (reserve_out(c, outlen)) {
            drop(s, c, 1, "out of memory");
            return 1;
        }
        memcpy(c->out + c->out_len, out, outlen);
        c->out_len += outlen;
    }
    if (refuse) {
        if (spmd__ratelimit_ok(&s->refusals, "store server"))
            SPMD_LOGW("store server: refused client %s: %s", c->name, err);
        c->closing = 1;
        flush(s, c);
        return 1;
    }
    if (c->hs.stage == 2) {
        c->hello_done = 1;
        s->npending--;
        SPMD_LOGD("store server: client %s authenticated", c->name);
    }
    if (!flush(s, c)) return 1;
    return 0;
}

/* Decode and run what is buffered, one request at a time. */
static void process(spmd_store_server *s, conn *c) {
    char err[256];
    while (!c->dead && !c->closing && c->in_len > c->in_off) {
        const unsigned char *p = c->in + c->in_off;
        size_t avail = c->in_len - c->in_off;
        if (!c->hello_done) {
            if (handshake(s, c)) return;
            if (!c->hello_done) break;
            continue;
        }
        if (c->parked || c->out_len > c->out_off) break;
        spmd__store_req req;
        spmd__wire_result r = spmd__store_decode_req(p, avail, &req, err, sizeof err);
        if (r == SPMD__WIRE_MORE) break;
        if (r == SPMD__WIRE_BAD) {
            drop(s, c, 1, "%s", err);
            return;
        }
        execute(s, c, &req);
        if (c->dead) return;
        if (c->stolen) c->stolen = 0; /* the buffer went with the value */
        else c->in_off += req.frame_len;
        if (!flush(s, c)) return;
    }
    if (!c->dead && c->in_off == c->in_len) {
        c->in_off = c->in_len = 0;
        if (c->in_cap > KEEP_CAP) {
            s->bytes -= c->in_cap;
            free(c->in);
            c->in = NULL;
            c->in_cap = 0;
        }
    }
}

/* Pull what the socket has (bounded per wake-up), then process it. */
static void on_readable(spmd_store_server *s, conn *c) {
    int eof = 0;
    for (int round = 0; round < READ_ROUNDS && !c->dead; round++) {
        if (c->in_off && (c->in_off == c->in_len || c->in_cap - c->in_len < IO_CHUNK)) {
            memmove(c->in, c->in + c->in_off, c->in_len - c->in_off);
            c->in_len -= c->in_off;
            c->in_off = 0;
        }
        /* Where the request being received ends, once its length is here
         * (the decoder checks that length; here it only stops the buffer
         * from growing past the request, never ahead of the bytes). */
        size_t end = 0;
        if (c->hello_done && c->in_len - c->in_off >= 4) {
            end = c->in_off + 4 + (size_t)spmd__get_u32(c->in + c->in_off);
            if (end <= c->in_len) {
                if (!c->parked && c->out_off == c->out_len) break; /* serve it first */
                end = 0; /* it waits its turn: read on as before */
            }
        }
        if (c->in_cap - c->in_len < IO_CHUNK && !(end > c->in_len && end <= c->in_cap)) {
            if (c->in_len >= IN_LIMIT) {
                drop(s, c, 1, "%zu bytes buffered without a complete request", c->in_len);
                return;
            }
            size_t cap = c->in_cap ? c->in_cap * 2 : IO_CHUNK;
            if (cap < c->in_len + IO_CHUNK) cap = c->in_len + IO_CHUNK;
            if (end > c->in_cap && end < cap) cap = end; /* just the request */
            if (cap > IN_LIMIT) cap = IN_LIMIT;
            size_t more = cap - c->in_cap;
            if (s->bytes + more > s->lim.max_bytes || cap > s->lim.max_client_bytes) {
                drop(s, c, 1, "a request of over %zu bytes would pass the store's memory limits "
                     "(SPMD_STORE_MAX_BYTES %zu, SPMD_STORE_MAX_CLIENT_BYTES %zu)", c->in_len,
                     s->lim.max_bytes, s->lim.max_client_bytes);
                return;
            }
            unsigned char *p = realloc(c->in, cap);
            if (!p) {
                drop(s, c, 1, "out of memory for its input");
                return;
            }
            s->bytes += more;
            c->in = p;
            c->in_cap = cap;
        }
        /* Before the proof checks out, read only the handshake's fixed size. */
        size_t room = c->in_cap - c->in_len;
        if (!c->hello_done) {
            size_t want = spmd__store_hs_want(&c->hs), have = c->in_len - c->in_off;
            if (have >= want) break;
            if (room > want - have) room = want - have;
        }
        ssize_t n = recv(c->fd, c->in + c->in_len, room, 0);
        if (n > 0) {
            c->in_len += (size_t)n;
            continue;
        }
        if (n == 0) { eof = 1; break; }
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) break;
        drop(s, c, 0, "recv: %s", strerror(errno));
        return;
    }
    process(s, c);
    if (!eof || c->dead) return;
    /* The peer is gone.  Whole requests before the EOF were served above. */
    if (c->in_len > c->in_off)
        drop(s, c, 1, "connection closed in the middle of a %s (%zu bytes of it received)",
             c->hello_done ? "request" : "handshake", c->in_len - c->in_off);
    else
        drop(s, c, 0, "it closed the connection");
}

/* Too many connections in their handshake: drop the oldest (the list is
 * newest first), which has had the longest to prove itself. */
static void shed_pending(spmd_store_server *s) {
    conn *old = NULL;
    for (conn *c = s->conns; c; c = c->next)
        if (!c->hello_done) old = c;
    if (old) drop(s, old, 1, "%d connections in their handshake (SPMD_STORE_MAX_PENDING)", s->npending);
}

/* Connections that did not finish their handshake in time go. */
static void expire_handshakes(spmd_store_server *s, uint64_t now) {
    conn *c = s->conns;
    while (c) {
        conn *next = c->next;
        if (!c->hello_done && !c->dead && now >= c->hs_deadline_ns)
            drop(s, c, 1, "no valid handshake within %d ms (SPMD_HANDSHAKE_TIMEOUT_MS)",
                 s->lim.handshake_ms);
        c = next;
    }
}

static void accept_all(spmd_store_server *s) {
    for (;;) {
        int fd = spmd__accept(s->lfd);
        if (fd < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK) return;
            if (errno == ECONNABORTED || errno == EPROTO) continue;
            /* Out of descriptors or memory: stop listening for a moment
             * rather than spin on a listening socket that stays readable. */
            SPMD_LOGW("store server: accept: %s (pausing accepts)", strerror(errno));
            epoll_ctl(s->epfd, EPOLL_CTL_DEL, s->lfd, NULL);
            s->accept_paused = 1;
            s->accept_resume_ns = spmd__now_ns() + ACCEPT_PAUSE_NS;
            return;
        }
        conn *c = calloc(1, sizeof *c);
        if (!c) {
            SPMD_LOGW("store server: out of memory for a new client");
            close(fd);
            continue;
        }
        c->fd = fd;
        spmd__sock_name(fd, 1, c->name, sizeof c->name);
        c->hs_deadline_ns = spmd__now_ns() + (uint64_t)s->lim.handshake_ms * 1000000ull;
        if (s->npending >= s->lim.max_pending) shed_pending(s);
        c->events = EPOLLIN | EPOLLRDHUP;
        struct epoll_event ev = {.events = c->events, .data.ptr = c};
        if (epoll_ctl(s->epfd, EPOLL_CTL_ADD, fd, &ev) != 0) {
            SPMD_LOGW("store server: epoll_ctl add: %s", strerror(errno));
            close(fd);
            free(c);
            continue;
        }
        c->next = s->conns;
        if (s->conns) s->conns->prev = c;
        s->conns = c;
        atomic_fetch_add(&s->nconns, 1);
        s->npending++;
        SPMD_LOGD("store server: client %s connected", c->name);
    }
}

/* epoll_wait timeout: until the earliest parked deadline or accept resume. */
static int next_timeout_ms(spmd_store_server *s, uint64_t now) {
    uint64_t best = UINT64_MAX;
    for (conn *c = s->parked; c; c = c->pnext)
        if (c->park_deadline_ns < best) best = c->park_deadline_ns;
    if (s->accept_paused && s->accept_resume_ns < best) best = s->accept_resume_ns;
    if (s->npending > 0)
        for (conn *c = s->conns; c; c = c->next)
            if (!c->hello_done && c->hs_deadline_ns < best) best = c->hs_deadline_ns;
    if (best == UINT64_MAX) return -1;
    if (best <= now) return 0;
    uint64_t ms = (best - now + 999999ull) / 1000000ull; /* round up: never early */
    return ms > INT_MAX ? INT_MAX : (int)ms;
}

spmd_status spmd_store_server_run(spmd_store_server *s) {
    if (!s) return SPMD_ERR_INVALID;
    struct epoll_event evs[MAX_EVENTS];
    spmd_status st = SPMD_OK;
    while (!atomic_load(&s->stop)) {
        int timeout = next_timeout_ms(s, spmd__now_ns());
        int n = epoll_wait(s->epfd, evs, MAX_EVENTS, timeout);
        if (n < 0) {
            if (errno == EINTR) continue;
            SPMD_LOGW("store server: epoll_wait: %s", strerror(errno));
            st = SPMD_ERR_SYSTEM;
            break;
        }
        pthread_mutex_lock(&s->mu);
        for (int i = 0; i < n; i++) {
            void *tag = evs[i].data.ptr;
            if (tag == &s->wakefd) {
                uint64_t v;
                ssize_t r = read(s->wakefd, &v, sizeof v);
                (void)r;
                continue;
            }
            if (tag == &s->lfd) {
                accept_all(s);
                continue;
            }
            conn *c = tag;
            if (c->dead) continue;
            if (evs[i].events & EPOLLOUT) {
                if (flush(s, c)) enqueue(s, c);
            }
            if (!c->dead && (evs[i].events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)))
                on_readable(s, c);
        }
        uint64_t now = spmd__now_ns();
        expire_parked(s, now);
        if (s->npending > 0) expire_handshakes(s, now);
        if (s->accept_paused && now >= s->accept_resume_ns) {
            struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &s->lfd};
            if (epoll_ctl(s->epfd, EPOLL_CTL_ADD, s->lfd, &ev) == 0) s->accept_paused = 0;
            else s->accept_resume_ns = now + ACCEPT_PAUSE_NS;
        }
        /* Woken and timed-out connections: re-check, flush, read on. */
        while (s->qhead) {
            conn *c = s->qhead;
            s->qhead = c->qnext;
            if (!s->qhead) s->qtail = NULL;
            c->queued = 0;
            if (c->dead) continue;
            if (c->parked && c->missing == 0) evaluate_park(s, c);
            if (!c->dead && !c->queued && flush(s, c)) process(s, c);
        }
        while (s->graveyard) {
            conn *c = s->graveyard;
            s->graveyard = c->gnext;
            free_conn(c);
        }
        pthread_mutex_unlock(&s->mu);
    }
    return st;
}

static void *server_main(void *arg) {
    spmd_store_server_run(arg);
    return NULL;
}

void spmd_store_server_interrupt(spmd_store_server *s) {
    if (!s) return;
    atomic_store(&s->stop, 1);
    uint64_t one = 1;
    ssize_t r = write(s->wakefd, &one, sizeof one); /* async-signal-safe */
    (void)r;
}

/* Close every descriptor and free everything; no thread may be running. */
static void destroy(spmd_store_server *s) {
    while (s->conns) {
        conn *c = s->conns;
        s->conns = c->next;
        unpark(s, c);
        close(c->fd);
        free_conn(c);
    }
    while (s->graveyard) {
        conn *c = s->graveyard;
        s->graveyard = c->gnext;
        free_conn(c);
    }
    for (size_t i = 0; i < s->nbuckets; i++) {
        entry *e = s->buckets[i];
        while (e) {
            entry *next = e->next;
            free_value(e);
            free(e);
            e = next;
        }
    }
    free(s->buckets);
    memset(&s->auth, 0, sizeof s->auth);
    if (s->lfd >= 0) close(s->lfd);
    if (s->epfd >= 0) close(s->epfd);
    if (s->wakefd >= 0) close(s->wakefd);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

spmd_status spmd_store_server_open(const char *host, int port, spmd_store_server **out,
                                   char *err, size_t errlen) {
    if (!out) return spmd__fail(err, errlen, SPMD_ERR_INVALID, "store server: out is NULL");
    spmd_store_server *s = calloc(1, sizeof *s);
    if (!s) return spmd__fail(err, errlen, SPMD_ERR_NOMEM, "store server: out of memory");
    s->lfd = s->epfd = s->wakefd = -1;
    pthread_mutex_init(&s->mu, NULL);
    s->seed = spmd__now_ns() ^ (uint64_t)(uintptr_t)s ^ ((uint64_t)getpid() << 32);
    char e2[SPMD__ERRLEN];
    spmd_status st = spmd__store_limits_from_env(&s->lim, e2, sizeof e2);
    if (!st) st = spmd__auth_get(&s->auth, e2, sizeof e2);
    if (st) {
        destroy(s);
        return spmd__fail(err, errlen, st, "store server: %s", e2);
    }
    s->lfd = spmd__listen(host, port, SOMAXCONN, &s->port, e2, sizeof e2);
    if (s->lfd < 0) {
        destroy(s);
        return spmd__fail(err, errlen, SPMD_ERR_SYSTEM, "store server: %s", e2);
    }
    s->epfd = epoll_create1(EPOLL_CLOEXEC);
    s->wakefd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    struct epoll_event el = {.events = EPOLLIN, .data.ptr = &s->lfd};
    struct epoll_event ew = {.events = EPOLLIN, .data.ptr = &s->wakefd};
    if (s->epfd < 0 || s->wakefd < 0 || epoll_ctl(s->epfd, EPOLL_CTL_ADD, s->lfd, &el) ||
        epoll_ctl(s->epfd, EPOLL_CTL_ADD, s->wakefd, &ew)) {
        int e = errno;
        destroy(s);
        return spmd__fail_errno(err, errlen, SPMD_ERR_SYSTEM, e, "store server: epoll setup");
    }
    reg_add(s);
    SPMD_LOGD("store server listening on %s:%d", host && *host ? host : "*", s->port);
    *out = s;
    return SPMD_OK;
}

spmd_status spmd_store_server_start(const char *host, int port, spmd_store_server **out,
                                    char *err, size_t errlen) {
    spmd_store_server *s = NULL;
    spmd_status st = spmd_store_server_open(host, port, &s, err, errlen);
    if (st) return st;
    int rc = pthread_create(&s->thread, NULL, server_main, s);
    if (!rc) pthread_setname_np(s->thread, "spmd-store"); /* top -H, perf, gdb */
    if (rc) {
        reg_remove(s);
        destroy(s);
        return spmd__fail_errno(err, errlen, SPMD_ERR_SYSTEM, rc, "store server: pthread_create");
    }
    s->has_thread = 1;
    *out = s;
    return SPMD_OK;
}

int spmd_store_server_port(const spmd_store_server *s) { return s ? s->port : -1; }

void spmd_store_server_stop(spmd_store_server *s) {
    if (!s) return;
    reg_remove(s);
    spmd_store_server_interrupt(s);
    if (s->has_thread) pthread_join(s->thread, NULL);
    destroy(s);
}

void spmd_store_server_forget(spmd_store_server *s) {
    if (!s) return;
    reg_remove(s);
    destroy(s);
}

void spmd__store_server_stats(const spmd_store_server *s, int *conns, int *parked) {
    if (conns) *conns = atomic_load(&s->nconns);
    if (parked) *parked = atomic_load(&s->nparked);
}
