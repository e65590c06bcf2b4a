// GPU health through NVML events, loaded with dlopen like ListDevices: a GPU is unhealthy after
// a critical XID, a double-bit ECC error, or when NVML reports it lost, and stays so for the
// monitor's life (such a GPU needs a reset). This is what the node agent reports to Kubernetes.
#pragma once

#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "gpu/devices.h"

namespace gpufrac::gpu {

struct GpuHealth {
  unsigned index = 0;  // NVML index.
  std::string uuid;    // "GPU-..."; empty if NVML could not tell (a GPU lost before Open).
  bool healthy = true;
  // Why it is unhealthy, one line: "XID 79 (GPU has fallen off the bus)", "double-bit ECC
  // error (...)", "GPU is lost (NVML_ERROR_GPU_IS_LOST): ...", "GPU requires a reset (...)".
  // The first cause is kept. Empty while healthy.
  std::string reason;
};

// XIDs that NVIDIA's k8s-device-plugin treats as application errors, leaving the GPU healthy:
// 13 (graphics engine exception), 31 (GPU memory page fault), 43 (GPU stopped processing),
// 45 (preemptive cleanup), 68 (video processor exception), 109 (context switch timeout).
bool IsApplicationXid(unsigned long long xid);

// A short meaning of a well-known XID ("GPU has fallen off the bus" for 79); empty for others.
std::string_view XidDescription(unsigned long long xid);

// Watches every GPU NVML sees. Open registers each GPU that supports them for critical-XID and
// double-bit ECC events; GPUs without event support are still checked for being lost on every
// Check. NVML stays initialised for the monitor's life (nvmlShutdown in the destructor).
// Thread-safe: concurrent Check calls run one after another, except Check(0), which never waits
// behind another.
class HealthMonitor {
 public:
  // Loads NVML from `library` (a path, or a name the dynamic loader resolves). Errors, as
  // ListDevices: kUnavailable when the library cannot be loaded or the driver is not loaded;
  // kFailedPrecondition when it lacks an entry point (driver too old); kInternal (naming the
  // call) when nvmlInit, nvmlDeviceGetCount or nvmlEventSetCreate fail. A GPU that cannot be
  // opened or registered is not an error: it is reported unhealthy (lost) or watched for loss.
  static StatusOr<std::unique_ptr<HealthMonitor>> Open(
      const std::string& library = kNvmlLibraryName);
  ~HealthMonitor();
  HealthMonitor(const HealthMonitor&) = delete;
  HealthMonitor& operator=(const HealthMonitor&) = delete;

  // Waits up to `wait` for the first event, takes every event already pending, checks each GPU
  // for being lost, and returns every GPU's state, by index. Returns early when an event
  // arrives or NVML reports a GPU lost; a GPU's state changes only from healthy to unhealthy.
  // Check(0ms) reads what is pending (NVML is asked with a 1 ms timeout, never 0, whose meaning
  // the headers leave open). When it cannot take the monitor at once (another Check is running)
  // it returns what the last finished Check found, leaving the events to the running one.
  std::vector<GpuHealth> Check(std::chrono::milliseconds wait);

 private:
  struct State;  // NVML entry points, the event set and every GPU's state (health.cc).
  explicit HealthMonitor(std::unique_ptr<State> state);

  std::mutex mu_;  // Serialises Check.
  std::unique_ptr<State> state_;
  std::mutex last_mu_;
  std::vector<GpuHealth> last_;  // What the last finished Check returned (guarded by last_mu_).
};

}  // namespace gpufrac::gpu
