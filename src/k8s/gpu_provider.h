// The node agent's resource manager behind the device plugin: advertises every GPU as a number
// of shareable slots, and in Allocate finds the pod the kubelet is starting (from the
// assignments the extender wrote on the pods bound to this node), creates its MIG instance if it
// has one, writes its read-only limit file (memory, and for a share of a GPU its compute request
// and limit) and returns what the container gets: the GPU or MIG UUIDs, the limiter library, the
// limit file, an /etc/ld.so.preload that loads the limiter, the device nodes, and for a share
// whose compute is arbitrated the GPU's compute arbiter, shared with the other pods on the GPU.
// A share of a GPU in MPS mode is instead a client of the GPU's MPS daemon (container_mps.h):
// its pipe directory, CUDA_MPS_ACTIVE_THREAD_PERCENTAGE from its compute limit and
// CUDA_MPS_PINNED_DEVICE_MEM_LIMIT from its memory, with the limiter keeping its memory and view
// but no compute pair (as gpufracd runs a job on an MPS GPU).
//
// The kubelet's Allocate does not say which pod it is for. The agent takes the pod bound to this
// node longest ago (by its assignment's time, then name) that has a container booked on exactly
// as many GPUs as the kubelet gives devices and not yet allocated, and records the allocation on
// the pod (annotation gpufrac.io/allocated) so that the next Allocate skips it. The kubelet
// admits one pod at a time, in the order the scheduler bound them, so the oldest is the one.
#pragma once

#include <mutex>
#include <string>
#include <vector>

#include "k8s/assignment.h"
#include "k8s/cluster_api.h"
#include "k8s/container_limiter.h"
#include "k8s/container_mps.h"
#include "k8s/device_provider.h"
#include "k8s/inventory.h"
#include "mig/backend.h"
#include "node/compute_policy.h"

namespace gpufrac::k8s {

inline constexpr std::string_view kAnnotationAllocated = "gpufrac.io/allocated";

struct AgentOptions {
  std::string node;        // This node's name.
  int slots_per_gpu = 10;  // Devices advertised per GPU: how many pods may share one.
  // On the host (the agent writes here; the kubelet mounts from here): libgpufrac.so, the
  // preload file, and pods/<uid>/<container>/limits.
  std::string host_dir = "/var/lib/gpufrac";
  std::string dev_dir = "/dev";  // Device nodes are passed only when they exist here.
  // How a shared GPU's time is divided, as gpufracd's --gpu-compute-policy: it decides the
  // compute limit of a container whose pod gives none (fair: 1, strict: its request, off: the
  // limit file carries no compute pair).
  node::ComputePolicy compute_policy = node::ComputePolicy::kFair;
};

class GpuProvider : public DeviceProvider {
 public:
  // `api`, `mig` (may be null when no GPU is in MIG mode), `limiter` (writes a shared
  // container's limit file under options.host_dir/pods) and `mps` (may be null when no GPU is in
  // MPS mode; its clients are named "pods/<uid>/<container>") must outlive the provider.
  GpuProvider(AgentOptions options, NodeInventory inventory, ClusterApi* api, mig::MigBackend* mig,
              ContainerLimiter* limiter, ContainerMps* mps = nullptr);

  // A new view of the GPUs (health, MIG instances); the caller then tells the plugin.
  void SetInventory(NodeInventory inventory);
  NodeInventory inventory() const;

  std::vector<PluginDevice> Devices() override;
  StatusOr<ContainerAllocation> Allocate(const std::vector<std::string>& device_ids) override;

  // Removes the limit files of pods that are no longer on this node (`live` holds the UIDs of
  // those that are), once they are five minutes old (a pod allocated after `live` was listed
  // keeps its own). Returns how many pod directories were removed.
  int CleanUp(const std::vector<std::string>& live);

 private:
  StatusOr<std::string> MigUuid(int gpu, const MigGrant& grant,
                                const std::vector<nlohmann::json>& pods);

  AgentOptions options_;
  ClusterApi* api_;
  mig::MigBackend* mig_;
  ContainerLimiter* limiter_;
  ContainerMps* mps_;
  mutable std::mutex mu_;  // Guards inventory_ and serialises Allocate.
  NodeInventory inventory_;
};

}  // namespace gpufrac::k8s
