// How much of one GPU a memory amount or a fraction takes, in the placement engine's units
// (thousandths and bytes): the one translation the node service and the Kubernetes extender
// share, so that "4 GiB" or "0.25" books the same share everywhere.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "common/compute_share.h"
#include "common/gpu_request.h"
#include "common/status.h"

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

// What a workload started on one GPU without a scheduler (`gpufrac exec`, a Slurm step) gets
// there for `request` (memory, a fraction, or whole GPUs): its memory limit, and on a share of
// the GPU its compute request (by default the memory's share) and limit (by default all of the
// GPU's idle time), as the node service's fair policy gives; no compute pair for all of the GPU.
struct OneGpuLimits {
  uint64_t memory_bytes = 0;
  uint32_t share_milli = 0;  // What the memory is of the GPU (1000: all of it).
  std::optional<ComputePair> compute = std::nullopt;  // nullopt for all of the GPU.
};
// The GPU has `total` bytes, a CUDA context takes `context` there, and `gpu` names it in errors
// ("GPU 0 (NVIDIA A100-SXM4-40GB)"). kInvalidArgument, one line: more memory than the GPU has,
// no more than the context, or a compute request or limit on all of the GPU.
StatusOr<OneGpuLimits> LimitsOnOneGpu(const GpuRequest& request, uint64_t total, uint64_t context,
                                      const std::string& gpu);

}  // namespace gpufrac::placement
