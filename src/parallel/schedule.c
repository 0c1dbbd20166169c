/* schedule.c — pipeline schedules as tables, and the balanced stage cut.
 *
 * GPipe: every forward, then every backward (all micro-batches alive).
 * 1F1B: stage s runs stages-s-1 warm-up forwards, then alternates one
 * forward and one backward, then drains the backwards; at most stages-s
 * micro-batches are alive, whatever the number of micro-batches. */
#include <stdio.h>
#include <string.h>
#include "spmd/parallel.h"

spmd_status spmd_schedule_parse(const char *s, spmd_schedule_kind *out) {
    if (!s || !out) return SPMD_ERR_INVALID;
    if (strcmp(s, "gpipe") == 0) *out = SPMD_SCHEDULE_GPIPE;
    else if (strcmp(s, "1f1b") == 0) *out = SPMD_SCHEDULE_1F1B;
    else return SPMD_ERR_INVALID;
    return SPMD_OK;
}

const char *spmd_schedule_name(spmd_schedule_kind k) {
    return k == SPMD_SCHEDULE_GPIPE ? "gpipe" : k == SPMD_SCHEDULE_1F1B ? "1f1b" : "?";
}

spmd_status spmd_pipe_schedule(spmd_schedule_kind k, int stages, int stage, int microbatches,
                               spmd_pipe_action *out) {
    if (!out || stages < 1 || stage < 0 || stage >= stages || microbatches < 1) return SPMD_ERR_INVALID;
    const int M = microbatches;
    int n = 0;
    if (k == SPMD_SCHEDULE_GPIPE) {
        for (int i = 0; i < M; i++) out[n++] = (spmd_pipe_action){'F', i};
        for (int i = 0; i < M; i++) out[n++] = (spmd_pipe_action){'B', i};
        return SPMD_OK;
    }
    if (k != SPMD_SCHEDULE_1F1B) return SPMD_ERR_INVALID;
    int warm = stages - stage - 1;
    if (warm > M) warm = M;
    for (int i = 0; i < warm; i++) out[n++] = (spmd_pipe_action){'F', i};
    for (int i = 0; i < M - warm; i++) {
        out[n++] = (spmd_pipe_action){'F', warm + i};
        out[n++] = (spmd_pipe_action){'B', i};
    }
    for (int i = M - warm; i < M; i++) out[n++] = (spmd_pipe_action){'B', i};
    return SPMD_OK;
}

spmd_status spmd_pipe_balance(const spmd_layers *L, int stages, int *cuts, char *err,
                              size_t errlen) {
    int n = spmd_layers_count(L);
    if (!L || !cuts || stages < 1 || stages > n) {
        if (err && errlen)
            snprintf(err, errlen, "cannot cut %d layers into %d stages: a stage would be empty", n,
                     stages);
        return SPMD_ERR_INVALID;
    }
    size_t total = 0;
    for (int i = 0; i < n; i++) total += spmd_layers_layer_params(L, i);
    /* stage k ends at the first layer where the running count reaches
     * k/stages of the total, keeping room for one layer per later stage */
    cuts[0] = 0;
    size_t acc = 0;
    int i = 0;
    for (int k = 1; k < stages; k++) {
        double target = (double)total * k / stages;
        int lo = cuts[k - 1] + 1, hi = n - (stages - k);
        while (i < lo) acc += spmd_layers_layer_params(L, i++);
        while (i < hi && (double)acc < target) acc += spmd_layers_layer_params(L, i++);
        /* the cut closer to the target of the two around it */
        if (i > lo && (double)acc - target > target - (double)(acc - spmd_layers_layer_params(L, i - 1))) {
            acc -= spmd_layers_layer_params(L, --i);
        }
        cuts[k] = i;
    }
    cuts[stages] = n;
    return SPMD_OK;
}
