// What every container the node agent puts under gpufrac's limiter gets, whichever resource it
// came through (a gpufrac.io/gpu share, replicas of a GPU shared under NVIDIA's names): its
// read-only limit file, the limiter library, an /etc/ld.so.preload that loads it, and the compute
// arbiter of each GPU whose time it shares with other pods.
#pragma once

#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "k8s/device_provider.h"
#include "launch/budget_dir.h"
#include "launch/limit_file.h"

namespace gpufrac::k8s {

// Where things appear inside the container.
inline constexpr std::string_view kContainerLimiter = "/usr/local/gpufrac/libgpufrac.so";
inline constexpr std::string_view kContainerLimitFile = "/etc/gpufrac/limits";
inline constexpr std::string_view kContainerPreload = "/etc/ld.so.preload";
// A shared GPU's compute arbiter appears here as compute.<uuid>.
inline constexpr std::string_view kContainerArbiterDir = "/etc/gpufrac";

// `text` as a limiter workload id (it names the workload's budgets and its arbiter slots): every
// character outside [A-Za-z0-9_.-] becomes '_', and it is cut to 63 characters. Callers make it
// unique per live container; this keeps it legal.
std::string LimiterWorkloadId(std::string_view text);

class ContainerLimiter {
 public:
  // `host_dir`: the agent's directory on the host (AgentOptions::host_dir), where the agent has
  // installed lib/libgpufrac.so and ld.so.preload before any Limit() (agent_service.cc).
  explicit ContainerLimiter(std::string host_dir);

  // Writes host_dir/<subdir>/limits (read-only, replacing a file an earlier Allocate left there)
  // limiting `workload` to `gpus`, and adds to `out` the mounts of that file, the limiter and the
  // preload file, and for each GPU whose compute is arbitrated (compute_milli > 0) the GPU's
  // arbiter, read-write on its own (made on first use; every container on the GPU gets the same
  // one, also after the agent restarts). `gpus` must not be empty; every GPU the container sees
  // must be in it (the limiter hides the others). Thread-safe.
  Status Limit(const std::string& subdir, const std::string& workload,
               const std::vector<launch::LimitedGpu>& gpus, ContainerAllocation* out);

  const std::string& host_dir() const { return host_dir_; }

 private:
  // The directory of compute arbiters, one per shared GPU, recorded in host_dir/arbiters so that
  // a restarted agent hands new pods the arbiter the running ones have joined. Under mu_.
  StatusOr<const launch::BudgetDir*> ArbiterDir();

  const std::string host_dir_;
  std::mutex mu_;
  std::optional<launch::BudgetDir> arbiters_;  // Guarded by mu_.
};

}  // namespace gpufrac::k8s
