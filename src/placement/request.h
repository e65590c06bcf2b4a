// What a workload asks the placement engine for: host CPU and memory plus zero or more GPUs, each
// a share of a GPU (thousandths) and optionally an amount of its memory, on allowed GPU models.
#pragma once

#include <cstdint>
#include <functional>

#include "common/units.h"

namespace gpufrac::placement {

// GPU models are small integers handed out by a ModelNames registry (cluster.h); a set of them
// is a bit mask. The empty set means "any model".
using ModelSet = uint64_t;
inline constexpr int kMaxModels = 64;

// Bit i stands for GPU i of a node.
using GpuSet = uint32_t;
inline constexpr int kMaxGpusPerNode = 32;

// A whole GPU in thousandths.
inline constexpr uint32_t kMilli = kMilliPerGpu;

struct Request {
  uint64_t cpu_milli = 0;         // Thousandths of a CPU core.
  uint64_t memory_bytes = 0;      // Host memory.
  uint32_t gpu_count = 0;         // How many GPUs; 0 for a CPU-only workload.
  uint32_t gpu_milli = 0;         // Share of each of those GPUs, 1..1000 (1000 = all of it).
  uint64_t gpu_memory_bytes = 0;  // GPU memory needed on each GPU; 0 when not asked for.
  ModelSet models = 0;            // Allowed GPU models; 0 = any.

  // One GPU shared with others (a fraction or a memory amount), as opposed to whole GPUs.
  bool SharesGpu() const { return gpu_count == 1 && gpu_milli < 1000; }
  // Total GPU thousandths asked for.
  uint64_t TotalGpuMilli() const { return uint64_t{gpu_count} * gpu_milli; }

  friend bool operator==(const Request&, const Request&) = default;
};

struct RequestHash {
  size_t operator()(const Request& r) const {
    uint64_t h = r.cpu_milli;
    for (uint64_t v : {r.memory_bytes, uint64_t{r.gpu_count}, uint64_t{r.gpu_milli},
                       r.gpu_memory_bytes, r.models}) {
      h = (h ^ v) * 0x100000001b3ULL + (h >> 29);
    }
    return std::hash<uint64_t>{}(h);
  }
};

}  // namespace gpufrac::placement
