// C declarations of every symbol the simulated libcuda exports, generated from
// abi/cuda_entry_points.h with the types of src/abi: a definition whose signature drifts from the
// ABI fails to compile. Tests include this to call the simulated driver directly.
#pragma once

#include <type_traits>

#include "abi/cuda_entry_points.h"
#include "simgpu/core/export.h"

#define SIMGPU_DECLARE_PTSZ_0(symbol, type)
#define SIMGPU_DECLARE_PTSZ_1(symbol, type) \
  SIMGPU_EXPORT std::remove_pointer_t<::gpufrac::abi::type> symbol##_ptsz;
#define SIMGPU_DECLARE_ENTRY_POINT(base, symbol, version, ptsz)           \
  SIMGPU_EXPORT std::remove_pointer_t<::gpufrac::abi::symbol##_t> symbol; \
  SIMGPU_DECLARE_PTSZ_##ptsz(symbol, symbol##_t)

extern "C" {
GPUFRAC_CUDA_ENTRY_POINTS(SIMGPU_DECLARE_ENTRY_POINT)
}

#undef SIMGPU_DECLARE_ENTRY_POINT
#undef SIMGPU_DECLARE_PTSZ_1
#undef SIMGPU_DECLARE_PTSZ_0
