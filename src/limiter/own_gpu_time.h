// This process's GPU time on one GPU as the driver measured it: NVML's per-process utilisation
// samples (nvmlDeviceGetProcessUtilization) for its own pid, added up, so that the compute arbiter
// charges what the GPU did rather than how long a turn lasted (compute_arbiter.h).
//
// Each sample is a percent of the period it covers: since this process's previous sample, or
// since the newest sample of the previous poll if later, at most one sample period (the least gap
// seen between two samples of this process; 1/6 s, the shortest NVML documents, until one is
// seen: a product that samples every second is learned from its gaps, not held to 1/6 s). A poll that finds samples of any process but none of this one measured 0 for it: a
// period passed in which it did not use the GPU. A poll more than a period after the last one
// may have missed samples, and only starts counting again (kBaseline): replacing a workload's
// estimates with it, a process alone on the GPU for 2 s (no polls: its launches take the fast
// path) was charged 0.9 s for those 2 s, and its neighbour got 0.40 instead of 0.5 after. Where
// the driver has no per-process samples (MIG), or shows the process under another pid (a
// container's pid namespace on a real GPU), nothing is measured and the arbiter's own charges
// stand.
//
// Heap-free; a poll is a few NVML calls, made at most every kPollNs, never under the arbiter's
// lock.
#pragma once

#include <pthread.h>
#include <sys/types.h>

#include <atomic>
#include <cstdint>

#include "abi/nvml_abi.h"
#include "limiter/compute_arbiter.h"

namespace gpufrac::limiter {

class OwnGpuTime final : public GpuTimeSource {
 public:
  static constexpr uint64_t kPollNs = 50'000'000;

  // For the GPU of NVML UUID `uuid` (a MIG device's: not measured). False when NVML is not there
  // or does not know the GPU; Take then measures nothing.
  bool Open(const char* uuid);
  // GPU time measured since the last Take that measured, when a poll is due and its samples show
  // a period passed; false otherwise (and while another thread polls).
  Measured Take(uint64_t now_ns, uint64_t* ns) override;
  uint64_t NextPollNs() const override {
    return open_ ? next_poll_ns_.load(std::memory_order_relaxed) : UINT64_MAX;
  }
  // In a forked child: its own pid's samples, from its first.
  void ForkedChild();

 private:
  static constexpr int kSamples = 128;
  pthread_mutex_t lock_ = PTHREAD_MUTEX_INITIALIZER;
  abi::nvmlDevice_t device_ = nullptr;
  bool open_ = false;
  std::atomic<uint64_t> next_poll_ns_{0};
  uint64_t last_poll_ns_ = 0;
  unsigned long long last_seen_us_ = 0;  // newest sample of any process so far
  unsigned long long own_last_us_ = 0;   // this process's newest sample; 0: none yet
  // The driver's sample period: the least gap seen between two samples of this process (NVML
  // documents 1/6 s to 1 s by product); 0 until one is seen, when the shortest is assumed.
  unsigned long long period_us_ = 0;
  unsigned long long Period() const { return period_us_ != 0 ? period_us_ : 1'000'000 / 6; }
  abi::nvmlProcessUtilizationSample_t samples_[kSamples] = {};
};

}  // namespace gpufrac::limiter
