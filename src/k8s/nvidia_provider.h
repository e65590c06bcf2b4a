// NVIDIA's resource names served by gpufrac's node agent, for GPUs the operator keeps out of
// gpufrac's own scheduling: whole GPUs as `nvidia.com/gpu` and the existing instances of GPUs in
// static MIG as `nvidia.com/mig-<profile>`, with the device ids and environment NVIDIA's device
// plugin uses (GPU or MIG UUIDs; the envvar device-list strategy), so pods written for NVIDIA's
// plugin run unchanged.
#pragma once

#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "k8s/device_provider.h"
#include "k8s/inventory.h"

namespace gpufrac::k8s {

inline constexpr std::string_view kResourceNvidiaGpu = "nvidia.com/gpu";

// "nvidia.com/mig-1g.10gb". A resource name may not hold "+", so a media-extension profile
// "1g.10gb+me" becomes "nvidia.com/mig-1g.10gb.me", as NVIDIA's plugin names it.
std::string NvidiaMigResource(std::string_view profile);
// The plugin's socket in the kubelet's directory: "gpufrac-nvidia-gpu.sock",
// "gpufrac-nvidia-mig-1g.10gb.sock".
std::string NvidiaSocketName(std::string_view resource);

// The GPUs the operator gave to NVIDIA's resource names (--nvidia-gpus, --static-mig-gpus).
struct NvidiaGpus {
  std::vector<int> whole;       // Served as nvidia.com/gpu.
  std::vector<int> static_mig;  // Their MIG instances served as nvidia.com/mig-<profile>.
  bool Contains(int index) const;
};

// kInvalidArgument (one line, naming the flag) for an index the node lacks, a GPU listed twice,
// a GPU in both lists or also in --whole-gpus, an --nvidia-gpus GPU in MIG mode, or a
// --static-mig-gpus GPU not in MIG mode. `all` is every GPU of the node as observed.
Status CheckNvidiaGpus(const NodeInventory& all, const NvidiaGpus& gpus);
// `all` without the GPUs of `gpus`: what gpufrac schedules and publishes.
NodeInventory WithoutNvidiaGpus(NodeInventory all, const NvidiaGpus& gpus);

// One device of an NVIDIA resource.
struct NvidiaDevice {
  std::string id;  // The GPU's UUID ("GPU-...") or the MIG instance's ("MIG-...").
  int gpu = 0;     // Index of the physical GPU (its device node).
  bool healthy = true;
  friend bool operator==(const NvidiaDevice&, const NvidiaDevice&) = default;
};

// Resource name -> its devices, from the GPUs as observed now: nvidia.com/gpu whenever
// `gpus.whole` is not empty, and one nvidia.com/mig-<profile> per profile with instances on a
// static MIG GPU. A device is as healthy as its physical GPU.
std::map<std::string, std::vector<NvidiaDevice>> NvidiaResources(const NodeInventory& all,
                                                                 const NvidiaGpus& gpus);

// The resource manager of one NVIDIA resource: lists its devices and answers Allocate with
// CUDA_VISIBLE_DEVICES and NVIDIA_VISIBLE_DEVICES set to the ids given and the device nodes
// that exist. No limiter: these are whole GPUs and hardware partitions.
class NvidiaProvider : public DeviceProvider {
 public:
  NvidiaProvider(std::string resource, std::string dev_dir, std::vector<NvidiaDevice> devices);

  // A new view of the devices; true when it differs (the caller then tells the plugin).
  bool SetDevices(std::vector<NvidiaDevice> devices);

  std::vector<PluginDevice> Devices() override;
  // kNotFound for an id this resource does not have (the kubelet's view is out of date).
  StatusOr<ContainerAllocation> Allocate(const std::vector<std::string>& device_ids) override;

 private:
  const std::string resource_;
  const std::string dev_dir_;
  mutable std::mutex mu_;
  std::vector<NvidiaDevice> devices_;
};

}  // namespace gpufrac::k8s
