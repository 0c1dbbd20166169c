/* src/common/dtype.c — names, sizes and parsing of dtypes and reduction ops
 * (the spmd_dtype_* / spmd_op_* functions of spmd/group.h). */
#include <strings.h>
#include "spmd/group.h"

static const struct {
    const char *name;    /* canonical, as torch spells it */
    size_t size;
    const char *alias[2];
} dtypes[SPMD_DTYPE_COUNT] = {
    [SPMD_F32] = {"float32", 4, {"f32", "float"}},
    [SPMD_F64] = {"float64", 8, {"f64", "double"}},
    [SPMD_F16] = {"float16", 2, {"f16", "half"}},
    [SPMD_BF16] = {"bfloat16", 2, {"bf16", NULL}},
    [SPMD_I8] = {"int8", 1, {"i8", NULL}},
    [SPMD_U8] = {"uint8", 1, {"u8", NULL}},
    [SPMD_I32] = {"int32", 4, {"i32", "int"}},
    [SPMD_I64] = {"int64", 8, {"i64", "long"}},
};

static const struct {
    const char *name;
    const char *alias;
} ops[SPMD_OP_COUNT] = {
    [SPMD_SUM] = {"sum", NULL},   [SPMD_AVG] = {"avg", NULL},   [SPMD_PROD] = {"prod", "product"},
    [SPMD_MIN] = {"min", NULL},   [SPMD_MAX] = {"max", NULL},   [SPMD_BAND] = {"band", NULL},
    [SPMD_BOR] = {"bor", NULL},   [SPMD_BXOR] = {"bxor", NULL},
};

size_t spmd_dtype_size(spmd_dtype dt) {
    return (unsigned)dt < SPMD_DTYPE_COUNT ? dtypes[dt].size : 0;
}

const char *spmd_dtype_name(spmd_dtype dt) {
    return (unsigned)dt < SPMD_DTYPE_COUNT ? dtypes[dt].name : "?";
}

const char *spmd_op_name(spmd_op op) {
    return (unsigned)op < SPMD_OP_COUNT ? ops[op].name : "?";
}

/* Names are matched without regard to case ("FLOAT32", "Sum"). */
static int same(const char *s, const char *name) {
    return name && strcasecmp(s, name) == 0;
}

spmd_status spmd_dtype_parse(const char *s, spmd_dtype *out) {
    if (!s || !out)
        return SPMD_ERR_INVALID;
    for (int i = 0; i < SPMD_DTYPE_COUNT; i++) {
        if (same(s, dtypes[i].name) || same(s, dtypes[i].alias[0]) ||
            same(s, dtypes[i].alias[1])) {
            *out = (spmd_dtype)i;
            return SPMD_OK;
        }
    }
    return SPMD_ERR_INVALID;
}

spmd_status spmd_op_parse(const char *s, spmd_op *out) {
    if (!s || !out)
        return SPMD_ERR_INVALID;
    for (int i = 0; i < SPMD_OP_COUNT; i++) {
        if (same(s, ops[i].name) || same(s, ops[i].alias)) {
            *out = (spmd_op)i;
            return SPMD_OK;
        }
    }
    return SPMD_ERR_INVALID;
}
