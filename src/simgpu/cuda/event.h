// CUDA events of the simulated driver. A recorded event is a point in its stream's work on the
// context's engine clock (engine.h); a timing event also owns an engine watch, which notes the
// real time at which the engine got there, so elapsed times include time spent waiting for other
// contexts, as on a real GPU.
#pragma once

#include <cstdint>

#include "abi/cuda_abi.h"
#include "simgpu/cuda/context.h"

namespace gpufrac::simgpu {

struct Event {
  static constexpr std::uint32_t kMagic = 0x45766e74;

  std::uint32_t magic = kMagic;  // cleared when the event is destroyed
  Context* context = nullptr;    // the context it was created in
  unsigned int flags = 0;
  int watch = -1;  // engine watch on the context's device; -1 with CU_EVENT_DISABLE_TIMING
  // The last cuEventRecord: the context's activation then (a reset drops the work, which
  // completes the event) and the engine-clock time of the recorded point.
  bool recorded = false;
  std::uint64_t activation = 0;
  std::uint64_t target_ns = 0;
};

inline abi::CUevent ToHandle(Event* event) { return reinterpret_cast<abi::CUevent>(event); }

}  // namespace gpufrac::simgpu
