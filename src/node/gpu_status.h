// What the node service reports of one GPU (status listings, metrics): its allocation, what its
// workloads hold now, and the job its free share is reserved for.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/compute_share.h"
#include "machine/node_gpu.h"

namespace gpufrac::node {

struct WorkloadStatus {
  int64_t job = 0;
  std::string user;
  uint32_t milli = 0;  // Its share: of the GPU's time, the compute request.
  // As its job's GpuGrant: nullopt when not arbitrated.
  std::optional<ComputePair> compute = std::nullopt;
  // On a GPU in MPS mode, the share of the SMs its MPS client is held to (launch::MpsClientOf).
  std::optional<unsigned> mps_thread_percentage = std::nullopt;
  uint64_t memory_limit = 0;
  uint64_t memory_used = 0;  // As the limiter's budget counts it now.
  double gpu_seconds = 0;    // GPU time its arbiter charged it so far.
  // Its share of the GPU's time over the last interval of at least a second (of the arbiter's
  // charges); nullopt until two samples a second apart exist, or when not arbitrated.
  std::optional<double> measured_share;
};

struct GpuStatus {
  machine::NodeGpu gpu;
  uint32_t allocated_milli = 0;
  uint64_t allocated_memory = 0;
  uint64_t used_memory = 0;
  // The measured shares of its arbitrated workloads, added up (nullopt when none is measured).
  std::optional<double> compute_in_use;
  std::optional<int64_t> reserved_for;
  std::vector<WorkloadStatus> workloads;
};

}  // namespace gpufrac::node
