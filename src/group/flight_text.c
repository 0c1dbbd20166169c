/* flight_text.c — a flight record to text and back (flight_record.h has the
 * format).  The parser reads files other processes wrote, so it trusts
 * nothing: every number is range-checked, every name bounded and limited to
 * printable characters, the number of ops bounded. */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "flight_record.h"

static const char *const state_names[] = {"?", "queued", "running", "done", "failed"};

const char *spmd__flight_state_name(int state) {
    return state >= SPMD__FLIGHT_QUEUED && state <= SPMD__FLIGHT_FAILED ? state_names[state] : "?";
}

/* ---- writing ------------------------------------------------------------- */

typedef struct {
    char *buf;
    size_t len, cap;
    int oom;
} text;

static void add(text *t, const char *fmt, ...) SPMD__PRINTF(2, 3);
static void add(text *t, const char *fmt, ...) {
    if (t->oom) return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(t->buf + t->len, t->cap - t->len, fmt, ap);
        va_end(ap);
        if (n < 0) {
            t->oom = 1;
            return;
        }
        if ((size_t)n < t->cap - t->len) {
            t->len += (size_t)n;
            return;
        }
        size_t cap = t->cap * 2 + (size_t)n;
        char *b = realloc(t->buf, cap);
        if (!b) {
            t->oom = 1;
            return;
        }
        t->buf = b;
        t->cap = cap;
    }
}

/* A name as one token: printable, no spaces, never empty. */
static const char *token(const char *s, char *out, size_t outlen) {
    size_t k = 0;
    for (; s && *s && k + 1 < outlen; s++) out[k++] = *s > ' ' && *s < 127 ? *s : '_';
    if (!k) out[k++] = '-';
    out[k] = 0;
    return out;
}

char *spmd__flight_format(const spmd__flight_record *r, size_t *len) {
    text t = {.cap = 1024 + (size_t)r->nops * 160};
    if (!(t.buf = malloc(t.cap))) return NULL;
    char a[96], b[96], c[96];
    char err[SPMD__ERRLEN];
    size_t k = 0;
    for (const char *s = r->error; *s && k + 1 < sizeof err; s++) err[k++] = (unsigned char)*s < ' ' || *s == 127 ? ' ' : *s;
    err[k] = 0;
    add(&t, "%s %d\ngroup %s\nrank %d %d\npid %ld\nhost %s\ntime %.6f\nreason %s\nrequest %llu\nissued %llu\n"
            "status %d\nculprit %d\nerror %s\n",
        SPMD__FLIGHT_MAGIC, SPMD__FLIGHT_VERSION, token(r->group, a, sizeof a), r->rank, r->world, r->pid,
        token(r->host, b, sizeof b), r->time, token(r->reason, c, sizeof c), (unsigned long long)r->request,
        (unsigned long long)r->issued, r->status, r->culprit, err);
    for (int i = 0; i < r->nops; i++) {
        const spmd__flight_op *o = &r->ops[i];
        add(&t, "op %c %llu %s %s %llu ", o->cls == 'p' ? 'p' : 'c', (unsigned long long)o->seq,
            token(o->kind, a, sizeof a), spmd__flight_state_name(o->state), (unsigned long long)o->count);
        add(&t, "%s %s %d %d %.6f %.6f %.6f %d\n", token(o->dtype, b, sizeof b), token(o->op, c, sizeof c), o->peer,
            o->tag, o->t_issue, o->t_start, o->t_end, o->status);
    }
    add(&t, "end\n");
    if (t.oom) {
        free(t.buf);
        return NULL;
    }
    *len = t.len;
    return t.buf;
}

/* ---- parsing ------------------------------------------------------------- */

#define MAX_TOKENS 16

static int parse_i64(const char *s, long long lo, long long hi, long long *out) {
    if (!s || !*s) return -1;
    char *end = NULL;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || *end || v < lo || v > hi) return -1;
    *out = v;
    return 0;
}

static int parse_u64(const char *s, uint64_t *out) {
    if (!s || *s < '0' || *s > '9') return -1;
    char *end = NULL;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end) return -1;
    *out = v;
    return 0;
}

/* A wall-clock time: 0, or seconds since 1970 before 2096 (where a double
 * still holds microseconds exactly, so a record's text survives a round trip). */
static int parse_time(const char *s, double *out) {
    if (!s || !*s) return -1;
    char *end = NULL;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || *end || !isfinite(v) || v < 0 || v > 4e9) return -1;
    *out = v;
    return 0;
}

static int parse_name(const char *s, char *out, size_t outlen) {
    size_t n = strlen(s);
    if (!n || n >= outlen) return -1;
    for (size_t i = 0; i < n; i++)
        if (s[i] <= ' ' || s[i] >= 127) return -1;
    memcpy(out, s, n + 1);
    return 0;
}

static int parse_state(const char *s) {
    for (int k = SPMD__FLIGHT_QUEUED; k <= SPMD__FLIGHT_FAILED; k++)
        if (!strcmp(s, state_names[k])) return k;
    return -1;
}

static int parse_op(char **tok, int ntok, spmd__flight_op *o) {
    long long peer, tag, status;
    if (ntok != 14 || strlen(tok[1]) != 1 || (tok[1][0] != 'c' && tok[1][0] != 'p')) return -1;
    o->cls = tok[1][0];
    if (parse_u64(tok[2], &o->seq) || parse_name(tok[3], o->kind, sizeof o->kind) ||
        (o->state = parse_state(tok[4])) < 0 || parse_u64(tok[5], &o->count) ||
        parse_name(tok[6], o->dtype, sizeof o->dtype) || parse_name(tok[7], o->op, sizeof o->op) ||
        parse_i64(tok[8], -1, 1 << 30, &peer) || parse_i64(tok[9], -1, INT32_MAX, &tag) ||
        parse_time(tok[10], &o->t_issue) || parse_time(tok[11], &o->t_start) || parse_time(tok[12], &o->t_end) ||
        parse_i64(tok[13], -1000, 1000, &status))
        return -1;
    o->peer = (int)peer;
    o->tag = (int)tag;
    o->status = (int)status;
    return 0;
}

/* One header line (not "op", not "end"); 0 ok or skipped, -1 bad. */
static int parse_header(spmd__flight_record *r, char **tok, int ntok, const char *rest) {
    const char *k = tok[0];
    long long v, w;
    if (!strcmp(k, "error")) {
        size_t n = strlen(rest);
        if (n >= sizeof r->error) n = sizeof r->error - 1;
        memcpy(r->error, rest, n);
        r->error[n] = 0;
        return 0;
    }
    if (!strcmp(k, "rank")) {
        if (ntok != 3 || parse_i64(tok[2], 1, 1 << 30, &w) || parse_i64(tok[1], 0, w - 1, &v)) return -1;
        r->rank = (int)v;
        r->world = (int)w;
        return 0;
    }
    static const char *const single[] = {"group", "pid", "host", "time", "reason",
                                         "request", "issued", "status", "culprit"};
    int known = 0;
    for (size_t i = 0; i < sizeof single / sizeof single[0]; i++) known |= !strcmp(k, single[i]);
    if (!known) return 0; /* a keyword of a later version */
    if (ntok != 2) return -1;
    if (!strcmp(k, "group")) return parse_name(tok[1], r->group, sizeof r->group);
    if (!strcmp(k, "host")) return parse_name(tok[1], r->host, sizeof r->host);
    if (!strcmp(k, "reason")) return parse_name(tok[1], r->reason, sizeof r->reason);
    if (!strcmp(k, "time")) return parse_time(tok[1], &r->time);
    if (!strcmp(k, "request")) return parse_u64(tok[1], &r->request);
    if (!strcmp(k, "issued")) return parse_u64(tok[1], &r->issued);
    if (!strcmp(k, "pid")) {
        if (parse_i64(tok[1], 0, INT32_MAX, &v)) return -1;
        r->pid = (long)v;
        return 0;
    }
    if (!strcmp(k, "status")) {
        if (parse_i64(tok[1], -1000, 1000, &v)) return -1;
        r->status = (int)v;
        return 0;
    }
    if (!strcmp(k, "culprit")) {
        if (parse_i64(tok[1], -1, 1 << 30, &v)) return -1;
        r->culprit = (int)v;
        return 0;
    }
    return -1;
}

spmd_status spmd__flight_parse(const char *text, size_t len, spmd__flight_record *r, char *err, size_t errlen) {
    memset(r, 0, sizeof *r);
    r->culprit = -1;
    snprintf(r->host, sizeof r->host, "-"); /* what the writer puts for an empty name */
    snprintf(r->reason, sizeof r->reason, "-");
    if (len > SPMD__FLIGHT_MAX_BYTES)
        return spmd__fail(err, errlen, SPMD_ERR_PROTOCOL, "flight record of %zu bytes is too large", len);
    char line[SPMD__ERRLEN + 64];
    int lineno = 0, cap = 0, ended = 0;
    size_t pos = 0;
    while (pos < len && !ended) {
        size_t eol = pos;
        while (eol < len && text[eol] != '\n') eol++;
        size_t n = eol - pos;
        lineno++;
        const char *why = NULL;
        if (n >= sizeof line) {
            why = "line too long";
            goto bad;
        }
        memcpy(line, text + pos, n);
        line[n] = 0;
        pos = eol + 1;
        if (memchr(line, 0, n)) {
            why = "NUL byte";
            goto bad;
        }
        /* the error text is everything after "error " */
        char rest[SPMD__ERRLEN];
        snprintf(rest, sizeof rest, "%s", n > 6 && !strncmp(line, "error ", 6) ? line + 6 : "");
        char *tok[MAX_TOKENS];
        int ntok = 0;
        for (char *s = line; *s && ntok < MAX_TOKENS;) {
            tok[ntok++] = s;
            char *sp = strchr(s, ' ');
            if (!sp) break;
            *sp = 0;
            s = sp + 1;
        }
        if (lineno == 1) {
            long long v;
            if (ntok != 2 || strcmp(tok[0], SPMD__FLIGHT_MAGIC) || parse_i64(tok[1], 1, 1000000, &v)) {
                why = "not a flight record";
                goto bad;
            }
            continue;
        }
        if (ntok == 0) continue;
        if (!strcmp(tok[0], "end")) {
            ended = 1;
        } else if (!strcmp(tok[0], "op")) {
            if (r->nops >= SPMD__FLIGHT_MAX_OPS) {
                why = "too many ops";
                goto bad;
            }
            if (r->nops == cap) {
                int ncap = cap ? cap * 2 : 64;
                spmd__flight_op *o = realloc(r->ops, (size_t)ncap * sizeof *o);
                if (!o) {
                    spmd__flight_free(r);
                    return spmd__fail(err, errlen, SPMD_ERR_NOMEM, "out of memory");
                }
                r->ops = o;
                cap = ncap;
            }
            spmd__flight_op *o = &r->ops[r->nops];
            memset(o, 0, sizeof *o);
            if (parse_op(tok, ntok, o)) {
                why = "bad op line";
                goto bad;
            }
            r->nops++;
        } else if (parse_header(r, tok, ntok, rest)) {
            why = "bad value";
            goto bad;
        }
        continue;
    bad:
        spmd__flight_free(r);
        return spmd__fail(err, errlen, SPMD_ERR_PROTOCOL, "flight record line %d: %s", lineno, why);
    }
    if (!ended) {
        spmd__flight_free(r);
        return spmd__fail(err, errlen, SPMD_ERR_PROTOCOL, "flight record truncated (no 'end' line)");
    }
    if (!r->world || !r->group[0]) {
        spmd__flight_free(r);
        return spmd__fail(err, errlen, SPMD_ERR_PROTOCOL, "flight record without its group or rank");
    }
    return SPMD_OK;
}

void spmd__flight_free(spmd__flight_record *r) {
    if (!r) return;
    free(r->ops);
    r->ops = NULL;
    r->nops = 0;
}
