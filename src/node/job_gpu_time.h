// The GPU time each running job used, as the driver measured it (gpu/process_gpu_time.h): a
// thread of its own polls the meter every kPollInterval (NVML is never called under the
// service's lock) and gives each process's time to the job whose cgroup holds the process, so a
// job's total counts every process it started, whether or not it kept the limiter. A process
// stays the job's for kKeepOwnerFor after it was last seen in the cgroup, so the samples of a
// process that just ended still count. Totals stay with a job after its processes end, until it
// is forgotten. Jobs without a cgroup (a service not running as root) and GPUs in MIG mode are
// not measured.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <utility>

#include "gpu/process_gpu_time.h"

namespace gpufrac::node {

class JobGpuTime {
 public:
  static constexpr std::chrono::milliseconds kPollInterval{50};
  static constexpr std::chrono::seconds kKeepOwnerFor{2};

  // Starts polling `meter`; with a null meter nothing is measured (UsedNs gives nullopt).
  explicit JobGpuTime(std::unique_ptr<gpu::GpuTimeMeter> meter);
  ~JobGpuTime();  // Stops the thread.
  JobGpuTime(const JobGpuTime&) = delete;
  JobGpuTime& operator=(const JobGpuTime&) = delete;

  // Measures job `job`, whose processes are in the cgroup of workload `workload`.
  void Track(int64_t job, std::string workload);
  void Forget(int64_t job);
  struct Used {
    uint64_t ns = 0;
    // Up to when that is counted, on the steady clock (ms): the driver's samples come a period
    // at a time, so a rate over the time between two reads would be off by up to a period
    // (a 0.25 / 0.75 pair read 0.268 / 0.798).
    int64_t until_ms = 0;
  };
  // GPU time (ns) job `job` was measured to use on GPU `gpu` since it was tracked (since this
  // service adopted it, after a restart); nullopt when it is not measured: no meter, not
  // tracked, its cgroup not found yet (or none), a GPU without per-process samples, or none
  // counted yet.
  std::optional<Used> UsedNs(int64_t job, int gpu) const;

 private:
  void Run();
  void PollOnce();

  struct Tracked {
    std::string workload;
    bool found = false;               // its cgroup was found
    std::map<int, uint64_t> used_ns;  // by GPU index
  };
  struct Owner {
    int64_t job = 0;
    std::chrono::steady_clock::time_point seen;
  };

  std::unique_ptr<gpu::GpuTimeMeter> meter_;
  mutable std::mutex mu_;
  std::condition_variable stop_cv_;
  bool stopping_ = false;
  std::map<int64_t, Tracked> jobs_;
  std::set<int> unmeasured_gpus_;
  std::map<int, int64_t> counted_until_ms_;  // by GPU index, steady clock
  std::map<pid_t, Owner> owners_;  // only the polling thread uses it
  std::thread thread_;
};

}  // namespace gpufrac::node
