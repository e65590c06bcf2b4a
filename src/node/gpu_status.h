// What the node service reports of one GPU (status listings, metrics): its allocation, what its
// workloads hold now, and the job its free share is reserved for.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/compute_share.h"
#include "machine/node_gpu.h"
#include "node/compute_guard.h"

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
  // GPU time its processes used since this service started or adopted it, as the driver
  // measured it (node/job_gpu_time.h); nullopt where the driver gives none (a service without
  // cgroups, MIG).
  std::optional<double> gpu_seconds;
  // GPU time its arbiter charged it so far; nullopt when not arbitrated.
  std::optional<double> charged_seconds;
  // Its share of the GPU's time over the last interval of at least a second: of what the driver
  // measured (of what the arbiter charged where the driver gives nothing); nullopt until two
  // samples a second apart exist, or when neither is known.
  std::optional<double> measured_share;
  // Whether it took more than its share in the last windows (node/compute_guard.h), and the
  // part of the time the service holds it frozen for that; kNo and 0 until judged.
  ComputeGuard::Over over_share = ComputeGuard::Over::kNo;
  double held = 0;
};

struct GpuStatus {
  machine::NodeGpu gpu;
  uint32_t allocated_milli = 0;
  uint64_t allocated_memory = 0;
  uint64_t used_memory = 0;
  // The measured shares of its workloads, added up (nullopt when none is measured).
  std::optional<double> compute_in_use;
  std::optional<int64_t> reserved_for;
  std::vector<WorkloadStatus> workloads;
};

}  // namespace gpufrac::node
