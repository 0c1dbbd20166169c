/* json.c — a small, strict, bounded JSON parser for untrusted headers
 * (RFC 8259 grammar, UTF-8 validated, no duplicate handling here).
 *
 * Memory is bounded up front: nodes are capped by max_nodes, nesting by
 * max_depth (the recursion depth), and all decoded strings live in one arena
 * of len + 1 bytes — a string literal of n source bytes ("..." included)
 * decodes to at most n - 2 bytes plus its terminator. */
#include <stdlib.h>
#include <string.h>
#include "data_internal.h"

typedef struct {
    const unsigned char *s;
    size_t len, pos;
    spmd__json *j;
    char *arena;
    size_t arena_used;
    size_t max_str;
    char *err;
    size_t errlen;
} parser;

static spmd_status perr(parser *p, const char *why) {
    return spmd__fail(p->err, p->errlen, SPMD_ERR_FORMAT, "offset %zu: %s", p->pos, why);
}

static void skip_ws(parser *p) {
    while (p->pos < p->len) {
        unsigned char c = p->s[p->pos];
        if (c != ' ' && c != '\t' && c != '\n' && c != '\r') break;
        p->pos++;
    }
}

static spmd_status new_node(parser *p, spmd__jtype t, int32_t *idx) {
    spmd__json *j = p->j;
    if (j->count >= j->max_nodes) return perr(p, "too many JSON values");
    if (j->count == j->cap) {
        size_t cap = j->cap ? j->cap * 2 : 64;
        if (cap > j->max_nodes) cap = j->max_nodes;
        spmd__jnode *n = realloc(j->nodes, cap * sizeof *n);
        if (!n) return spmd__fail(p->err, p->errlen, SPMD_ERR_NOMEM, "JSON: out of memory");
        j->nodes = n;
        j->cap = cap;
    }
    spmd__jnode *n = &j->nodes[j->count];
    memset(n, 0, sizeof *n);
    n->type = t;
    n->first_child = n->next = -1;
    n->offset = p->pos;
    *idx = (int32_t)j->count++;
    return SPMD_OK;
}

static int hexval(unsigned char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

static int read_u4(parser *p, uint32_t *v) {
    if (p->len - p->pos < 4) return 0;
    uint32_t x = 0;
    for (int i = 0; i < 4; i++) {
        int h = hexval(p->s[p->pos + i]);
        if (h < 0) return 0;
        x = x << 4 | (uint32_t)h;
    }
    p->pos += 4;
    *v = x;
    return 1;
}

/* Length of the valid UTF-8 sequence at p->pos (1..4), 0 if invalid. */
static size_t utf8_len(const unsigned char *s, size_t left) {
    unsigned char c = s[0];
    if (c < 0x80) return 1;
    size_t n;
    uint32_t cp;
    if (c >= 0xC2 && c <= 0xDF) n = 2, cp = c & 0x1F;
    else if (c >= 0xE0 && c <= 0xEF) n = 3, cp = c & 0x0F;
    else if (c >= 0xF0 && c <= 0xF4) n = 4, cp = c & 0x07;
    else return 0;
    if (left < n) return 0;
    for (size_t i = 1; i < n; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0;
        cp = cp << 6 | (s[i] & 0x3F);
    }
    if ((n == 3 && cp < 0x800) || (n == 4 && (cp < 0x10000 || cp > 0x10FFFF))) return 0;
    if (cp >= 0xD800 && cp <= 0xDFFF) return 0;
    return n;
}

static size_t put_utf8(char *o, uint32_t cp) {
    if (cp < 0x80) { o[0] = (char)cp; return 1; }
    if (cp < 0x800) { o[0] = (char)(0xC0 | cp >> 6); o[1] = (char)(0x80 | (cp & 0x3F)); return 2; }
    if (cp < 0x10000) {
        o[0] = (char)(0xE0 | cp >> 12); o[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (char)(0xF0 | cp >> 18); o[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (char)(0x80 | ((cp >> 6) & 0x3F)); o[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* At an opening quote: decode into the arena, return the copy and length. */
static spmd_status parse_string(parser *p, char **out, size_t *outlen) {
    p->pos++; /* the quote */
    char *dst = p->arena + p->arena_used;
    size_t n = 0;
    for (;;) {
        if (p->pos >= p->len) return perr(p, "unterminated string");
        unsigned char c = p->s[p->pos];
        if (c == '"') { p->pos++; break; }
        if (c < 0x20) return perr(p, "control character in string");
        if (n + 4 > p->max_str) return perr(p, "string too long");
        if (c == '\\') {
            if (p->pos + 1 >= p->len) return perr(p, "unterminated escape");
            unsigned char e = p->s[p->pos + 1];
            p->pos += 2;
            switch (e) {
            case '"': dst[n++] = '"'; break;
            case '\\': dst[n++] = '\\'; break;
            case '/': dst[n++] = '/'; break;
            case 'b': dst[n++] = '\b'; break;
            case 'f': dst[n++] = '\f'; break;
            case 'n': dst[n++] = '\n'; break;
            case 'r': dst[n++] = '\r'; break;
            case 't': dst[n++] = '\t'; break;
            case 'u': {
                uint32_t cp;
                if (!read_u4(p, &cp)) return perr(p, "bad \\u escape");
                if (cp >= 0xDC00 && cp <= 0xDFFF) return perr(p, "lone low surrogate");
                if (cp >= 0xD800 && cp <= 0xDBFF) {
                    uint32_t lo;
                    if (p->len - p->pos < 2 || p->s[p->pos] != '\\' || p->s[p->pos + 1] != 'u')
                        return perr(p, "high surrogate without a low one");
                    p->pos += 2;
                    if (!read_u4(p, &lo) || lo < 0xDC00 || lo > 0xDFFF)
                        return perr(p, "bad low surrogate");
                    cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                }
                if (cp == 0) return perr(p, "NUL character in string");
                n += put_utf8(dst + n, cp);
                break;
            }
            default: p->pos -= 1; return perr(p, "unknown escape");
            }
            continue;
        }
        size_t k = utf8_len(p->s + p->pos, p->len - p->pos);
        if (!k) return perr(p, "invalid UTF-8 in string");
        memcpy(dst + n, p->s + p->pos, k);
        n += k;
        p->pos += k;
    }
    dst[n] = '\0';
    p->arena_used += n + 1;
    *out = dst;
    *outlen = n;
    return SPMD_OK;
}

static int is_digit(unsigned char c) { return c >= '0' && c <= '9'; }

static spmd_status parse_number(parser *p, spmd__jnode *n) {
    size_t start = p->pos;
    int neg = 0, frac = 0;
    if (p->s[p->pos] == '-') { neg = 1; p->pos++; }
    if (p->pos >= p->len || !is_digit(p->s[p->pos])) return perr(p, "bad number");
    if (p->s[p->pos] == '0') {
        p->pos++;
    } else {
        while (p->pos < p->len && is_digit(p->s[p->pos])) p->pos++;
    }
    size_t int_end = p->pos;
    if (p->pos < p->len && p->s[p->pos] == '.') {
        frac = 1;
        p->pos++;
        if (p->pos >= p->len || !is_digit(p->s[p->pos])) return perr(p, "bad number fraction");
        while (p->pos < p->len && is_digit(p->s[p->pos])) p->pos++;
    }
    if (p->pos < p->len && (p->s[p->pos] == 'e' || p->s[p->pos] == 'E')) {
        frac = 1;
        p->pos++;
        if (p->pos < p->len && (p->s[p->pos] == '+' || p->s[p->pos] == '-')) p->pos++;
        if (p->pos >= p->len || !is_digit(p->s[p->pos])) return perr(p, "bad number exponent");
        while (p->pos < p->len && is_digit(p->s[p->pos])) p->pos++;
    }
    if (!neg && !frac) {
        uint64_t v = 0;
        int ok = 1;
        for (size_t i = start; i < int_end; i++) {
            unsigned d = p->s[i] - '0';
            if (v > (((uint64_t)1 << 63) - 1 - d) / 10) { ok = 0; break; }
            v = v * 10 + d;
        }
        n->num_is_uint = ok;
        n->u = ok ? v : 0;
    }
    return SPMD_OK;
}

static spmd_status parse_value(parser *p, int depth, int32_t *idx);

static spmd_status parse_container(parser *p, int depth, int is_obj, int32_t self) {
    p->pos++; /* '[' or '{' */
    int32_t last = -1, count = 0;
    skip_ws(p);
    if (p->pos < p->len && p->s[p->pos] == (is_obj ? '}' : ']')) {
        p->pos++;
        return SPMD_OK;
    }
    for (;;) {
        char *key = NULL;
        size_t keylen = 0;
        skip_ws(p);
        if (is_obj) {
            if (p->pos >= p->len || p->s[p->pos] != '"') return perr(p, "expected a string key");
            spmd_status st = parse_string(p, &key, &keylen);
            if (st) return st;
            skip_ws(p);
            if (p->pos >= p->len || p->s[p->pos] != ':') return perr(p, "expected ':'");
            p->pos++;
            skip_ws(p);
        }
        int32_t child;
        spmd_status st = parse_value(p, depth + 1, &child);
        if (st) return st;
        spmd__jnode *nodes = p->j->nodes;
        nodes[child].key = key;
        if (last < 0) nodes[self].first_child = child;
        else nodes[last].next = child;
        last = child;
        count++;
        skip_ws(p);
        if (p->pos >= p->len) return perr(p, is_obj ? "unterminated object" : "unterminated array");
        unsigned char c = p->s[p->pos++];
        if (c == ',') continue;
        if (c == (is_obj ? '}' : ']')) break;
        p->pos--;
        return perr(p, is_obj ? "expected ',' or '}'" : "expected ',' or ']'");
    }
    p->j->nodes[self].nchildren = count;
    return SPMD_OK;
}

static int match_word(parser *p, const char *w) {
    size_t n = strlen(w);
    if (p->len - p->pos < n || memcmp(p->s + p->pos, w, n) != 0) return 0;
    p->pos += n;
    return 1;
}

static spmd_status parse_value(parser *p, int depth, int32_t *idx) {
    if (depth > p->j->max_depth) return perr(p, "nesting too deep");
    skip_ws(p);
    if (p->pos >= p->len) return perr(p, "expected a value");
    unsigned char c = p->s[p->pos];
    spmd_status st;
    switch (c) {
    case '{':
    case '[':
        st = new_node(p, c == '{' ? SPMD__J_OBJ : SPMD__J_ARR, idx);
        if (st) return st;
        return parse_container(p, depth, c == '{', *idx);
    case '"': {
        st = new_node(p, SPMD__J_STR, idx);
        if (st) return st;
        char *s;
        size_t n;
        st = parse_string(p, &s, &n);
        if (st) return st;
        p->j->nodes[*idx].str = s;
        p->j->nodes[*idx].len = n;
        return SPMD_OK;
    }
    case 't':
    case 'f':
    case 'n':
        st = new_node(p, c == 'n' ? SPMD__J_NULL : SPMD__J_BOOL, idx);
        if (st) return st;
        if (match_word(p, "true")) p->j->nodes[*idx].b = 1;
        else if (!match_word(p, "false") && !match_word(p, "null")) return perr(p, "bad literal");
        return SPMD_OK;
    default:
        if (c == '-' || is_digit(c)) {
            st = new_node(p, SPMD__J_NUM, idx);
            if (st) return st;
            return parse_number(p, &p->j->nodes[*idx]);
        }
        return perr(p, "unexpected character");
    }
}

spmd_status spmd__json_parse(const char *text, size_t len, size_t max_nodes, int max_depth,
                             size_t max_str, spmd__json *out, char *err, size_t errlen) {
    if (!out || (!text && len)) return spmd__fail(err, errlen, SPMD_ERR_INVALID, "JSON: bad args");
    spmd__json j = {NULL, 0, 0, max_nodes ? max_nodes : 1, max_depth, NULL};
    parser p = {(const unsigned char *)(text ? text : ""), len, 0, &j, NULL, 0, max_str,
                err, errlen};
    p.arena = malloc(len + 1);
    if (!p.arena) return spmd__fail(err, errlen, SPMD_ERR_NOMEM, "JSON: out of memory");
    int32_t root;
    spmd_status st = parse_value(&p, 0, &root);
    if (!st) {
        skip_ws(&p);
        if (p.pos != p.len) st = perr(&p, "unexpected data after the JSON value");
    }
    if (st) {
        free(j.nodes);
        free(p.arena);
        return st;
    }
    *out = j;
    out->arena = p.arena;
    return SPMD_OK;
}

void spmd__json_free(spmd__json *j) {
    if (!j) return;
    free(j->nodes);
    free(j->arena);
    memset(j, 0, sizeof *j);
}

int spmd__utf8_valid(const char *s) {
    const unsigned char *u = (const unsigned char *)s;
    size_t left = strlen(s);
    while (left) {
        size_t k = utf8_len(u, left);
        if (!k) return 0;
        u += k;
        left -= k;
    }
    return 1;
}

size_t spmd__json_quote(const char *s, char *buf, size_t cap) {
    static const char hex[] = "0123456789abcdef";
    size_t n = 0;
#define PUT(ch) do { if (buf && n + 1 < cap) buf[n] = (ch); n++; } while (0)
    PUT('"');
    for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
        switch (*c) {
        case '"': PUT('\\'); PUT('"'); break;
        case '\\': PUT('\\'); PUT('\\'); break;
        case '\n': PUT('\\'); PUT('n'); break;
        case '\r': PUT('\\'); PUT('r'); break;
        case '\t': PUT('\\'); PUT('t'); break;
        default:
            if (*c < 0x20) {
                PUT('\\'); PUT('u'); PUT('0'); PUT('0'); PUT(hex[*c >> 4]); PUT(hex[*c & 15]);
            } else {
                PUT((char)*c);
            }
        }
    }
    PUT('"');
#undef PUT
    if (buf && cap) buf[n < cap ? n : cap - 1] = '\0';
    return n;
}
