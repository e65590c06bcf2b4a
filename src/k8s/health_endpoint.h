// The agent's probe endpoint (--health-listen): GET /readyz answers 200 while `ready()` holds
// and 503 otherwise, GET /healthz 200 while the process serves, for the readiness and liveness
// probes of deploy/kubernetes/agent-daemonset.yaml. The extender keeps GPU pods off a node
// whose agent pod is not Ready (agent_pods.h), so readiness must mean that the kubelet has the
// plugin's devices and the extender the node's GPUs.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "common/status.h"

namespace gpufrac::k8s {

class HealthEndpoint {
 public:
  // Binds `listen` (HOST:PORT; port 0 picks a free one) and serves on a thread of its own.
  // kInvalidArgument for a malformed address, kUnavailable when it cannot be bound.
  static StatusOr<std::unique_ptr<HealthEndpoint>> Start(const std::string& listen,
                                                         std::function<bool()> ready);
  ~HealthEndpoint();  // Stops serving.

  int port() const;

 private:
  struct Impl;
  explicit HealthEndpoint(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace gpufrac::k8s
