// A workload's share of a shared GPU's time, decided once where it is placed and carried from
// there. Every workload that shares a GPU (a memory amount or a fraction of one, not all of it)
// has a compute request (what it is guaranteed when others compete: --gpu-compute, by default its
// memory's share) and a compute limit (the most it may take when others are idle:
// --gpu-compute-limit, by default as the policy says):
//   fair    the limit defaults to all of the GPU: idle time goes to whoever wants it
//   strict  the limit defaults to the request: a workload never takes more than it asked for
//   off     the GPU's time is not arbitrated: its own time-slicing gives every process an equal
//           share, whatever the requests
// Whole GPUs and MIG instances are not arbitrated (their compute is their own).
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "common/gpu_request.h"

namespace gpufrac {

enum class ComputePolicy { kFair, kStrict, kOff };

// "fair", "strict", "off"; nullopt for anything else.
std::optional<ComputePolicy> ParseComputePolicy(std::string_view text);
const char* ComputePolicyName(ComputePolicy policy);

// What an arbitrated workload is given of one GPU's time, in thousandths:
// 1 <= request_milli <= limit_milli <= 1000.
struct ComputePair {
  uint32_t request_milli = 0;
  uint32_t limit_milli = 0;
  friend bool operator==(const ComputePair&, const ComputePair&) = default;
};

// The GPU time that placement books for `request`, a memory amount or a fraction, on a GPU of
// which its memory takes `memory_milli` thousandths: its compute request when given, else the
// memory's share, never above its compute limit when one is given.
uint32_t ComputeRequestMilli(const GpuRequest& request, uint32_t memory_milli);

// The pair of a workload booked `request_milli` of a GPU's time (ComputeRequestMilli) that asked
// for `asked_limit` (nullopt: the policy's default; held between the request and all of the GPU)
// under `policy`; nullopt when its time is not arbitrated: the policy is off, or it holds all of
// the GPU (`request_milli` 0 or 1000).
std::optional<ComputePair> DecideComputePair(uint32_t request_milli,
                                             std::optional<uint32_t> asked_limit,
                                             ComputePolicy policy);

// `milli` thousandths of a GPU's time as MPS's share of its SMs
// (CUDA_MPS_ACTIVE_THREAD_PERCENTAGE): rounded up to a whole percent, 1 to 100.
unsigned MpsThreadPercentage(uint32_t milli);

}  // namespace gpufrac
