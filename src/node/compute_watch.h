// The service's watch over compute shares from outside the workloads: a thread of its own reads,
// every kTick, what the driver measured of each arbitrated job (node/job_gpu_time.h), has
// ComputeGuard judge it, logs each change of a job's verdict (the event operators read in the
// service's log), and, when enforcing, holds each job the guard says to hold by freezing its
// cgroup (launch/cgroup.h) for that part of every kCycle.
//
// A job that keeps the limiter takes turns on its GPU's arbiter; frozen while it holds a turn, it
// would keep the others waiting until the turn is taken from it. So a freeze waits, up to
// kMostDeferred, for a moment the job holds no turn (as the arbiter says: a job that writes
// there that it always holds one is frozen after kMostDeferred all the same), and a job found
// holding a turn just after it was frozen is thawed to try again at the next tick.
//
// What it can hold: a workload whose work is short on the GPU. Freezing stops its processes from
// launching, not work they already queued, so a held workload still runs what it queued before
// each freeze: one that keeps a step (tens of ms) queued is held within a window or two; one that
// queues seconds of kernels ahead is held only on average, over as long. It cannot hold a
// workload on a GPU the driver gives no per-process samples for (MIG), or one without a cgroup
// (a service not running as root). Every frozen job is thawed when it is forgotten and when the
// watch stops.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/compute_share.h"
#include "launch/cgroup.h"
#include "node/compute_guard.h"
#include "node/job_gpu_time.h"

namespace gpufrac::node {

class ComputeWatch {
 public:
  static constexpr std::chrono::milliseconds kTick{20};
  static constexpr std::chrono::milliseconds kCycle{500};
  static constexpr int kMostDeferred = 1;  // ticks a freeze waits for a moment without a turn

  // Watches with what `gpu_time` measures (it must outlive the watch); `enforce`: hold jobs
  // over their shares. `holds_turn` says whether a workload holds the turn of a GPU's arbiter
  // (by UUID) now; it must never block. `log` gets one line per change of a job's verdict or
  // hold (`warning` for a job over its share, held, or that cannot be held).
  using HoldsTurn = std::function<bool(const std::string& workload, const std::string& uuid)>;
  ComputeWatch(const JobGpuTime& gpu_time, bool enforce, HoldsTurn holds_turn,
               std::function<void(bool warning, const std::string&)> log);
  ~ComputeWatch();  // Thaws every held job, then stops the thread.
  ComputeWatch(const ComputeWatch&) = delete;
  ComputeWatch& operator=(const ComputeWatch&) = delete;

  // One GPU a job's time is arbitrated on.
  struct ArbitratedGpu {
    std::string uuid;
    ComputePair compute;
  };
  // Watches job `job`, whose processes are in workload `workload`'s cgroup, on the GPUs of
  // `gpus` (by index), thawing it if a service before this one left it frozen.
  void Track(int64_t job, std::string workload, std::map<int, ArbitratedGpu> gpus);
  // Stops watching it, thawing it if it is held; no freeze of it follows once this returns.
  void Forget(int64_t job);
  std::optional<ComputeGuard::Verdict> Of(int64_t job, int gpu) const;

 private:
  struct Watched {
    std::string workload;
    std::map<int, ArbitratedGpu> gpus;
    std::optional<launch::WorkloadCgroup> cgroup;  // found once, when tracked
    bool frozen = false;
    ComputeGuard::Over logged = ComputeGuard::Over::kNo;
    bool logged_held = false;
    bool cannot_hold = false;  // said once
    int deferred = 0;          // ticks its freeze has waited for a moment without a turn
  };
  void Run();
  void Judge();
  void Hold(int64_t now_ms);
  void SetFrozen(Watched& w, bool frozen);
  bool HoldsAnyTurn(const Watched& w) const;

  const JobGpuTime& gpu_time_;
  HoldsTurn holds_turn_;
  std::function<void(bool warning, const std::string&)> log_;
  mutable std::mutex mu_;
  std::condition_variable stop_cv_;
  bool stopping_ = false;
  ComputeGuard guard_;
  std::map<int64_t, Watched> jobs_;
  std::thread thread_;
};

}  // namespace gpufrac::node
