/* tests/launcher/barrier.c — the start-up benchmark's worker: form the group
 * from the launcher's environment, one barrier, leave.  The Python twin for
 * torchrun is barrier.py. */
#include <stdio.h>

#include "spmd/group.h"

int main(void) {
    spmd_group *g = NULL;
    char err[512];
    if (spmd_group_init(NULL, &g, err, sizeof err) != SPMD_OK) {
        fprintf(stderr, "group init failed: %s\n", err);
        return 1;
    }
    int rc = spmd_barrier(g) != SPMD_OK;
    if (rc) fprintf(stderr, "barrier failed: %s\n", spmd_group_errmsg(g));
    spmd_group_destroy(g);
    return rc;
}
