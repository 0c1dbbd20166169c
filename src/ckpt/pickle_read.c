/* pickle_read.c — the restricted pickle machine (see pickle.h): it builds a
 * value tree from the opcodes of plain data and records, never calls, the
 * allowed globals it meets. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "ckpt/pickle.h"
#include "common/common.h"

struct spmd__pickle {
    spmd__pv **all; /* every value made, for freeing */
    size_t nall, capall;
};

typedef struct {
    const uint8_t *b;
    size_t len, pos, op_at;
    const spmd__pickle_limits *lim;
    spmd__pickle *p;
    spmd__pv **stack;
    size_t sp, stack_cap;
    spmd__pv **memo;
    size_t memo_cap, memo_next;
    const char *what;
    char *err;
    size_t errlen;
} vm;

static spmd_status bad(vm *m, const char *fmt, const char *detail) {
    char why[256];
    snprintf(why, sizeof why, fmt, detail);
    return spmd__fail(m->err, m->errlen, SPMD_ERR_FORMAT, "%s: pickle offset %zu: %s", m->what,
                      m->op_at, why);
}

static spmd_status nomem(vm *m) {
    return spmd__fail(m->err, m->errlen, SPMD_ERR_NOMEM, "%s: out of memory at pickle offset %zu",
                      m->what, m->op_at);
}

static spmd__pv *mk(vm *m, spmd__pv_type t) {
    spmd__pickle *p = m->p;
    if (p->nall >= m->lim->max_values) return NULL;
    if (p->nall == p->capall) {
        size_t nc = p->capall ? p->capall * 2 : 64;
        spmd__pv **na = realloc(p->all, nc * sizeof *na);
        if (!na) return NULL;
        p->all = na;
        p->capall = nc;
    }
    spmd__pv *v = calloc(1, sizeof *v);
    if (!v) return NULL;
    v->type = t;
    p->all[p->nall++] = v;
    return v;
}

static spmd_status mkfail(vm *m) {
    if (m->p->nall >= m->lim->max_values) return bad(m, "more than the limit of values%s", "");
    return nomem(m);
}

static spmd_status push(vm *m, spmd__pv *v) {
    if (m->sp >= m->lim->max_stack) return bad(m, "stack deeper than the limit%s", "");
    if (m->sp == m->stack_cap) {
        size_t nc = m->stack_cap ? m->stack_cap * 2 : 32;
        spmd__pv **ns = realloc(m->stack, nc * sizeof *ns);
        if (!ns) return nomem(m);
        m->stack = ns;
        m->stack_cap = nc;
    }
    m->stack[m->sp++] = v;
    return SPMD_OK;
}

static spmd_status append_item(vm *m, spmd__pv *c, spmd__pv *v) {
    if (c->n == c->cap) {
        size_t nc = c->cap ? c->cap * 2 : 4;
        spmd__pv **ni = realloc(c->items, nc * sizeof *ni);
        if (!ni) return nomem(m);
        c->items = ni;
        c->cap = nc;
    }
    c->items[c->n++] = v;
    return SPMD_OK;
}

/* Index of the topmost MARK, or SIZE_MAX. */
static size_t top_mark(vm *m) {
    for (size_t i = m->sp; i > 0; i--)
        if (m->stack[i - 1]->type == SPMD__PV_MARK) return i - 1;
    return SIZE_MAX;
}

static int need(vm *m, size_t n) { return m->len - m->pos >= n; }

static uint64_t le(const uint8_t *p, int n) {
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

static spmd_status take(vm *m, int n, uint64_t *v) {
    if (!need(m, (size_t)n)) return bad(m, "truncated argument%s", "");
    *v = le(m->b + m->pos, n);
    m->pos += (size_t)n;
    return SPMD_OK;
}

static int utf8_ok(const uint8_t *s, size_t n, int nul_ok) {
    size_t i = 0;
    while (i < n) {
        uint8_t c = s[i];
        size_t k;
        uint32_t cp;
        if (c == 0 && !nul_ok) return 0;
        if (c < 0x80) { i++; continue; }
        if ((c & 0xe0) == 0xc0) k = 1, cp = c & 0x1f;
        else if ((c & 0xf0) == 0xe0) k = 2, cp = c & 0x0f;
        else if ((c & 0xf8) == 0xf0) k = 3, cp = c & 0x07;
        else return 0;
        if (n - i <= k) return 0;
        for (size_t j = 1; j <= k; j++) {
            if ((s[i + j] & 0xc0) != 0x80) return 0;
            cp = cp << 6 | (s[i + j] & 0x3f);
        }
        if ((k == 1 && cp < 0x80) || (k == 2 && cp < 0x800) || (k == 3 && cp < 0x10000) ||
            cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
            return 0;
        i += k + 1;
    }
    return 1;
}

/* A string or bytes value of n bytes read from the input. */
static spmd_status push_text(vm *m, uint64_t n, int is_str) {
    if (n > m->len - m->pos) return bad(m, "string or bytes longer than the rest of the input%s", "");
    const uint8_t *s = m->b + m->pos;
    if (is_str && !utf8_ok(s, (size_t)n, m->lim->str_nul_ok))
        return bad(m, m->lim->str_nul_ok ? "string is not UTF-8%s" : "string is not UTF-8 without NUL%s", "");
    spmd__pv *v = mk(m, is_str ? SPMD__PV_STR : SPMD__PV_BYTES);
    if (!v) return mkfail(m);
    v->s = malloc((size_t)n + 1);
    if (!v->s) return nomem(m);
    memcpy(v->s, s, (size_t)n);
    v->s[n] = 0;
    v->len = (size_t)n;
    m->pos += (size_t)n;
    return push(m, v);
}

static spmd_status push_int(vm *m, spmd__pv_type t, int64_t i) {
    spmd__pv *v = mk(m, t);
    if (!v) return mkfail(m);
    v->i = i;
    return push(m, v);
}

/* Pop items above the topmost mark (and the mark) into a new container. */
static spmd_status collect(vm *m, spmd__pv_type t, spmd__pv **out) {
    size_t mk_at = top_mark(m);
    if (mk_at == SIZE_MAX) return bad(m, "no MARK on the stack%s", "");
    spmd__pv *c = mk(m, t);
    if (!c) return mkfail(m);
    for (size_t i = mk_at + 1; i < m->sp; i++)
        if (append_item(m, c, m->stack[i])) return nomem(m);
    m->sp = mk_at;
    *out = c;
    return SPMD_OK;
}

static spmd_status pop(vm *m, spmd__pv **v, const char *op) {
    if (m->sp == 0 || m->stack[m->sp - 1]->type == SPMD__PV_MARK)
        return bad(m, "%s with too few values on the stack", op);
    *v = m->stack[--m->sp];
    return SPMD_OK;
}

static const spmd__global *find_global(vm *m, const char *module, const char *name) {
    for (const spmd__global *g = m->lim->allow; g && g->module; g++)
        if (!strcmp(g->module, module) && !strcmp(g->name, name)) return g;
    return NULL;
}

static spmd_status push_global(vm *m, const char *module, const char *name) {
    const spmd__global *g = find_global(m, module, name);
    if (!g) {
        char q[300];
        snprintf(q, sizeof q, "%.140s.%.140s", module, name);
        return bad(m, "global %s is not on the allow-list", q);
    }
    spmd__pv *v = mk(m, SPMD__PV_GLOBAL);
    if (!v) return mkfail(m);
    v->g = g;
    return push(m, v);
}

/* GLOBAL (protocol 0-2): "module\nname\n" in the input. */
static spmd_status op_global(vm *m) {
    char part[2][128];
    for (int k = 0; k < 2; k++) {
        size_t i = 0;
        for (;;) {
            if (!need(m, 1)) return bad(m, "truncated GLOBAL%s", "");
            uint8_t c = m->b[m->pos++];
            if (c == '\n') break;
            if (c < 0x20 || c > 0x7e || i + 1 >= sizeof part[k]) return bad(m, "malformed GLOBAL name%s", "");
            part[k][i++] = (char)c;
        }
        part[k][i] = 0;
    }
    return push_global(m, part[0], part[1]);
}

static spmd_status op_stack_global(vm *m) {
    spmd__pv *name = NULL, *module = NULL;
    spmd_status st = pop(m, &name, "STACK_GLOBAL");
    if (!st) st = pop(m, &module, "STACK_GLOBAL");
    if (st) return st;
    if (name->type != SPMD__PV_STR || module->type != SPMD__PV_STR)
        return bad(m, "STACK_GLOBAL of values that are not strings%s", "");
    return push_global(m, module->s, name->s);
}

static spmd_status op_call(vm *m, int newobj) {
    const char *op = newobj ? "NEWOBJ" : "REDUCE";
    spmd__pv *args = NULL, *cls = NULL;
    spmd_status st = pop(m, &args, op);
    if (!st) st = pop(m, &cls, op);
    if (st) return st;
    if (cls->type != SPMD__PV_GLOBAL) return bad(m, "%s of a value that is not a global", op);
    int kind = newobj ? SPMD__G_CLASS : SPMD__G_REDUCE;
    if (!(cls->g->kinds & kind)) {
        char q[300];
        snprintf(q, sizeof q, "%s of %.140s.%.140s", op, cls->g->module, cls->g->name);
        return bad(m, "%s is not allowed", q);
    }
    if (args->type != SPMD__PV_TUPLE) return bad(m, "%s arguments are not a tuple", op);
    spmd__pv *o = mk(m, SPMD__PV_OBJ);
    if (!o) return mkfail(m);
    o->g = cls->g;
    o->args = args;
    return push(m, o);
}

static spmd_status op_build(vm *m) {
    spmd__pv *state = NULL; /* set by pop unless it fails (gcc -O3 cannot tell) */
    spmd_status st = pop(m, &state, "BUILD");
    if (st) return st;
    if (m->sp == 0 || m->stack[m->sp - 1]->type != SPMD__PV_OBJ ||
        !(m->stack[m->sp - 1]->g->kinds & SPMD__G_CLASS))
        return bad(m, "BUILD on a value that is not an allowed class's object%s", "");
    spmd__pv *o = m->stack[m->sp - 1];
    if (o->state) return bad(m, "BUILD twice on one object%s", "");
    o->state = state;
    return SPMD_OK;
}

static spmd_status memo_put(vm *m, uint64_t idx) {
    if (m->sp == 0 || m->stack[m->sp - 1]->type == SPMD__PV_MARK) return bad(m, "memo store of an empty stack%s", "");
    /* Python numbers memo entries in order; a sparse index may not exceed the
     * values made so far, so the memo never outgrows what the input built. */
    if (idx >= m->lim->max_memo || idx > m->p->nall) return bad(m, "memo index beyond the limit%s", "");
    if (idx >= m->memo_cap) {
        size_t nc = m->memo_cap ? m->memo_cap : 64;
        while (nc <= idx) nc *= 2;
        spmd__pv **nm = realloc(m->memo, nc * sizeof *nm);
        if (!nm) return nomem(m);
        memset(nm + m->memo_cap, 0, (nc - m->memo_cap) * sizeof *nm);
        m->memo = nm;
        m->memo_cap = nc;
    }
    m->memo[idx] = m->stack[m->sp - 1];
    return SPMD_OK;
}

static spmd_status memo_get(vm *m, uint64_t idx) {
    if (idx >= m->memo_cap || !m->memo[idx]) return bad(m, "memo get of an unset index%s", "");
    return push(m, m->memo[idx]);
}

static spmd_status set_items(vm *m, size_t from) {
    spmd__pv *d = m->stack[from - 2]; /* below the MARK */
    if (d->type != SPMD__PV_DICT) return bad(m, "SETITEM(S) on a value that is not a dict%s", "");
    if ((m->sp - from) % 2) return bad(m, "SETITEMS with an odd number of values%s", "");
    for (size_t i = from; i < m->sp; i++)
        if (append_item(m, d, m->stack[i])) return nomem(m);
    return SPMD_OK;
}

static spmd_status append_items(vm *m, size_t from) {
    spmd__pv *l = m->stack[from - 2]; /* below the MARK */
    if (l->type != SPMD__PV_LIST) return bad(m, "APPEND(S) on a value that is not a list%s", "");
    for (size_t i = from; i < m->sp; i++)
        if (append_item(m, l, m->stack[i])) return nomem(m);
    return SPMD_OK;
}

static const char *op_name(uint8_t op) {
    static const struct {
        uint8_t op;
        const char *name;
    } names[] = {{'(', "MARK"}, {'.', "STOP"}, {'0', "POP"}, {'1', "POP_MARK"}, {'2', "DUP"},
                 {'F', "FLOAT"}, {'I', "INT"}, {'L', "LONG"}, {'P', "PERSID"}, {'S', "STRING"},
                 {'T', "BINSTRING"}, {'U', "SHORT_BINSTRING"}, {'V', "UNICODE"}, {'c', "GLOBAL"},
                 {'g', "GET"}, {'i', "INST"}, {'o', "OBJ"}, {'p', "PUT"}, {0x82, "EXT1"},
                 {0x83, "EXT2"}, {0x84, "EXT4"}, {0x8b, "LONG4"}, {0x8f, "EMPTY_SET"},
                 {0x90, "ADDITEMS"}, {0x91, "FROZENSET"}, {0x92, "NEWOBJ_EX"}, {0x96, "BYTEARRAY8"},
                 {0x97, "NEXT_BUFFER"}, {0x98, "READONLY_BUFFER"}, {'Q', "BINPERSID"}};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (names[i].op == op) return names[i].name;
    return NULL;
}

static spmd_status reject(vm *m, uint8_t op) {
    const char *n = op_name(op);
    char q[64];
    if (n) snprintf(q, sizeof q, "%s (0x%02x)", n, op);
    else snprintf(q, sizeof q, "0x%02x", op);
    return bad(m, "opcode %s is not allowed", q);
}

static spmd_status step(vm *m, uint8_t op, int *stop) {
    uint64_t u = 0;
    spmd__pv *v = NULL, *a = NULL, *b = NULL;
    spmd_status st;
    size_t mark;
    switch (op) {
    case 0x80: /* PROTO */
        if ((st = take(m, 1, &u))) return st;
        if (u < 2 || u > 5) return bad(m, "unsupported pickle protocol%s", "");
        return SPMD_OK;
    case 0x95: /* FRAME: a length hint, the opcodes follow inline */
        return take(m, 8, &u);
    case '.': *stop = 1; return SPMD_OK;
    case '(': v = mk(m, SPMD__PV_MARK); return v ? push(m, v) : mkfail(m);
    case '0': return pop(m, &v, "POP");
    case '1':
        if ((mark = top_mark(m)) == SIZE_MAX) return bad(m, "POP_MARK without MARK%s", "");
        m->sp = mark;
        return SPMD_OK;
    case 'N': return push_int(m, SPMD__PV_NONE, 0);
    case 0x88: return push_int(m, SPMD__PV_BOOL, 1);
    case 0x89: return push_int(m, SPMD__PV_BOOL, 0);
    case 'J':
        if ((st = take(m, 4, &u))) return st;
        return push_int(m, SPMD__PV_INT, (int32_t)(uint32_t)u);
    case 'K':
        if ((st = take(m, 1, &u))) return st;
        return push_int(m, SPMD__PV_INT, (int64_t)u);
    case 'M':
        if ((st = take(m, 2, &u))) return st;
        return push_int(m, SPMD__PV_INT, (int64_t)u);
    case 0x8a: /* LONG1: n little-endian two's-complement bytes, n <= 8 */
        if ((st = take(m, 1, &u))) return st;
        if (u > 8) return bad(m, "LONG1 integer wider than 64 bits%s", "");
        if (!need(m, (size_t)u)) return bad(m, "truncated LONG1%s", "");
        {
            uint64_t x = le(m->b + m->pos, (int)u);
            if (u > 0 && u < 8 && (m->b[m->pos + u - 1] & 0x80)) x |= ~0ull << (8 * u);
            m->pos += (size_t)u;
            return push_int(m, SPMD__PV_INT, (int64_t)x);
        }
    case 'G': /* BINFLOAT: big-endian double */
        if (!need(m, 8)) return bad(m, "truncated BINFLOAT%s", "");
        {
            uint64_t x = 0;
            for (int i = 0; i < 8; i++) x = x << 8 | m->b[m->pos + (size_t)i];
            m->pos += 8;
            if (!(v = mk(m, SPMD__PV_FLOAT))) return mkfail(m);
            memcpy(&v->f, &x, sizeof x);
            return push(m, v);
        }
    case 0x8c: if ((st = take(m, 1, &u))) return st; return push_text(m, u, 1);
    case 'X': if ((st = take(m, 4, &u))) return st; return push_text(m, u, 1);
    case 0x8d: if ((st = take(m, 8, &u))) return st; return push_text(m, u, 1);
    case 'C': if ((st = take(m, 1, &u))) return st; return push_text(m, u, 0);
    case 'B': if ((st = take(m, 4, &u))) return st; return push_text(m, u, 0);
    case 0x8e: if ((st = take(m, 8, &u))) return st; return push_text(m, u, 0);
    case '}': v = mk(m, SPMD__PV_DICT); return v ? push(m, v) : mkfail(m);
    case ']': v = mk(m, SPMD__PV_LIST); return v ? push(m, v) : mkfail(m);
    case ')': v = mk(m, SPMD__PV_TUPLE); return v ? push(m, v) : mkfail(m);
    case 't': if ((st = collect(m, SPMD__PV_TUPLE, &v))) return st; return push(m, v);
    case 'l': if ((st = collect(m, SPMD__PV_LIST, &v))) return st; return push(m, v);
    case 'd':
        if ((st = collect(m, SPMD__PV_DICT, &v))) return st;
        if (v->n % 2) return bad(m, "DICT with an odd number of values%s", "");
        return push(m, v);
    case 0x85: case 0x86: case 0x87: {
        size_t k = (size_t)(op - 0x84);
        if (m->sp < k) return bad(m, "TUPLEn with too few values on the stack%s", "");
        for (size_t i = m->sp - k; i < m->sp; i++)
            if (m->stack[i]->type == SPMD__PV_MARK) return bad(m, "TUPLEn over a MARK%s", "");
        if (!(v = mk(m, SPMD__PV_TUPLE))) return mkfail(m);
        for (size_t i = m->sp - k; i < m->sp; i++)
            if (append_item(m, v, m->stack[i])) return nomem(m);
        m->sp -= k;
        return push(m, v);
    }
    case 'a':
        if ((st = pop(m, &a, "APPEND"))) return st;
        if (m->sp == 0 || m->stack[m->sp - 1]->type != SPMD__PV_LIST) return bad(m, "APPEND on a value that is not a list%s", "");
        return append_item(m, m->stack[m->sp - 1], a) ? nomem(m) : SPMD_OK;
    case 'e': case 'u':
        if ((mark = top_mark(m)) == SIZE_MAX || mark == 0) return bad(m, "APPENDS/SETITEMS without a container and MARK%s", "");
        st = op == 'e' ? append_items(m, mark + 1) : set_items(m, mark + 1);
        if (st) return st;
        m->sp = mark;
        return SPMD_OK;
    case 's':
        if ((st = pop(m, &b, "SETITEM")) || (st = pop(m, &a, "SETITEM"))) return st;
        if (m->sp == 0 || m->stack[m->sp - 1]->type != SPMD__PV_DICT) return bad(m, "SETITEM on a value that is not a dict%s", "");
        if (append_item(m, m->stack[m->sp - 1], a) || append_item(m, m->stack[m->sp - 1], b)) return nomem(m);
        return SPMD_OK;
    case 0x94: /* MEMOIZE */
        if ((st = memo_put(m, m->memo_next))) return st;
        m->memo_next++;
        return SPMD_OK;
    case 'q': if ((st = take(m, 1, &u))) return st; return memo_put(m, u);
    case 'r': if ((st = take(m, 4, &u))) return st; return memo_put(m, u);
    case 'h': if ((st = take(m, 1, &u))) return st; return memo_get(m, u);
    case 'j': if ((st = take(m, 4, &u))) return st; return memo_get(m, u);
    case 'c': return op_global(m);
    case 0x93: return op_stack_global(m);
    case 'R': return op_call(m, 0);
    case 0x81: return op_call(m, 1);
    case 'b': return op_build(m);
    case 'Q':
        if (!m->lim->allow_persid) return reject(m, op);
        if ((st = pop(m, &a, "BINPERSID"))) return st;
        if (!(v = mk(m, SPMD__PV_PERSID))) return mkfail(m);
        v->args = a;
        return push(m, v);
    default: return reject(m, op);
    }
}

spmd_status spmd__pickle_load(const void *buf, size_t len, const spmd__pickle_limits *lim,
                              const char *what, spmd__pickle **out, spmd__pv **root, char *err,
                              size_t errlen) {
    if (!buf || !lim || !out || !root)
        return spmd__fail(err, errlen, SPMD_ERR_INVALID, "spmd__pickle_load: bad args");
    vm m = {.b = buf, .len = len, .lim = lim, .what = what ? what : "pickle", .err = err, .errlen = errlen};
    m.p = calloc(1, sizeof *m.p);
    if (!m.p) return nomem(&m);
    spmd_status st = SPMD_OK;
    int stop = 0;
    while (!stop) {
        m.op_at = m.pos;
        if (!need(&m, 1)) {
            st = bad(&m, "input ends before STOP%s", "");
            break;
        }
        if ((st = step(&m, m.b[m.pos++], &stop))) break;
    }
    if (!st && m.sp != 1) st = bad(&m, "STOP with a stack that does not hold exactly one value%s", "");
    if (!st && m.stack[0]->type == SPMD__PV_MARK) st = bad(&m, "STOP with a MARK as the result%s", "");
    if (!st && m.pos != len) st = bad(&m, "bytes after STOP%s", "");
    if (!st) *root = m.stack[0];
    free(m.stack);
    free(m.memo);
    if (st) {
        spmd__pickle_free(m.p);
        return st;
    }
    *out = m.p;
    return SPMD_OK;
}

void spmd__pickle_free(spmd__pickle *p) {
    if (!p) return;
    for (size_t i = 0; i < p->nall; i++) {
        free(p->all[i]->s);
        free(p->all[i]->items);
        free(p->all[i]);
    }
    free(p->all);
    free(p);
}

int spmd__pv_is_global(const spmd__pv *v, const char *module, const char *name) {
    return v && v->type == SPMD__PV_GLOBAL && (!module || !strcmp(v->g->module, module)) &&
           !strcmp(v->g->name, name);
}

int spmd__pv_is_obj(const spmd__pv *v, const char *name) {
    return v && v->type == SPMD__PV_OBJ && !strcmp(v->g->name, name);
}

const spmd__pv *spmd__pv_dict_get(const spmd__pv *d, const char *key) {
    if (!d || d->type != SPMD__PV_DICT) return NULL;
    for (size_t i = 0; i + 1 < d->n; i += 2)
        if (d->items[i]->type == SPMD__PV_STR && !strcmp(d->items[i]->s, key)) return d->items[i + 1];
    return NULL;
}

/* Protocol 2 has no bytes opcode: Python pickles b"..." as
 * _codecs.encode("<the bytes as latin-1 text>", "latin1"), and b"" as
 * __builtin__.bytes().  Both are only recognised here, never called. */
const spmd__global spmd__plain_data_allow[] = {
    {"_codecs", "encode", SPMD__G_REDUCE}, {"__builtin__", "bytes", SPMD__G_REDUCE}, {NULL, NULL, 0}};

int spmd__pv_protocol2_bytes(const spmd__pv *v, char **out, size_t *len) {
    if (!v || v->type != SPMD__PV_OBJ || v->state || !v->args || v->args->type != SPMD__PV_TUPLE) return 0;
    const spmd__pv *a = v->args;
    if (!strcmp(v->g->module, "__builtin__") && !strcmp(v->g->name, "bytes") && a->n == 0) {
        *len = 0;
        return (*out = malloc(1)) ? 1 : -1;
    }
    if (strcmp(v->g->module, "_codecs") || strcmp(v->g->name, "encode") || a->n != 2 ||
        a->items[0]->type != SPMD__PV_STR || a->items[1]->type != SPMD__PV_STR ||
        (strcmp(a->items[1]->s, "latin1") && strcmp(a->items[1]->s, "latin-1")))
        return 0;
    const uint8_t *s = (const uint8_t *)a->items[0]->s;
    size_t n = a->items[0]->len, k = 0;
    uint8_t *b = malloc(n ? n : 1);
    if (!b) return -1;
    for (size_t i = 0; i < n; i++) { /* UTF-8 of code points < 256: one byte, or C2/C3 and one more */
        if (s[i] < 0x80) b[k++] = s[i];
        else if ((s[i] == 0xC2 || s[i] == 0xC3) && i + 1 < n && (s[i + 1] & 0xC0) == 0x80)
            b[k++] = (uint8_t)((s[i] & 0x03) << 6 | (s[i + 1] & 0x3F)), i++;
        else {
            free(b);
            return 0; /* a code point past 255: not bytes */
        }
    }
    *out = (char *)b;
    *len = k;
    return 1;
}
