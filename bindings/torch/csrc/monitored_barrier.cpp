// monitored_barrier.cpp — torch's monitored_barrier on spmd, gloo's protocol
// over spmd's point-to-point messages: every rank tells rank 0 it arrived;
// rank 0 waits for each within the deadline and either names the ranks that
// did not come (the first one, or all of them with wait_all_ranks) or
// releases everyone.  Each barrier has a tag of its own, so a rank arriving
// late never satisfies a later barrier.
#include <c10/util/Exception.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <string>
#include <vector>

#include "process_group.hpp"

namespace spmd_torch {

namespace {

// Above the tags programs use (torch's default is 0); 65536 barriers cycle.
constexpr int kTagBase = 0x7fff0000;
using Clock = std::chrono::steady_clock;

int remainingMs(Clock::time_point deadline) {
  auto left =
      std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return left > 0 ? (int)std::min<long long>(left, INT_MAX) : 0;
}

// A handle released on scope exit: a receive never matched is cancelled, a
// (one-byte, eager) send drains.
struct Handle {
  spmd_work* w = nullptr;
  Handle() = default;
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  ~Handle() { spmd_work_free(w); }
};

}  // namespace

void ProcessGroupSpmd::monitoredBarrier(const c10d::BarrierOptions& opts, bool waitAllRanks) {
  TORCH_CHECK(!state_->retired, "spmd monitored_barrier: rank ", rank_,
              ": this process group was replaced by spmd_torch.elastic's recovery; "
              "use the group recover() returned");
  const std::chrono::milliseconds timeout = opts.timeout.count() >= 0 ? opts.timeout : timeout_;
  const Clock::time_point deadline = Clock::now() + timeout;
  const int tag = kTagBase + (int)(monitoredBarriers_++ & 0xffff);
  static const uint8_t token = 1;

  if (rank_ != 0) {
    Handle arrived, released;
    uint8_t ack = 0;
    spmd_status st = spmd_isend(group_, &token, 1, SPMD_U8, 0, tag, &arrived.w);
    if (st == SPMD_OK) st = spmd_irecv(group_, &ack, 1, SPMD_U8, 0, tag, &released.w);
    if (st == SPMD_OK) st = spmd_work_wait(released.w, remainingMs(deadline));
    // Worded as gloo's (torch's suite matches it), then spmd's cause.
    TORCH_CHECK(st == SPMD_OK, "spmd: Rank ", rank_,
                " successfully reached monitoredBarrier, but received errors while waiting "
                "for send/recv from rank 0: rank 0 did not release it within ",
                timeout.count(), " ms (",
                released.w ? spmd_work_errmsg(released.w) : spmd_group_errmsg(group_),
                "); rank 0's error names the rank that did not arrive");
    return;
  }

  std::vector<Handle> arrivals(size_);
  std::vector<uint8_t> got(size_);
  for (int r = 1; r < size_; r++) {
    spmd_status st = spmd_irecv(group_, &got[r], 1, SPMD_U8, r, tag, &arrivals[r].w);
    TORCH_CHECK(st == SPMD_OK, "spmd: [Rank 0]: monitoredBarrier cannot receive from rank ", r,
                ": ", spmd_group_errmsg(group_));
  }
  std::vector<int> missing;
  std::string details;
  for (int r = 1; r < size_; r++) {
    const int left = remainingMs(deadline);
    if (left == 0 && !waitAllRanks && spmd_work_test(arrivals[r].w) == SPMD_ERR_AGAIN) {
      // Rank 0's own time ran out before it could wait for rank r (gloo's
      // wording: the timeout was spent on earlier ranks, or was 0): name
      // every rank not yet arrived.
      std::string ranks;
      for (int q = r; q < size_; q++)
        if (spmd_work_test(arrivals[q].w) != SPMD_OK)
          ranks += (ranks.empty() ? "" : ", ") + std::to_string(q);
      TORCH_CHECK(false, "spmd: [Rank 0]: Rank 0 timed out in monitoredBarrier after ",
                  timeout.count(), " ms, with no time left to wait for Rank ", r,
                  " (ranks that did not arrive: ", ranks, ")");
    }
    spmd_status st = spmd_work_wait(arrivals[r].w, left);
    if (st == SPMD_OK) continue;
    missing.push_back(r);
    if (st != SPMD_ERR_TIMEOUT)
      details += std::string("; rank ") + std::to_string(r) + ": " +
                 spmd_work_errmsg(arrivals[r].w);
    if (!waitAllRanks) break;
  }
  if (!missing.empty()) {
    std::string ranks;
    for (int r : missing) ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
    TORCH_CHECK(false, "spmd: [Rank 0]: Rank", missing.size() > 1 ? "s " : " ", ranks,
                " failed to pass monitoredBarrier in ", timeout.count(), " ms", details);
  }
  std::vector<Handle> releases(size_);
  for (int r = 1; r < size_; r++) {
    spmd_status st = spmd_isend(group_, &token, 1, SPMD_U8, r, tag, &releases[r].w);
    TORCH_CHECK(st == SPMD_OK, "spmd: [Rank 0]: monitoredBarrier cannot release rank ", r, ": ",
                spmd_group_errmsg(group_));
  }
}

}  // namespace spmd_torch
