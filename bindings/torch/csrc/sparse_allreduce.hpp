// sparse_allreduce.hpp — all_reduce(SUM) of a sparse COO tensor, as gloo
// offers it on CPU: the ranks' nonzeros are gathered and summed.
#pragma once

#include <ATen/ATen.h>

#include "spmd/spmd.h"

namespace spmd_torch {

// The sum over the group of every rank's `t` (sparse COO, same sizes on
// every rank), coalesced.  Blocking; throws c10::Error naming the failure.
at::Tensor sparseAllReduceSum(spmd_group* g, const at::Tensor& t);

}  // namespace spmd_torch
