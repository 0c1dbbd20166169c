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

    setenv("SPMD_TEST_INT", "42", 1);
    long v = 0;
    CHECK(spmd__env_int("SPMD_TEST_INT", 0, 100, &v) == SPMD_OK && v == 42);
    CHECK(spmd__env_int("SPMD_TEST_INT", 0, 10, &v) == SPMD_ERR_INVALID);
    setenv("SPMD_TEST_INT", "4x", 1);
    CHECK(spmd__env_int("SPMD_TEST_INT", 0, 100, &v) == SPMD_ERR_INVALID);
    CHECK(spmd__env_int("SPMD_TEST_UNSET_VAR", 0, 100, &v) == SPMD_ERR_NOTFOUND);
    TEST_MAIN_END();
}
