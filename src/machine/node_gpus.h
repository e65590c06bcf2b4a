// The GPUs a node service or Kubernetes agent serves: this machine's, found through NVML, or
// simulated ones when the operator asks for them (`--sim 2xH100-80GB,1xA30-24GB`; never
// silently), with their MIG control.
#pragma once

#include <deque>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "common/status.h"
#include "gpu/mig_device.h"
#include "machine/node_gpu.h"
#include "machine/nvidia_caps.h"
#include "mig/nvml_backend.h"

namespace gpufrac::machine {

struct Inventory {
  std::vector<NodeGpu> gpus;  // Every GPU, MIG-enabled or not.
  // GPUs the operator made whole-only (--whole-gpus): their mode whenever MIG mode is off.
  std::set<int> whole_gpus;
  // Variables every job gets on top of its own environment (the simulated driver's
  // configuration and namespace; LD_LIBRARY_PATH is put in front of the job's own); empty for
  // real GPUs.
  std::vector<std::string> job_env;
  bool simulated = false;
  std::string nvml_library;  // Where NVML was loaded from (for MIG control).
  std::string product_name;  // NVML's name of the first GPU ("NVIDIA H100 80GB HBM3").
  // The driver's capability nodes (MIG instances' among them); empty for simulated GPUs.
  NvidiaCaps caps;
};

// Sets the mode of the GPUs whose MIG mode is on to kMig, asking `control`.
Status ReadMigModes(const gpu::MigControl& control, Inventory* inventory);

// Real GPUs through libnvidia-ml.so.1. Fails when there is no driver or no GPU, saying how to
// use simulated GPUs instead.
StatusOr<Inventory> DiscoverGpus();

// Simulated GPUs of the configuration `spec` (simgpu's syntax: "[Nx]MODEL[,...]"), from the
// stand-in driver libraries in `simgpu_dir`, on a simulated machine called `name_space` that only
// this service and its jobs share.
StatusOr<Inventory> SimulatedGpus(const std::string& spec, const std::string& simgpu_dir,
                                  const std::string& name_space);

// A node's GPUs ready to serve: the inventory (real or simulated, with whole-only GPUs marked and
// MIG modes read) and, when the driver offers MIG control, the MIG backend with each MIG GPU's
// profile tables (the driver's, when the GPU is in MIG mode; else the catalogue's).
struct NodeGpus {
  Inventory inventory;
  std::unique_ptr<gpu::MigControl> mig_control;      // Null without MIG support.
  std::unique_ptr<mig::NvmlMigBackend> mig_backend;  // Null without MIG support.
  std::map<int, const gpu::MigModel*> mig_models;    // GPUs in MIG mode -> the driver's tables.
  std::deque<gpu::MigModel> driver_models;           // Storage for those tables.
};

struct NodeGpusOptions {
  std::string sim;              // Simulated GPUs ("2xH100-80GB"), or "" for this machine's.
  std::string sim_namespace;    // The simulated machine's name (see SimulatedGpus).
  std::vector<int> whole_gpus;  // GPUs that serve whole-GPU jobs only.
  std::vector<int> mps_gpus;    // GPUs whose shares run under MPS.
};

// Discovers the GPUs and sets up MIG control. Errors: those of DiscoverGpus/SimulatedGpus,
// ReadMigModes, and kInvalidArgument for a --whole-gpus or --mps-gpus index the node does not
// have, or one in both. A driver
// without MIG control is not an error (`warning` says so; GPUs in MIG mode are then left alone).
StatusOr<std::unique_ptr<NodeGpus>> OpenNodeGpus(const NodeGpusOptions& options,
                                                 std::string* warning);

}  // namespace gpufrac::machine
