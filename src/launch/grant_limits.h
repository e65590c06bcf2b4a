// The one step from a workload's grants to what its limiter and MPS are told: the limit file's
// GPUs (memory, context charge, compute pair) and, on a GPU in MPS mode, the MPS client it is.
// The node service and the Kubernetes agent both start workloads through here.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "launch/gpu_grant.h"
#include "launch/limit_file.h"

namespace gpufrac::launch {

// A workload that is a client of one GPU's MPS daemon: MPS holds its share of the SMs and its
// pinned memory.
struct MpsClient {
  int index = 0;
  std::string uuid;
  unsigned thread_percentage = 100;  // Its compute limit (all of it where not arbitrated).
  uint64_t pinned_mib = 0;           // Its memory limit.
};

struct GrantLimits {
  std::vector<LimitedGpu> gpus;  // The limit file's, in the grants' order.
  std::optional<MpsClient> mps;  // Where one grant is on a GPU in MPS mode.
};

// What `grant`, on a GPU in MPS mode, makes its workload as an MPS client there.
MpsClient MpsClientOf(const GpuGrant& grant);

// The limits of `grants`: each GPU's memory limit, the context charge `context_of(index)` gives
// and its compute pair; on a GPU where `mps_of(index)` holds, the memory only (MPS holds the SMs,
// and no turns are taken) and the MPS client. kFailedPrecondition, naming `workload`, for grants
// on two GPUs in MPS mode (an MPS client reaches one daemon).
StatusOr<GrantLimits> LimitsOfGrants(const std::vector<GpuGrant>& grants,
                                     const std::function<uint64_t(int index)>& context_of,
                                     const std::function<bool(int index)>& mps_of,
                                     const std::string& workload);

// The MPS client's variables ("NAME=value"): CUDA_MPS_PIPE_DIRECTORY (`pipe_dir`, as the client
// sees it), CUDA_MPS_ACTIVE_THREAD_PERCENTAGE and CUDA_MPS_PINNED_DEVICE_MEM_LIMIT (its one
// visible device, 0).
std::vector<std::string> MpsClientEnvironment(const MpsClient& client, const std::string& pipe_dir);

}  // namespace gpufrac::launch
