// What a workload holds on one GPU: the one grant type of every launcher. The node service keeps
// a job's grants in its store, the Kubernetes extender writes a pod's into its assignment
// annotation and the agent reads them back, and each turns them into the workload's limit file
// and environment (launch/grant_limits.h).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "common/compute_share.h"

namespace gpufrac::launch {

// Where on a GPU in MIG mode a Kubernetes container's instance is made (the extender decides the
// placement, the agent makes or finds the instance there).
struct MigGrant {
  std::string profile;  // "2g.20gb"
  int start = 0;        // Placement in memory slices.
  int size = 0;
  friend bool operator==(const MigGrant&, const MigGrant&) = default;
};

struct GpuGrant {
  int index = 0;     // NVML index on its node.
  std::string uuid;  // "GPU-..." (the physical GPU), or the node service's MIG instance "MIG-...".
  // Share of the GPU booked for it, in thousandths (1000: all of it): the node service and the
  // extender book its compute request (by default its memory's share), `gpufrac exec` and Slurm
  // its memory's share. What its limiter is given of the GPU's time is `compute`, not this.
  uint32_t milli = 0;
  uint64_t memory_bytes = 0;  // Memory limit on it (all of it for a whole GPU).
  // Its share of the GPU's time as its limiter is given it, decided where it is placed or
  // started; nullopt when its time is not arbitrated (whole GPUs, MIG, the policy off). (A
  // Kubernetes assignment from an extender before compute pairs carries none at all and says so
  // by its missing compute_policy: the agent decides them on reading it; k8s::Assignment.)
  std::optional<ComputePair> compute = std::nullopt;
  std::optional<MigGrant> mig = std::nullopt;  // Kubernetes' dynamic MIG: the instance to use.
  friend bool operator==(const GpuGrant&, const GpuGrant&) = default;
};

}  // namespace gpufrac::launch
