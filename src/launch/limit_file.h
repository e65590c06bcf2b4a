// The workload's limit file: which GPUs it may use and how much memory on each, in the format the
// limiter reads (limiter/limit_config.h). Every launcher (gpufrac exec, the node service, the
// Kubernetes agent) writes it through here.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace gpufrac::launch {

// One GPU a workload is limited on.
struct LimitedGpu {
  std::string uuid;  // "GPU-..." or "MIG-...".
  uint64_t limit_bytes = 0;
  uint64_t context_bytes = 0;  // What the limiter charges each CUDA context.
};

// A workload id names the limiter's shared budgets: 1 to 63 of [A-Za-z0-9_.-].
bool ValidWorkloadId(const std::string& id);
// A real 16-byte GPU or MIG UUID of letters, digits and dashes (it ends up in shared-memory names
// and in CUDA_VISIBLE_DEVICES).
bool ValidGpuUuid(const std::string& uuid);

// The limit file giving `workload` these GPUs and limits, checked by parsing it back as the
// limiter will. kInvalidArgument for a bad id, UUID or limit; kInternal when it would not parse.
StatusOr<std::string> LimitFileText(const std::string& workload,
                                    const std::vector<LimitedGpu>& gpus, bool quiet = false);

// Creates `path` (which must not exist, and is not followed if it is a link) holding `text`, with
// exactly `mode` whatever the umask.
Status WriteNewFile(const std::string& path, const std::string& text, mode_t mode);

}  // namespace gpufrac::launch
