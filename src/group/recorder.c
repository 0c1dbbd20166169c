/* recorder.c — the flight recorder's ring buffers and the writing of the
 * record (recorder.h).
 *
 * A slot is written by one thread at a time (a collective's number, or a
 * point-to-point ticket, picks it), and read by whoever writes the record,
 * seqlock style: the writer clears the slot's number, fills it, then
 * publishes the number; a reader keeps a slot only if the number it read
 * before and after the fields is the same.  The end of an operation (state,
 * end time, status) is stored by whoever finishes it, after checking that
 * the slot still holds that operation.  Everything is relaxed atomics: plain
 * moves on x86, and no data race for the sanitizers.
 *
 * Times come from the group's progress thread (mesh.h's clock_ms, at most
 * about 0.1 s old): reading a clock twice per operation cost more than all
 * the rest (~25 ns of ~35 ns per operation).  A group without a progress
 * thread (world size 1) reads the coarse clock.
 */
#define _GNU_SOURCE
#include "recorder.h"
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "flight_record.h"
#include "group_internal.h"

#define DEFAULT_ENTRIES 256
#define P2P_SEND 1000 /* slot kinds beyond the collective kinds */
#define P2P_RECV 1001

typedef struct {
    _Atomic uint64_t seq; /* 0: empty or being written */
    _Atomic uint32_t kind, state;
    _Atomic uint64_t count;
    _Atomic int32_t dtype, op, peer, tag, status;
    _Atomic int64_t t_issue, t_start, t_end; /* CLOCK_MONOTONIC ms, 0: not yet */
} slot;

struct spmd__rec {
    uint64_t mask;               /* slots per ring - 1 (a power of two) */
    slot *coll, *p2p;
    uint64_t p2p_count;          /* tickets handed out, under the p2p engine's lock (on_post) */
    _Atomic uint64_t issued;     /* highest collective number issued */
    _Atomic int64_t *clock;      /* the progress thread's clock (ms), NULL: read one */
    char dir[1024];              /* SPMD_RECORDER_DIR, "" when unset */
    /* requests answered (the progress thread's tick only) */
    uint64_t api_seen, file_seen;
    struct timespec req_mtime;
    ino_t req_ino;
};

/* spmd_request_record_dump()'s generation, for every group of the process. */
static _Atomic uint64_t dump_requests;
static _Atomic uint64_t tmp_counter;

#define LD(x) atomic_load_explicit(&(x), memory_order_relaxed)
#define ST(x, v) atomic_store_explicit(&(x), (v), memory_order_relaxed)

static int64_t mono_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int64_t now_ms(const spmd__rec *r) { return r->clock ? LD(*r->clock) : mono_ms(); }

void spmd__rec_set_clock(spmd__rec *r, _Atomic int64_t *clock) {
    if (r) r->clock = clock;
}

spmd__rec *spmd__rec_new(void) {
    long n = DEFAULT_ENTRIES;
    if (spmd__env_int("SPMD_RECORDER_ENTRIES", 0, 1 << 20, &n) == SPMD_ERR_INVALID)
        SPMD_LOGW("SPMD_RECORDER_ENTRIES must be a whole number in [0, %d]; using %d", 1 << 20, DEFAULT_ENTRIES);
    if (n <= 0) return NULL;
    uint64_t slots = 1;
    while (slots < (uint64_t)n) slots <<= 1;
    spmd__rec *r = calloc(1, sizeof *r);
    if (!r) return NULL;
    r->mask = slots - 1;
    r->coll = calloc(slots, sizeof *r->coll);
    r->p2p = calloc(slots, sizeof *r->p2p);
    if (!r->coll || !r->p2p) {
        spmd__rec_free(r);
        return NULL;
    }
    const char *dir = getenv("SPMD_RECORDER_DIR");
    if (dir && *dir) snprintf(r->dir, sizeof r->dir, "%s", dir);
    r->api_seen = atomic_load(&dump_requests);
    return r;
}

void spmd__rec_free(spmd__rec *r) {
    if (!r) return;
    free(r->coll);
    free(r->p2p);
    free(r);
}

/* ---- filling ------------------------------------------------------------------ */

/* Fill slot s for the operation numbered seq (its readers see it whole or
 * not at all: seq is cleared first and stored last). */
static void slot_write(slot *s, uint64_t seq, uint32_t kind, int state, uint64_t count, int dtype, int op, int peer,
                       int tag, int64_t t_issue, int64_t t_start, int64_t t_end) {
    ST(s->seq, 0);
    atomic_thread_fence(memory_order_release);
    ST(s->kind, kind);
    ST(s->state, (uint32_t)state);
    ST(s->count, count);
    ST(s->dtype, dtype);
    ST(s->op, op);
    ST(s->peer, peer);
    ST(s->tag, tag);
    ST(s->status, 0);
    ST(s->t_issue, t_issue);
    ST(s->t_start, t_start);
    ST(s->t_end, t_end);
    atomic_store_explicit(&s->seq, seq, memory_order_release);
}

static void slot_begin(slot *s, uint64_t seq, uint32_t kind, int state, uint64_t count, int dtype, int op, int peer,
                       int tag, int64_t now) {
    slot_write(s, seq, kind, state, count, dtype, op, peer, tag, now, state == SPMD__FLIGHT_RUNNING ? now : 0, 0);
}

static void slot_end(slot *s, uint64_t seq, spmd_status st, int64_t now) {
    if (LD(s->seq) != seq) return; /* overwritten: this op is out of the record */
    ST(s->t_end, now);
    ST(s->status, (int32_t)st);
    atomic_store_explicit(&s->state, st ? SPMD__FLIGHT_FAILED : SPMD__FLIGHT_DONE, memory_order_release);
}

static int rooted(spmd__coll_kind k) {
    return k == SPMD__C_BROADCAST || k == SPMD__C_REDUCE || k == SPMD__C_GATHER || k == SPMD__C_SCATTER;
}

void spmd__rec_coll_issue(spmd__rec *r, const spmd__coll_args *a, int running) {
    if (!r) return;
    slot_begin(&r->coll[a->seq & r->mask], a->seq, (uint32_t)a->kind,
               running ? SPMD__FLIGHT_RUNNING : SPMD__FLIGHT_QUEUED, a->count, a->kind == SPMD__C_BARRIER ? -1 : (int)a->dt,
               a->kind == SPMD__C_ALL_REDUCE || a->kind == SPMD__C_REDUCE || a->kind == SPMD__C_REDUCE_SCATTER
                   ? (int)a->op
                   : -1,
               rooted(a->kind) ? a->root : -1, -1, now_ms(r));
    ST(r->issued, a->seq);
}

void spmd__rec_coll_start(spmd__rec *r, uint32_t seq) {
    if (!r) return;
    slot *s = &r->coll[seq & r->mask];
    if (LD(s->seq) != seq || LD(s->state) != SPMD__FLIGHT_QUEUED) return; /* ran at once: already running */
    ST(s->t_start, now_ms(r));
    ST(s->state, SPMD__FLIGHT_RUNNING);
}

void spmd__rec_coll_end(spmd__rec *r, uint32_t seq, spmd_status st) {
    if (r) slot_end(&r->coll[seq & r->mask], seq, st, now_ms(r));
}

uint64_t spmd__rec_p2p_post(spmd__rec *r, int send, int peer, int tag, size_t bytes, int dtype) {
    if (!r) return 0;
    uint64_t t = ++r->p2p_count; /* the caller holds the engine's lock: no atomic add (~10 ns) */
    slot_begin(&r->p2p[t & r->mask], t, send ? P2P_SEND : P2P_RECV, SPMD__FLIGHT_RUNNING, bytes, dtype, -1, peer,
               tag, now_ms(r));
    return t;
}

void spmd__rec_p2p_done(spmd__rec *r, int send, int peer, int tag, size_t bytes, int dtype) {
    if (!r) return;
    uint64_t t = ++r->p2p_count; /* under the engine's lock, as at a post */
    /* written once, already finished: it is on a small message's path */
    const int64_t now = now_ms(r);
    slot_write(&r->p2p[t & r->mask], t, send ? P2P_SEND : P2P_RECV, SPMD__FLIGHT_DONE, bytes, dtype, -1, peer, tag, now,
               now, now);
}

void spmd__rec_p2p_end(spmd__rec *r, uint64_t ticket, spmd_status st) {
    if (r && ticket) slot_end(&r->p2p[ticket & r->mask], ticket, st, now_ms(r));
}

/* ---- the record ------------------------------------------------------------------ */

/* A consistent copy of slot s into o (wall-clock times); 0 when empty or
 * overwritten meanwhile. */
static int snapshot(slot *s, char cls, double wall_now, int64_t mono_now, spmd__flight_op *o) {
    uint64_t seq = atomic_load_explicit(&s->seq, memory_order_acquire);
    if (!seq) return 0;
    uint32_t kind = LD(s->kind);
    int state = (int)atomic_load_explicit(&s->state, memory_order_acquire);
    int64_t t[3] = {LD(s->t_issue), LD(s->t_start), LD(s->t_end)};
    int dtype = LD(s->dtype), op = LD(s->op);
    memset(o, 0, sizeof *o);
    o->cls = cls;
    o->seq = seq;
    o->state = state;
    o->count = LD(s->count);
    o->peer = LD(s->peer);
    o->tag = LD(s->tag);
    o->status = LD(s->status);
    atomic_thread_fence(memory_order_acquire);
    if (LD(s->seq) != seq) return 0;
    snprintf(o->kind, sizeof o->kind, "%s",
             kind == P2P_SEND ? "send" : kind == P2P_RECV ? "recv" : spmd__coll_kind_name((spmd__coll_kind)kind));
    snprintf(o->dtype, sizeof o->dtype, "%s", dtype >= 0 ? spmd_dtype_name((spmd_dtype)dtype) : "-");
    snprintf(o->op, sizeof o->op, "%s", op >= 0 ? spmd_op_name((spmd_op)op) : "-");
    double *w[3] = {&o->t_issue, &o->t_start, &o->t_end};
    for (int k = 0; k < 3; k++) *w[k] = t[k] ? wall_now - (double)(mono_now - t[k]) / 1e3 : 0.0;
    return 1;
}

static int by_seq(const void *a, const void *b) {
    const spmd__flight_op *x = a, *y = b;
    if (x->cls != y->cls) return x->cls == 'c' ? -1 : 1;
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

/* Text of g's record (malloc()ed). */
static char *record_text(spmd_group *g, const char *reason, uint64_t request, int status, int culprit,
                         const char *error, size_t *len) {
    spmd__rec *r = g->rec;
    spmd__flight_record fr;
    memset(&fr, 0, sizeof fr);
    snprintf(fr.group, sizeof fr.group, "%s", g->name);
    fr.rank = g->rank;
    fr.world = g->world;
    fr.pid = (long)getpid();
    if (gethostname(fr.host, sizeof fr.host) < 0) snprintf(fr.host, sizeof fr.host, "?");
    fr.host[sizeof fr.host - 1] = 0;
    struct timespec wall;
    clock_gettime(CLOCK_REALTIME, &wall);
    fr.time = (double)wall.tv_sec + (double)wall.tv_nsec / 1e9;
    snprintf(fr.reason, sizeof fr.reason, "%s", reason);
    fr.request = request;
    fr.status = status;
    fr.culprit = culprit;
    snprintf(fr.error, sizeof fr.error, "%s", error ? error : "");
    size_t slots = r ? (size_t)r->mask + 1 : 0;
    fr.ops = slots ? malloc(2 * slots * sizeof *fr.ops) : NULL;
    if (r && fr.ops) {
        fr.issued = LD(r->issued);
        int64_t mono = spmd__now_ms();
        for (size_t i = 0; i < slots; i++) {
            fr.nops += snapshot(&r->coll[i], 'c', fr.time, mono, &fr.ops[fr.nops]);
            fr.nops += snapshot(&r->p2p[i], 'p', fr.time, mono, &fr.ops[fr.nops]);
        }
        qsort(fr.ops, (size_t)fr.nops, sizeof *fr.ops, by_seq);
    }
    char *text = spmd__flight_format(&fr, len);
    free(fr.ops);
    return text;
}

static int write_all(int fd, const char *p, size_t len) {
    while (len) {
        ssize_t n = write(fd, p, len);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return -1;
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

/* <dir>/<group>.<rank>.rec, the group's name kept to safe characters. */
static void default_path(const spmd_group *g, const char *dir, char *out, size_t outlen) {
    char name[sizeof g->name];
    size_t k = 0;
    for (const char *s = g->name; *s && k + 1 < sizeof name; s++)
        name[k++] = (*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') || *s == '.' ||
                            *s == '-' || *s == '_'
                        ? *s
                        : '_';
    name[k] = 0;
    snprintf(out, outlen, "%s/%s.%d.rec", dir, name, g->rank);
}

/* Write the record to path (NULL: stderr), whole or not at all (a temporary
 * file renamed into place). */
static spmd_status write_record(spmd_group *g, const char *path, const char *reason, uint64_t request, int status,
                                int culprit, const char *error, char *err, size_t errlen) {
    size_t len = 0;
    char *text = record_text(g, reason, request, status, culprit, error, &len);
    if (!text) return spmd__fail(err, errlen, SPMD_ERR_NOMEM, "out of memory writing the flight record");
    if (!path) {
        int bad = write_all(2, text, len);
        free(text);
        return bad ? spmd__fail_errno(err, errlen, SPMD_ERR_SYSTEM, errno, "writing the flight record to stderr")
                   : SPMD_OK;
    }
    char tmp[1200];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld.%llu", path, (long)getpid(),
             (unsigned long long)atomic_fetch_add(&tmp_counter, 1));
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    int bad = fd < 0 || write_all(fd, text, len) < 0;
    int e = errno;
    if (fd >= 0 && close(fd) < 0 && !bad) bad = 1, e = errno;
    if (!bad && rename(tmp, path) < 0) bad = 1, e = errno;
    free(text);
    if (bad) {
        unlink(tmp);
        return spmd__fail_errno(err, errlen, SPMD_ERR_SYSTEM, e, "writing the flight record to %s", path);
    }
    return SPMD_OK;
}

/* ---- when the record is written ------------------------------------------------------ */

static void on_fail(void *arg, spmd_status st, int culprit, const char *msg) {
    spmd_group *g = arg;
    if (!g->rec->dir[0]) return;
    char path[1200], err[SPMD__ERRLEN];
    default_path(g, g->rec->dir, path, sizeof path);
    if (write_record(g, path, "failure", 0, st, culprit, msg, err, sizeof err))
        SPMD_LOGW("rank %d: %s", g->rank, err);
}

/* The generation in <dir>/request when the file changed since we last
 * looked, else 0. */
static uint64_t file_request(spmd__rec *r) {
    char path[1100];
    snprintf(path, sizeof path, "%s/request", r->dir);
    struct stat sb;
    if (stat(path, &sb) < 0) return 0;
    if (sb.st_ino == r->req_ino && sb.st_mtim.tv_sec == r->req_mtime.tv_sec &&
        sb.st_mtim.tv_nsec == r->req_mtime.tv_nsec)
        return 0;
    r->req_ino = sb.st_ino;
    r->req_mtime = sb.st_mtim;
    FILE *f = fopen(path, "re");
    if (!f) return 0;
    unsigned long long gen = 0;
    int ok = fscanf(f, "%llu", &gen) == 1;
    fclose(f);
    return ok ? gen : 0;
}

/* The group's failure as recorded (status 0: none). */
static spmd_status failure_state(spmd_group *g, int *culprit, char *msg, size_t msglen) {
    pthread_mutex_lock(&g->t.fail_mu);
    spmd_status st = (spmd_status)atomic_load(&g->t.failed);
    *culprit = st ? g->t.fail_culprit : -1;
    snprintf(msg, msglen, "%s", st ? g->t.fail_msg : "");
    pthread_mutex_unlock(&g->t.fail_mu);
    return st;
}

static void on_tick(void *arg) {
    spmd_group *g = arg;
    spmd__rec *r = g->rec;
    uint64_t api = atomic_load(&dump_requests), request = 0;
    int asked = api != r->api_seen;
    r->api_seen = api;
    if (r->dir[0]) {
        uint64_t gen = file_request(r);
        if (gen > r->file_seen) {
            r->file_seen = gen;
            request = gen;
            asked = 1;
        }
    }
    if (!asked) return;
    char msg[SPMD__ERRLEN], path[1200], err[SPMD__ERRLEN];
    int culprit;
    spmd_status st = failure_state(g, &culprit, msg, sizeof msg);
    if (r->dir[0]) default_path(g, r->dir, path, sizeof path);
    if (write_record(g, r->dir[0] ? path : NULL, "request", request, st, culprit, msg, err, sizeof err))
        SPMD_LOGW("rank %d: %s", g->rank, err);
}

void spmd__rec_timeout(spmd_group *g, const char *msg) {
    if (!g->rec || !g->rec->dir[0]) return;
    char path[1200], err[SPMD__ERRLEN];
    default_path(g, g->rec->dir, path, sizeof path);
    if (write_record(g, path, "timeout", 0, 0, -1, msg, err, sizeof err)) SPMD_LOGW("rank %d: %s", g->rank, err);
}

/* A send or receive is posted (the engine's lock held): number it. */
static void on_post(void *arg, spmd__preq *q) {
    spmd_group *g = arg;
    if (!q->recorded) return; /* not a spmd_work's: rpc posts requests of its own */
    spmd_work *w = (spmd_work *)(void *)((char *)q - offsetof(spmd_work, req));
    if (w->kind == SPMD__W_COLL) return;
    w->rec_ticket = spmd__rec_p2p_post(g->rec, q->send, q->peer, q->tag, q->len, q->dtype);
}

/* A blocking send or receive done at once by the engine's quick path. */
static void on_done_now(void *arg, int send, int peer, int tag, size_t len, int dtype) {
    spmd__rec_p2p_done(((spmd_group *)arg)->rec, send, peer, tag, len, dtype);
}

void spmd__rec_attach(spmd_group *g) {
    if (!g->rec) return;
    g->t.on_post = on_post;
    g->t.on_done_now = on_done_now;
    if (g->world > 1) {
        g->t.clock_wanted = 1;
        spmd__rec_set_clock(g->rec, &g->t.clock_ms);
    }
    g->t.on_fail = on_fail;
    g->t.on_tick = on_tick;
    g->t.hook_arg = g;
}

/* ---- the public calls ------------------------------------------------------------------ */

void spmd_request_record_dump(void) { atomic_fetch_add(&dump_requests, 1); }

spmd_status spmd_group_dump_record(spmd_group *g, const char *path) {
    if (!g) return SPMD_ERR_INVALID;
    char def[1200], msg[SPMD__ERRLEN], err[SPMD__ERRLEN];
    if (!path) {
        const char *dir = g->rec && g->rec->dir[0] ? g->rec->dir : getenv("SPMD_RECORDER_DIR");
        if (!dir || !*dir)
            return spmd__group_error(g, SPMD_ERR_INVALID,
                                     "spmd_group_dump_record: no path given and SPMD_RECORDER_DIR is not set");
        default_path(g, dir, def, sizeof def);
        path = def;
    }
    int culprit;
    spmd_status st = failure_state(g, &culprit, msg, sizeof msg);
    spmd_status rc = write_record(g, path, "call", 0, st, culprit, msg, err, sizeof err);
    return rc ? spmd__group_error(g, rc, "%s", err) : SPMD_OK;
}
