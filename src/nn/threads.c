/* threads.c — how many threads the BLAS under the training stack may use.
 * Under a launcher with several ranks per node the default is one per rank
 * (as torch does with OMP_NUM_THREADS=1), so ranks don't fight over cores. */
#include <stdlib.h>
#include <cblas.h>
#include "spmd/nn.h"

spmd_status spmd_nn_set_threads(int n) {
    if (n < 1) return SPMD_ERR_INVALID;
    openblas_set_num_threads(n);
    return SPMD_OK;
}

/* OPENBLAS_NUM_THREADS / OMP_NUM_THREADS when set, else 1: the training stack
 * is tuned for one BLAS thread per process. */
int spmd_nn_default_threads(void) {
    const char *names[] = {"OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS"};
    for (int i = 0; i < 2; i++) {
        const char *s = getenv(names[i]);
        if (s && *s) {
            int v = atoi(s);
            if (v >= 1) return v;
        }
    }
    return 1;
}
