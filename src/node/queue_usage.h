// One queue's use of the node against its quota: what its running jobs hold, and, within one
// scheduling pass, what is kept for its jobs that hold reservations and whether its head is held
// back by the quota. Amounts are thousandths of a GPU.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "common/status.h"
#include "node/queue_config.h"

namespace gpufrac::node {

class QueueUsage {
 public:
  // A quota of `share` (0..1) of `gpu_count` GPUs; a share of 1 is no limit.
  QueueUsage(double share, size_t gpu_count);

  uint64_t quota() const { return quota_; }
  uint64_t in_use() const { return in_use_; }
  size_t running() const { return running_; }

  // A job holding `milli` started or ended.
  void Start(uint64_t milli);
  void End(uint64_t milli);

  // Whether a job costing `milli` could ever run in this queue (on an idle node).
  bool CouldHold(uint64_t milli) const { return !limited_ || milli <= quota_; }
  // Whether it may start now in pass `pass`: within the quota, less what is kept.
  bool Allows(uint64_t pass, uint64_t milli) const;
  // A job of this queue reserved GPUs worth `milli` in pass `pass`: kept from later jobs.
  void Keep(uint64_t pass, uint64_t milli);
  // The queue's head, job `id`, is held back by the quota in pass `pass`: nothing behind it
  // starts in that pass.
  void Block(uint64_t pass, int64_t id);
  bool BlockedIn(uint64_t pass) const { return blocked_pass_ == pass; }
  int64_t blocked_by() const { return blocked_by_; }

  // "at its quota (1.5 of 2 GPUs in use, 0.5 kept for its jobs waiting for GPUs)", as of pass
  // `pass`.
  std::string StateText(uint64_t pass) const;
  // OK when a job costing `least` (its cheapest placement; `need` says what it asked, e.g.
  // "--gpus 2") fits the quota of queue `spec` on a node of `gpu_count` GPUs; otherwise
  // kInvalidArgument: "queue batch's quota (0.25 of 4 GPUs) is less than --gpus 2".
  static Status CheckHolds(const QueueSpec& spec, size_t gpu_count, uint64_t least,
                           const std::string& need);

 private:
  uint64_t Kept(uint64_t pass) const { return kept_pass_ == pass ? kept_ : 0; }

  uint64_t quota_ = 0;
  bool limited_ = false;  // The quota is below the node's capacity.
  uint64_t in_use_ = 0;
  size_t running_ = 0;
  uint64_t kept_pass_ = 0;
  uint64_t kept_ = 0;
  uint64_t blocked_pass_ = 0;
  int64_t blocked_by_ = 0;
};

}  // namespace gpufrac::node
