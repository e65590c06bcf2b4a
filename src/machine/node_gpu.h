// One GPU as the node service's scheduler and the Kubernetes agent see it.
#pragma once

#include <cstdint>
#include <string>

namespace gpufrac::machine {

// One GPU the node service or agent schedules (not the MIG instances of a GPU in MIG mode).
struct NodeGpu {
  int index = 0;               // NVML index.
  std::string uuid;            // "GPU-...".
  std::string model;           // Catalogue short name ("H100-80GB"); "" when not in the catalogue.
  uint64_t memory_bytes = 0;   // Total memory.
  uint64_t context_bytes = 0;  // Charged per CUDA context (ContextChargeBytes); limits exceed it.
  bool whole_only = false;     // Mode "whole": serves whole-GPU jobs only, never shares.
};

}  // namespace gpufrac::machine
