// How much of one GPU a memory amount or a fraction takes, in the placement engine's units
// (thousandths and bytes): the one translation the node service and the Kubernetes extender
// share, so that "4 GiB" or "0.25" books the same share everywhere.
#pragma once

#include <cstdint>
#include <optional>

namespace gpufrac::placement {

struct GpuShareSize {
  uint32_t milli = 0;         // Thousandths of the GPU booked.
  uint64_t memory_bytes = 0;  // The memory limit on it.
};

// `memory` bytes on a GPU of `total` bytes whose CUDA context takes `context`: ceil(1000 x
// memory / total) thousandths (at least 1) and `memory` bytes. Nullopt when the GPU cannot hold
// it (more than it has, or no more than the context itself).
std::optional<GpuShareSize> ShareForMemory(uint64_t memory, uint64_t total, uint64_t context);

// `milli` thousandths (1..999) of such a GPU: those thousandths and floor(total x milli / 1000)
// bytes. Nullopt when that leaves no room beyond the context.
std::optional<GpuShareSize> ShareForFraction(uint32_t milli, uint64_t total, uint64_t context);

}  // namespace gpufrac::placement
