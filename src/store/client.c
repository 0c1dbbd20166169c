/* client.c — store client: one TCP connection, shared by prefixed handles.
 *
 * A call locks the connection, sends one request and reads until the reply
 * with the same sequence number.  Blocking requests carry their timeout and
 * the server answers SPMD_ERR_TIMEOUT itself; the client's own poll deadline
 * (the timeout plus a grace period) is only a safety net for a server that
 * stopped answering.  A reply that arrives after the client gave up sits in
 * the read buffer and is skipped by the next call (older seq), so the stream
 * never loses its place.  EOF or reset marks the connection broken: this and
 * every later call fail with SPMD_ERR_REMOTE and a message saying so.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <time.h>
#include "store/handshake.h"
#include "store/store_internal.h"

#define GRACE_MS 2000
#define KEEP_CAP ((size_t)1 << 20)
#define READ_CHUNK ((size_t)64 * 1024)

typedef struct {
    pthread_mutex_t mu;
    atomic_int refs;
    int fd;
    uint32_t seq;
    spmd_status broken; /* SPMD_OK while usable */
    char broken_msg[256];
    unsigned char *wbuf;
    size_t wcap;
    unsigned char *rbuf;
    size_t roff, rlen, rcap;
    char peer[128];
} sconn;

struct spmd_store {
    sconn *c;
    char *prefix; /* "" or "a/" or "a/b/" */
    size_t plen;
    atomic_int timeout_ms;
    char errmsg[SPMD__ERRLEN];
};

static spmd_status fail(spmd_store *h, spmd_status st, const char *fmt, ...) SPMD__PRINTF(3, 4);
static spmd_status fail(spmd_store *h, spmd_status st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(h->errmsg, sizeof h->errmsg, fmt, ap);
    va_end(ap);
    return st;
}

static int handle_timeout(const spmd_store *h) {
    int t = atomic_load(&h->timeout_ms);
    return t > 0 ? t : SPMD_STORE_DEFAULT_TIMEOUT_MS;
}

/* ---- connect ---------------------------------------------------------------- */
/* Protocol 2's handshake (store/handshake.h), blocking.  SPMD_ERR_REMOTE
 * when the server closed or reset the connection mid-way (worth a retry). */
static spmd_status store_handshake(int fd, const spmd__auth *auth, int64_t deadline, char *err,
                                   size_t errlen) {
    unsigned char chello[SPMD__STORE_CHELLO_LEN], shello[SPMD__STORE_SHELLO_LEN];
    unsigned char proof[SPMD__AUTH_MAC], verdict[4];
    spmd_status st = spmd__store_hs_client_hello(auth, chello);
    if (st) return spmd__fail(err, errlen, st, "no randomness for a nonce");
    st = spmd__write_full(fd, chello, sizeof chello, deadline, NULL, err, errlen);
    /* A server of another version answers with just 12 bytes and closes. */
    if (!st) st = spmd__read_full(fd, shello, SPMD__STORE_HELLO_LEN, deadline, NULL, err, errlen);
    if (st) return st;
    uint32_t version = 0, status = 0;
    if (spmd__store_decode_hello(shello, SPMD__STORE_HELLO_LEN, &version, &status, err, errlen) !=
        SPMD__WIRE_OK)
        return SPMD_ERR_PROTOCOL;
    if (version != SPMD__STORE_VERSION)
        return spmd__fail(err, errlen, SPMD_ERR_MISMATCH,
                          "protocol version mismatch (client %u, server %u)", SPMD__STORE_VERSION,
                          version);
    st = spmd__read_full(fd, shello + SPMD__STORE_HELLO_LEN,
                         SPMD__STORE_SHELLO_LEN - SPMD__STORE_HELLO_LEN, deadline, NULL, err, errlen);
    if (st) return st;
    st = spmd__store_hs_client_check(auth, chello, shello, proof, err, errlen);
    if (st && status == 0 && auth->on) {
        /* Tell the server too (a proof that never matches), so its side
         * records and reports the refusal instead of a vanished client. */
        unsigned char zero[SPMD__AUTH_MAC] = {0};
        char e2[64];
        (void)spmd__write_full(fd, zero, sizeof zero, deadline, NULL, e2, sizeof e2);
    }
    if (st) return st;
    st = spmd__write_full(fd, proof, sizeof proof, deadline, NULL, err, errlen);
    if (!st) st = spmd__read_full(fd, verdict, sizeof verdict, deadline, NULL, err, errlen);
    if (st) return st;
    uint32_t v = spmd__get_u32(verdict);
    if (v) return spmd__fail(err, errlen, SPMD_ERR_PROTOCOL, "refused: %s", spmd__store_hs_text(v));
    return SPMD_OK;
}

/* This process cannot get its job secret (an unreadable or unsafe secret
 * file): it cannot join, but the ranks waiting for it should learn that in
 * seconds, not at their deadline.  So it greets the store without a secret;
 * the store refuses it and records the refusal, which ends the rendezvous on
 * every rank with the cause (group/rdzv_watch.c) — just as a stranger's
 * refusal does.  Best effort, and bounded: the caller reports its own error. */
static void announce_no_secret(const char *host, int port, int tmo) {
    char e2[SPMD__ERRLEN];
    spmd__auth none;
    memset(&none, 0, sizeof none);
    int64_t deadline = spmd__deadline(tmo < 15000 ? tmo : 15000);
    int fd = spmd__connect(host && *host ? host : "127.0.0.1", port, deadline, e2, sizeof e2);
    if (fd < 0) return;
    (void)store_handshake(fd, &none, deadline, e2, sizeof e2);
    close(fd);
}

static spmd_status connect_store(const char *host, int port, int timeout_ms, int up, spmd_store **out,
                                 char *err, size_t errlen) {
    const char *shown = host && *host ? host : "localhost";
    if (!out) return spmd__fail(err, errlen, SPMD_ERR_INVALID, "store connect: out is NULL");
    if (port <= 0 || port > 65535)
        return spmd__fail(err, errlen, SPMD_ERR_INVALID, "store connect: port %d out of range 1..65535",
                          port);
    int tmo = timeout_ms > 0 ? timeout_ms : SPMD_STORE_DEFAULT_TIMEOUT_MS;
    int64_t deadline = spmd__deadline(tmo);
    char e2[SPMD__ERRLEN];
    spmd__auth auth;
    spmd_status st = spmd__auth_get(&auth, e2, sizeof e2);
    if (st) {
        announce_no_secret(host, port, tmo);
        return spmd__fail(err, errlen, st, "store connect to %s:%d: %s", shown, port, e2);
    }
    int fd = -1;
    /* A handshake cut short (the server shed us under a flood of strangers,
     * or restarted) is retried until the deadline; a refusal is final. */
    for (;;) {
        fd = up ? spmd__connect_up(host && *host ? host : "127.0.0.1", port, deadline, e2, sizeof e2)
                : spmd__connect(host && *host ? host : "127.0.0.1", port, deadline, e2, sizeof e2);
        if (fd < 0)
            return spmd__fail(err, errlen,
                              spmd__remaining_ms(deadline) == 0 ? SPMD_ERR_TIMEOUT : SPMD_ERR_SYSTEM,
                              "store connect to %s:%d (timeout %d ms): %s", shown, port, tmo, e2);
        st = store_handshake(fd, &auth, deadline, e2, sizeof e2);
        if (st == SPMD_OK) break;
        close(fd);
        if (st != SPMD_ERR_REMOTE || spmd__remaining_ms(deadline) == 0) {
            memset(&auth, 0, sizeof auth);
            return spmd__fail(err, errlen, st, "store handshake with %s:%d: %s", shown, port, e2);
        }
        struct timespec ts = {0, 20 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    memset(&auth, 0, sizeof auth);
    sconn *c = calloc(1, sizeof *c);
    spmd_store *h = calloc(1, sizeof *h);
    char *prefix = calloc(1, 1);
    if (!c || !h || !prefix) {
        free(c);
        free(h);
        free(prefix);
        close(fd);
        return spmd__fail(err, errlen, SPMD_ERR_NOMEM, "store connect: out of memory");
    }
    pthread_mutex_init(&c->mu, NULL);
    atomic_init(&c->refs, 1);
    c->fd = fd;
    snprintf(c->peer, sizeof c->peer, "%s:%d", shown, port);
    h->c = c;
    h->prefix = prefix;
    atomic_init(&h->timeout_ms, tmo);
    *out = h;
    return SPMD_OK;
}

spmd_status spmd_store_connect(const char *host, int port, int timeout_ms, spmd_store **out,
                               char *err, size_t errlen) {
    return connect_store(host, port, timeout_ms, 0, out, err, errlen);
}

spmd_status spmd__store_connect_up(const char *host, int port, int timeout_ms, spmd_store **out, char *err,
                                   size_t errlen) {
    return connect_store(host, port, timeout_ms, 1, out, err, errlen);
}

spmd_status spmd_store_reconnect(spmd_store *h, spmd_store **out, char *err, size_t errlen) {
    if (!h || !out) return spmd__fail(err, errlen, SPMD_ERR_INVALID, "store reconnect: NULL handle or out");
    struct sockaddr_storage sa;
    socklen_t salen = sizeof sa;
    char host[NI_MAXHOST], port[NI_MAXSERV];
    if (getpeername(h->c->fd, (struct sockaddr *)&sa, &salen) != 0 ||
        getnameinfo((struct sockaddr *)&sa, salen, host, sizeof host, port, sizeof port,
                    NI_NUMERICHOST | NI_NUMERICSERV) != 0)
        return spmd__fail(err, errlen, SPMD_ERR_REMOTE, "store reconnect: the connection to %s is gone", h->c->peer);
    spmd_store *n = NULL;
    spmd_status st = spmd_store_connect(host, atoi(port), handle_timeout(h), &n, err, errlen);
    if (st) return st;
    char *prefix = strdup(h->prefix);
    if (!prefix) {
        spmd_store_close(n);
        return spmd__fail(err, errlen, SPMD_ERR_NOMEM, "store reconnect: out of memory");
    }
    free(n->prefix);
    n->prefix = prefix;
    n->plen = h->plen;
    *out = n;
    return SPMD_OK;
}

spmd_status spmd_store_prefixed(spmd_store *parent, const char *prefix, spmd_store **out) {
    if (!parent || !prefix || !out) {
        if (parent) fail(parent, SPMD_ERR_INVALID, "store prefixed: NULL prefix or out");
        return SPMD_ERR_INVALID;
    }
    /* "" adds nothing: a second handle on the same namespace (own errmsg). */
    size_t n = strlen(prefix), add = n ? n + 1 : 0;
    if (parent->plen + add > SPMD_STORE_MAX_KEY)
        return fail(parent, SPMD_ERR_INVALID, "store prefixed: prefix of %zu bytes is too long",
                    parent->plen + add);
    spmd_store *h = calloc(1, sizeof *h);
    char *p = malloc(parent->plen + add + 1);
    if (!h || !p) {
        free(h);
        free(p);
        return fail(parent, SPMD_ERR_NOMEM, "store prefixed: out of memory");
    }
    memcpy(p, parent->prefix, parent->plen);
    if (n) {
        memcpy(p + parent->plen, prefix, n);
        p[parent->plen + n] = '/';
    }
    p[parent->plen + add] = 0;
    h->c = parent->c;
    h->prefix = p;
    h->plen = parent->plen + add;
    atomic_init(&h->timeout_ms, atomic_load(&parent->timeout_ms));
    atomic_fetch_add(&h->c->refs, 1);
    *out = h;
    return SPMD_OK;
}

void spmd_store_close(spmd_store *h) {
    if (!h) return;
    sconn *c = h->c;
    if (atomic_fetch_sub(&c->refs, 1) == 1) {
        close(c->fd);
        free(c->wbuf);
        free(c->rbuf);
        pthread_mutex_destroy(&c->mu);
        free(c);
    }
    free(h->prefix);
    free(h);
}

void spmd_store_set_timeout(spmd_store *h, int timeout_ms) {
    if (h) atomic_store(&h->timeout_ms, timeout_ms > 0 ? timeout_ms : SPMD_STORE_DEFAULT_TIMEOUT_MS);
}

const char *spmd_store_errmsg(const spmd_store *h) {
    return h ? h->errmsg : "invalid store handle (NULL)";
}

/* ---- one round trip --------------------------------------------------------- */
typedef struct {
    int64_t num;
    void **val; /* NULL: the reply's bytes are not wanted */
    size_t *vlen;
} result;

/* Mark the connection unusable; the caller holds c->mu. */
static spmd_status break_conn(spmd_store *h, spmd_status st, const char *fmt, ...) SPMD__PRINTF(3, 4);
static spmd_status break_conn(spmd_store *h, spmd_status st, const char *fmt, ...) {
    sconn *c = h->c;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->broken_msg, sizeof c->broken_msg, fmt, ap);
    va_end(ap);
    c->broken = st;
    return fail(h, st, "%s", c->broken_msg);
}

/* Read until a whole reply to `seq` is buffered; *rep points into c->rbuf. */
static spmd_status read_reply(spmd_store *h, uint32_t seq, const char *op, int64_t deadline,
                              int wait_ms, spmd__store_rep *rep) {
    sconn *c = h->c;
    char e2[256];
    for (;;) {
        spmd__wire_result r = spmd__store_decode_rep(c->rbuf + c->roff, c->rlen - c->roff, rep, e2,
                                                     sizeof e2);
        if (r == SPMD__WIRE_BAD)
            return break_conn(h, SPMD_ERR_PROTOCOL, "store %s: bad reply from server %s: %s", op,
                              c->peer, e2);
        if (r == SPMD__WIRE_OK) {
            if (rep->seq == seq) return SPMD_OK;
            if ((int32_t)(seq - rep->seq) > 0) { /* late reply to a call we gave up on */
                c->roff += rep->frame_len;
                continue;
            }
            return break_conn(h, SPMD_ERR_PROTOCOL,
                              "store %s: server %s answered request %u while %u was expected", op,
                              c->peer, rep->seq, seq);
        }
        /* Need more bytes: make room (the decoder has bounded the frame). */
        if (c->roff) {
            memmove(c->rbuf, c->rbuf + c->roff, c->rlen - c->roff);
            c->rlen -= c->roff;
            c->roff = 0;
        }
        if (c->rcap - c->rlen < READ_CHUNK / 4) {
            size_t cap = c->rcap ? c->rcap * 2 : READ_CHUNK;
            unsigned char *p = realloc(c->rbuf, cap);
            if (!p)
                return break_conn(h, SPMD_ERR_NOMEM, "store %s: out of memory for the reply", op);
            c->rbuf = p;
            c->rcap = cap;
        }
        ssize_t n = recv(c->fd, c->rbuf + c->rlen, c->rcap - c->rlen, 0);
        if (n > 0) {
            c->rlen += (size_t)n;
            continue;
        }
        if (n == 0)
            return break_conn(h, SPMD_ERR_REMOTE,
                              "store %s: server %s closed the connection (server stopped or died)",
                              op, c->peer);
        if (errno == EINTR) continue;
        if (errno == ECONNRESET)
            return break_conn(h, SPMD_ERR_REMOTE,
                              "store %s: connection to server %s reset (server stopped or died)",
                              op, c->peer);
        if (errno != EAGAIN && errno != EWOULDBLOCK)
            return break_conn(h, SPMD_ERR_SYSTEM, "store %s: recv from %s: %s", op, c->peer,
                              strerror(errno));
        for (;;) {
            struct pollfd p = {.fd = c->fd, .events = POLLIN, .revents = 0};
            int left = spmd__remaining_ms(deadline);
            if (left == 0)
                return fail(h, SPMD_ERR_TIMEOUT, "store %s: no reply from server %s within %d ms",
                            op, c->peer, wait_ms);
            int pr = poll(&p, 1, left);
            if (pr > 0) break;
            if (pr < 0 && errno != EINTR)
                return break_conn(h, SPMD_ERR_SYSTEM, "store %s: poll: %s", op, strerror(errno));
        }
    }
}

/* Send spec, wait for its reply.  blocking_ms > 0: the server may park the
 * request that long, so the client waits that long plus GRACE_MS. */
static spmd_status call(spmd_store *h, spmd__store_req_spec *spec, int blocking_ms, result *res) {
    sconn *c = h->c;
    const char *op = spmd__store_op_name(spec->op);
    char e2[SPMD__ERRLEN];
    int io_ms = handle_timeout(h);
    pthread_mutex_lock(&c->mu);
    if (c->broken) {
        spmd_status st = fail(h, c->broken, "%s", c->broken_msg);
        pthread_mutex_unlock(&c->mu);
        return st;
    }
    spec->seq = ++c->seq;
    spec->prefix = h->prefix;
    spec->plen = h->plen;
    size_t n = spmd__store_req_size(spec);
    if (n > c->wcap) {
        unsigned char *p = realloc(c->wbuf, n);
        if (!p) {
            pthread_mutex_unlock(&c->mu);
            return fail(h, SPMD_ERR_NOMEM, "store %s: out of memory for a %zu-byte request", op, n);
        }
        c->wbuf = p;
        c->wcap = n;
    }
    spmd__store_encode_req(c->wbuf, spec);
    spmd_status st = spmd__write_full(c->fd, c->wbuf, n, spmd__deadline(io_ms), NULL, e2, sizeof e2);
    if (c->wcap > KEEP_CAP) {
        free(c->wbuf);
        c->wbuf = NULL;
        c->wcap = 0;
    }
    if (st) {
        /* Part of a request may be on the wire: the stream cannot be trusted. */
        if (st == SPMD_ERR_REMOTE)
            st = break_conn(h, st, "store %s: lost the connection to server %s (server stopped or "
                            "died): %s", op, c->peer, e2);
        else
            st = break_conn(h, st, "store %s: sending to server %s: %s", op, c->peer, e2);
        pthread_mutex_unlock(&c->mu);
        return st;
    }
    int wait_ms = io_ms;
    if (blocking_ms > 0) wait_ms = blocking_ms > INT_MAX - GRACE_MS ? INT_MAX : blocking_ms + GRACE_MS;
    spmd__store_rep rep;
    st = read_reply(h, spec->seq, op, spmd__deadline(wait_ms), wait_ms, &rep);
    if (!st) {
        if (rep.status != SPMD_OK) {
            st = fail(h, (spmd_status)rep.status, "store %s: %.*s (server %s)", op, (int)rep.vlen,
                      (const char *)rep.val, c->peer);
        } else if (res) {
            if (res->val) {
                unsigned char *v = malloc((size_t)rep.vlen + 1);
                if (!v) {
                    st = fail(h, SPMD_ERR_NOMEM, "store %s: out of memory for a %u-byte value", op,
                              rep.vlen);
                } else {
                    if (rep.vlen) memcpy(v, rep.val, rep.vlen);
                    v[rep.vlen] = 0;
                    *res->val = v;
                    if (res->vlen) *res->vlen = rep.vlen;
                }
            }
            res->num = rep.num;
        }
        c->roff += rep.frame_len;
    }
    if (c->roff == c->rlen) {
        c->roff = c->rlen = 0;
        if (c->rcap > KEEP_CAP) {
            free(c->rbuf);
            c->rbuf = NULL;
            c->rcap = 0;
        }
    }
    pthread_mutex_unlock(&c->mu);
    return st;
}

/* ---- the operations --------------------------------------------------------- */
static spmd_status check_key(spmd_store *h, const char *what, const char *key, size_t *klen) {
    if (!key) return fail(h, SPMD_ERR_INVALID, "store %s: key is NULL", what);
    *klen = strlen(key);
    if (h->plen + *klen > SPMD_STORE_MAX_KEY)
        return fail(h, SPMD_ERR_INVALID, "store %s: key of %zu bytes (with prefix) over the limit %u",
                    what, h->plen + *klen, SPMD_STORE_MAX_KEY);
    return SPMD_OK;
}

static spmd_status check_value(spmd_store *h, const char *what, const void *v, size_t len) {
    if (!v && len) return fail(h, SPMD_ERR_INVALID, "store %s: value is NULL", what);
    if (len > SPMD_STORE_MAX_VALUE)
        return fail(h, SPMD_ERR_INVALID, "store %s: value of %zu bytes over the limit %u", what, len,
                    SPMD_STORE_MAX_VALUE);
    return SPMD_OK;
}

static void one_key(spmd__store_req_spec *s, uint8_t op, const char **key, const size_t *klen) {
    memset(s, 0, sizeof *s);
    s->op = op;
    s->keys = key;
    s->klens = klen;
    s->nkeys = 1;
}

spmd_status spmd_store_set(spmd_store *h, const char *key, const void *val, size_t len) {
    if (!h) return SPMD_ERR_INVALID;
    size_t kl;
    spmd_status st = check_key(h, "set", key, &kl);
    if (!st) st = check_value(h, "set", val, len);
    if (st) return st;
    spmd__store_req_spec s;
    one_key(&s, SPMD__STORE_OP_SET, &key, &kl);
    const void *vals[1] = {val};
    size_t vlens[1] = {len};
    s.vals = vals;
    s.vlens = vlens;
    s.nvals = 1;
    return call(h, &s, 0, NULL);
}

static spmd_status get_common(spmd_store *h, uint8_t op, const char *key, void **val, size_t *len) {
    if (!h) return SPMD_ERR_INVALID;
    const char *what = spmd__store_op_name(op);
    if (!val || !len) return fail(h, SPMD_ERR_INVALID, "store %s: val or len is NULL", what);
    size_t kl;
    spmd_status st = check_key(h, what, key, &kl);
    if (st) return st;
    spmd__store_req_spec s;
    one_key(&s, op, &key, &kl);
    int tmo = op == SPMD__STORE_OP_GET ? handle_timeout(h) : 0;
    s.timeout_ms = (uint32_t)tmo;
    void *v = NULL;
    size_t vl = 0;
    result r = {0, &v, &vl};
    st = call(h, &s, tmo, &r);
    if (st) return st;
    *val = v;
    *len = vl;
    return SPMD_OK;
}

spmd_status spmd_store_get(spmd_store *h, const char *key, void **val, size_t *len) {
    return get_common(h, SPMD__STORE_OP_GET, key, val, len);
}

spmd_status spmd_store_try_get(spmd_store *h, const char *key, void **val, size_t *len) {
    return get_common(h, SPMD__STORE_OP_TRY_GET, key, val, len);
}

spmd_status spmd_store_wait(spmd_store *h, const char *const *keys, size_t nkeys, int timeout_ms) {
    if (!h) return SPMD_ERR_INVALID;
    if (nkeys == 0) return SPMD_OK;
    if (!keys) return fail(h, SPMD_ERR_INVALID, "store wait: keys is NULL");
    if (nkeys > SPMD_STORE_MAX_WAIT_KEYS)
        return fail(h, SPMD_ERR_INVALID, "store wait: %zu keys over the limit %u", nkeys,
                    SPMD_STORE_MAX_WAIT_KEYS);
    size_t *klens = malloc(nkeys * sizeof *klens);
    if (!klens) return fail(h, SPMD_ERR_NOMEM, "store wait: out of memory");
    spmd_status st = SPMD_OK;
    for (size_t i = 0; i < nkeys && !st; i++) st = check_key(h, "wait", keys[i], &klens[i]);
    if (!st) {
        int tmo = timeout_ms > 0 ? timeout_ms : handle_timeout(h);
        spmd__store_req_spec s;
        memset(&s, 0, sizeof s);
        s.op = SPMD__STORE_OP_WAIT;
        s.timeout_ms = (uint32_t)tmo;
        s.keys = (const char *const *)keys;
        s.klens = klens;
        s.nkeys = (uint32_t)nkeys;
        st = call(h, &s, tmo, NULL);
    }
    free(klens);
    return st;
}

spmd_status spmd_store_add(spmd_store *h, const char *key, int64_t delta, int64_t *result_out) {
    if (!h) return SPMD_ERR_INVALID;
    size_t kl;
    spmd_status st = check_key(h, "add", key, &kl);
    if (st) return st;
    spmd__store_req_spec s;
    one_key(&s, SPMD__STORE_OP_ADD, &key, &kl);
    s.num = delta;
    result r = {0, NULL, NULL};
    st = call(h, &s, 0, &r);
    if (!st && result_out) *result_out = r.num;
    return st;
}

spmd_status spmd_store_compare_set(spmd_store *h, const char *key, const void *expected,
                                   size_t expected_len, const void *desired, size_t desired_len,
                                   void **current, size_t *current_len) {
    if (!h) return SPMD_ERR_INVALID;
    if (!current != !current_len)
        return fail(h, SPMD_ERR_INVALID, "store compare_set: current and current_len must both be "
                    "set or both be NULL");
    size_t kl;
    spmd_status st = check_key(h, "compare_set", key, &kl);
    if (!st) st = check_value(h, "compare_set", expected, expected_len);
    if (!st) st = check_value(h, "compare_set", desired, desired_len);
    if (st) return st;
    spmd__store_req_spec s;
    one_key(&s, SPMD__STORE_OP_CAS, &key, &kl);
    const void *vals[2] = {expected, desired};
    size_t vlens[2] = {expected_len, desired_len};
    s.vals = vals;
    s.vlens = vlens;
    s.nvals = 2;
    void *v = NULL;
    size_t vl = 0;
    result r = {0, current ? &v : NULL, &vl};
    st = call(h, &s, 0, &r);
    if (st) return st;
    if (current) {
        *current = v;
        *current_len = vl;
    }
    return SPMD_OK;
}

spmd_status spmd_store_delete(spmd_store *h, const char *key, int *deleted) {
    if (!h) return SPMD_ERR_INVALID;
    size_t kl;
    spmd_status st = check_key(h, "delete", key, &kl);
    if (st) return st;
    spmd__store_req_spec s;
    one_key(&s, SPMD__STORE_OP_DELETE, &key, &kl);
    result r = {0, NULL, NULL};
    st = call(h, &s, 0, &r);
    if (!st && deleted) *deleted = r.num != 0;
    return st;
}

spmd_status spmd_store_num_keys(spmd_store *h, int64_t *n) {
    if (!h) return SPMD_ERR_INVALID;
    if (!n) return fail(h, SPMD_ERR_INVALID, "store num_keys: n is NULL");
    spmd__store_req_spec s;
    memset(&s, 0, sizeof s);
    s.op = SPMD__STORE_OP_NUM_KEYS;
    result r = {0, NULL, NULL};
    spmd_status st = call(h, &s, 0, &r);
    if (!st) *n = r.num;
    return st;
}
