// work.hpp — torch Work objects over spmd work handles, and the per-group
// completer thread that finishes them (so getFuture() completes without
// anyone calling wait(), as DDP's comm hooks need).
#pragma once

#include <spmd/spmd.h>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <ATen/core/ivalue.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace spmd_torch {

struct GroupState;

// One torch operation: zero or more spmd handles (issued in order), the
// tensors the op writes (its result), buffers that must live until it ends,
// and a step run on success (copying a packed buffer back into a list).
// `inputs` are what the profiler records as the op's input shapes: the op's
// inputs, as gloo records them (torch's suite compares the shapes).
class WorkSpmd : public c10d::Work {
 public:
  WorkSpmd(int rank, c10d::OpType op, const char* what, std::vector<at::Tensor> outputs,
           const std::vector<at::Tensor>& inputs);
  ~WorkSpmd() override;

  void addHandle(spmd_work* w) { handles_.push_back(w); }
  void keepAlive(at::Tensor t) { keep_.push_back(std::move(t)); }
  void onSuccess(std::function<void()> fn) { post_ = std::move(fn); }
  // The spmd group must outlive every handle on it (a Work may outlive its
  // process group in Python).
  // The work registers itself with the group's state until it is freed.
  void keepGroup(std::shared_ptr<GroupState> g);
  // Is an spmd operation of this work still running?
  bool running();
  // The operation's own timeout (the options' `timeout`, kUnsetTimeout:
  // none, the group's deadline applies): past it the work fails with a
  // timeout error and the group is aborted, as a timed-out collective leaves
  // the ranks out of step.
  void setTimeout(std::chrono::milliseconds t);
  // Collectives: the completer that completes the future, used only once
  // getFuture() is called (a blocking dist.all_reduce never wakes it).
  void setCompleter(const std::shared_ptr<class Completer>& c) { completer_ = c; }

  bool isCompleted() override;
  bool isSuccess() const override;
  std::exception_ptr exception() const override;
  int sourceRank() const override;
  std::vector<at::Tensor> result() override;
  void synchronize() override {}
  bool wait(std::chrono::milliseconds timeout = kNoTimeout) override;
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;

  // Wait for the spmd handles and finish the work, once, by whichever thread
  // claims it first (the user's wait() or the completer); false if another
  // thread had claimed it.
  bool drive();
  // Until every handle is done or a user's thread has claimed the work,
  // polling with short naps (never runs the operation itself).
  void awaitPassively();
  // Fail without running (the op could not be issued).
  void fail(const std::string& msg);

 private:
  void finishWith(std::exception_ptr e);
  // Wait for h, within the operation's deadline when it has one; false if
  // the deadline passed first (h goes on).
  bool awaitHandle(spmd_work* h);

  std::chrono::milliseconds timeout_{-1};
  std::chrono::steady_clock::time_point deadline_;

  std::string what_;
  std::vector<at::Tensor> outputs_;
  std::vector<at::Tensor> keep_;
  std::vector<spmd_work*> handles_;
  std::shared_ptr<GroupState> group_;
  std::function<void()> post_;
  std::atomic<bool> claimed_{false};
  std::weak_ptr<class Completer> completer_;
  std::atomic<bool> watched_{false};
  int source_ = -1;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

// A thread that completes the group's collectives in issue order (their
// futures complete without anyone calling wait()).  It only observes: spmd's
// executor runs the collectives, or the user's thread that waits for one.
// Point-to-point works are not queued here (each is driven by whoever waits
// for it, see drive()).
class Completer {
 public:
  Completer();
  ~Completer();
  void push(c10::intrusive_ptr<WorkSpmd> w);
  bool idle();
  void stop();

 private:
  void run();
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<c10::intrusive_ptr<WorkSpmd>> q_;
  // Works the thread has finished.  It never drops the last reference
  // itself: that may free tensors owned by Python objects, which takes the
  // GIL, and the thread holding the GIL may be waiting for this one
  // (destroy_process_group).  Callers of push() and stop() release them.
  std::vector<c10::intrusive_ptr<WorkSpmd>> done_;
  bool busy_ = false;
  bool stop_ = false;
  std::thread th_;
};

}  // namespace spmd_torch
