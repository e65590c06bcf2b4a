// Names of the sharing modes (see gpu_mode.h).
#include "gpu/gpu_mode.h"

namespace gpufrac::gpu {

std::string_view GpuModeName(GpuMode mode) {
  switch (mode) {
    case GpuMode::kWhole:
      return "whole";
    case GpuMode::kShared:
      return "shared";
    case GpuMode::kMig:
      return "mig";
    case GpuMode::kMps:
      return "mps";
  }
  return "shared";
}

std::optional<GpuMode> ParseGpuMode(std::string_view name) {
  for (GpuMode mode : {GpuMode::kWhole, GpuMode::kShared, GpuMode::kMig, GpuMode::kMps}) {
    if (GpuModeName(mode) == name) return mode;
  }
  return std::nullopt;
}

}  // namespace gpufrac::gpu
