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

#include "common/status.h"

namespace gpufrac::k8s {

inline constexpr std::string_view kAnnotationAssignment = "gpufrac.io/assignment";

struct MigGrant {
  std::string profile;  // "2g.20gb"
  int start = 0;        // Placement in memory slices.
  int size = 0;
  friend bool operator==(const MigGrant&, const MigGrant&) = default;
};

// One GPU given to a container.
struct GpuGrant {
  int index = 0;
  std::string uuid;           // "GPU-..." (the physical GPU, also for MIG).
  uint32_t milli = 0;         // Share of the GPU booked (1000 for a whole GPU).
  uint64_t memory_bytes = 0;  // Memory limit on it (all of it for a whole GPU).
  std::optional<MigGrant> mig;
  friend bool operator==(const GpuGrant&, const GpuGrant&) = default;
};

struct ContainerAssignment {
  std::string container;
  std::vector<GpuGrant> gpus;
  // The compute limit the pod asked for on its shared GPUs (gpufrac.io/gpu-compute-limit), in
  // thousandths; nullopt when it gave none and the node agent's policy decides. (The compute
  // request is each grant's milli: placement books a share of the GPU's time.)
  std::optional<uint32_t> compute_limit_milli;
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
  std::vector<ContainerAssignment> containers;
  friend bool operator==(const Assignment&, const Assignment&) = default;
};

nlohmann::json AssignmentToJson(const Assignment& assignment);
StatusOr<Assignment> AssignmentFromJson(const nlohmann::json& document);

}  // namespace gpufrac::k8s
