// work.hpp — torch Work objects for the spmd backend, and the per-group
// executor thread that runs its collectives.
//
// Collectives run as spmd's *blocking* calls, one at a time in issue order,
// on the group's executor thread — or on the thread that waits for one when
// it is next in line and nothing is running (a blocking dist.all_reduce then
// costs what spmd_all_reduce costs, with no hand-off, and spmd may use
// cross-memory attach for large messages because the caller waits).  So the
// op runs in the background after the call returns, getFuture() completes
// without anyone calling wait() (DDP's comm hooks), and ranks stay matched.
// Point-to-point ops are spmd's async handles, waited for by whoever waits.
#pragma once

#include <spmd/spmd.h>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <ATen/core/ivalue.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace spmd_torch {

class Executor;

// One torch operation: either a collective to run (a blocking spmd call
// returning an error message, "" on success) or spmd p2p handles; the
// tensors it writes (its result), buffers that must live until it ends, and
// a step run on success (copying a packed buffer back into a list).
class WorkSpmd : public c10d::Work {
 public:
  WorkSpmd(int rank, c10d::OpType op, const char* what, std::vector<at::Tensor> outputs);
  ~WorkSpmd() override;

  void setRun(std::function<std::string()> fn) { run_ = std::move(fn); }
  void addHandle(spmd_work* w) { handles_.push_back(w); }
  void keepAlive(at::Tensor t) { keep_.push_back(std::move(t)); }
  void onSuccess(std::function<void()> fn) { post_ = std::move(fn); }
  // The spmd group must outlive every handle on it (a Work may outlive its
  // process group in Python).
  void keepGroup(std::shared_ptr<void> g) { group_ = std::move(g); }
  void setExecutor(Executor* e) { exec_ = e; }

  bool isCompleted() override;
  bool isSuccess() const override;
  std::exception_ptr exception() const override;
  int sourceRank() const override;
  std::vector<at::Tensor> result() override;
  void synchronize() override {}
  bool wait(std::chrono::milliseconds timeout = kNoTimeout) override;
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;

  // Run the collective (executor or a helping waiter) and finish.
  void execute();
  // p2p: wait for the handles and finish, unless another thread does.
  void driveHandles();
  // Fail without running (the op could not be issued, or the group went away).
  void fail(const std::string& msg);
  bool completed();

 private:
  void finish(const std::string& err);
  void finishWith(std::exception_ptr e);

  std::string what_;
  std::vector<at::Tensor> outputs_;
  std::vector<at::Tensor> keep_;
  std::function<std::string()> run_;
  std::vector<spmd_work*> handles_;
  std::shared_ptr<void> group_;
  std::function<void()> post_;
  Executor* exec_ = nullptr;  // collectives: valid until the work completes
  std::atomic<bool> claimed_{false};
  int source_ = -1;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

class Executor {
 public:
  Executor();
  ~Executor();
  void push(c10::intrusive_ptr<WorkSpmd> w);
  // Until w has completed: run it on this thread if it is next and nothing
  // runs, else wait.
  void waitFor(WorkSpmd* w);
  bool idle();
  void stop();

 private:
  void run();
  std::mutex mu_;
  std::condition_variable cv_;    // the executor thread: new work or stop
  std::condition_variable done_cv_;  // waiters: a work finished
  std::deque<c10::intrusive_ptr<WorkSpmd>> q_;
  bool busy_ = false;
  bool stop_ = false;
  // Works finished here.  Never released on the executor thread: the last
  // reference may free tensors owned by Python objects, which takes the GIL,
  // and the thread holding the GIL may be waiting for this one
  // (destroy_process_group).  push() and stop() release them.
  std::vector<c10::intrusive_ptr<WorkSpmd>> done_;
  std::thread th_;
};

}  // namespace spmd_torch
