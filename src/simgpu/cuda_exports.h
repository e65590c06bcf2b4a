// C declarations of every symbol the simulated libcuda exports, generated from
// cuda_entry_points.inc with the types of src/abi: a definition whose signature drifts from the
// ABI fails to compile. Tests include this to call the simulated driver directly.
#pragma once

#include <type_traits>

#include "abi/cuda_abi.h"
#include "simgpu/export.h"

#define SIMGPU_DECLARE_PTSZ_0(symbol, type)
#define SIMGPU_DECLARE_PTSZ_1(symbol, type) \
  SIMGPU_EXPORT std::remove_pointer_t<::gpufrac::type> symbol##_ptsz;
#define SIMGPU_ENTRY_POINT(base, symbol, type, version, ptsz)  \
  SIMGPU_EXPORT std::remove_pointer_t<::gpufrac::type> symbol; \
  SIMGPU_DECLARE_PTSZ_##ptsz(symbol, type)

extern "C" {
#include "simgpu/cuda_entry_points.inc"
}

#undef SIMGPU_ENTRY_POINT
#undef SIMGPU_DECLARE_PTSZ_1
#undef SIMGPU_DECLARE_PTSZ_0
