// The visible-devices environment and device nodes of a container's GPUs.
#include "k8s/container_gpus.h"

#include <sys/stat.h>

#include <set>

namespace gpufrac::k8s {
namespace {

std::vector<ContainerAllocation::DeviceNode> ExistingDeviceNodes(const std::string& dev_dir,
                                                                 const std::vector<int>& gpus) {
  std::vector<std::string> names = {"nvidiactl", "nvidia-uvm", "nvidia-uvm-tools"};
  std::set<int> seen;
  for (int g : gpus) {
    if (seen.insert(g).second) names.push_back("nvidia" + std::to_string(g));
  }
  std::vector<ContainerAllocation::DeviceNode> nodes;
  for (const std::string& n : names) {
    std::string host = dev_dir + "/" + n;
    struct stat st;
    if (stat(host.c_str(), &st) == 0) nodes.push_back({"/dev/" + n, host, "rw"});
  }
  return nodes;
}

}  // namespace

void ExposeGpus(const std::vector<std::string>& ids, const std::string& dev_dir,
                const std::vector<int>& gpus, ContainerAllocation* out) {
  std::string visible;
  for (const std::string& id : ids) visible += (visible.empty() ? "" : ",") + id;
  out->envs["CUDA_VISIBLE_DEVICES"] = visible;
  out->envs["NVIDIA_VISIBLE_DEVICES"] = visible;
  out->devices = ExistingDeviceNodes(dev_dir, gpus);
}

}  // namespace gpufrac::k8s
