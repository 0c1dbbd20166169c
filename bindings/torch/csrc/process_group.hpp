// process_group.hpp — torch's backend interface over one spmd group: a
// c10d::ProcessGroup on torch 1.x, a c10d::Backend on 2.x (torch_compat.hpp).
#pragma once

#include <spmd/spmd.h>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_set>

#include "torch_compat.hpp"
#include "work.hpp"

namespace spmd_torch {

// The spmd group and its rendezvous store, released with the last user (the
// process group or a Work still holding handles).
struct GroupState {
  // Group rank 0 hosts the rendezvous store, except for the default group
  // under spmdrun, which forms on the agent's store (rendezvous.cpp): then
  // both are null and the spmd group keeps its own connection.
  spmd_store_server* server = nullptr;
  spmd_store* store = nullptr;
  spmd_group* group = nullptr;
  // The works alive on the group (each registers itself while it lives), so
  // that destroying the process group can tell whether an operation is
  // still running.
  std::mutex mu;
  std::unordered_set<WorkSpmd*> works;
  // spmd_torch.elastic (elastic.cpp): a recovery replaced this group and
  // destroys it itself; the process group over it refuses new operations.
  std::atomic<bool> retired{false};
  // The state whose store a shrunk or grown group still uses (elastic.cpp).
  std::shared_ptr<GroupState> parent;
  bool anyRunning();
  ~GroupState();
};

class ProcessGroupSpmd : public BackendBase {
 public:
  // Rendezvous through torch's store (rendezvous.cpp), or for the default
  // group (defaultGroup) under spmdrun on the agent's store; blocks until
  // every rank has joined or `timeout` passes.
  ProcessGroupSpmd(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                   std::chrono::milliseconds timeout, bool defaultGroup = false);
  // Over a group made by spmd_torch.elastic's recovery (elastic.cpp).
  ProcessGroupSpmd(std::shared_ptr<GroupState> state, std::chrono::milliseconds timeout);
  ~ProcessGroupSpmd() override;

  const std::string getBackendName() const override { return "spmd"; }

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors,
                                        const c10d::ReduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(
      std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs,
                                        std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs,
                                         std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
      at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                               std::vector<int64_t>& outputSplitSizes,
                                               std::vector<int64_t>& inputSplitSizes,
                                               const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs,
                                          std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override;
  // torch's monitored_barrier (monitored_barrier.cpp): a barrier through rank
  // 0 with a deadline (opts.timeout, else the group's) that names the ranks
  // that did not arrive, as gloo's does.
  void monitoredBarrier(const c10d::BarrierOptions& opts, bool waitAllRanks) override;
  // Sequence numbers, as gloo's: how many collectives this rank has issued
  // on the group (point-to-point ops not counted), from 0 on every rank.
  // torch's ProcessGroupWrapper (TORCH_DISTRIBUTED_DEBUG=DETAIL) compares
  // them across ranks before each collective to report a desync.
  void setSequenceNumberForGroup() override {}
  uint64_t getSequenceNumberForGroup() override { return seq_.load(); }
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dstRank,
                                      int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int srcRank,
                                      int tag) override;
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors,
                                               int tag) override;
#if SPMD_TORCH_BACKEND_API
  // torch 2.x: all_gather_into_tensor / reduce_scatter_tensor under
  // _coalescing_manager (FSDP).
  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::ReduceScatterOptions& opts) override;
#endif

  spmd_group* group() const { return group_; }
  const std::shared_ptr<GroupState>& state() const { return state_; }
  std::chrono::milliseconds timeout() const { return timeout_; }

 private:
  using WorkPtr = c10::intrusive_ptr<WorkSpmd>;
  // outputs: the op's result; inputs: what the profiler records (WorkSpmd);
  // timeout: the operation's own (its options'); kUnsetTimeout for none.
  WorkPtr newWork(c10d::OpType op, const char* what, std::vector<at::Tensor> outputs,
                  const std::vector<at::Tensor>& inputs,
                  std::chrono::milliseconds timeout = c10d::kUnsetTimeout);
  // Check an issue call's status; on failure the work fails with the group's
  // message.  Returns the work, queued on the completer (collectives).
  c10::intrusive_ptr<c10d::Work> issued(const WorkPtr& w, spmd_status st, bool collective);

  std::shared_ptr<GroupState> state_;
  spmd_group* group_ = nullptr;  // state_->group
  std::chrono::milliseconds timeout_;  // the group's (init_process_group's timeout)
  std::atomic<uint64_t> seq_{0};  // collectives issued (getSequenceNumberForGroup)
  unsigned monitoredBarriers_ = 0;  // how many this rank entered (their tags differ)
  std::shared_ptr<Completer> completer_;
};

// Rendezvous (rendezvous.cpp): the spmd store every rank of the group joins.
struct Rendezvous {
  spmd_store_server* server = nullptr;
  spmd_store* store = nullptr;
};
Rendezvous rendezvous(c10d::Store& torchStore, int rank, int size, std::chrono::milliseconds timeout);

// The default group under spmdrun (rendezvous.cpp): spmdrun's agent hosts an
// spmd store that outlives every worker, so the default group forms on it
// (spmd_group_init's env:// path, as spmd-train's does): no rank is special
// to a shrink, and a replacement finds the group there.
bool onLauncherStore();
// The spmd group name of this process's next default group on the agent's
// store ("torch", then "torch.1", ... when a program makes it again),
// published in the agent's store for joiners.
std::string launcherGroupName(std::chrono::milliseconds timeout);
// A replacement under spmdrun --on-failure replace: join the running default
// group when its ranks next grow (spmd_group_join).
c10::intrusive_ptr<BackendBase> joinDefaultGroup(std::chrono::milliseconds timeout);

}  // namespace spmd_torch
