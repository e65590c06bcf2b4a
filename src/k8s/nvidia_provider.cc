// NVIDIA's resource names: which GPUs and MIG instances they cover, flag checks, and Allocate.
#include "k8s/nvidia_provider.h"

#include <algorithm>
#include <set>

#include "common/log.h"
#include "k8s/container_gpus.h"

namespace gpufrac::k8s {

std::string NvidiaMigResource(std::string_view profile) {
  std::string name = "nvidia.com/mig-" + std::string(profile);
  std::replace(name.begin(), name.end(), '+', '.');
  return name;
}

std::string NvidiaSocketName(std::string_view resource) {
  std::string name(resource);
  if (name.rfind("nvidia.com/", 0) == 0) name = name.substr(std::string_view("nvidia.com/").size());
  for (char& c : name) {
    if (c == '/') c = '-';
  }
  return "gpufrac-nvidia-" + name + ".sock";
}

bool NvidiaGpus::Contains(int index) const {
  return std::count(whole.begin(), whole.end(), index) > 0 ||
         std::count(static_mig.begin(), static_mig.end(), index) > 0;
}

Status CheckNvidiaGpus(const NodeInventory& all, const NvidiaGpus& gpus) {
  std::set<int> whole;
  for (int index : gpus.whole) {
    const GpuInfo* g = FindGpu(all, index);
    const std::string which = "--nvidia-gpus: GPU " + std::to_string(index);
    if (g == nullptr) return InvalidArgumentError(which + ": this node has no such GPU");
    if (!whole.insert(index).second) return InvalidArgumentError(which + " is listed twice");
    if (g->mode == GpuMode::kMig) {
      return InvalidArgumentError(which +
                                  " is in MIG mode; list it in --static-mig-gpus to serve "
                                  "its instances, or disable MIG on it");
    }
    if (g->mode == GpuMode::kWhole) {
      return InvalidArgumentError(which + " is also in --whole-gpus; list it in one of the two");
    }
  }
  std::set<int> mig;
  for (int index : gpus.static_mig) {
    const GpuInfo* g = FindGpu(all, index);
    const std::string which = "--static-mig-gpus: GPU " + std::to_string(index);
    if (g == nullptr) return InvalidArgumentError(which + ": this node has no such GPU");
    if (!mig.insert(index).second) return InvalidArgumentError(which + " is listed twice");
    if (whole.count(index) > 0) {
      return InvalidArgumentError(which + " is also in --nvidia-gpus; list it in one of the two");
    }
    if (g->mode != GpuMode::kMig) {
      return InvalidArgumentError(which +
                                  " is not in MIG mode (or the driver offers no MIG "
                                  "control); enable MIG and create its instances first");
    }
  }
  return OkStatus();
}

NodeInventory WithoutNvidiaGpus(NodeInventory all, const NvidiaGpus& gpus) {
  std::erase_if(all.gpus, [&gpus](const GpuInfo& g) { return gpus.Contains(g.index); });
  return all;
}

std::map<std::string, std::vector<NvidiaDevice>> NvidiaResources(const NodeInventory& all,
                                                                 const NvidiaGpus& gpus) {
  std::map<std::string, std::vector<NvidiaDevice>> resources;
  if (!gpus.whole.empty()) {
    std::vector<NvidiaDevice>& devices = resources[std::string(kResourceNvidiaGpu)];
    for (int index : gpus.whole) {
      if (const GpuInfo* g = FindGpu(all, index)) devices.push_back({g->uuid, g->index, g->healthy});
    }
  }
  for (int index : gpus.static_mig) {
    const GpuInfo* g = FindGpu(all, index);
    if (g == nullptr) continue;
    for (const MigInstanceInfo& m : g->mig) {
      if (m.uuid.empty()) continue;
      resources[NvidiaMigResource(m.profile)].push_back({m.uuid, g->index, g->healthy});
    }
  }
  return resources;
}

NvidiaProvider::NvidiaProvider(std::string resource, std::string dev_dir,
                               std::vector<NvidiaDevice> devices)
    : resource_(std::move(resource)), dev_dir_(std::move(dev_dir)), devices_(std::move(devices)) {}

bool NvidiaProvider::SetDevices(std::vector<NvidiaDevice> devices) {
  std::lock_guard<std::mutex> lock(mu_);
  if (devices == devices_) return false;
  devices_ = std::move(devices);
  return true;
}

std::vector<PluginDevice> NvidiaProvider::Devices() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<PluginDevice> out;
  for (const NvidiaDevice& d : devices_) {
    out.push_back({.id = d.id, .healthy = d.healthy, .numa_node = {}});
  }
  return out;
}

StatusOr<ContainerAllocation> NvidiaProvider::Allocate(const std::vector<std::string>& device_ids) {
  std::vector<int> gpus;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const std::string& id : device_ids) {
      auto it = std::find_if(devices_.begin(), devices_.end(),
                             [&id](const NvidiaDevice& d) { return d.id == id; });
      if (it == devices_.end()) {
        return NotFoundError(resource_ + " has no device " + id +
                             " on this node any more (its GPU or MIG instance is gone); delete "
                             "the pod to schedule it again");
      }
      gpus.push_back(it->gpu);
    }
  }
  ContainerAllocation out;
  ExposeGpus(device_ids, dev_dir_, gpus, &out);
  LogInfo("allocated %s: %s", resource_.c_str(), out.envs["CUDA_VISIBLE_DEVICES"].c_str());
  return out;
}

}  // namespace gpufrac::k8s
