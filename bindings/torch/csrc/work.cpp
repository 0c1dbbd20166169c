// work.cpp — WorkSpmd and the executor (see work.hpp).
#include "work.hpp"

#include <ATen/core/jit_type.h>
#include <c10/util/Exception.h>

#include <chrono>
#include <stdexcept>

namespace spmd_torch {

WorkSpmd::WorkSpmd(int rank, c10d::OpType op, const char* what, std::vector<at::Tensor> outputs)
    : c10d::Work(rank, op), what_(what), outputs_(std::move(outputs)) {
  future_ = c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()));
}

WorkSpmd::~WorkSpmd() {
  // spmd_work_free waits for a running operation (or cancels an unmatched
  // receive), so a dropped Work never leaves spmd writing into freed tensors.
  for (spmd_work* h : handles_) spmd_work_free(h);
}

void WorkSpmd::execute() {
  std::string err;
  try {
    err = run_();
  } catch (const std::exception& e) {
    err = e.what();
  }
  finish(err.empty() ? err : "spmd " + what_ + " failed: " + err);
}

void WorkSpmd::driveHandles() {
  bool expected = false;
  if (!claimed_.compare_exchange_strong(expected, true)) return;
  std::string err;
  for (spmd_work* h : handles_) {
    spmd_status st = spmd_work_wait(h, -1);
    if (st != SPMD_OK && err.empty())
      err = std::string("spmd ") + what_ + " failed: " + spmd_work_errmsg(h) + " (" +
            spmd_status_name(st) + ")";
    if (opType_ == c10d::OpType::RECVANYSOURCE) source_ = spmd_work_source(h);
  }
  finish(err);
}

void WorkSpmd::finish(const std::string& err) {
  std::exception_ptr e;
  if (!err.empty()) {
    e = std::make_exception_ptr(std::runtime_error(err));
  } else if (post_) {
    try {
      post_();
    } catch (...) {
      e = std::current_exception();
    }
  }
  finishWith(e);
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
  }
  cv_.notify_all();
  if (e)
    future_->setError(e);
  else
    future_->markCompleted(c10::IValue(outputs_));
}

bool WorkSpmd::completed() {
  std::lock_guard<std::mutex> lock(mutex_);
  return completed_;
}

bool WorkSpmd::isCompleted() {
  if (completed()) return true;
  if (run_ || claimed_) return false;  // collectives finish on their own
  for (spmd_work* h : handles_)
    if (spmd_work_test(h) == SPMD_ERR_AGAIN) return false;
  driveHandles();  // every handle is done: finishing is quick
  return completed();
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
    if (completed()) {
    } else if (run_) {
      exec_->waitFor(this);
    } else {
      driveHandles();
      std::unique_lock<std::mutex> lock(mutex_);
      cv_.wait(lock, [&] { return completed_; });
    }
  } else {
    // With a deadline nobody helps: poll until done or the deadline.
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
  return future_;
}

// ---- executor -------------------------------------------------------------

Executor::Executor() : th_([this] { run(); }) {}

Executor::~Executor() { stop(); }

void Executor::push(c10::intrusive_ptr<WorkSpmd> w) {
  std::vector<c10::intrusive_ptr<WorkSpmd>> done;
  {
    std::lock_guard<std::mutex> lock(mu_);
    w->setExecutor(this);
    q_.push_back(std::move(w));
    done.swap(done_);
  }
  cv_.notify_one();
  // `done` is released here, on the caller's thread.
}

void Executor::waitFor(WorkSpmd* w) {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    if (w->completed()) return;
    if (!busy_ && !q_.empty() && q_.front().get() == w) {
      c10::intrusive_ptr<WorkSpmd> mine = std::move(q_.front());
      q_.pop_front();
      busy_ = true;
      lock.unlock();
      mine->execute();  // inline: no hand-off
      lock.lock();
      busy_ = false;
      done_.push_back(std::move(mine));
      lock.unlock();
      cv_.notify_one();
      done_cv_.notify_all();
      return;
    }
    done_cv_.wait(lock);
  }
}

bool Executor::idle() {
  std::lock_guard<std::mutex> lock(mu_);
  return q_.empty() && !busy_;
}

void Executor::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_one();
  if (th_.joinable()) th_.join();
  std::vector<c10::intrusive_ptr<WorkSpmd>> done;
  std::lock_guard<std::mutex> lock(mu_);
  done.swap(done_);
}

void Executor::run() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    // (a waiter running one inline has busy_ set and wakes this thread after)
    cv_.wait(lock, [&] { return !busy_ && (stop_ || !q_.empty()); });
    if (q_.empty()) return;  // stopping and drained
    c10::intrusive_ptr<WorkSpmd> w = std::move(q_.front());
    q_.pop_front();
    busy_ = true;
    lock.unlock();
    w->execute();
    lock.lock();
    busy_ = false;
    done_.push_back(std::move(w));
    done_cv_.notify_all();
  }
}

}  // namespace spmd_torch
