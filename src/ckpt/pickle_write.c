/* pickle_write.c — protocol-2 pickle opcodes appended to a growing buffer
 * (what Python's pickle.load and torch.load(weights_only=True) read). */
#include <stdlib.h>
#include <string.h>
#include "ckpt/pickle.h"

static void put(spmd__pw *w, const void *p, size_t n) {
    if (w->failed) return;
    if (w->cap - w->len < n) {
        size_t nc = w->cap ? w->cap : 256;
        while (nc - w->len < n) nc *= 2;
        uint8_t *nb = realloc(w->buf, nc);
        if (!nb) {
            w->failed = 1;
            return;
        }
        w->buf = nb;
        w->cap = nc;
    }
    memcpy(w->buf + w->len, p, n);
    w->len += n;
}

void spmd__pw_op(spmd__pw *w, uint8_t op) { put(w, &op, 1); }
void spmd__pw_raw(spmd__pw *w, const void *p, size_t n) { put(w, p, n); }

static void put_le(spmd__pw *w, uint64_t v, int n) {
    uint8_t b[8];
    for (int i = 0; i < n; i++) b[i] = (uint8_t)(v >> (8 * i));
    put(w, b, (size_t)n);
}

void spmd__pw_proto(spmd__pw *w) {
    spmd__pw_op(w, 0x80);
    spmd__pw_op(w, 2);
}
void spmd__pw_stop(spmd__pw *w) { spmd__pw_op(w, '.'); }
void spmd__pw_none(spmd__pw *w) { spmd__pw_op(w, 'N'); }
void spmd__pw_bool(spmd__pw *w, int b) { spmd__pw_op(w, b ? 0x88 : 0x89); }
void spmd__pw_float(spmd__pw *w, double f) { /* BINFLOAT: the IEEE 754 double, big-endian */
    uint64_t u;
    uint8_t b[8];
    memcpy(&u, &f, sizeof u);
    for (int i = 0; i < 8; i++) b[i] = (uint8_t)(u >> (56 - 8 * i));
    spmd__pw_op(w, 'G');
    put(w, b, 8);
}

void spmd__pw_int(spmd__pw *w, int64_t v) {
    if (v >= 0 && v < 256) {
        spmd__pw_op(w, 'K');
        put_le(w, (uint64_t)v, 1);
    } else if (v >= 0 && v < 65536) {
        spmd__pw_op(w, 'M');
        put_le(w, (uint64_t)v, 2);
    } else if (v >= INT32_MIN && v <= INT32_MAX) {
        spmd__pw_op(w, 'J');
        put_le(w, (uint64_t)(uint32_t)(int32_t)v, 4);
    } else { /* LONG1 with 8 two's-complement bytes */
        spmd__pw_op(w, 0x8a);
        spmd__pw_op(w, 8);
        put_le(w, (uint64_t)v, 8);
    }
}

void spmd__pw_str(spmd__pw *w, const char *s) {
    size_t n = strlen(s);
    spmd__pw_op(w, 'X');
    put_le(w, n, 4);
    put(w, s, n);
}

void spmd__pw_bytes(spmd__pw *w, const void *p, size_t n) {
    spmd__pw_op(w, 'B');
    put_le(w, n, 4);
    put(w, p, n);
}

void spmd__pw_global(spmd__pw *w, const char *module, const char *name) {
    spmd__pw_op(w, 'c');
    put(w, module, strlen(module));
    spmd__pw_op(w, '\n');
    put(w, name, strlen(name));
    spmd__pw_op(w, '\n');
}

void spmd__pw_size(spmd__pw *w, const int64_t *v, int n) {
    spmd__pw_global(w, "torch", "Size");
    spmd__pw_op(w, '(');
    spmd__pw_op(w, '(');
    for (int i = 0; i < n; i++) spmd__pw_int(w, v[i]);
    spmd__pw_op(w, 't');
    spmd__pw_op(w, 't');
    spmd__pw_op(w, 'R');
}

void spmd__pw_newobj(spmd__pw *w, const char *module, const char *name) {
    spmd__pw_global(w, module, name);
    spmd__pw_op(w, ')');
    spmd__pw_op(w, 0x81);
}
