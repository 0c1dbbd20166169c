/* Unit tests for src/common: status text, durations, Slurm hostlists. */
#include "common/common.h"
#include "harness.h"

int main(void) {
    CHECK(strcmp(spmd_status_str(SPMD_OK), "success") == 0);
    CHECK(strcmp(spmd_status_name(SPMD_ERR_TIMEOUT), "SPMD_ERR_TIMEOUT") == 0);
    CHECK(strcmp(spmd_status_str((spmd_status)-999), "unknown status") == 0);

    long ms = 0;
    CHECK(spmd__parse_duration_ms("30", &ms) == SPMD_OK && ms == 30000);
    CHECK(spmd__parse_duration_ms("250ms", &ms) == SPMD_OK && ms == 250);
    CHECK(spmd__parse_duration_ms("2m", &ms) == SPMD_OK && ms == 120000);
    CHECK(spmd__parse_duration_ms("x", &ms) == SPMD_ERR_INVALID);
    CHECK(spmd__parse_duration_ms("5parsecs", &ms) == SPMD_ERR_INVALID);

    char h[64];
    CHECK(spmd__hostlist_first("node[01-04,07]", h, sizeof h) == SPMD_OK && !strcmp(h, "node01"));
    CHECK(spmd__hostlist_nth("node[01-04,07]", 4, h, sizeof h) == SPMD_OK && !strcmp(h, "node07"));
    CHECK(spmd__hostlist_nth("node[01-04,07]", 5, h, sizeof h) == SPMD_ERR_NOTFOUND);
    CHECK(spmd__hostlist_nth("a1,b[8-10]x,c", 3, h, sizeof h) == SPMD_OK && !strcmp(h, "b10x"));
    CHECK(spmd__hostlist_nth("a1,b[8-10]x,c", 4, h, sizeof h) == SPMD_OK && !strcmp(h, "c"));
    CHECK(spmd__hostlist_first("gpu-host", h, sizeof h) == SPMD_OK && !strcmp(h, "gpu-host"));
    CHECK(spmd__hostlist_first("node[3-1]", h, sizeof h) == SPMD_ERR_INVALID);
    CHECK(spmd__hostlist_first("node[1-", h, sizeof h) == SPMD_ERR_INVALID);
    CHECK(spmd__hostlist_first("node[a-b]", h, sizeof h) == SPMD_ERR_INVALID);
    /* Several bracket groups, as `scontrol show hostnames` expands them. */
    const char *want[] = {"rack2n05", "rack2n06", "rack3n05", "rack3n06"};
    for (size_t k = 0; k < 4; k++)
        CHECK(spmd__hostlist_nth("rack[2-3]n[05-06]", k, h, sizeof h) == SPMD_OK && !strcmp(h, want[k]));
    CHECK(spmd__hostlist_nth("rack[2-3]n[05-06]", 4, h, sizeof h) == SPMD_ERR_NOTFOUND);
    const char *want2[] = {"a01-x1", "a01-x3", "a01-x4", "a03-x1", "a03-x3", "a03-x4", "gpu7", "c8", "c9", "c10"};
    for (size_t k = 0; k < 10; k++)
        CHECK(spmd__hostlist_nth("a[01,03]-x[1,3-4],gpu7,c[8-10]", k, h, sizeof h) == SPMD_OK &&
              !strcmp(h, want2[k]));
    CHECK(spmd__hostlist_nth("a[01,03]-x[1,3-4],gpu7,c[8-10]", 10, h, sizeof h) == SPMD_ERR_NOTFOUND);
    CHECK(spmd__hostlist_nth("n[098-101]", 3, h, sizeof h) == SPMD_OK && !strcmp(h, "n101"));
    CHECK(spmd__hostlist_nth("[1-2]x", 1, h, sizeof h) == SPMD_OK && !strcmp(h, "2x"));
    /* Malformed anywhere: refused whole, even when the host asked for comes first. */
    CHECK(spmd__hostlist_first("a,b[1-2", h, sizeof h) == SPMD_ERR_INVALID);
    CHECK(spmd__hostlist_first("a,,b", h, sizeof h) == SPMD_ERR_INVALID);
    CHECK(spmd__hostlist_first("a,", h, sizeof h) == SPMD_ERR_INVALID);
    CHECK(spmd__hostlist_first("a[[1]]", h, sizeof h) == SPMD_ERR_INVALID);
    CHECK(spmd__hostlist_first("a]1[", h, sizeof h) == SPMD_ERR_INVALID);
    CHECK(spmd__hostlist_first("a[]", h, sizeof h) == SPMD_ERR_INVALID);
    CHECK(spmd__hostlist_first("a[1,]", h, sizeof h) == SPMD_ERR_INVALID);
    CHECK(spmd__hostlist_first("a[0-1000000]", h, sizeof h) == SPMD_ERR_INVALID);
    CHECK(spmd__hostlist_first("a[0-999]b[0-999]c[0-999]", h, sizeof h) == SPMD_ERR_INVALID);
    char tiny[4];
    CHECK(spmd__hostlist_first("longname", tiny, sizeof tiny) == SPMD_ERR_INVALID);

    setenv("SPMD_TEST_INT", "42", 1);
    long v = 0;
    CHECK(spmd__env_int("SPMD_TEST_INT", 0, 100, &v) == SPMD_OK && v == 42);
    CHECK(spmd__env_int("SPMD_TEST_INT", 0, 10, &v) == SPMD_ERR_INVALID);
    setenv("SPMD_TEST_INT", "4x", 1);
    CHECK(spmd__env_int("SPMD_TEST_INT", 0, 100, &v) == SPMD_ERR_INVALID);
    CHECK(spmd__env_int("SPMD_TEST_UNSET_VAR", 0, 100, &v) == SPMD_ERR_NOTFOUND);

    /* A malformed numeric SPMD_* variable is an error naming it and its value. */
    char err[256] = "";
    CHECK(spmd__env_check_numeric(err, sizeof err) == SPMD_OK);
    setenv("SPMD_TIMEOUT", "30x", 1);
    CHECK(spmd__env_check_numeric(err, sizeof err) == SPMD_ERR_INVALID && strstr(err, "SPMD_TIMEOUT='30x'"));
    setenv("SPMD_TIMEOUT", "45s", 1);
    CHECK(spmd__env_check_numeric(err, sizeof err) == SPMD_OK);
    setenv("SPMD_SHM_SLOT_BYTES", "64k", 1);
    CHECK(spmd__env_check_numeric(err, sizeof err) == SPMD_ERR_INVALID && strstr(err, "SPMD_SHM_SLOT_BYTES='64k'"));
    setenv("SPMD_SHM_SLOT_BYTES", "100", 1); /* below its range */
    CHECK(spmd__env_check_numeric(err, sizeof err) == SPMD_ERR_INVALID && strstr(err, "[4096, "));
    unsetenv("SPMD_SHM_SLOT_BYTES");
    setenv("SPMD_HEARTBEAT_TIMEOUT", "five", 1);
    CHECK(spmd__env_check_numeric(err, sizeof err) == SPMD_ERR_INVALID && strstr(err, "SPMD_HEARTBEAT_TIMEOUT='five'"));
    unsetenv("SPMD_HEARTBEAT_TIMEOUT");
    unsetenv("SPMD_TIMEOUT");
    TEST_MAIN_END();
}
