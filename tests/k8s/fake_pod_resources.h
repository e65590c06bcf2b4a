// A stand-in for the kubelet's PodResources API (v1 List) on a unix socket, holding what a kubelet
// holds: every pod it knows on the node, from the moment it admits one (before the device plugins'
// Allocate for it), and per container the devices of each resource, recorded once that
// container's Allocate has returned. Real gRPC, no k8s.
#pragma once

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"

namespace gpufrac::k8s::testing {

class FakePodResources {
 public:
  // Serves on `socket_path` (removed first if it exists).
  explicit FakePodResources(std::string socket_path);
  ~FakePodResources();  // Stops.

  FakePodResources(const FakePodResources&) = delete;
  FakePodResources& operator=(const FakePodResources&) = delete;

  Status Start();
  void Stop();

  // The kubelet admits pod ns/name with these containers: List shows it, with no devices yet.
  void Admit(const std::string& ns, const std::string& name,
             const std::vector<std::string>& containers);
  // The device plugin's Allocate for the container returned: List shows `ids` of `resource`.
  void Record(const std::string& ns, const std::string& name, const std::string& container,
              const std::string& resource, const std::vector<std::string>& ids);
  // While set, List fails with this gRPC code (a kubelet in trouble).
  void FailWith(std::optional<grpc::StatusCode> code);
  // List answers only after `delay` (a kubelet that hangs).
  void Delay(std::chrono::milliseconds delay);

  // How many List calls were answered or refused.
  int calls() const;
  const std::string& socket_path() const { return socket_path_; }

 private:
  class Service;
  struct Container {
    std::string name;
    std::map<std::string, std::vector<std::string>> devices;  // By resource.
  };
  struct Pod {
    std::string ns, name;
    std::vector<Container> containers;
  };

  const std::string socket_path_;
  std::unique_ptr<Service> service_;
  std::unique_ptr<grpc::Server> server_;
  mutable std::mutex mu_;
  std::vector<Pod> pods_;  // In the order admitted.
  std::optional<grpc::StatusCode> failure_;
  std::chrono::milliseconds delay_{0};
  int calls_ = 0;
};

}  // namespace gpufrac::k8s::testing
