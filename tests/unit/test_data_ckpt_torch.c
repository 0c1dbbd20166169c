/* Interoperability with PyTorch through the safetensors format.
 *   test_data_ckpt_torch fixture FILE  — read tests/data/torch_fixture.safetensors
 *       (tensors made by torch, serialised by tests/data/make_torch_fixture.py)
 *       and check every value bit for bit;
 *   test_data_ckpt_torch python SCRIPT — write a checkpoint, have
 *       tests/data/check_safetensors.py read it with torch (exit 77 = skip
 *       when no Python with torch is found). */
#include <stdint.h>
#include <sys/wait.h>
#include <unistd.h>
#include "harness.h"
#include "spmd/data.h"

static int fixture(const char *path) {
    spmd_ckpt *c = NULL;
    char err[512] = "";
    CHECK_MSG(spmd_ckpt_open(path, &c, err, sizeof err) == SPMD_OK, "%s", err);
    if (!c) return 1;
    CHECK(spmd_ckpt_count(c) == 10);
    CHECK(!strcmp(spmd_ckpt_meta(c, "format"), "pt") && !strcmp(spmd_ckpt_meta(c, "epoch"), "7"));

    float w[3][4], b[3], nan2[2], empty[1];
    double d[5];
    int64_t step = 0;
    uint16_t half[4], bf[3];
    uint8_t u8[10];
    spmd_ckpt_tensor t[] = {
        {"fc1.weight", SPMD_F32, 2, {3, 4}, w}, {"fc1.bias", SPMD_F32, 1, {3}, b},
        {"step", SPMD_I64, 0, {0}, &step},      {"d", SPMD_F64, 1, {5}, d},
        {"half", SPMD_F16, 1, {4}, half},       {"bf", SPMD_BF16, 1, {3}, bf},
        {"u8", SPMD_U8, 1, {10}, u8},           {"nan", SPMD_F32, 1, {2}, nan2},
        {"empty", SPMD_F32, 2, {0, 3}, empty},
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
        CHECK_MSG(spmd_ckpt_read(c, &t[i], err, sizeof err) == SPMD_OK, "%s", err);
    for (int i = 0; i < 12; i++) CHECK(w[i / 4][i % 4] == (float)i / 8);
    CHECK(b[0] == -1.5f && b[1] == 0.0f && b[2] == 2.25f);
    CHECK(step == 1875);
    for (int i = 0; i < 5; i++) CHECK(d[i] == i / 4.0);
    CHECK(half[0] == 0x3c00 && half[1] == 0xc000 && half[2] == 0x3800 && half[3] == 0x7bff);
    CHECK(bf[0] == 0x3f80 && bf[1] == 0xbf00 && bf[2] == 0x4040);
    for (int i = 0; i < 10; i++) CHECK(u8[i] == i);
    uint32_t nb[2];
    memcpy(nb, nan2, sizeof nb);
    CHECK(nb[0] == 0x7fc00000u && nb[1] == 0xff800000u);
    /* a dtype spmd has no enum for is still described */
    spmd_ckpt_info info;
    CHECK_OK(spmd_ckpt_find(c, "mask", &info));
    CHECK(!strcmp(info.dtype_name, "BOOL") && info.dtype == SPMD_DTYPE_COUNT && info.nbytes == 3);
    spmd_ckpt_tensor m = {"mask", SPMD_U8, 1, {3}, u8};
    CHECK(spmd_ckpt_read(c, &m, err, sizeof err) == SPMD_ERR_MISMATCH);
    CHECK_MSG(strstr(err, "BOOL [3]"), "%s", err);
    spmd_ckpt_close(c);
    TEST_MAIN_END();
}

static int python(const char *script) {
    const char *t = getenv("TMPDIR");
    char dir[256], path[300];
    snprintf(dir, sizeof dir, "%s/spmd-torch-XXXXXX", t && *t ? t : "/tmp");
    REQUIRE(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/c.safetensors", dir);

    float w[6];
    for (int i = 0; i < 6; i++) w[i] = i * 0.25f - 1;
    double b[3] = {0.1, -2.5, 1e300};
    int64_t n = -42;
    int8_t i8[4] = {-128, -1, 0, 127};
    uint8_t u8[4] = {0, 1, 254, 255};
    int32_t i32[3] = {INT32_MIN, 0, INT32_MAX};
    uint16_t h[3] = {0x3c00, 0xc000, 0x7e01}, bf[2] = {0x3f80, 0x4049};
    uint32_t nanbits[2] = {0x7fc00001u, 0xff800000u};
    spmd_ckpt_tensor ts[] = {
        {"u8", SPMD_U8, 2, {2, 2}, u8},  {"w", SPMD_F32, 2, {2, 3}, w},   {"h", SPMD_F16, 1, {3}, h},
        {"b", SPMD_F64, 1, {3}, b},      {"i8", SPMD_I8, 1, {4}, i8},     {"n", SPMD_I64, 0, {0}, &n},
        {"bf", SPMD_BF16, 1, {2}, bf},   {"i32", SPMD_I32, 1, {3}, i32},  {"e", SPMD_F32, 1, {0}, NULL},
        {"nan", SPMD_F32, 1, {2}, nanbits},
    };
    spmd_ckpt_kv meta[] = {{"epoch", "5"}, {"model", "mlp \"q\" \xc3\xa9\n"}};
    char err[512];
    CHECK_MSG(spmd_ckpt_save(path, ts, sizeof ts / sizeof ts[0], meta, 2, err, sizeof err) == SPMD_OK,
              "%s", err);

    /* The first interpreter that has torch decides. */
    const char *env = getenv("SPMD_PYTHON");
    const char *cands[] = {env && *env ? env : "/usr/bin/python3", "/usr/bin/python3", "python3"};
    int rc = 77;
    for (size_t i = 0; i < 3 && rc == 77; i++) {
        fflush(NULL);
        pid_t pid = fork();
        REQUIRE(pid >= 0);
        if (pid == 0) {
            execlp(cands[i], cands[i], script, path, (char *)NULL);
            _exit(77); /* no such interpreter */
        }
        int status;
        REQUIRE(waitpid(pid, &status, 0) == pid);
        rc = WIFEXITED(status) ? WEXITSTATUS(status) : 1;
    }
    unlink(path);
    rmdir(dir);
    if (rc == 77) {
        printf("SKIP: no python3 with torch found (set SPMD_PYTHON)\n");
        return test_failures ? 1 : 77;
    }
    CHECK_MSG(rc == 0, "check_safetensors.py exited with %d", rc);
    TEST_MAIN_END();
}

int main(int argc, char **argv) {
    if (argc == 3 && !strcmp(argv[1], "fixture")) return fixture(argv[2]);
    if (argc == 3 && !strcmp(argv[1], "python")) return python(argv[2]);
    fprintf(stderr, "usage: %s fixture FILE | python SCRIPT\n", argv[0]);
    return 2;
}
