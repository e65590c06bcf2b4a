// A client of the kubelet's PodResources API (v1): List over the kubelet's unix socket, which
// says which pods the kubelet knows on this node and which devices of each resource it recorded
// for each of their containers. Free of gRPC types, so that its users need no generated code.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace gpufrac::k8s {

inline constexpr std::string_view kDefaultPodResourcesSocket =
    "/var/lib/kubelet/pod-resources/kubelet.sock";

// What the kubelet recorded for one container: per resource, the device ids its device plugin
// advertised and the kubelet gave the container. The kubelet records them once the plugin's
// Allocate for the container has returned.
struct ContainerDevices {
  std::string resource_name;
  std::vector<std::string> device_ids;
};

struct ContainerResources {
  std::string name;
  std::vector<ContainerDevices> devices;

  // The ids recorded for `resource` (empty when none are).
  std::vector<std::string> DevicesOf(std::string_view resource) const;
};

// One pod the kubelet knows on this node: running, starting, or being admitted (the kubelet lists
// a pod from the moment it admits it, before the device plugins' Allocate for it).
struct PodResources {
  std::string ns;
  std::string name;
  std::vector<ContainerResources> containers;

  // The container named `name`, or nullptr.
  const ContainerResources* Container(std::string_view name) const;
};

class PodResourcesClient {
 public:
  // `socket_path` is the kubelet's socket; every List gives up after `timeout`.
  explicit PodResourcesClient(std::string socket_path,
                              std::chrono::milliseconds timeout = std::chrono::seconds(2));
  ~PodResourcesClient();

  PodResourcesClient(const PodResourcesClient&) = delete;
  PodResourcesClient& operator=(const PodResourcesClient&) = delete;

  // Every pod the kubelet lists, as it lists them. kUnavailable, one line naming the socket, when
  // there is no socket, the kubelet does not answer within the timeout or answers with an error.
  // Thread-safe; never blocks longer than the timeout.
  StatusOr<std::vector<PodResources>> List();

  const std::string& socket_path() const { return socket_path_; }

 private:
  struct Impl;
  const std::string socket_path_;
  const std::chrono::milliseconds timeout_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace gpufrac::k8s
