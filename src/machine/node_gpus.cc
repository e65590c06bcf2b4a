// Builds the scheduler's GPU list from NVML's device list, real or simulated.
#include "machine/node_gpus.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>

#include "common/paths.h"
#include "gpu/devices.h"
#include "gpu/mig_catalogue.h"
#include "simgpu/core/config.h"

namespace gpufrac::machine {
namespace {

// The driver's device minor of each GPU, by UUID, from /proc/driver/nvidia/gpus/*/information
// ("Device Minor: 3", "GPU UUID: GPU-..."), which the NVIDIA kernel module writes.
std::map<std::string, int> DeviceMinors() {
  std::map<std::string, int> minors;
  std::error_code ec;
  for (const auto& entry :
       std::filesystem::directory_iterator("/proc/driver/nvidia/gpus", ec)) {
    std::ifstream in(entry.path() / "information");
    std::string line, uuid;
    int minor = -1;
    while (std::getline(in, line)) {
      if (line.rfind("Device Minor:", 0) == 0) minor = std::atoi(line.c_str() + 13);
      if (line.rfind("GPU UUID:", 0) == 0) {
        uuid = line.substr(9);
        uuid.erase(0, uuid.find_first_not_of(" \t"));
      }
    }
    if (!uuid.empty() && minor >= 0) minors[uuid] = minor;
  }
  return minors;
}

Inventory FromDevices(const std::vector<gpu::DeviceInfo>& devices) {
  Inventory inventory;
  const std::map<std::string, int> minors = DeviceMinors();
  for (const gpu::DeviceInfo& d : devices) {
    NodeGpu g;
    g.index = static_cast<int>(d.index);
    if (auto it = minors.find(d.uuid); it != minors.end()) g.minor = it->second;
    g.uuid = d.uuid;
    g.model = d.model ? std::string(d.model->short_name) : std::string();
    g.memory_bytes = d.memory_total;
    g.context_bytes = gpu::ContextChargeBytes(d.model);
    inventory.gpus.push_back(g);
  }
  if (!devices.empty()) inventory.product_name = devices.front().name;
  return inventory;
}

}  // namespace

StatusOr<Inventory> DiscoverGpus() {
  auto devices = gpu::ListDevices();
  if (!devices.ok()) {
    return Status(devices.status().code(),
                  devices.status().message() +
                      " (to try gpufrac without GPUs, start the service with --sim 2xH100-80GB)");
  }
  if (devices->empty()) {
    return UnavailableError(
        "NVML found no GPU on this machine (to try gpufrac without GPUs, use --sim 2xH100-80GB)");
  }
  Inventory inventory = FromDevices(*devices);
  inventory.nvml_library = gpu::kNvmlLibraryName;
  inventory.caps = ReadNvidiaCaps();
  return inventory;
}

StatusOr<Inventory> SimulatedGpus(const std::string& spec, const std::string& simgpu_dir,
                                  const std::string& name_space) {
  simgpu::MachineConfig config;
  std::string error;
  if (!simgpu::ParseMachineConfig(spec, &config, &error)) {
    return InvalidArgumentError("--sim " + spec + ": " + error);
  }
  std::string nvml = simgpu_dir + "/libnvidia-ml.so.1";
  if (access(nvml.c_str(), R_OK) != 0) {
    return UnavailableError("cannot find the simulated driver " + nvml +
                            " (build gpufrac, or set GPUFRAC_SIMGPU_DIR)");
  }
  // The stand-in NVML reads its machine from the environment; the service's own process is one
  // of the simulated machine's processes, as its jobs are.
  setenv("SIMGPU_CONFIG", spec.c_str(), 1);
  setenv("SIMGPU_NAMESPACE", name_space.c_str(), 1);
  auto devices = gpu::ListDevices(nvml);
  if (!devices.ok())
    return Status(devices.status().code(), "--sim " + spec + ": " + devices.status().message());
  Inventory inventory = FromDevices(*devices);
  for (NodeGpu& g : inventory.gpus) g.minor = g.index;
  inventory.job_env = {"LD_LIBRARY_PATH=" + simgpu_dir, "SIMGPU_CONFIG=" + spec,
                       "SIMGPU_NAMESPACE=" + name_space};
  inventory.simulated = true;
  inventory.nvml_library = nvml;
  return inventory;
}

Status ReadMigModes(const gpu::MigControl& control, Inventory* inventory) {
  // Every GPU, not only the catalogue's MIG models: a GPU in MIG mode that gpufrac cannot
  // drive must still be kept out of the shared lane (it has no usable whole device).
  for (NodeGpu& g : inventory->gpus) {
    auto mode = control.GetMigMode(static_cast<unsigned>(g.index));
    if (!mode.ok() && mode.status().code() == StatusCode::kFailedPrecondition) continue;  // No MIG.
    if (!mode.ok()) return mode.status();
    if (mode->current) g.mode = gpu::GpuMode::kMig;
  }
  return OkStatus();
}

StatusOr<std::unique_ptr<NodeGpus>> OpenNodeGpus(const NodeGpusOptions& options,
                                                 std::string* warning) {
  auto gpus = std::make_unique<NodeGpus>();
  StatusOr<Inventory> inventory =
      options.sim.empty() ? DiscoverGpus()
                          : SimulatedGpus(options.sim, SimgpuDir(), options.sim_namespace);
  if (!inventory.ok()) return inventory.status();
  gpus->inventory = std::move(*inventory);
  for (int index : options.whole_gpus) {
    bool found = false;
    for (NodeGpu& g : gpus->inventory.gpus) {
      if (g.index != index) continue;
      g.mode = gpu::GpuMode::kWhole;
      found = true;
    }
    if (!found) {
      return InvalidArgumentError("--whole-gpus: no GPU " + std::to_string(index) +
                                  " on this node");
    }
    gpus->inventory.whole_gpus.insert(index);
  }
  for (int index : options.mps_gpus) {
    if (gpus->inventory.whole_gpus.count(index)) {
      return InvalidArgumentError("GPU " + std::to_string(index) +
                                  " is in both --whole-gpus and --mps-gpus; choose one");
    }
    bool found = false;
    for (NodeGpu& g : gpus->inventory.gpus) {
      if (g.index != index) continue;
      g.mode = gpu::GpuMode::kMps;
      found = true;
    }
    if (!found) {
      return InvalidArgumentError("--mps-gpus: no GPU " + std::to_string(index) + " on this node");
    }
  }
  auto control = gpu::MigControl::Open(gpus->inventory.nvml_library);
  if (!control.ok()) {
    if (warning != nullptr) {
      *warning =
          "no MIG control (" + control.status().message() + "); GPUs in MIG mode are left alone";
    }
    return gpus;
  }
  gpus->mig_control = std::move(*control);
  GPUFRAC_RETURN_IF_ERROR(ReadMigModes(*gpus->mig_control, &gpus->inventory));
  std::map<int, const gpu::MigModel*> models;
  for (const NodeGpu& g : gpus->inventory.gpus) {
    const gpu::MigModel* m = g.model.empty() ? nullptr : gpu::FindMigModel(g.model);
    if (m == nullptr) continue;
    models[g.index] = m;
    // A GPU in MIG mode tells its own profile tables; they win over the built-in ones.
    if (g.mode != gpu::GpuMode::kMig) continue;
    auto profiles = gpus->mig_control->Profiles(static_cast<unsigned>(g.index));
    if (!profiles.ok()) continue;
    gpus->driver_models.push_back(gpu::MigModelFromDriver(*m, *profiles));
    models[g.index] = &gpus->driver_models.back();
    gpus->mig_models[g.index] = &gpus->driver_models.back();
  }
  gpus->mig_backend = std::make_unique<mig::NvmlMigBackend>(gpus->mig_control.get(), models);
  return gpus;
}

}  // namespace gpufrac::machine
