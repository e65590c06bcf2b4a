// The workload's limit file: which GPUs it may use and how much memory on each, in the format the
// limiter reads (limiter/limit_config.h). Every launcher (gpufrac exec, the node service, the
// Kubernetes agent) writes it through here.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/compute_share.h"
#include "common/status.h"

namespace gpufrac::launch {

// One GPU a workload is limited on.
struct LimitedGpu {
  std::string uuid;  // "GPU-..." or "MIG-...".
  uint64_t limit_bytes = 0;
  uint64_t context_bytes = 0;  // What the limiter charges each CUDA context.
  // Its share of the GPU's time, guaranteed and at most; nullopt: not arbitrated.
  std::optional<ComputePair> compute = std::nullopt;
};

// What a limit file says besides the GPUs.
struct LimitFileOptions {
  // The launcher's budget directory (launch/budget_dir.h), where the limiter attaches to the
  // budgets; "" when the limiter makes them in its own /dev/shm (a container's).
  std::string budget_dir = {};
  // Where the workload finds the GPUs' compute arbiters, when not in budget_dir (a container's
  // mounts).
  std::string arbiter_dir = {};
  bool quiet = false;  // No over-limit message.
  // Written by the workload's own user (a launcher not running as root): the limiter accepts it
  // only where no system service runs the GPUs (limiter/limit_config.h, LoadLimitFile).
  bool advisory = false;
};

// The limit file giving `workload` (1 to 63 of [A-Za-z0-9_.-]: it names the limiter's shared
// budgets) these GPUs and limits, checked by parsing it back as the limiter will.
// kInvalidArgument for a bad id, a UUID that is not a real GPU or MIG UUID, a GPU listed twice, a
// bad limit or budget directory; kInternal when it would not parse.
StatusOr<std::string> LimitFileText(const std::string& workload,
                                    const std::vector<LimitedGpu>& gpus,
                                    const LimitFileOptions& options = {});

// Whether gpufrac's system service runs this machine's GPUs (limiter::kSystemServiceDir is a
// directory of root's): the limiter then refuses a user's own (advisory) limit file.
bool SystemServiceRunsGpus();

// Creates `path` (which must not exist, and is not followed if it is a link) holding `text`, with
// exactly `mode` whatever the umask. On failure nothing is left at `path` by this call.
Status WriteNewFile(const std::string& path, const std::string& text, mode_t mode);

}  // namespace gpufrac::launch
