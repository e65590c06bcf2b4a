// The GPUs a node service schedules: this machine's, found through NVML, or simulated ones when
// the operator asks for them (`--sim 2xH100-80GB,1xA30-24GB`; never silently).
#pragma once

#include <set>
#include <string>
#include <vector>

#include "common/status.h"
#include "gpu/mig_device.h"
#include "node/queue_scheduler.h"

namespace gpufrac::node {

struct Inventory {
  std::vector<NodeGpu> gpus;  // Every GPU, MIG-enabled or not.
  std::set<int> mig_enabled;  // Indexes of the GPUs in MIG mode (served by the MIG lane).
  // Variables every job gets on top of its own environment (the simulated driver's
  // configuration and namespace; LD_LIBRARY_PATH is put in front of the job's own); empty for
  // real GPUs.
  std::vector<std::string> job_env;
  bool simulated = false;
  std::string nvml_library;  // Where NVML was loaded from (for MIG control).
};

// Marks the GPUs whose MIG mode is on in `inventory.mig_enabled`, asking `control`.
Status ReadMigModes(const gpu::MigControl& control, Inventory* inventory);

// Real GPUs through libnvidia-ml.so.1. Fails when there is no driver or no GPU, saying how to
// use simulated GPUs instead.
StatusOr<Inventory> DiscoverGpus();

// Simulated GPUs of the configuration `spec` (simgpu's syntax: "[Nx]MODEL[,...]"), from the
// stand-in driver libraries in `simgpu_dir`, on a simulated machine called `name_space` that only
// this service and its jobs share.
StatusOr<Inventory> SimulatedGpus(const std::string& spec, const std::string& simgpu_dir,
                                  const std::string& name_space);

}  // namespace gpufrac::node
