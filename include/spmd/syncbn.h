/* spmd/syncbn.h — SyncBatchNorm: BatchNorm2d whose batch statistics are
 * computed over the whole global batch, across ranks (torch.nn.SyncBatchNorm).
 *
 * Same layout and semantics as spmd_batchnorm_forward/backward (spmd/nn.h):
 * activations are (C, B, H, W), eps 1e-5, momentum 0.1, biased variance for
 * normalising, unbiased (over the global count) for running_var.  The only
 * difference: the per-channel sums go through `reduce`, which must sum a
 * double array in place over every rank (e.g. spmd_syncbn_group_reduce with a
 * group).  Ranks may hold different batch sizes.
 *
 * Gradients: dgamma/dbeta are this rank's contributions (DDP averages them as
 * for any parameter); dinp is the gradient of the sum of all ranks' losses
 * with respect to this rank's inputs, which after DDP's division by the world
 * size equals single-process BatchNorm on the concatenated batch. */
#ifndef SPMD_SYNCBN_H
#define SPMD_SYNCBN_H

#include <stddef.h>
#include "spmd/group.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef spmd_status (*spmd_syncbn_reduce_fn)(void *ctx, double *buf, size_t n);

/* reduce = spmd_all_reduce(SUM, float64) on the group passed as ctx. */
spmd_status spmd_syncbn_group_reduce(void *group, double *buf, size_t n);

/* Training-mode forward.  mean/rstd (C) are saved for backward.  scratch
 * holds 2*C + 1 doubles. */
spmd_status spmd_syncbn_forward(float *out, float *mean, float *rstd, const float *inp, const float *gamma,
                                const float *beta, float *running_mean, float *running_var, int C, int B,
                                int HW, spmd_syncbn_reduce_fn reduce, void *ctx, double *scratch);
/* Backward of the training-mode forward.  dgamma/dbeta +=; dinp = (or +=
 * when acc).  scratch holds 2*C + 1 doubles. */
spmd_status spmd_syncbn_backward(float *dinp, float *dgamma, float *dbeta, const float *dout,
                                 const float *inp, const float *mean, const float *rstd, const float *gamma,
                                 int C, int B, int HW, int acc, spmd_syncbn_reduce_fn reduce, void *ctx,
                                 double *scratch);

#ifdef __cplusplus
}
#endif
#endif
