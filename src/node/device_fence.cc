#include "node/device_fence.h"

#include <map>
#include <set>
#include <string>

namespace gpufrac::node {
namespace {

// The GPU minor a capability name such as "gpu3/gi1/ci0/access" is about, or -1 ("config").
int CapabilityGpu(const std::string& name) {
  if (name.rfind("gpu", 0) != 0) return -1;
  size_t end = name.find('/');
  if (end == 3 || end == std::string::npos || end > 8) return -1;
  int minor = 0;
  for (size_t i = 3; i < end; ++i) {
    if (name[i] < '0' || name[i] > '9') return -1;
    minor = minor * 10 + (name[i] - '0');
  }
  return minor;
}

}  // namespace

std::optional<std::vector<launch::DeviceNode>> DeniedDevices(const std::vector<FencedGpu>& own,
                                                             const machine::NvidiaCaps& caps) {
  std::set<int> own_minors;
  // Per own GPU, the capability prefixes left open ("gpu0/gi3/"); none for a whole GPU.
  std::map<int, std::vector<std::string>> open_prefixes;
  for (const FencedGpu& gpu : own) {
    if (gpu.minor < 0) return std::nullopt;
    own_minors.insert(gpu.minor);
    auto& prefixes = open_prefixes[gpu.minor];
    if (gpu.gpu_instance) {
      prefixes.push_back("gpu" + std::to_string(gpu.minor) + "/gi" +
                         std::to_string(*gpu.gpu_instance) + "/");
    }
  }
  std::vector<launch::DeviceNode> denied;
  for (unsigned minor = 0; minor < launch::kNvidiaFirstControlMinor; ++minor) {
    if (own_minors.count(static_cast<int>(minor)) == 0) {
      denied.push_back({.major = launch::kNvidiaMajor, .minor = minor});
    }
  }
  if (caps.major < 0) return denied;
  for (const auto& [name, minor] : caps.minors) {
    const int gpu = CapabilityGpu(name);
    bool deny = gpu < 0;  // config, monitor and any other capability of the whole driver
    if (auto it = open_prefixes.find(gpu); gpu >= 0 && it != open_prefixes.end()) {
      deny = true;
      for (const std::string& prefix : it->second) {
        if (name.rfind(prefix, 0) == 0) deny = false;
      }
    }
    if (deny) denied.push_back({.major = static_cast<unsigned>(caps.major), .minor = minor});
  }
  return denied;
}

}  // namespace gpufrac::node
