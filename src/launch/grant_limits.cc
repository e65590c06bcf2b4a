// Grants into limits and an MPS client (grant_limits.h).
#include "launch/grant_limits.h"

namespace gpufrac::launch {

MpsClient MpsClientOf(const GpuGrant& grant) {
  return {
      .index = grant.index,
      .uuid = grant.uuid,
      .thread_percentage = grant.compute ? MpsThreadPercentage(grant.compute->limit_milli) : 100,
      .pinned_mib = grant.memory_bytes >> 20};
}

StatusOr<GrantLimits> LimitsOfGrants(const std::vector<GpuGrant>& grants,
                                     const std::function<uint64_t(int index)>& context_of,
                                     const std::function<bool(int index)>& mps_of,
                                     const std::string& workload) {
  GrantLimits out;
  for (const GpuGrant& grant : grants) {
    LimitedGpu limited{.uuid = grant.uuid,
                       .limit_bytes = grant.memory_bytes,
                       .context_bytes = context_of(grant.index)};
    if (!mps_of(grant.index)) {
      limited.compute = grant.compute;
      out.gpus.push_back(std::move(limited));
      continue;
    }
    if (out.mps) {
      return FailedPreconditionError(
          workload +
          " is booked on shares of two GPUs in MPS mode, which one MPS client cannot use");
    }
    out.mps = MpsClientOf(grant);
    out.gpus.push_back(std::move(limited));
  }
  return out;
}

std::vector<std::string> MpsClientEnvironment(const MpsClient& client,
                                              const std::string& pipe_dir) {
  return {"CUDA_MPS_PIPE_DIRECTORY=" + pipe_dir,
          "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=" + std::to_string(client.thread_percentage),
          "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=" + std::to_string(client.pinned_mib) + "M"};
}

}  // namespace gpufrac::launch
