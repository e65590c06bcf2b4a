// Memory amounts and fractions as shares of a GPU.
#include "placement/gpu_share.h"

#include <algorithm>

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

}  // namespace gpufrac::placement
