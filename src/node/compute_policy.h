// How the node divides a shared GPU's time among the jobs on it. Every job that shares a GPU has
// a compute request (guaranteed when others compete; --gpu-compute, by default its memory share)
// and a compute limit (the most it may take when others are idle; --gpu-compute-limit):
//   fair    the limit defaults to 1: idle time goes to whoever wants it (work-conserving)
//   strict  the limit defaults to the request: a job never takes more than it asked for
//   off     the node does not arbitrate: the GPU's own time-slicing gives every process an equal
//           share, whatever the requests
// Whole GPUs and MIG instances are not arbitrated (their compute is their own).
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "common/gpu_request.h"

namespace gpufrac::node {

enum class ComputePolicy { kFair, kStrict, kOff };

// "fair", "strict", "off"; nullopt for anything else.
std::optional<ComputePolicy> ParseComputePolicy(std::string_view text);
const char* ComputePolicyName(ComputePolicy policy);

// The compute limit, in thousandths, of a job asking `request` that was given a share of
// `share_milli` of a GPU (its compute request) under `policy`; 0 when its compute is not
// arbitrated (policy off, a whole GPU, a MIG instance).
uint32_t ComputeLimitMilli(const GpuRequest& request, uint32_t share_milli, ComputePolicy policy);

// On a GPU in MPS mode, the share of the SMs a job with compute limit `limit_milli` gets, as
// CUDA_MPS_ACTIVE_THREAD_PERCENTAGE (1 to 100; 100 when its compute is not arbitrated).
int MpsThreadPercentage(uint32_t limit_milli);

}  // namespace gpufrac::node
