// The compute pair's one rule (compute_share.h).
#include "common/compute_share.h"

#include <algorithm>

#include "common/units.h"

namespace gpufrac {

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

uint32_t ComputeRequestMilli(const GpuRequest& request, uint32_t memory_milli) {
  const uint32_t asked = request.compute_milli.value_or(memory_milli);
  const std::optional<uint32_t> limit = request.compute_limit_milli;
  return limit ? std::min(asked, *limit) : asked;
}

std::optional<ComputePair> DecideComputePair(uint32_t request_milli,
                                             std::optional<uint32_t> asked_limit,
                                             ComputePolicy policy) {
  if (policy == ComputePolicy::kOff || request_milli == 0 || request_milli >= kMilliPerGpu) {
    return std::nullopt;
  }
  const uint32_t limit = asked_limit                        ? *asked_limit
                         : policy == ComputePolicy::kStrict ? request_milli
                                                            : kMilliPerGpu;
  // Never below the request (placement books the request within the limit; a record that says
  // otherwise was not written by it), never above the GPU.
  return ComputePair{.request_milli = request_milli,
                     .limit_milli = std::clamp<uint32_t>(limit, request_milli, kMilliPerGpu)};
}

unsigned MpsThreadPercentage(uint32_t milli) {
  return std::clamp<unsigned>((milli + 9) / 10, 1, 100);
}

}  // namespace gpufrac
