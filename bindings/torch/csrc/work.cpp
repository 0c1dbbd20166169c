// work.cpp — WorkSpmd and the completer thread (see work.hpp).
#include "work.hpp"
#include "process_group.hpp"
#include <Python.h>

#include <ATen/core/jit_type.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <chrono>
#include <stdexcept>

namespace spmd_torch {

namespace {
// The profiler's name of an operation: gloo's names with "spmd:" (torch's
// suite and users' traces look events up by them); like gloo's, a coalesced
// all_reduce or all_gather is named as the plain one.
const char* profilingTitle(c10d::OpType op) {
  using c10d::OpType;
  switch (op) {
    case OpType::BROADCAST: return "spmd:broadcast";
    case OpType::ALLREDUCE: return "spmd:all_reduce";
    case OpType::ALLREDUCE_COALESCED: return "spmd:all_reduce";
    case OpType::REDUCE: return "spmd:reduce";
    case OpType::ALLGATHER: return "spmd:all_gather";
    case OpType::_ALLGATHER_BASE: return "spmd:all_gather_into_tensor";
    case OpType::ALLGATHER_COALESCED: return "spmd:all_gather";
    case OpType::GATHER: return "spmd:gather";
    case OpType::SCATTER: return "spmd:scatter";
    case OpType::REDUCE_SCATTER: return "spmd:reduce_scatter";
    case OpType::_REDUCE_SCATTER_BASE: return "spmd:reduce_scatter_tensor";
    case OpType::ALLTOALL_BASE: return "spmd:all_to_all";
    case OpType::ALLTOALL: return "spmd:all_to_all";
    case OpType::BARRIER: return "spmd:barrier";
    case OpType::SEND: return "spmd:send";
    case OpType::RECV: return "spmd:recv";
    case OpType::RECVANYSOURCE: return "spmd:recvAnySource";
    default: return "spmd:coalesced";
  }
}
}  // namespace

WorkSpmd::WorkSpmd(int rank, c10d::OpType op, const char* what, std::vector<at::Tensor> outputs,
                   const std::vector<at::Tensor>& inputs)
    : c10d::Work(rank, op, profilingTitle(op), c10::optional<std::vector<at::Tensor>>(inputs)),
      what_(what),
      outputs_(std::move(outputs)) {
  future_ = c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()));
}

WorkSpmd::~WorkSpmd() {
  if (group_) {
    std::lock_guard<std::mutex> lock(group_->mu);
    group_->works.erase(this);
  }
  // spmd_work_free waits for a running operation (or cancels an unmatched
  // receive), so a dropped Work never leaves spmd writing into freed tensors.
  for (spmd_work* h : handles_) spmd_work_free(h);
}

void WorkSpmd::keepGroup(std::shared_ptr<GroupState> g) {
  group_ = std::move(g);
  std::lock_guard<std::mutex> lock(group_->mu);
  group_->works.insert(this);
}

bool WorkSpmd::running() {
  for (spmd_work* h : handles_)
    if (spmd_work_test(h) == SPMD_ERR_AGAIN) return true;
  return false;
}

bool WorkSpmd::drive() {
  bool expected = false;
  if (!claimed_.compare_exchange_strong(expected, true)) return false;
  std::string err;
  for (spmd_work* h : handles_) {
    if (!awaitHandle(h)) {
      // Past the operation's own timeout: the ranks are out of step for
      // good, so break the group (this and every later operation on every
      // rank fails at once instead of waiting for the group's deadline).
      std::string why = std::string("spmd ") + what_ + " timed out after " +
                        std::to_string(timeout_.count()) + " ms (the operation's timeout)";
      if (err.empty()) err = why + "; the process group is aborted";
      spmd_group_abort(group_->group, why.c_str());
    }
    spmd_status st = spmd_work_wait(h, -1);
    if (st != SPMD_OK && err.empty()) {
      err = std::string("spmd ") + what_ + " failed: ";
      // A timeout says so in gloo's words (" Timed out ", which torch's
      // suite and users' scripts look for).
      if (st == SPMD_ERR_TIMEOUT)
        err += std::string("Timed out (SPMD_ERR_TIMEOUT): ") + spmd_work_errmsg(h);
      else
        err += std::string(spmd_work_errmsg(h)) + " (" + spmd_status_name(st) + ")";
    }
    if (opType_ == c10d::OpType::RECVANYSOURCE) source_ = spmd_work_source(h);
  }
  std::exception_ptr e;
  if (err.empty() && post_) {
    try {
      post_();
    } catch (...) {
      e = std::current_exception();
    }
  }
  if (!err.empty()) e = std::make_exception_ptr(std::runtime_error(err));
  finishWith(e);
  return true;
}

void WorkSpmd::setTimeout(std::chrono::milliseconds t) {
  if (t.count() < 0 || !group_) return;  // kUnsetTimeout: the group's deadline
  timeout_ = t;
  deadline_ = std::chrono::steady_clock::now() + t;
}

bool WorkSpmd::awaitHandle(spmd_work* h) {
  if (timeout_.count() < 0) return true;  // spmd_work_wait applies the group's deadline
  // With a deadline of its own the work is left to spmd's executor (waiting
  // in spmd_work_wait would run it on this thread, bound by the group's
  // deadline only) and watched with short naps.
  auto nap = std::chrono::microseconds(10);
  while (spmd_work_test(h) == SPMD_ERR_AGAIN) {
    if (std::chrono::steady_clock::now() >= deadline_) return false;
    std::this_thread::sleep_for(nap);
    nap = std::min(nap * 2, std::chrono::microseconds(1000));
  }
  return true;
}

void WorkSpmd::fail(const std::string& msg) {
  claimed_ = true;
  finishWith(std::make_exception_ptr(std::runtime_error(msg)));
}

void WorkSpmd::finishWith(std::exception_ptr e) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    completed_ = true;
    exception_ = e;
    // The profiler's event (started when the work was made) ends here.
    if (recordFunctionEndCallback_) {
      recordFunctionEndCallback_();
      recordFunctionEndCallback_ = nullptr;
    }
  }
  cv_.notify_all();
  if (e)
    future_->setError(e);
  else
    future_->markCompleted(c10::IValue(outputs_));
}

void WorkSpmd::awaitPassively() {
  auto nap = std::chrono::microseconds(10);
  for (spmd_work* h : handles_) {
    while (!claimed_ && spmd_work_test(h) == SPMD_ERR_AGAIN) {
      // past its own timeout: drive() fails it
      if (timeout_.count() >= 0 && std::chrono::steady_clock::now() >= deadline_) return;
      std::this_thread::sleep_for(nap);
      nap = std::min(nap * 2, std::chrono::microseconds(500));
    }
  }
}

bool WorkSpmd::isCompleted() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (completed_) return true;
  }
  if (claimed_) return false;
  if (timeout_.count() >= 0 && std::chrono::steady_clock::now() >= deadline_) {
    drive();  // past its own timeout: fails it (quick: the group is aborted)
    std::lock_guard<std::mutex> lock(mutex_);
    return completed_;
  }
  for (spmd_work* h : handles_)
    if (spmd_work_test(h) == SPMD_ERR_AGAIN) return false;
  drive();  // every handle is done: finishing is quick
  std::lock_guard<std::mutex> lock(mutex_);
  return completed_;
}

bool WorkSpmd::isSuccess() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return completed_ && !exception_;
}

std::exception_ptr WorkSpmd::exception() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return exception_;
}

int WorkSpmd::sourceRank() const {
  TORCH_CHECK(opType_ == c10d::OpType::RECVANYSOURCE,
              "sourceRank() is only defined for a receive from any source");
  std::lock_guard<std::mutex> lock(mutex_);
  TORCH_CHECK(completed_, "sourceRank(): the receive has not completed");
  return source_;
}

std::vector<at::Tensor> WorkSpmd::result() { return outputs_; }

bool WorkSpmd::wait(std::chrono::milliseconds timeout) {
  if (timeout == kNoTimeout) {
    if (!drive()) {
      std::unique_lock<std::mutex> lock(mutex_);
      cv_.wait(lock, [&] { return completed_; });
    }
  } else {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    while (!isCompleted()) {
      if (std::chrono::steady_clock::now() >= deadline)
        TORCH_CHECK(false, "spmd ", what_, ": wait timed out after ", timeout.count(), " ms");
      std::unique_lock<std::mutex> lock(mutex_);
      cv_.wait_for(lock, std::chrono::milliseconds(1), [&] { return completed_; });
    }
  }
  std::lock_guard<std::mutex> lock(mutex_);
  if (exception_) std::rethrow_exception(exception_);
  return true;
}

c10::intrusive_ptr<c10::ivalue::Future> WorkSpmd::getFuture() {
  TORCH_CHECK(!c10d::isP2POp(opType_),
              "spmd: getFuture() is not supported for point-to-point operations (as gloo)");
  if (!watched_.exchange(true)) {
    if (auto c = completer_.lock())
      c->push(c10::intrusive_ptr<WorkSpmd>::reclaim_copy(this));
    else
      drive();  // the process group is gone: finish here
  }
  return future_;
}

// ---- completer ------------------------------------------------------------

Completer::Completer() : th_([this] { run(); }) {}

Completer::~Completer() { stop(); }

void Completer::push(c10::intrusive_ptr<WorkSpmd> w) {
  std::vector<c10::intrusive_ptr<WorkSpmd>> done;
  {
    std::lock_guard<std::mutex> lock(mu_);
    q_.push_back(std::move(w));
    done.swap(done_);
  }
  cv_.notify_one();
  // `done` is released here, in the caller's thread.
}

bool Completer::idle() {
  std::lock_guard<std::mutex> lock(mu_);
  return q_.empty() && !busy_;
}

void Completer::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_ && !th_.joinable()) return;
    stop_ = true;
  }
  cv_.notify_one();
  if (th_.joinable()) {
    // The completer may be inside a future's Python callback, which takes
    // the GIL: a caller holding it (a process group destroyed from Python)
    // lets it go while joining, or both wait for ever.
    PyThreadState* saved = Py_IsInitialized() && PyGILState_Check() ? PyEval_SaveThread() : nullptr;
    th_.join();
    if (saved) PyEval_RestoreThread(saved);
  }
  std::vector<c10::intrusive_ptr<WorkSpmd>> done;
  std::lock_guard<std::mutex> lock(mu_);
  done.swap(done_);
}

void Completer::run() {
  for (;;) {
    c10::intrusive_ptr<WorkSpmd> w;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !q_.empty(); });
      if (q_.empty()) return;  // stopping and drained
      w = q_.front();
      q_.pop_front();
      busy_ = true;
    }
    // Wait passively: spmd's executor thread runs the collective in the
    // background (spmd_work_wait would run it here instead, as a caller that
    // blocks, which suits a waiting user but not DDP's buckets overlapping the
    // backward on busy cores).  A user's wait() claims and helps it instead.
    w->awaitPassively();
    w->drive();  // quick: every handle is done, or the user's thread has it
    std::lock_guard<std::mutex> lock(mu_);
    done_.push_back(std::move(w));
    busy_ = false;
  }
}

}  // namespace spmd_torch
