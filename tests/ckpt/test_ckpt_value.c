/* test_ckpt_value.c — bytes items holding Python values, as torch 2.6's
 * dcp.save wrote them (tests/ckpt/fixtures/dcp_optim, made by
 * make_dcp_fixtures.py): an SGD optimizer's param_groups (floats, an int,
 * bools, None, a list of str), a nested list and tuple, bytes (protocol 2's
 * _codecs.encode form, with a NUL and a byte past 127) read by both
 * spmd_dcp_load_value and spmd_dcp_load_bytes; a torch.dtype and a complex
 * refused with the item's name and the global; a bytes item spmd saved.
 * Usage: test_ckpt_value FIXTURES_DIR */
#include <math.h>
#include <stdint.h>
#include <unistd.h>
#include "harness.h"
#include "spmd/ckpt.h"

static char dir[4096], err[512];

static int value(const char *fqn, spmd_dcp_value *v) {
    spmd_status st = spmd_dcp_load_value(dir, fqn, v, err, sizeof err);
    if (st) fprintf(stderr, "%s: %s\n", fqn, err);
    return st == SPMD_OK;
}

static int is_str(const spmd_dcp_value *v, const char *s) {
    return v->type == SPMD_DCP_STR && v->len == strlen(s) && !strcmp(v->s, s);
}

int main(int argc, char **argv) {
    REQUIRE(argc > 1);
    snprintf(dir, sizeof dir, "%s/dcp_optim", argv[1]);
    double x = 0;
    CHECK(spmd_dcp_load_number(dir, "optim.param_groups.0.lr", &x, err, sizeof err) == SPMD_OK && x == 0.01);
    CHECK(spmd_dcp_load_number(dir, "optim.param_groups.0.momentum", &x, err, sizeof err) == SPMD_OK && x == 0.5);
    spmd_dcp_value v;
    CHECK(value("optim.param_groups.0.dampening", &v) && v.type == SPMD_DCP_INT && v.i == 0);
    spmd_dcp_value_free(&v);
    CHECK(value("optim.param_groups.0.nesterov", &v) && v.type == SPMD_DCP_BOOL && v.i == 0);
    spmd_dcp_value_free(&v);
    CHECK(value("optim.param_groups.0.foreach", &v) && v.type == SPMD_DCP_NONE);
    spmd_dcp_value_free(&v);
    CHECK(value("optim.param_groups.0.params", &v) && v.type == SPMD_DCP_LIST && !v.is_tuple && v.n == 2 &&
          is_str(&v.items[0], "fc1.weight") && is_str(&v.items[1], "fc1.bias"));
    spmd_dcp_value_free(&v);
    CHECK(spmd_dcp_load_number(dir, "optim.param_groups.0.params", &x, err, sizeof err) == SPMD_ERR_MISMATCH &&
          strstr(err, "not a number"));

    /* Nested plain data. */
    CHECK(value("extra.nested.a", &v) && v.type == SPMD_DCP_LIST && v.n == 3 && v.items[0].type == SPMD_DCP_INT &&
          v.items[0].i == 1 && v.items[1].type == SPMD_DCP_FLOAT && v.items[1].f == 2.5 && is_str(&v.items[2], "x"));
    spmd_dcp_value_free(&v);
    CHECK(value("extra.nested.t", &v) && v.type == SPMD_DCP_LIST && v.is_tuple && v.n == 2 &&
          v.items[0].type == SPMD_DCP_BOOL && v.items[0].i == 1 && v.items[1].type == SPMD_DCP_BYTES &&
          v.items[1].len == 3 && !memcmp(v.items[1].s, "raw", 3));
    spmd_dcp_value_free(&v);

    /* torch's bytes (protocol 2: _codecs.encode of latin-1 text) with a NUL and 0xff. */
    CHECK(value("extra.raw", &v) && v.type == SPMD_DCP_BYTES && v.len == 5 && !memcmp(v.s, "\0\xffrng", 5));
    spmd_dcp_value_free(&v);
    void *b = NULL;
    size_t blen = 0;
    CHECK(spmd_dcp_load_bytes(dir, "extra.raw", &b, &blen, err, sizeof err) == SPMD_OK && blen == 5 &&
          !memcmp(b, "\0\xffrng", 5));
    free(b);

    /* Not plain data: refused, naming the item and the global; nothing runs. */
    CHECK(spmd_dcp_load_value(dir, "extra.dtype", &v, err, sizeof err) == SPMD_ERR_FORMAT &&
          strstr(err, "extra.dtype") && strstr(err, "torch.float32") && v.type == SPMD_DCP_NONE && !v.items);
    CHECK(spmd_dcp_load_value(dir, "extra.cplx", &v, err, sizeof err) == SPMD_ERR_FORMAT &&
          strstr(err, "extra.cplx") && strstr(err, "complex"));
    CHECK(spmd_dcp_load_value(dir, "model.fc1.weight", &v, err, sizeof err) == SPMD_ERR_NOTFOUND &&
          strstr(err, "no bytes item model.fc1.weight"));
    CHECK(spmd_dcp_load_value(dir, "nothing", &v, err, sizeof err) == SPMD_ERR_NOTFOUND);
    CHECK(spmd_dcp_load_value(NULL, "x", &v, err, sizeof err) == SPMD_ERR_INVALID);

    /* The tensors of the same checkpoint still load. */
    float w[6] = {0}, mb[6] = {0};
    spmd_dcp_shard s[2] = {{"model.fc1.weight", "float32", 2, {2, 3}, {0, 0}, {2, 3}, w},
                           {"optim.state.fc1.weight.momentum_buffer", "float32", 2, {2, 3}, {0, 0}, {2, 3}, mb}};
    CHECK(spmd_dcp_load(dir, s, 2, err, sizeof err) == SPMD_OK && w[0] != 0 && mb[0] != 0);

    /* A bytes item spmd saved reads as bytes too. */
    char tmp[] = "/tmp/spmd-ckvalue-XXXXXX";
    REQUIRE(mkdtemp(tmp));
    char ck[64];
    snprintf(ck, sizeof ck, "%s/ck", tmp);
    spmd_dcp_bytes by = {"rng", "\0abc", 4, 0};
    REQUIRE(spmd_dcp_save(NULL, ck, NULL, 0, &by, 1, err, sizeof err) == SPMD_OK);
    snprintf(dir, sizeof dir, "%s", ck);
    CHECK(value("rng", &v) && v.type == SPMD_DCP_BYTES && v.len == 4 && !memcmp(v.s, "\0abc", 4));
    spmd_dcp_value_free(&v);

    /* A value spmd_dcp_value_encode pickled (a param group's entries) reads
     * back as that value: {"betas": (0.9, 0.999), "params": ["a", "b"],
     * "foreach": None, "nesterov": True, "n": -3} */
    spmd_dcp_value betas[2] = {{.type = SPMD_DCP_FLOAT, .f = 0.9}, {.type = SPMD_DCP_FLOAT, .f = 0.999}};
    spmd_dcp_value names[2] = {{.type = SPMD_DCP_STR, .s = "a", .len = 1}, {.type = SPMD_DCP_STR, .s = "b", .len = 1}};
    spmd_dcp_value kv[10] = {{.type = SPMD_DCP_STR, .s = "betas", .len = 5},
                             {.type = SPMD_DCP_LIST, .is_tuple = 1, .n = 2, .items = betas},
                             {.type = SPMD_DCP_STR, .s = "params", .len = 6},
                             {.type = SPMD_DCP_LIST, .n = 2, .items = names},
                             {.type = SPMD_DCP_STR, .s = "foreach", .len = 7},
                             {.type = SPMD_DCP_NONE},
                             {.type = SPMD_DCP_STR, .s = "nesterov", .len = 8},
                             {.type = SPMD_DCP_BOOL, .i = 1},
                             {.type = SPMD_DCP_STR, .s = "n", .len = 1},
                             {.type = SPMD_DCP_INT, .i = -3}};
    spmd_dcp_value dict = {.type = SPMD_DCP_DICT, .n = 5, .items = kv};
    void *pk = NULL;
    size_t pklen = 0;
    REQUIRE(spmd_dcp_value_encode(&dict, &pk, &pklen) == SPMD_OK);
    spmd_dcp_bytes pg = {"group", pk, pklen, 1};
    snprintf(ck, sizeof ck, "%s/pg", tmp);
    REQUIRE(spmd_dcp_save(NULL, ck, NULL, 0, &pg, 1, err, sizeof err) == SPMD_OK);
    free(pk);
    snprintf(dir, sizeof dir, "%s", ck);
    CHECK(value("group", &v) && v.type == SPMD_DCP_DICT && v.n == 5);
    if (v.type == SPMD_DCP_DICT && v.n == 5) {
        const spmd_dcp_value *it = v.items;
        CHECK(!strcmp(it[0].s, "betas") && it[1].type == SPMD_DCP_LIST && it[1].is_tuple && it[1].n == 2 &&
              it[1].items[0].f == 0.9 && it[1].items[1].f == 0.999);
        CHECK(!strcmp(it[2].s, "params") && it[3].type == SPMD_DCP_LIST && !it[3].is_tuple && it[3].n == 2 &&
              !strcmp(it[3].items[1].s, "b"));
        CHECK(it[5].type == SPMD_DCP_NONE && it[7].type == SPMD_DCP_BOOL && it[7].i == 1 &&
              it[9].type == SPMD_DCP_INT && it[9].i == -3);
    }
    spmd_dcp_value_free(&v);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
    CHECK(system(cmd) == 0);
    TEST_MAIN_END();
}
