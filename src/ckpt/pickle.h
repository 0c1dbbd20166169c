/* src/ckpt/pickle.h — a restricted pickle codec (internal to src/ckpt).
 *
 * The reader is a pickle machine that executes nothing: it accepts only the
 * opcodes Python emits for plain data (ints, floats, strings, bytes, tuples,
 * lists, dicts, memo) plus GLOBAL/STACK_GLOBAL, REDUCE, NEWOBJ, BUILD and
 * (for torch.save payloads) BINPERSID, and a global is accepted only when it
 * is on an allow-list.  REDUCE and NEWOBJ never call anything: they build a
 * node that records the allowed global and its arguments, BUILD records the
 * state.  Everything else is rejected with an error naming the opcode or the
 * global and the byte offset.  Memory, nesting, memo size and counts are
 * bounded.
 *
 * The writer appends protocol-2 opcodes to a growing buffer. */
#ifndef SPMD_CKPT_PICKLE_H
#define SPMD_CKPT_PICKLE_H

#include <stddef.h>
#include <stdint.h>
#include "spmd/status.h"

typedef enum {
    SPMD__PV_NONE,
    SPMD__PV_BOOL,
    SPMD__PV_INT,
    SPMD__PV_FLOAT,
    SPMD__PV_STR,    /* UTF-8, NUL-terminated copy (embedded NUL rejected) */
    SPMD__PV_BYTES,
    SPMD__PV_TUPLE,
    SPMD__PV_LIST,
    SPMD__PV_DICT,   /* items: key, value, key, value ... */
    SPMD__PV_GLOBAL, /* an allowed global used as a value (torch.float32) */
    SPMD__PV_OBJ,    /* REDUCE/NEWOBJ of an allowed global: cls, args, state */
    SPMD__PV_PERSID, /* BINPERSID: args = the persistent id */
    SPMD__PV_MARK    /* internal: a MARK on the stack */
} spmd__pv_type;

/* What an allowed global may be used for. */
typedef enum {
    SPMD__G_VALUE = 1,  /* pushed as a value only (dtypes, layouts, storage types) */
    SPMD__G_REDUCE = 2, /* callable by REDUCE (torch.Size, OrderedDict, enums) */
    SPMD__G_CLASS = 4   /* NEWOBJ + BUILD (DCP's dataclasses) */
} spmd__gkind;

typedef struct {
    const char *module, *name;
    int kinds; /* spmd__gkind bits */
} spmd__global;

typedef struct spmd__pv spmd__pv;
struct spmd__pv {
    spmd__pv_type type;
    int64_t i;    /* BOOL, INT */
    double f;     /* FLOAT */
    char *s;      /* STR, BYTES */
    size_t len;   /* STR, BYTES */
    spmd__pv **items; /* TUPLE, LIST, DICT */
    size_t n, cap;
    const spmd__global *g; /* GLOBAL, OBJ */
    spmd__pv *args;  /* OBJ: the argument tuple; PERSID: the id */
    spmd__pv *state; /* OBJ: BUILD's state (NULL when none) */
};

typedef struct {
    const spmd__global *allow; /* terminated by a {NULL} entry */
    int allow_persid;          /* accept BINPERSID (torch.save's data.pkl) */
    size_t max_values;         /* values created, all kinds */
    size_t max_memo;           /* highest memo index + 1 */
    size_t max_stack;          /* stack depth (marks included) */
    int str_nul_ok;            /* strings may hold NUL (plain data, where no name is compared:
                                * protocol 2 spells bytes as latin-1 text) */
} spmd__pickle_limits;

typedef struct spmd__pickle spmd__pickle; /* owns every value it made */

/* Run buf[0..len) up to STOP.  On success *out owns the values and *root is
 * the result; free with spmd__pickle_free.  Errors: SPMD_ERR_FORMAT naming
 * the opcode or global and the offset (prefixed with what), SPMD_ERR_NOMEM. */
spmd_status spmd__pickle_load(const void *buf, size_t len, const spmd__pickle_limits *lim,
                              const char *what, spmd__pickle **out, spmd__pv **root, char *err,
                              size_t errlen);
void spmd__pickle_free(spmd__pickle *p);

/* Reading helpers for a loaded tree. */
int spmd__pv_is_global(const spmd__pv *v, const char *module, const char *name);
int spmd__pv_is_obj(const spmd__pv *v, const char *name); /* class name, any allowed module */
/* The value stored under the string key in a DICT (NULL when absent). */
const spmd__pv *spmd__pv_dict_get(const spmd__pv *d, const char *key);

/* The allow-list of plain data: no global but the two protocol 2 spells
 * bytes with (below). */
extern const spmd__global spmd__plain_data_allow[];
/* v is protocol 2's pickle of a bytes object: 1 and a malloc'd copy in
 * out and len; 0: v is something else; -1: out of memory. */
int spmd__pv_protocol2_bytes(const spmd__pv *v, char **out, size_t *len);

/* ---- writer -------------------------------------------------------------- */
typedef struct spmd__pw {
    uint8_t *buf;
    size_t len, cap;
    int failed; /* an allocation failed: the buffer is incomplete */
} spmd__pw;

void spmd__pw_proto(spmd__pw *w); /* PROTO 2 */
void spmd__pw_stop(spmd__pw *w);
void spmd__pw_none(spmd__pw *w);
void spmd__pw_bool(spmd__pw *w, int b);
void spmd__pw_int(spmd__pw *w, int64_t v);
void spmd__pw_float(spmd__pw *w, double f);
void spmd__pw_str(spmd__pw *w, const char *s);
void spmd__pw_bytes(spmd__pw *w, const void *p, size_t n);
void spmd__pw_global(spmd__pw *w, const char *module, const char *name);
void spmd__pw_op(spmd__pw *w, uint8_t op); /* a bare opcode (MARK, TUPLE, ...) */
void spmd__pw_raw(spmd__pw *w, const void *p, size_t n); /* bytes as they are */
/* torch.Size((v0, v1, ...)) */
void spmd__pw_size(spmd__pw *w, const int64_t *v, int n);
/* An object of a dataclass: NEWOBJ of module.name with no arguments; the
 * caller then writes the state and calls spmd__pw_op(w, 'b') (BUILD). */
void spmd__pw_newobj(spmd__pw *w, const char *module, const char *name);

#endif
