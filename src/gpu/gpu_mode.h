// How a GPU is shared: the one vocabulary of the node service, the Kubernetes agent and extender.
#pragma once

#include <optional>
#include <string_view>

namespace gpufrac::gpu {

// kWhole: whole-GPU requests only. kShared: fractions and memory amounts under the limiter.
// kMig: MIG instances, created on demand.
enum class GpuMode { kWhole, kShared, kMig };

// "whole", "shared", "mig".
std::string_view GpuModeName(GpuMode mode);
// The mode called `name`; nullopt for any other name.
std::optional<GpuMode> ParseGpuMode(std::string_view name);

}  // namespace gpufrac::gpu
