/* src/data/data_internal.h — what the files of src/data share: a bounded
 * JSON parser (for safetensors headers), the safetensors dtype table and the
 * random generator behind the sampler. */
#ifndef SPMD_DATA_INTERNAL_H
#define SPMD_DATA_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include "common/common.h"
#include "common/xoshiro.h"
#include "spmd/data.h"

/* ---- random numbers (xoshiro256**, seeded through splitmix64) ----------- */
typedef struct {
    uint64_t s[4];
} spmd__rng;

void spmd__rng_seed(spmd__rng *r, uint64_t seed);
uint64_t spmd__rng_next(spmd__rng *r);
/* Uniform in [0, bound) without modulo bias (Lemire); bound >= 1. */
uint64_t spmd__rng_below(spmd__rng *r, uint64_t bound);

/* ---- JSON ---------------------------------------------------------------- */
/* A parsed JSON document as a flat array of nodes.  Strings are decoded
 * (escapes resolved, UTF-8 validated) into NUL-terminated copies; an embedded
 * NUL ("\u0000") is rejected so names stay C strings. */
typedef enum { SPMD__J_NULL, SPMD__J_BOOL, SPMD__J_NUM, SPMD__J_STR, SPMD__J_ARR, SPMD__J_OBJ } spmd__jtype;

typedef struct {
    spmd__jtype type;
    /* STR: the decoded text.  OBJ members: key is the decoded key. */
    char *str;
    size_t len;
    char *key;
    /* NUM: value when it is an integer in [0, 2^63) (num_is_uint), else the
     * raw text is kept in str for messages. */
    int num_is_uint;
    uint64_t u;
    int b;
    /* ARR / OBJ: children are nodes first_child, next... (index, -1 = none). */
    int32_t first_child;
    int32_t next;
    int32_t nchildren;
    size_t offset; /* byte offset of the value in the parsed text */
} spmd__jnode;

typedef struct {
    spmd__jnode *nodes;
    size_t count, cap;
    size_t max_nodes;
    int max_depth;
    char *arena; /* every decoded string, one allocation */
} spmd__json;

/* Parse text[0..len) (the whole of it must be one value, surrounding
 * whitespace allowed).  Bounded: at most max_nodes values, max_depth nesting,
 * strings at most max_str bytes.  On error: SPMD_ERR_FORMAT with "offset N:
 * why" in err, nothing to free.  On success free with spmd__json_free. */
spmd_status spmd__json_parse(const char *text, size_t len, size_t max_nodes, int max_depth,
                             size_t max_str, spmd__json *out, char *err, size_t errlen);
void spmd__json_free(spmd__json *j);
/* 1 if the NUL-terminated s is valid UTF-8 (no overlongs, no surrogates). */
int spmd__utf8_valid(const char *s);
/* Append s as a JSON string literal (with quotes) to buf; returns the length
 * it needs (like snprintf) so callers can size first with buf NULL. */
size_t spmd__json_quote(const char *s, char *buf, size_t cap);

/* ---- safetensors dtypes ---------------------------------------------------- */
typedef struct {
    const char *name;  /* "F32" */
    size_t size;       /* bytes per element */
    spmd_dtype dtype;  /* SPMD_DTYPE_COUNT when spmd has no such dtype */
} spmd__st_dtype;

/* NULL when the name is not a safetensors dtype. */
const spmd__st_dtype *spmd__st_dtype_by_name(const char *name);
/* The entry of an spmd_dtype; NULL if out of range. */
const spmd__st_dtype *spmd__st_dtype_of(spmd_dtype dt);

/* The mkstemp template of spmd_ckpt_save's temporary for path
 * ("<dir>/.<base>.tmp-<host>-<pid>-XXXXXX", ckpt_stale.c); -1 if too long. */
int spmd__ckpt_tmp_template(const char *path, char *out, size_t outlen);

#endif
