#include "node/compute_policy.h"

#include <algorithm>

#include "common/units.h"

namespace gpufrac::node {

std::optional<ComputePolicy> ParseComputePolicy(std::string_view text) {
  if (text == "fair") return ComputePolicy::kFair;
  if (text == "strict") return ComputePolicy::kStrict;
  if (text == "off") return ComputePolicy::kOff;
  return std::nullopt;
}

const char* ComputePolicyName(ComputePolicy policy) {
  switch (policy) {
    case ComputePolicy::kFair:
      return "fair";
    case ComputePolicy::kStrict:
      return "strict";
    case ComputePolicy::kOff:
      return "off";
  }
  return "?";
}

uint32_t ComputeLimitMilli(const GpuRequest& request, uint32_t share_milli, ComputePolicy policy) {
  const bool shared =
      request.kind == GpuRequest::Kind::kMemory || request.kind == GpuRequest::Kind::kFraction;
  if (policy == ComputePolicy::kOff || !shared || share_milli == 0 || share_milli >= kMilliPerGpu) {
    return 0;
  }
  if (request.compute_limit_milli != 0) return request.compute_limit_milli;
  return policy == ComputePolicy::kStrict ? share_milli : kMilliPerGpu;
}

int MpsThreadPercentage(uint32_t limit_milli) {
  if (limit_milli == 0) return 100;
  return static_cast<int>(std::min<uint32_t>((limit_milli + 9) / 10, 100));
}

}  // namespace gpufrac::node
