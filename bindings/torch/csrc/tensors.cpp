// tensors.cpp — see tensors.hpp.
#include "tensors.hpp"

#include <c10/util/Exception.h>

namespace spmd_torch {

void checkTensor(const at::Tensor& t, const char* what) {
  TORCH_CHECK(t.defined(), "spmd ", what, ": undefined tensor");
  TORCH_CHECK(t.device().is_cpu(), "spmd ", what, ": tensor on ", t.device(),
              "; the spmd backend handles CPU tensors only");
  TORCH_CHECK(t.layout() == at::kStrided, "spmd ", what, ": only dense (strided) tensors");
  TORCH_CHECK(t.is_contiguous(), "spmd ", what,
              ": the tensor is not contiguous; pass tensor.contiguous() and copy the result back");
}

const at::Tensor& single(const std::vector<at::Tensor>& ts, const char* what) {
  TORCH_CHECK(ts.size() == 1, "spmd ", what, ": expected one tensor per rank, got ", ts.size());
  checkTensor(ts[0], what);
  return ts[0];
}

void checkSameShape(const std::vector<at::Tensor>& ts, const at::Tensor& like, const char* what) {
  for (const at::Tensor& t : ts) {
    checkTensor(t, what);
    TORCH_CHECK(t.scalar_type() == like.scalar_type(), "spmd ", what, ": dtype ",
                t.scalar_type(), " differs from ", like.scalar_type());
    TORCH_CHECK(t.numel() == like.numel(), "spmd ", what, ": tensor of ", t.numel(),
                " elements where ", like.numel(), " were expected");
  }
}

spmd_dtype reduceDtype(const at::Tensor& t, const char* what) {
  switch (t.scalar_type()) {
    case at::kFloat: return SPMD_F32;
    case at::kDouble: return SPMD_F64;
    case at::kHalf: return SPMD_F16;
    case at::kBFloat16: return SPMD_BF16;
    case at::kChar: return SPMD_I8;
    case at::kByte: return SPMD_U8;
    case at::kBool: return SPMD_U8;
    case at::kInt: return SPMD_I32;
    case at::kLong: return SPMD_I64;
    default:
      TORCH_CHECK(false, "spmd ", what, ": spmd cannot reduce dtype ", t.scalar_type(),
                  " (float32/64, float16, bfloat16, int8, uint8, int32, int64 and bool can be)");
  }
}

spmd_op reduceOp(const c10d::ReduceOp& op, const at::Tensor& t, const char* what) {
  const bool isBool = t.scalar_type() == at::kBool;
  switch (op.op_) {
    case c10d::ReduceOp::SUM: return isBool ? SPMD_BOR : SPMD_SUM;
    case c10d::ReduceOp::MAX: return isBool ? SPMD_BOR : SPMD_MAX;
    case c10d::ReduceOp::PRODUCT: return isBool ? SPMD_BAND : SPMD_PROD;
    case c10d::ReduceOp::MIN: return isBool ? SPMD_BAND : SPMD_MIN;
    case c10d::ReduceOp::BAND: return SPMD_BAND;
    case c10d::ReduceOp::BOR: return SPMD_BOR;
    case c10d::ReduceOp::BXOR: return SPMD_BXOR;
    case c10d::ReduceOp::AVG:
      TORCH_CHECK(!isBool, "spmd ", what, ": ReduceOp.AVG of a bool tensor");
      return SPMD_AVG;
    default:
      TORCH_CHECK(false, "spmd ", what, ": reduce op ", (int)op.op_,
                  " is not supported (PREMUL_SUM is NCCL's)");
  }
}

at::Tensor flatten(const std::vector<at::Tensor>& ts) {
  std::vector<at::Tensor> flat;
  flat.reserve(ts.size());
  for (const at::Tensor& t : ts) flat.push_back(t.reshape({-1}));
  return at::cat(flat);
}

void unflatten(const at::Tensor& flat, const std::vector<at::Tensor>& ts) {
  int64_t off = 0;
  for (const at::Tensor& t : ts) {
    t.view({-1}).copy_(flat.narrow(0, off, t.numel()));
    off += t.numel();
  }
}

}  // namespace spmd_torch
