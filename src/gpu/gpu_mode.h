// How a GPU is shared: the one vocabulary of the node service, the Kubernetes agent and extender.
#pragma once

#include <optional>
#include <string_view>

namespace gpufrac::gpu {

// kWhole: whole-GPU requests only. kShared: fractions and memory amounts under the limiter, taking
// turns on the GPU's time. kMig: MIG instances, created on demand. kMps: fractions and memory
// amounts under the limiter, running side by side under NVIDIA's Multi-Process Service, each on its
// share of the SMs (one user's jobs at a time, one GPU per job).
enum class GpuMode { kWhole, kShared, kMig, kMps };

// "whole", "shared", "mig", "mps".
std::string_view GpuModeName(GpuMode mode);
// The mode called `name`; nullopt for any other name.
std::optional<GpuMode> ParseGpuMode(std::string_view name);

}  // namespace gpufrac::gpu
