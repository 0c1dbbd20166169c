// process_group.cpp — every c10d operation torch calls, issued on spmd's
// async collectives and point-to-point calls.  Each returns at once with a
// WorkSpmd; the operation runs on spmd's executor / progress thread.
#include "process_group.hpp"

#include <c10/util/Exception.h>

#include <algorithm>
#include <climits>

#include "sparse_allreduce.hpp"
#include "tensors.hpp"

namespace spmd_torch {

using c10d::OpType;

bool GroupState::anyRunning() {
  std::lock_guard<std::mutex> lock(mu);
  for (WorkSpmd* w : works)
    if (w->running()) return true;
  return false;
}

GroupState::~GroupState() {
  if (!retired) spmd_group_destroy(group);
  spmd_store_close(store);
  spmd_store_server_stop(server);
}

ProcessGroupSpmd::ProcessGroupSpmd(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                   int size, std::chrono::milliseconds timeout,
                                   bool defaultGroup)
    : BackendBase(rank, size), timeout_(timeout) {
  TORCH_CHECK(store, "spmd: no store given");
  auto state = std::make_shared<GroupState>();
  spmd_group_opts opts = SPMD_GROUP_OPTS_DEFAULT;
  std::string name = "torch";
  if (defaultGroup && onLauncherStore()) {
    name = launcherGroupName(timeout);  // opts.store NULL: spmd_group_init reaches the agent's
  } else {
    Rendezvous r = rendezvous(*store, rank, size, timeout);
    state->server = r.server;
    state->store = r.store;
    opts.store = r.store;
  }
  opts.rank = rank;
  opts.world_size = size;
  opts.timeout_ms = timeout.count() > 0 && timeout.count() < INT_MAX ? (int)timeout.count() : 0;
  opts.name = name.c_str();
  char err[512] = "";
  spmd_status st = spmd_group_init(&opts, &state->group, err, sizeof err);
  TORCH_CHECK(st == SPMD_OK, "spmd: rank ", rank, " of ", size,
              " could not form the process group: ", err);
  state_ = std::move(state);
  group_ = state_->group;
  completer_ = std::make_shared<Completer>();
  init();
}

ProcessGroupSpmd::ProcessGroupSpmd(std::shared_ptr<GroupState> state,
                                   std::chrono::milliseconds timeout)
    : BackendBase(spmd_group_rank(state->group), spmd_group_size(state->group)),
      state_(std::move(state)),
      group_(state_->group),
      timeout_(timeout),
      completer_(std::make_shared<Completer>()) {
  init();
}

ProcessGroupSpmd::~ProcessGroupSpmd() {
  // Operations still running would wait for ranks that may never issue them
  // (a Work kept by Python keeps the spmd group): break the group so they
  // fail at once, then drain.
  if (!state_->retired && (!completer_->idle() || state_->anyRunning()))
    spmd_group_abort(group_, "the torch process group was destroyed with operations pending");
  completer_->stop();
}

ProcessGroupSpmd::WorkPtr ProcessGroupSpmd::newWork(OpType op, const char* what,
                                                   std::vector<at::Tensor> outputs,
                                                   const std::vector<at::Tensor>& inputs,
                                                   std::chrono::milliseconds timeout) {
  TORCH_CHECK(!state_->retired, "spmd ", what, ": rank ", rank_,
              ": this process group was replaced by spmd_torch.elastic's recovery; "
              "use the group recover() returned");
  if (op != OpType::SEND && op != OpType::RECV && op != OpType::RECVANYSOURCE) seq_++;
  auto w = c10::make_intrusive<WorkSpmd>(rank_, op, what, std::move(outputs), inputs);
  w->keepGroup(state_);
  w->setTimeout(timeout);
  return w;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupSpmd::issued(const WorkPtr& w, spmd_status st,
                                                        bool collective) {
  if (st != SPMD_OK) {
    w->fail(std::string("spmd: rank ") + std::to_string(rank_) + ": " +
            spmd_group_errmsg(group_) + " (" + spmd_status_name(st) + ")");
  } else if (collective) {
    w->setCompleter(completer_);  // queued there once someone asks for its future
  }
  return w;
}

#define SPMD_ISSUE(w, call, collective)          \
  do {                                           \
    spmd_work* h_ = nullptr;                     \
    spmd_status st_ = (call);                    \
    if (h_) (w)->addHandle(h_);                  \
    return issued((w), st_, (collective));       \
  } while (0)

c10::intrusive_ptr<c10d::Work> ProcessGroupSpmd::broadcast(std::vector<at::Tensor>& tensors,
                                                           const c10d::BroadcastOptions& opts) {
  const at::Tensor& t = single(tensors, "broadcast");
  auto w = newWork(OpType::BROADCAST, "broadcast", tensors, tensors, opts.timeout);
  SPMD_ISSUE(w, spmd_broadcast_async(group_, t.data_ptr(), t.nbytes(), SPMD_U8,
                                     (int)opts.rootRank, nullptr, &h_), true);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupSpmd::allreduce(std::vector<at::Tensor>& tensors,
                                                           const c10d::AllreduceOptions& opts) {
  if (tensors.size() == 1 && tensors[0].is_sparse()) {  // gloo's sparse COO all_reduce (blocking)
    TORCH_CHECK(opts.reduceOp == c10d::ReduceOp::SUM,
                "spmd allreduce: sparse tensors can only be summed (ReduceOp.SUM)");
    tensors[0].copy_(sparseAllReduceSum(group_, tensors[0]));
    return issued(newWork(OpType::ALLREDUCE, "allreduce", tensors, tensors, opts.timeout),
                  SPMD_OK, false);
  }
  const at::Tensor& t = single(tensors, "allreduce");
  spmd_dtype dt = reduceDtype(t, "allreduce");
  spmd_op op = reduceOp(opts.reduceOp, t, "allreduce");
  auto w = newWork(OpType::ALLREDUCE, "allreduce", tensors, tensors, opts.timeout);
  SPMD_ISSUE(w, spmd_all_reduce_async(group_, t.data_ptr(), t.data_ptr(), (size_t)t.numel(), dt,
                                      op, nullptr, &h_), true);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupSpmd::allreduce_coalesced(
    std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) {
  const char* what = "allreduce_coalesced";
  TORCH_CHECK(!tensors.empty(), "spmd allreduce_coalesced: no tensors");
  // One flat buffer and one all_reduce per dtype, in the order the dtypes
  // first appear (the same on every rank: the ranks pass the same list).
  std::vector<std::vector<at::Tensor>> byType;
  for (const at::Tensor& t : tensors) {
    checkTensor(t, what);
    auto it = std::find_if(byType.begin(), byType.end(), [&](const std::vector<at::Tensor>& g) {
      return g[0].scalar_type() == t.scalar_type();
    });
    if (it == byType.end())
      byType.push_back({t});
    else
      it->push_back(t);
  }
  std::vector<at::Tensor> flats;
  std::vector<spmd_dtype> dts;
  std::vector<spmd_op> ops;
  for (const auto& g : byType) {
    flats.push_back(flatten(g));
    dts.push_back(reduceDtype(flats.back(), what));
    ops.push_back(reduceOp(opts.reduceOp, flats.back(), what));
  }
  auto w = newWork(OpType::ALLREDUCE_COALESCED, what, tensors, tensors, opts.timeout);
  for (const at::Tensor& f : flats) w->keepAlive(f);
  w->onSuccess([flats, byType] {
    for (size_t i = 0; i < flats.size(); i++) unflatten(flats[i], byType[i]);
  });
  for (size_t i = 0; i < flats.size(); i++) {
    spmd_work* h = nullptr;
    spmd_status st = spmd_all_reduce_async(group_, flats[i].data_ptr(), flats[i].data_ptr(),
                                           (size_t)flats[i].numel(), dts[i], ops[i], nullptr, &h);
    if (h) w->addHandle(h);
    if (st != SPMD_OK) return issued(w, st, true);
  }
  return issued(w, SPMD_OK, true);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupSpmd::reduce(std::vector<at::Tensor>& tensors,
                                                        const c10d::ReduceOptions& opts) {
  const at::Tensor& t = single(tensors, "reduce");
  spmd_dtype dt = reduceDtype(t, "reduce");
  spmd_op op = reduceOp(opts.reduceOp, t, "reduce");
  auto w = newWork(OpType::REDUCE, "reduce", tensors, tensors, opts.timeout);
  SPMD_ISSUE(w, spmd_reduce_async(group_, t.data_ptr(), t.data_ptr(), (size_t)t.numel(), dt, op,
                                  (int)opts.rootRank, nullptr, &h_), true);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupSpmd::allgather(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) {
  const at::Tensor& in = single(inputs, "allgather");
  TORCH_CHECK(outputs.size() == 1 && (int)outputs[0].size() == size_,
              "spmd allgather: expected one output list of ", size_, " tensors");
  checkSameShape(outputs[0], in, "allgather");
  std::vector<void*> bufs;
  for (at::Tensor& o : outputs[0]) bufs.push_back(o.data_ptr());
  auto w = newWork(OpType::ALLGATHER, "allgather", outputs[0], inputs, opts.timeout);
  w->keepAlive(in);
  SPMD_ISSUE(w, spmd_all_gather_list_async(group_, in.data_ptr(), bufs.data(), in.nbytes(),
                                           SPMD_U8, nullptr, &h_), true);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupSpmd::_allgather_base(at::Tensor& output,
                                                                 at::Tensor& input,
                                                                 const c10d::AllgatherOptions& opts) {
  checkTensor(input, "_allgather_base");
  checkTensor(output, "_allgather_base");
  TORCH_CHECK(output.scalar_type() == input.scalar_type() &&
                  output.numel() == input.numel() * size_,
              "spmd _allgather_base: the output must hold world_size (", size_,
              ") times the input's elements, of the same dtype");
  auto w = newWork(OpType::_ALLGATHER_BASE, "_allgather_base", {output}, {input}, opts.timeout);
  w->keepAlive(input);
  SPMD_ISSUE(w, spmd_all_gather_async(group_, input.data_ptr(), output.data_ptr(), input.nbytes(),
                                      SPMD_U8, nullptr, &h_), true);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupSpmd::allgather_coalesced(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) {
  TORCH_CHECK(!inputs.empty(), "spmd allgather_coalesced: no tensors");
  TORCH_CHECK((int)outputs.size() == size_, "spmd allgather_coalesced: expected ", size_,
              " output lists");
  for (auto& list : outputs) {
    TORCH_CHECK(list.size() == inputs.size(),
                "spmd allgather_coalesced: every output list must match the inputs");
    for (size_t i = 0; i < list.size(); i++) checkSameShape({list[i]}, inputs[i], "allgather_coalesced");
  }
  at::Tensor flat = flatten(inputs);
  at::Tensor all = at::empty({flat.numel() * size_}, flat.options());
  std::vector<at::Tensor> outs;
  for (auto& list : outputs) outs.insert(outs.end(), list.begin(), list.end());
  auto w = newWork(OpType::ALLGATHER_COALESCED, "allgather_coalesced", outs, inputs, opts.timeout);
  w->keepAlive(flat);
  w->keepAlive(all);
  w->onSuccess([all, outs] { unflatten(all, outs); });
  SPMD_ISSUE(w, spmd_all_gather_async(group_, flat.data_ptr(), all.data_ptr(), flat.nbytes(),
                                      SPMD_U8, nullptr, &h_), true);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupSpmd::gather(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::GatherOptions& opts) {
  const at::Tensor& in = single(inputs, "gather");
  const int root = (int)opts.rootRank;
  TORCH_CHECK(root >= 0 && root < size_, "spmd gather: root ", root, " out of range");
  at::Tensor all;
  std::vector<at::Tensor> outs;
  if (rank_ == root) {
    TORCH_CHECK(outputs.size() == 1 && (int)outputs[0].size() == size_,
                "spmd gather: the root needs one output list of ", size_, " tensors");
    checkSameShape(outputs[0], in, "gather");
    outs = outputs[0];
    all = at::empty({in.numel() * size_}, in.options());
  } else {
    TORCH_CHECK(outputs.empty() || (outputs.size() == 1 && outputs[0].empty()),
                "spmd gather: only the root (", root, ") takes output tensors");
  }
  auto w = newWork(OpType::GATHER, "gather", outs, inputs, opts.timeout);
  w->keepAlive(in);
  if (all.defined()) {
    w->keepAlive(all);
    w->onSuccess([all, outs] { unflatten(all, outs); });
  }
  SPMD_ISSUE(w, spmd_gather_async(group_, in.data_ptr(), all.defined() ? all.data_ptr() : nullptr,
                                  in.nbytes(), SPMD_U8, root, nullptr, &h_), true);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupSpmd::scatter(
    std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
    const c10d::ScatterOptions& opts) {
  const at::Tensor& out = single(outputs, "scatter");
  const int root = (int)opts.rootRank;
  TORCH_CHECK(root >= 0 && root < size_, "spmd scatter: root ", root, " out of range");
  at::Tensor all;
  if (rank_ == root) {
    TORCH_CHECK(inputs.size() == 1 && (int)inputs[0].size() == size_,
                "spmd scatter: the root needs one input list of ", size_, " tensors");
    checkSameShape(inputs[0], out, "scatter");
    all = flatten(inputs[0]);
  } else {
    TORCH_CHECK(inputs.empty() || (inputs.size() == 1 && inputs[0].empty()),
                "spmd scatter: only the root (", root, ") takes input tensors");
  }
  auto w = newWork(OpType::SCATTER, "scatter", outputs,
                   inputs.empty() ? std::vector<at::Tensor>{} : inputs[0], opts.timeout);
  if (all.defined()) w->keepAlive(all);
  SPMD_ISSUE(w, spmd_scatter_async(group_, all.defined() ? all.data_ptr() : nullptr,
                                   out.data_ptr(), out.nbytes(), SPMD_U8, root, nullptr, &h_),
             true);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupSpmd::reduce_scatter(
    std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
    const c10d::ReduceScatterOptions& opts) {
  const at::Tensor& out = single(outputs, "reduce_scatter");
  TORCH_CHECK(inputs.size() == 1 && (int)inputs[0].size() == size_,
              "spmd reduce_scatter: expected one input list of ", size_, " tensors");
  checkSameShape(inputs[0], out, "reduce_scatter");
  spmd_dtype dt = reduceDtype(out, "reduce_scatter");
  spmd_op op = reduceOp(opts.reduceOp, out, "reduce_scatter");
  at::Tensor all = flatten(inputs[0]);
  auto w = newWork(OpType::REDUCE_SCATTER, "reduce_scatter", outputs, outputs, opts.timeout);
  w->keepAlive(all);
  SPMD_ISSUE(w, spmd_reduce_scatter_async(group_, all.data_ptr(), out.data_ptr(),
                                          (size_t)out.numel(), dt, op, nullptr, &h_), true);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupSpmd::_reduce_scatter_base(
    at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) {
  checkTensor(input, "_reduce_scatter_base");
  checkTensor(output, "_reduce_scatter_base");
  TORCH_CHECK(output.scalar_type() == input.scalar_type() &&
                  input.numel() == output.numel() * size_,
              "spmd _reduce_scatter_base: the input must hold world_size (", size_,
              ") times the output's elements, of the same dtype");
  spmd_dtype dt = reduceDtype(output, "_reduce_scatter_base");
  spmd_op op = reduceOp(opts.reduceOp, output, "_reduce_scatter_base");
  auto w = newWork(OpType::_REDUCE_SCATTER_BASE, "_reduce_scatter_base", {output}, {output},
                   opts.timeout);
  w->keepAlive(input);
  SPMD_ISSUE(w, spmd_reduce_scatter_async(group_, input.data_ptr(), output.data_ptr(),
                                          (size_t)output.numel(), dt, op, nullptr, &h_), true);
}

#if SPMD_TORCH_BACKEND_API
namespace {
// The pairs of a coalesced op: as many outputs as inputs.
void checkPairs(const std::vector<at::Tensor>& outputs, const std::vector<at::Tensor>& inputs,
                const char* what) {
  TORCH_CHECK(!inputs.empty() && outputs.size() == inputs.size(), "spmd ", what,
              ": expected as many outputs as inputs (", outputs.size(), " and ", inputs.size(),
              ")");
}
}  // namespace

// One spmd collective per pair, issued in order on one work.
c10::intrusive_ptr<c10d::Work> ProcessGroupSpmd::allgather_into_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) {
  const char* what = "allgather_into_tensor_coalesced";
  checkPairs(outputs, inputs, what);
  for (size_t i = 0; i < inputs.size(); i++) {
    checkTensor(inputs[i], what);
    checkTensor(outputs[i], what);
    TORCH_CHECK(outputs[i].scalar_type() == inputs[i].scalar_type() &&
                    outputs[i].numel() == inputs[i].numel() * size_,
                "spmd ", what, ": output ", i, " must hold world_size (", size_,
                ") times input ", i, "'s elements, of the same dtype");
  }
  auto w = newWork(OpType::COALESCED, what, outputs, inputs, opts.timeout);
  for (size_t i = 0; i < inputs.size(); i++) {
    w->keepAlive(inputs[i]);
    spmd_work* h = nullptr;
    spmd_status st = spmd_all_gather_async(group_, inputs[i].data_ptr(), outputs[i].data_ptr(),
                                           inputs[i].nbytes(), SPMD_U8, nullptr, &h);
    if (h) w->addHandle(h);
    if (st != SPMD_OK) return issued(w, st, true);
  }
  return issued(w, SPMD_OK, true);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupSpmd::reduce_scatter_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::ReduceScatterOptions& opts) {
  const char* what = "reduce_scatter_tensor_coalesced";
  checkPairs(outputs, inputs, what);
  std::vector<spmd_dtype> dts;
  std::vector<spmd_op> ops;
  for (size_t i = 0; i < inputs.size(); i++) {
    checkTensor(inputs[i], what);
    checkTensor(outputs[i], what);
    TORCH_CHECK(outputs[i].scalar_type() == inputs[i].scalar_type() &&
                    inputs[i].numel() == outputs[i].numel() * size_,
                "spmd ", what, ": input ", i, " must hold world_size (", size_,
                ") times output ", i, "'s elements, of the same dtype");
    dts.push_back(reduceDtype(outputs[i], what));
    ops.push_back(reduceOp(opts.reduceOp, outputs[i], what));
  }
  auto w = newWork(OpType::COALESCED, what, outputs, inputs, opts.timeout);
  for (size_t i = 0; i < inputs.size(); i++) {
    w->keepAlive(inputs[i]);
    spmd_work* h = nullptr;
    spmd_status st = spmd_reduce_scatter_async(group_, inputs[i].data_ptr(),
                                               outputs[i].data_ptr(), (size_t)outputs[i].numel(),
                                               dts[i], ops[i], nullptr, &h);
    if (h) w->addHandle(h);
    if (st != SPMD_OK) return issued(w, st, true);
  }
  return issued(w, SPMD_OK, true);
}
#endif

namespace {
// Byte counts and displacements of an all-to-all over the first dimension.
void splitBytes(const at::Tensor& t, const std::vector<int64_t>& splits, int size,
                std::vector<size_t>& counts, std::vector<size_t>& displs, const char* side) {
  const int64_t rows = t.dim() > 0 ? t.size(0) : 1;
  const size_t rowBytes = rows > 0 ? t.nbytes() / (size_t)rows : 0;
  counts.assign(size, 0);
  displs.assign(size, 0);
  int64_t total = 0;
  for (int i = 0; i < size; i++) {
    int64_t n = splits.empty() ? rows / size : splits[i];
    TORCH_CHECK(n >= 0, "spmd alltoall_base: negative ", side, " split");
    counts[i] = (size_t)n * rowBytes;
    displs[i] = (size_t)total * rowBytes;
    total += n;
  }
  TORCH_CHECK(splits.empty() || (int)splits.size() == size, "spmd alltoall_base: ", side,
              " splits must have world_size (", size, ") entries, got ", splits.size());
  TORCH_CHECK(splits.empty() ? rows % size == 0 : total == rows, "spmd alltoall_base: the ",
              side, " tensor's first dimension (", rows, ") does not match its splits",
              splits.empty() ? " (it must divide by world_size)" : "");
}
}  // namespace

c10::intrusive_ptr<c10d::Work> ProcessGroupSpmd::alltoall_base(
    at::Tensor& output, at::Tensor& input, std::vector<int64_t>& outputSplitSizes,
    std::vector<int64_t>& inputSplitSizes, const c10d::AllToAllOptions& opts) {
  checkTensor(input, "alltoall_base");
  checkTensor(output, "alltoall_base");
  TORCH_CHECK(output.scalar_type() == input.scalar_type(), "spmd alltoall_base: dtypes differ (",
              input.scalar_type(), " in, ", output.scalar_type(), " out)");
  auto w = newWork(OpType::ALLTOALL_BASE, "alltoall_base", {output}, {input}, opts.timeout);
  w->keepAlive(input);
  if (outputSplitSizes.empty() && inputSplitSizes.empty()) {
    TORCH_CHECK(input.numel() == output.numel() && input.nbytes() % size_ == 0,
                "spmd alltoall_base: input and output must have the same size, divisible by "
                "world_size");
    SPMD_ISSUE(w, spmd_all_to_all_async(group_, input.data_ptr(), output.data_ptr(),
                                        input.nbytes() / size_, SPMD_U8, nullptr, &h_), true);
  }
  std::vector<size_t> sc, sd, rc, rd;
  splitBytes(input, inputSplitSizes, size_, sc, sd, "input");
  splitBytes(output, outputSplitSizes, size_, rc, rd, "output");
  SPMD_ISSUE(w, spmd_all_to_all_v_async(group_, input.data_ptr(), sc.data(), sd.data(),
                                        output.data_ptr(), rc.data(), rd.data(), SPMD_U8,
                                        nullptr, &h_), true);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupSpmd::alltoall(std::vector<at::Tensor>& outputs,
                                                          std::vector<at::Tensor>& inputs,
                                                          const c10d::AllToAllOptions& opts) {
  TORCH_CHECK((int)outputs.size() == size_ && (int)inputs.size() == size_,
              "spmd alltoall: expected ", size_, " input and output tensors");
  std::vector<size_t> sc, sd, rc, rd;
  size_t soff = 0, roff = 0;
  for (int i = 0; i < size_; i++) {
    checkTensor(inputs[i], "alltoall");
    checkTensor(outputs[i], "alltoall");
    TORCH_CHECK(inputs[i].scalar_type() == inputs[0].scalar_type() &&
                    outputs[i].scalar_type() == inputs[0].scalar_type(),
                "spmd alltoall: every tensor must have one dtype");
    sc.push_back(inputs[i].nbytes());
    sd.push_back(soff);
    soff += inputs[i].nbytes();
    rc.push_back(outputs[i].nbytes());
    rd.push_back(roff);
    roff += outputs[i].nbytes();
  }
  at::Tensor in = flatten(inputs);
  at::Tensor out = at::empty({(int64_t)(roff / inputs[0].element_size())}, in.options());
  auto w = newWork(OpType::ALLTOALL, "alltoall", outputs, inputs, opts.timeout);
  w->keepAlive(in);
  w->keepAlive(out);
  std::vector<at::Tensor> outs = outputs;
  w->onSuccess([out, outs] { unflatten(out, outs); });
  SPMD_ISSUE(w, spmd_all_to_all_v_async(group_, in.data_ptr(), sc.data(), sd.data(),
                                        out.data_ptr(), rc.data(), rd.data(), SPMD_U8, nullptr,
                                        &h_), true);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupSpmd::barrier(const c10d::BarrierOptions& opts) {
  auto w = newWork(OpType::BARRIER, "barrier", {}, {}, opts.timeout);
  SPMD_ISSUE(w, spmd_barrier_async(group_, nullptr, &h_), true);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupSpmd::send(std::vector<at::Tensor>& tensors,
                                                      int dstRank, int tag) {
  const at::Tensor& t = single(tensors, "send");
  auto w = newWork(OpType::SEND, "send", tensors, tensors);
  SPMD_ISSUE(w, spmd_isend(group_, t.data_ptr(), t.nbytes(), SPMD_U8, dstRank, tag, &h_), false);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupSpmd::recv(std::vector<at::Tensor>& tensors,
                                                      int srcRank, int tag) {
  const at::Tensor& t = single(tensors, "recv");
  auto w = newWork(OpType::RECV, "recv", tensors, tensors);
  SPMD_ISSUE(w, spmd_irecv(group_, t.data_ptr(), t.nbytes(), SPMD_U8, srcRank, tag, &h_), false);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupSpmd::recvAnysource(std::vector<at::Tensor>& tensors,
                                                               int tag) {
  const at::Tensor& t = single(tensors, "recv");
  auto w = newWork(OpType::RECVANYSOURCE, "recv", tensors, tensors);
  SPMD_ISSUE(w, spmd_irecv(group_, t.data_ptr(), t.nbytes(), SPMD_U8, SPMD_ANY_SOURCE, tag, &h_),
             false);
}

}  // namespace spmd_torch
