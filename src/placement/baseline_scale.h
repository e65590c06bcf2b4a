// The fixed scale the FGD paper's baseline policies normalise resources by: a reference node of
// 128 CPU cores and 8 GPUs (not the node's own capacity). Kept so that the baselines rank nodes
// exactly as they did there.
#pragma once

#include <cstdint>

namespace gpufrac::placement {

inline constexpr double kReferenceCpuMilli = 128000;
inline constexpr double kReferenceGpuMilli = 8000;
inline constexpr int64_t kMaxScore = 100;

}  // namespace gpufrac::placement
