/* dtype/op names, sizes and parsing (src/common/dtype.c). */
#include "coll/reduce.h"
#include "harness.h"

int main(void) {
    static const struct { const char *s; spmd_dtype dt; size_t size; } dts[] = {
        {"float32", SPMD_F32, 4},  {"f32", SPMD_F32, 4},     {"float", SPMD_F32, 4},
        {"float64", SPMD_F64, 8},  {"f64", SPMD_F64, 8},     {"double", SPMD_F64, 8},
        {"float16", SPMD_F16, 2},  {"f16", SPMD_F16, 2},     {"half", SPMD_F16, 2},
        {"bfloat16", SPMD_BF16, 2}, {"bf16", SPMD_BF16, 2},  {"int8", SPMD_I8, 1},
        {"i8", SPMD_I8, 1},        {"uint8", SPMD_U8, 1},    {"u8", SPMD_U8, 1},
        {"int32", SPMD_I32, 4},    {"i32", SPMD_I32, 4},     {"int", SPMD_I32, 4},
        {"int64", SPMD_I64, 8},    {"i64", SPMD_I64, 8},     {"long", SPMD_I64, 8},
        {"FLOAT32", SPMD_F32, 4},  {"BF16", SPMD_BF16, 2},
    };
    for (size_t i = 0; i < sizeof dts / sizeof dts[0]; i++) {
        spmd_dtype dt = SPMD_DTYPE_COUNT;
        CHECK_MSG(spmd_dtype_parse(dts[i].s, &dt) == SPMD_OK && dt == dts[i].dt, "%s", dts[i].s);
        CHECK(spmd_dtype_size(dt) == dts[i].size);
    }
    static const struct { const char *s; spmd_op op; } ops[] = {
        {"sum", SPMD_SUM},   {"avg", SPMD_AVG}, {"prod", SPMD_PROD}, {"product", SPMD_PROD},
        {"min", SPMD_MIN},   {"max", SPMD_MAX}, {"band", SPMD_BAND}, {"bor", SPMD_BOR},
        {"bxor", SPMD_BXOR}, {"SUM", SPMD_SUM}, {"Max", SPMD_MAX},
    };
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) {
        spmd_op op = SPMD_OP_COUNT;
        CHECK_MSG(spmd_op_parse(ops[i].s, &op) == SPMD_OK && op == ops[i].op, "%s", ops[i].s);
    }
    /* every name parses back to itself; names are distinct */
    for (int i = 0; i < SPMD_DTYPE_COUNT; i++) {
        spmd_dtype dt;
        CHECK(spmd_dtype_parse(spmd_dtype_name((spmd_dtype)i), &dt) == SPMD_OK && dt == (spmd_dtype)i);
        CHECK(spmd_dtype_size((spmd_dtype)i) > 0);
    }
    for (int i = 0; i < SPMD_OP_COUNT; i++) {
        spmd_op op;
        CHECK(spmd_op_parse(spmd_op_name((spmd_op)i), &op) == SPMD_OK && op == (spmd_op)i);
    }
    CHECK(strcmp(spmd_dtype_name(SPMD_BF16), "bfloat16") == 0);
    CHECK(strcmp(spmd_op_name(SPMD_BXOR), "bxor") == 0);
    /* unknown: "?" / 0 / SPMD_ERR_INVALID, out untouched */
    CHECK(strcmp(spmd_dtype_name(SPMD_DTYPE_COUNT), "?") == 0);
    CHECK(strcmp(spmd_dtype_name((spmd_dtype)-1), "?") == 0);
    CHECK(strcmp(spmd_op_name(SPMD_OP_COUNT), "?") == 0);
    CHECK(spmd_dtype_size(SPMD_DTYPE_COUNT) == 0);
    spmd_dtype dt = SPMD_I8;
    spmd_op op = SPMD_MIN;
    static const char *const bad[] = {"", "float3", "float322", "f 32", "uint32", "?", "sum "};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CHECK_MSG(spmd_dtype_parse(bad[i], &dt) == SPMD_ERR_INVALID, "'%s'", bad[i]);
        CHECK_MSG(spmd_op_parse(bad[i], &op) == SPMD_ERR_INVALID, "'%s'", bad[i]);
    }
    CHECK(spmd_op_parse("mean", &op) == SPMD_ERR_INVALID);
    CHECK(dt == SPMD_I8 && op == SPMD_MIN);
    CHECK(spmd_dtype_parse(NULL, &dt) == SPMD_ERR_INVALID);
    CHECK(spmd_dtype_parse("f32", NULL) == SPMD_ERR_INVALID);
    CHECK(spmd_op_parse(NULL, &op) == SPMD_ERR_INVALID);
    CHECK(spmd_op_parse("sum", NULL) == SPMD_ERR_INVALID);
    TEST_MAIN_END();
}
