/* A malformed numeric SPMD_* variable makes spmd_group_init fail with an
 * error naming the variable and its value; it was silently the default
 * (SPMD_TIMEOUT=30x gave the 30-minute deadline). */
#include <stdlib.h>
#include <string.h>
#include "harness.h"
#include "spmd/group.h"

static spmd_status init_alone(char *err, size_t errlen) {
    spmd_group_opts o = SPMD_GROUP_OPTS_DEFAULT;
    o.rank = 0;
    o.world_size = 1;
    o.backend = "spmd";
    spmd_group *g = NULL;
    spmd_status st = spmd_group_init(&o, &g, err, errlen);
    if (g) spmd_group_destroy(g);
    return st;
}

int main(void) {
    char err[512] = "";
    static const char *cases[][2] = {{"SPMD_TIMEOUT", "30x"}, {"SPMD_HEARTBEAT_TIMEOUT", "5 s"},
                                     {"SPMD_SPIN_US", "-1"}, {"SPMD_SEGMENT_BYTES", "1M"},
                                     {"SPMD_RPC_THREADS", "four"}, {"SPMD_WAIT_SLICE_US", "200000"},
                                     {"SPMD_P2P_PARALLEL_MIN_BYTES", "-1"}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        setenv(cases[i][0], cases[i][1], 1);
        char want[128];
        snprintf(want, sizeof want, "%s='%s'", cases[i][0], cases[i][1]);
        CHECK(init_alone(err, sizeof err) == SPMD_ERR_INVALID);
        if (!strstr(err, want)) fprintf(stderr, "%s: got '%s'\n", want, err);
        CHECK(strstr(err, want) != NULL);
        unsetenv(cases[i][0]);
    }
    setenv("SPMD_TIMEOUT", "30s", 1);
    CHECK(init_alone(err, sizeof err) == SPMD_OK);
    TEST_MAIN_END();
}
