// C declarations of every symbol the simulated libnvidia-ml exports (abi/nvml_entry_points.h),
// with the types of src/abi: a definition whose signature drifts from the ABI fails to compile.
#pragma once

#include <type_traits>

#include "abi/nvml_entry_points.h"
#include "simgpu/core/export.h"

#define SIMGPU_DECLARE_NVML_ENTRY_POINT(symbol) \
  SIMGPU_EXPORT std::remove_pointer_t<::gpufrac::abi::symbol##_t> symbol;

extern "C" {
GPUFRAC_NVML_ENTRY_POINTS(SIMGPU_DECLARE_NVML_ENTRY_POINT)
}

#undef SIMGPU_DECLARE_NVML_ENTRY_POINT
