// Memory amounts and fractions as shares of a GPU.
#include "placement/gpu_share.h"

#include <algorithm>

#include "common/compute_share.h"
#include "common/units.h"

namespace gpufrac::placement {

std::optional<GpuShareSize> ShareForMemory(uint64_t memory, uint64_t total, uint64_t context) {
  if (memory == 0 || memory > total || memory <= context) return std::nullopt;
  unsigned __int128 scaled = static_cast<unsigned __int128>(memory) * kMilliPerGpu;
  uint64_t milli = static_cast<uint64_t>((scaled + total - 1) / total);
  return GpuShareSize{static_cast<uint32_t>(std::clamp<uint64_t>(milli, 1, kMilliPerGpu)), memory};
}

std::optional<GpuShareSize> ShareForFraction(uint32_t milli, uint64_t total, uint64_t context) {
  if (milli == 0 || milli >= kMilliPerGpu) return std::nullopt;
  uint64_t limit = BytesOfShare(total, milli);
  if (limit <= context) return std::nullopt;
  return GpuShareSize{milli, limit};
}

StatusOr<OneGpuLimits> LimitsOnOneGpu(const GpuRequest& request, uint64_t total, uint64_t context,
                                      const std::string& gpu) {
  OneGpuLimits out{.memory_bytes = total, .share_milli = kMilliPerGpu};
  std::optional<GpuShareSize> share;
  if (request.kind == GpuRequest::Kind::kMemory) {
    out.memory_bytes = request.memory_bytes;
    share = ShareForMemory(request.memory_bytes, total, context);
  } else if (request.kind == GpuRequest::Kind::kFraction) {
    out.memory_bytes = BytesOfShare(total, request.fraction_milli);
    share = ShareForFraction(request.fraction_milli, total, context);
  }
  if (out.memory_bytes > total) {
    return InvalidArgumentError(FormatSize(out.memory_bytes) + " is more than " + gpu +
                                " has: " + FormatSize(total));
  }
  if (out.memory_bytes <= context) {
    return InvalidArgumentError(FormatSize(out.memory_bytes) +
                                " cannot hold even the CUDA context on " + gpu + " (about " +
                                FormatSize(context) + "); ask for more");
  }
  const bool asked_compute = request.compute_milli || request.compute_limit_milli;
  if (share) out.share_milli = share->milli;
  if (share && share->milli < kMilliPerGpu) {
    // As the node service's fair policy gives.
    out.compute = DecideComputePair(ComputeRequestMilli(request, share->milli),
                                    request.compute_limit_milli, ComputePolicy::kFair);
  } else if (asked_compute) {
    return InvalidArgumentError(
        "--gpu-compute and --gpu-compute-limit need a share of the GPU, not all of its memory (" +
        gpu + ")");
  }
  return out;
}

}  // namespace gpufrac::placement
