// sparse_allreduce.cpp — see sparse_allreduce.hpp.
#include "sparse_allreduce.hpp"

#include <c10/util/Exception.h>

#include <algorithm>
#include <string>
#include <vector>

namespace spmd_torch {
namespace {

// One all_gather of `bytes` bytes per rank, waited for.
void gatherBytes(spmd_group* g, const void* send, void* recv, size_t bytes) {
  spmd_work* w = nullptr;
  spmd_status st = spmd_all_gather_async(g, send, recv, bytes, SPMD_U8, nullptr, &w);
  std::string err = st == SPMD_OK ? "" : spmd_group_errmsg(g);
  if (w) {
    st = spmd_work_wait(w, -1);
    if (st != SPMD_OK) err = spmd_work_errmsg(w);
    spmd_work_free(w);
  }
  TORCH_CHECK(st == SPMD_OK, "spmd sparse allreduce failed: ", err, " (", spmd_status_name(st),
              ")");
}

// `rows` (n rows) padded with zero rows to `n_max` rows.
at::Tensor padRows(const at::Tensor& rows, int64_t n_max) {
  std::vector<int64_t> sizes = rows.sizes().vec();
  sizes[0] = n_max;
  at::Tensor out = at::zeros(sizes, rows.options());
  out.narrow(0, 0, rows.size(0)).copy_(rows);
  return out;
}

}  // namespace

at::Tensor sparseAllReduceSum(spmd_group* g, const at::Tensor& t) {
  TORCH_CHECK(t.is_sparse() && t.device().is_cpu(),
              "spmd allreduce: sparse tensors must be sparse COO on the CPU");
  const int world = spmd_group_size(g);
  at::Tensor c = t.coalesce();
  // Nonzeros one per row: indices [nnz, sparse_dim], values [nnz, dense...].
  at::Tensor idx = c._indices().t().contiguous();
  at::Tensor val = c._values().contiguous();
  int64_t nnz = idx.size(0);
  std::vector<int64_t> counts(world);
  gatherBytes(g, &nnz, counts.data(), sizeof nnz);
  int64_t n_max = 0;
  for (int64_t n : counts) n_max = std::max(n_max, n);
  at::Tensor idxPad = padRows(idx, n_max), valPad = padRows(val, n_max);
  std::vector<int64_t> idxAllSizes = idxPad.sizes().vec(), valAllSizes = valPad.sizes().vec();
  idxAllSizes.insert(idxAllSizes.begin(), world);
  valAllSizes.insert(valAllSizes.begin(), world);
  at::Tensor idxAll = at::empty(idxAllSizes, idxPad.options());
  at::Tensor valAll = at::empty(valAllSizes, valPad.options());
  gatherBytes(g, idxPad.data_ptr(), idxAll.data_ptr(), idxPad.nbytes());
  gatherBytes(g, valPad.data_ptr(), valAll.data_ptr(), valPad.nbytes());
  std::vector<at::Tensor> idxParts, valParts;
  for (int r = 0; r < world; r++) {
    idxParts.push_back(idxAll[r].narrow(0, 0, counts[r]));
    valParts.push_back(valAll[r].narrow(0, 0, counts[r]));
  }
  return at::sparse_coo_tensor(at::cat(idxParts).t(), at::cat(valParts), t.sizes(), t.options())
      .coalesce();
}

}  // namespace spmd_torch
