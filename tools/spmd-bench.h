/* spmd-bench.h — what spmd-bench's files share: the operation, the options,
 * and the data checks (spmd-bench-check.c). */
#ifndef SPMD_TOOLS_SPMD_BENCH_H
#define SPMD_TOOLS_SPMD_BENCH_H

#include <stddef.h>
#include "spmd/spmd.h"

typedef enum { O_ALL_REDUCE, O_BROADCAST, O_REDUCE, O_ALL_GATHER, O_REDUCE_SCATTER, O_ALL_TO_ALL,
               O_GATHER, O_SCATTER, O_BARRIER, O_PINGPONG, O_BW } op_t;

typedef struct {
    size_t min_bytes, max_bytes, step_bytes;
    double factor;
    int iters, warmup, check, root, np;
    int min_ms;          /* --min-ms: each size's timed loop lasts at least this long (0: -n only) */
    op_t op;
    const char *opname;
    spmd_dtype dt;
    spmd_op redop;
    const char *algo, *csv, *plot;
    int inplace_only, outplace_only;
    int all_dtypes;      /* -d all: one table per datatype, as nccl-tests */
} opts_t;

/* Fill this rank's buffers for the measured collective (values checked by
 * spmd__bench_count_wrong). */
void spmd__bench_fill(const opts_t *o, int rank, int w, void *sendb, void *recvb, size_t count, int inplace);
/* Elements of this rank's result that differ from what it must hold. */
long spmd__bench_count_wrong(const opts_t *o, int rank, int w, const void *recvb, size_t count, int inplace);

#endif
