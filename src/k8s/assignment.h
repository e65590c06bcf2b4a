// Where the extender put a pod: for each GPU container, the exact GPUs (and the share, memory
// or MIG placement on each). Stored on the pod as the annotation gpufrac.io/assignment, which is
// the one record of a booking: the extender rebuilds its books from these after a restart, and
// the node agent reads it in Allocate to give the container what was booked.
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/compute_share.h"
#include "common/status.h"
#include "launch/gpu_grant.h"

namespace gpufrac::k8s {

inline constexpr std::string_view kAnnotationAssignment = "gpufrac.io/assignment";

// One GPU given to a container: the launchers' one grant type. Its uuid is the physical GPU's,
// also for MIG (the agent finds the instance at the grant's placement); the annotation records
// index, uuid, milli, memory_bytes, mig and, on a share the extender decided it for, the compute
// pair (`compute`: request_milli, limit_milli).
using launch::GpuGrant;
using launch::MigGrant;

struct ContainerAssignment {
  std::string container;
  std::vector<GpuGrant> gpus;
  // The compute limit the pod asked for on its shared GPUs (gpufrac.io/gpu-compute-limit), in
  // thousandths; nullopt when it gave none. (The compute request is each grant's milli:
  // placement books a share of the GPU's time.) What the pairs were decided from; an agent
  // decides from it only for an assignment without a compute_policy.
  std::optional<uint32_t> compute_limit_milli = std::nullopt;
  // The kubelet calls the device plugin for this container (it asks for gpufrac.io/gpu). An
  // annotation-only container is booked but never allocated, so Allocate must not match it.
  bool device_plugin = true;
  // Who the container runs as (ContainerRequest::run_as) when its GPU is in MPS mode: no other
  // user's container is booked on that GPU while this one holds it. "" otherwise.
  std::string mps_user{};
  friend bool operator==(const ContainerAssignment&, const ContainerAssignment&) = default;
};

struct Assignment {
  std::string node;
  int64_t time_ms = 0;  // When it was made (Unix time): the node agent starts pods in this order.
  // The node's policy (NodeInventory::compute_policy) by which the extender decided the compute
  // pair of every share here: each share's grant carries its pair, and nullopt there is "not
  // arbitrated". nullopt in an assignment that carries no pairs (from an extender before them,
  // or for a node whose agent publishes no policy): the agent then decides each share's pair
  // at Allocate, from compute_limit_milli and its own policy, as it did before.
  std::optional<ComputePolicy> compute_policy = std::nullopt;
  std::vector<ContainerAssignment> containers;
  friend bool operator==(const Assignment&, const Assignment&) = default;
};

nlohmann::json AssignmentToJson(const Assignment& assignment);
StatusOr<Assignment> AssignmentFromJson(const nlohmann::json& document);

}  // namespace gpufrac::k8s
