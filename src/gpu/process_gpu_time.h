// The GPU time each process used, as the driver measured it: NVML's per-process utilisation
// samples (nvmlDeviceGetProcessUtilization) added up, for status and metrics that report what
// the GPU did rather than what an arbiter charged.
//
// Asked for the samples since the last one it gave (lastSeenTimeStamp), the driver gives, for each
// process with work since then, its utilisation in percent, stamped. The meter counts each as
// that percent of the time it covers: since the newest sample of the previous poll, or since the
// process's own previous sample if later, at most kMaxCoverUs; a process's first sample covers
// one sample period (the least gap seen between two samples of one process on the GPU, 1/6 s,
// the shortest NVML documents, until one is seen). Polled at least once a period, its error is
// the driver's rounding, under a percent of each period. GPUs in MIG mode have no per-process
// samples (NVML_ERROR_NOT_SUPPORTED): they are not measured (Unmeasured).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "abi/nvml_abi.h"
#include "common/status.h"
#include "gpu/nvml_library.h"

namespace gpufrac::gpu {

class GpuTimeMeter {
 public:
  // Loads NVML from `library` for the GPUs of NVML indices `indices`. Errors as NvmlSession's,
  // and as Resolve when the driver lacks nvmlDeviceGetProcessUtilization.
  static StatusOr<std::unique_ptr<GpuTimeMeter>> Open(const std::string& library,
                                                      const std::vector<int>& indices);

  struct Use {
    int gpu = 0;  // NVML index
    pid_t pid = 0;
    uint64_t ns = 0;
  };
  // The GPU time each process was measured to use, per GPU, in the samples that came since the
  // last Poll. A GPU whose query fails (lost, MIG mode) adds nothing.
  std::vector<Use> Poll();
  // The GPUs that answered the last Poll that they have no per-process samples (e.g. in MIG
  // mode): nothing is counted there. For the thread that polls.
  std::vector<int> Unmeasured() const;
  // For each GPU (NVML index), up to when (CLOCK_REALTIME, µs) its time is all counted: the end
  // of the newest sample period polled, or, when no sample came for two periods (no process had
  // work), a period before the last poll; 0 before either. The counts grow a period at a time,
  // so a rate is their difference over the difference of these, not of when they were read.
  // For the thread that polls.
  std::vector<std::pair<int, unsigned long long>> CountedUntilUs() const;

 private:
  struct Gpu {
    int index = 0;
    abi::nvmlDevice_t handle = nullptr;
    bool measured = true;  // false while the driver says it has no per-process samples
    unsigned long long last_seen_us = 0;
    unsigned long long counted_until_us = 0;
    uint64_t period_us = 1000000 / 6;
    std::map<pid_t, unsigned long long> last_stamp_us;  // each process's latest sample
  };

  GpuTimeMeter() = default;

  std::unique_ptr<NvmlSession> nvml_;
  abi::nvmlDeviceGetProcessUtilization_t get_samples_ = nullptr;
  std::vector<Gpu> gpus_;
  std::vector<abi::nvmlProcessUtilizationSample_t> buffer_;
};

}  // namespace gpufrac::gpu
