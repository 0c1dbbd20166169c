// tensors.hpp — checks and conversions between torch tensors and spmd buffers.
#pragma once

#include <ATen/ATen.h>
#include <spmd/spmd.h>
#include <torch/csrc/distributed/c10d/Types.hpp>

#include <string>
#include <vector>

namespace spmd_torch {

// A dense contiguous CPU tensor, or a clear error naming `what` and the cause.
void checkTensor(const at::Tensor& t, const char* what);
// Exactly one tensor in the list (spmd is CPU-only: one tensor per rank).
const at::Tensor& single(const std::vector<at::Tensor>& ts, const char* what);
// Every tensor has the dtype and number of elements of `like`.
void checkSameShape(const std::vector<at::Tensor>& ts, const at::Tensor& like, const char* what);

// The spmd dtype and op that reduce `t` with torch's `op` (bool reduces as
// logical or/and on bytes); an error names a dtype or op spmd cannot reduce.
spmd_dtype reduceDtype(const at::Tensor& t, const char* what);
spmd_op reduceOp(const c10d::ReduceOp& op, const at::Tensor& t, const char* what);

// All tensors flattened into one new contiguous 1-D tensor, and back.
at::Tensor flatten(const std::vector<at::Tensor>& ts);
void unflatten(const at::Tensor& flat, const std::vector<at::Tensor>& ts);

}  // namespace spmd_torch
