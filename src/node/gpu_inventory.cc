// Builds the scheduler's GPU list from NVML's device list, real or simulated.
#include "node/gpu_inventory.h"

#include <unistd.h>

#include <cstdlib>

#include "gpu/devices.h"
#include "gpu/mig_catalogue.h"
#include "simgpu/config.h"

namespace gpufrac::node {
namespace {

Inventory FromDevices(const std::vector<gpu::DeviceInfo>& devices) {
  Inventory inventory;
  for (const gpu::DeviceInfo& d : devices) {
    NodeGpu g;
    g.index = static_cast<int>(d.index);
    g.uuid = d.uuid;
    g.model = d.model ? std::string(d.model->short_name) : std::string();
    g.memory_bytes = d.memory_total;
    g.context_bytes = gpu::ContextBytes(d.model);
    inventory.gpus.push_back(g);
  }
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
  inventory.job_env = {"LD_LIBRARY_PATH=" + simgpu_dir, "SIMGPU_CONFIG=" + spec,
                       "SIMGPU_NAMESPACE=" + name_space};
  inventory.simulated = true;
  inventory.nvml_library = nvml;
  return inventory;
}

Status ReadMigModes(const gpu::MigControl& control, Inventory* inventory) {
  // Every GPU, not only the catalogue's MIG models: a GPU in MIG mode that gpufrac cannot
  // drive must still be kept out of the shared lane (it has no usable whole device).
  for (const NodeGpu& g : inventory->gpus) {
    auto mode = control.GetMigMode(static_cast<unsigned>(g.index));
    if (!mode.ok() && mode.status().code() == StatusCode::kFailedPrecondition) continue;  // No MIG.
    if (!mode.ok()) return mode.status();
    if (mode->current) inventory->mig_enabled.insert(g.index);
  }
  return OkStatus();
}

}  // namespace gpufrac::node
