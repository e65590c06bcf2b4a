// DeviceProvider: what the kubelet device plugin asks of gpufrac's resource manager (which devices
// exist, their health, what a container gets). Free of gRPC so the manager is testable alone.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"

namespace gpufrac::k8s {

// One schedulable unit as the kubelet sees it: a whole GPU, a MIG instance, or one of the slots a
// shared GPU is cut into. The kubelet counts these; it knows nothing of what lies behind an id.
struct PluginDevice {
  // Unique within the resource; at most 63 characters (the kubelet's limit).
  std::string id;
  bool healthy = true;
  // Reported to the kubelet's topology manager when known.
  std::optional<int> numa_node;

  friend bool operator==(const PluginDevice&, const PluginDevice&) = default;
};

// What the container runtime must do for one container: environment, bind mounts, device nodes,
// runtime annotations and, for runtimes that use them, CDI device names.
struct ContainerAllocation {
  struct Mount {
    std::string container_path;
    std::string host_path;
    bool read_only = true;

    friend bool operator==(const Mount&, const Mount&) = default;
  };
  struct DeviceNode {
    std::string container_path;
    std::string host_path;
    // Cgroup device permissions, some of "r", "w", "m".
    std::string permissions = "rw";

    friend bool operator==(const DeviceNode&, const DeviceNode&) = default;
  };

  std::map<std::string, std::string> envs;
  std::vector<Mount> mounts;
  std::vector<DeviceNode> devices;
  std::map<std::string, std::string> annotations;
  // Fully qualified CDI names ("vendor/class=device"); empty unless the node uses CDI.
  std::vector<std::string> cdi_devices;

  friend bool operator==(const ContainerAllocation&, const ContainerAllocation&) = default;
};

// Implemented by the resource manager. The plugin calls it from gRPC threads, several at a time,
// so every method must be thread-safe. None may call back into the DevicePlugin except
// DevicePlugin::DevicesChanged(), which never blocks on the provider.
class DeviceProvider {
 public:
  virtual ~DeviceProvider() = default;

  // The full current list, including unhealthy devices (the kubelet must see them go unhealthy
  // rather than vanish, or it cannot tell a failed GPU from a reconfigured one).
  virtual std::vector<PluginDevice> Devices() = 0;

  // What one container that the kubelet gave `device_ids` needs. An error fails the pod's start
  // and its message reaches the pod's events, so it should say what the user can do about it.
  // Codes map to gRPC codes of the same name (kResourceExhausted -> RESOURCE_EXHAUSTED, ...).
  virtual StatusOr<ContainerAllocation> Allocate(const std::vector<std::string>& device_ids) = 0;

  // Which `size` devices the provider would rather the kubelet chose from `available`, always
  // including `must_include`. Only a hint: the kubelet may allocate others. Called only when
  // DevicePluginOptions::preferred_allocation is set. The default keeps `must_include` and fills
  // up from `available` in order.
  virtual StatusOr<std::vector<std::string>> PreferredAllocation(
      const std::vector<std::string>& available, const std::vector<std::string>& must_include,
      int size);
};

}  // namespace gpufrac::k8s
