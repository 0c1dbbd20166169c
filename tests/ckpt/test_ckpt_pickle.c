/* test_ckpt_pickle.c — the DCP metadata codec: encode -> decode round trip,
 * and the restricted reader's refusals (each error names the opcode or the
 * global).  A .metadata file given as argv[1] (torch-made fixture) is decoded
 * and its expected contents checked by test_ckpt_fixture instead. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "harness.h"
#include "spmd/ckpt.h"

static spmd_dcp_metadata sample(void) {
    static spmd_dcp_chunk w_chunks[2] = {{{0, 0}, {2, 3}}, {{2, 0}, {2, 3}}};
    static spmd_dcp_entry e[3];
    static spmd_dcp_storage s[3];
    memset(e, 0, sizeof e);
    memset(s, 0, sizeof s);
    e[0] = (spmd_dcp_entry){.fqn = "model.fc.weight", .dtype = "float32", .requires_grad = 1, .ndim = 2,
                            .size = {4, 3}, .nchunks = 2, .chunks = w_chunks};
    e[1] = (spmd_dcp_entry){.fqn = "rng", .is_bytes = 1};
    static spmd_dcp_chunk step_chunk = {{0}, {0}};
    e[2] = (spmd_dcp_entry){.fqn = "optim.step", .dtype = "int64", .ndim = 0, .nchunks = 1, .chunks = &step_chunk};
    s[0] = (spmd_dcp_storage){.fqn = "model.fc.weight", .has_offset = 1, .ndim = 2, .offset = {2, 0},
                              .index = 1, .relative_path = "__1_0.distcp", .file_offset = 0, .length = 1234};
    s[1] = (spmd_dcp_storage){.fqn = "rng", .index = -1, .relative_path = "__0_0.distcp",
                              .file_offset = 5000000000ull, .length = 7};
    s[2] = (spmd_dcp_storage){.fqn = "optim.step", .has_offset = 1, .ndim = 0, .index = 0,
                              .relative_path = "__0_0.distcp", .file_offset = 7, .length = 70000};
    return (spmd_dcp_metadata){3, e, 3, s};
}

static void round_trip(void) {
    spmd_dcp_metadata m = sample(), d;
    void *buf = NULL;
    size_t len = 0;
    char err[512];
    CHECK_MSG(spmd_dcp_metadata_encode(&m, &buf, &len, err, sizeof err) == SPMD_OK, "%s", err);
    CHECK_MSG(spmd_dcp_metadata_decode(buf, len, "rt", &d, err, sizeof err) == SPMD_OK, "%s", err);
    CHECK(d.nentries == 3 && d.nstorage == 3);
    const spmd_dcp_entry *w = spmd_dcp_metadata_find(&d, "model.fc.weight");
    CHECK(w && !w->is_bytes && !strcmp(w->dtype, "float32") && w->requires_grad && w->ndim == 2 &&
          w->size[0] == 4 && w->size[1] == 3 && w->nchunks == 2 && w->chunks[1].offsets[0] == 2 &&
          w->chunks[1].sizes[1] == 3);
    const spmd_dcp_entry *r = spmd_dcp_metadata_find(&d, "rng");
    CHECK(r && r->is_bytes);
    const spmd_dcp_entry *st = spmd_dcp_metadata_find(&d, "optim.step");
    CHECK(st && st->ndim == 0 && !strcmp(st->dtype, "int64") && st->nchunks == 1);
    CHECK(!strcmp(d.storage[0].relative_path, "__1_0.distcp") && d.storage[0].has_offset &&
          d.storage[0].offset[0] == 2 && d.storage[0].index == 1 && d.storage[0].length == 1234);
    CHECK(!d.storage[1].has_offset && d.storage[1].index == -1 && d.storage[1].file_offset == 5000000000ull);
    CHECK(d.storage[2].length == 70000 && d.storage[2].has_offset && d.storage[2].ndim == 0);
    /* Every strict prefix is an error (the reader needs STOP), never a crash. */
    for (size_t n = 0; n < len; n++) {
        spmd_dcp_metadata t;
        CHECK(spmd_dcp_metadata_decode(buf, n, "prefix", &t, err, sizeof err) == SPMD_ERR_FORMAT);
    }
    spmd_dcp_metadata_free(&d);
    free(buf);
}

/* Decoding p must fail with SPMD_ERR_FORMAT and a message holding want. */
static void refuses(const char *p, size_t n, const char *want) {
    spmd_dcp_metadata d;
    char err[512] = "";
    spmd_status st = spmd_dcp_metadata_decode(p, n, "hostile", &d, err, sizeof err);
    CHECK_MSG(st == SPMD_ERR_FORMAT && strstr(err, want) && strstr(err, "hostile"), "want '%s', got %d '%s'",
              want, (int)st, err);
}
#define REFUSES(lit, want) refuses(lit, sizeof(lit) - 1, want)

static void hostile(void) {
    /* The classic: os.system("echo pwned") by GLOBAL + REDUCE. */
    REFUSES("\x80\x02" "cos\nsystem\nX\x0a\0\0\0echo pwnedR.", "global os.system is not on the allow-list");
    REFUSES("\x80\x04\x8c\x08" "builtins\x8c\x04" "eval\x93.", "global builtins.eval");
    REFUSES("\x80\x02(X\x01\0\0\0xios\nsystem\n.", "opcode INST");
    REFUSES("\x80\x02(X\x01\0\0\0xo.", "opcode OBJ");
    REFUSES("\x80\x02\x82\x01.", "opcode EXT1");
    REFUSES("\x80\x02Pabc\n.", "opcode PERSID");
    REFUSES("\x80\x02X\x01\0\0\0xQ.", "opcode BINPERSID");
    REFUSES("\x80\x02S'x'\n.", "opcode STRING");
    REFUSES("\x80\x05\x96\x01\0\0\0\0\0\0\0x.", "opcode BYTEARRAY8");
    REFUSES("\x80\x02\xff.", "opcode 0xff");
    /* Allowed globals, used the wrong way: calling a dtype, NEWOBJ of torch.Size. */
    REFUSES("\x80\x02" "ctorch\nfloat32\n)R.", "REDUCE of torch.float32 is not allowed");
    REFUSES("\x80\x02" "ctorch\nSize\n)\x81.", "NEWOBJ of torch.Size is not allowed");
    REFUSES("\x80\x02" "ctorch\nSize\n)Rb.", "BUILD on a value");
    REFUSES("\x80\x02" "ctorch\nSize\n)R}b.", "BUILD on a value that is not an allowed class");
    /* Structure: protocol, truncation, memo, trailing bytes, stack. */
    REFUSES("\x80\x09N.", "unsupported pickle protocol");
    REFUSES("\x80\x02X\xff\xff\xff\x7f" "abc.", "longer than the rest of the input");
    REFUSES("\x80\x02h\x05.", "memo get of an unset index");
    REFUSES("\x80\x02Nr\xff\xff\xff\xff.", "memo index beyond the limit");
    REFUSES("\x80\x02Nr\xff\xff\xff\x03.", "memo index beyond the limit"); /* under the 64 Mi cap: no 512 MiB memo */
    REFUSES("\x80\x02N.N", "bytes after STOP");
    REFUSES("\x80\x02NN.", "exactly one value");
    REFUSES("\x80\x02X\x02\0\0\0\xc3\x28.", "not UTF-8");
    REFUSES("\x80\x02X\x01\0\0\0\0.", "not UTF-8 without NUL");
    REFUSES("\x80\x02\x8a\x09\0\0\0\0\0\0\0\0\0.", "wider than 64 bits");
    REFUSES("\x80\x02N.", "not a DCP Metadata");
    /* Deep nesting stops at the stack limit, not in a crash. */
    size_t n = 2 + 70000 + 1;
    char *deep = malloc(n);
    if (!deep) {
        CHECK(deep);
        return;
    }
    memcpy(deep, "\x80\x02", 2);
    memset(deep + 2, ']', 70000);
    deep[n - 1] = '.';
    refuses(deep, n, "stack deeper than the limit");
    free(deep);
    /* A list that contains itself: accepted by the machine, refused as metadata. */
    REFUSES("\x80\x02]q\x00h\x00" "a.", "not a DCP Metadata");
}

/* Metadata whose shapes break the rules. */
static void bad_shapes(void) {
    spmd_dcp_metadata m = sample();
    char err[512];
    void *buf;
    size_t len;
    m.entries[0].chunks[1].offsets[0] = 3; /* 3 + 2 > 4 */
    CHECK(spmd_dcp_metadata_encode(&m, &buf, &len, err, sizeof err) == SPMD_ERR_INVALID &&
          strstr(err, "model.fc.weight") && strstr(err, "outside"));
    m.entries[0].chunks[1].offsets[0] = 2;
    m.storage[0].offset[0] = 1;
    CHECK(spmd_dcp_metadata_encode(&m, &buf, &len, err, sizeof err) == SPMD_ERR_INVALID &&
          strstr(err, "not one of its chunks"));
    m.storage[0].offset[0] = 2;
    m.storage[0].relative_path = "../etc/passwd";
    CHECK(spmd_dcp_metadata_encode(&m, &buf, &len, err, sizeof err) == SPMD_ERR_INVALID);
    m.storage[0].relative_path = "__1_0.distcp";
    snprintf(m.entries[0].dtype, sizeof m.entries[0].dtype, "object");
    CHECK(spmd_dcp_metadata_encode(&m, &buf, &len, err, sizeof err) == SPMD_ERR_INVALID &&
          strstr(err, "unknown dtype"));
    snprintf(m.entries[0].dtype, sizeof m.entries[0].dtype, "float32");
}

int main(void) {
    round_trip();
    hostile();
    bad_shapes();
    return test_failures ? 1 : 0;
}
