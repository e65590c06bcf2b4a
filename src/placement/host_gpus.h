// The one adapter from a host's GPUs to the placement library, shared by the node service and the
// Kubernetes extender: alike GPUs of a host become one placement node (a group), and a request
// (common/gpu_request.h) becomes what it takes on a GPU of each group.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/gpu_request.h"
#include "common/status.h"
#include "placement/cluster.h"
#include "placement/request.h"

namespace gpufrac::placement {

// One GPU of a host that placement may give out (not in MIG mode, healthy).
struct HostGpu {
  std::string model;  // As the host reports it; "" when not in the catalogue.
  uint64_t memory_bytes = 0;
  uint64_t context_bytes = 0;  // What the limiter charges each CUDA context on it.
  bool whole_only = false;     // It takes whole-GPU requests only.
  // Its shares run under MPS: one user's at a time (the caller keeps to that), one GPU per share.
  bool mps = false;
};

// GPUs alike in everything placement looks at: one placement node.
struct GpuGroup {
  std::string model;
  uint64_t memory_bytes = 0;
  uint64_t context_bytes = 0;
  bool whole_only = false;
  bool mps = false;
  std::vector<int> members;  // Slot (placement GPU) -> position in the list it was grouped from.
  int model_id = -1;  // The cluster's id of `model` (ModelNames), once the caller interns it.
};

// Groups `gpus` in the order each kind first appears, members in list order. The one rule for a
// host with more alike GPUs than a placement node holds (kMaxGpusPerNode): kInvalidArgument
// ("more than 32 H100-80GB GPUs on one node are not supported"), never a group cut short.
// gpufracd then refuses to start; the extender offers none of the node's shared and whole GPUs
// and gives this as the reason.
StatusOr<std::vector<GpuGroup>> GroupHostGpus(const std::vector<HostGpu>& gpus);

// What a host has of CPU and memory as placement sees a GPU group: more than anything asks. The
// node service and the extender place GPUs only (the host's CPU and memory are the job's own
// limits' and kube-scheduler's to decide).
inline constexpr uint64_t kHostPlenty = uint64_t{1} << 60;

// The placement node of `group` (from GroupHostGpus: at most kMaxGpusPerNode members), named
// `name`, its GPUs of model id `model`: one node spec for the node service's groups and the
// extender's alike.
NodeSpec GroupNodeSpec(std::string name, const GpuGroup& group, int model);

// What `request` takes on the GPUs of `group`: its GPU count, the share of each and the memory
// limit on each, and (when it names a model and the group has an id) the allowed model. Nullopt
// when it cannot run there at all: another model, a MIG profile, a share on a whole-only group,
// shares of several GPUs on an MPS group, more GPUs than the group has, or an amount the GPU
// cannot hold beside a CUDA context.
std::optional<Request> RequestOnGroup(const GpuRequest& request, const GpuGroup& group);

}  // namespace gpufrac::placement
