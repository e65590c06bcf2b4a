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
// A slot is named after its GPU ("<GPU UUID>::<slot>", GpuSlotId), and GetPreferredAllocation
// steers the kubelet to slots of the GPUs the container is booked on, so that what the kubelet
// records (and its PodResources API reports to tools such as DCGM exporter) names the GPU the
// container runs on.
//
// The kubelet's Allocate does not say which pod it is for. The agent takes, among the containers
// bound to this node that are booked on exactly as many GPUs as the kubelet gives devices and not
// yet allocated: first one of a pod that the kubelet's PodResources API lists with no
// gpufrac.io/gpu device recorded for that container (the kubelet lists the pod it is admitting,
// and records a container's devices only once its Allocate has returned); then one booked on the
// GPUs the given slots name; then the pod bound longest ago (by its assignment's time, then
// name). Without the PodResources API (no socket, an error: logged once) the last two rules
// decide. It records the allocation on the pod (annotation gpufrac.io/allocated) so that the next
// Allocate skips it.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "common/compute_share.h"
#include "k8s/assignment.h"
#include "k8s/cluster_api.h"
#include "k8s/container_limiter.h"
#include "k8s/container_mps.h"
#include "k8s/device_provider.h"
#include "k8s/inventory.h"
#include "k8s/pod_resources.h"
#include "mig/backend.h"

namespace gpufrac::k8s {

inline constexpr std::string_view kAnnotationAllocated = "gpufrac.io/allocated";
// The reason of the warning event on a pod whose slots the kubelet took from another GPU.
inline constexpr std::string_view kEventSlotMismatch = "GpufracSlotsOnOtherGpu";

// Slot `slot` of the GPU with UUID `uuid`: "<uuid>::<slot>", the id NVIDIA's plugin gives a
// shared GPU's replicas (NvidiaReplicaId), which PodResources readers map to the GPU by the part
// before "::". 44 characters at most for NVML's UUIDs, within the kubelet's 63.
std::string GpuSlotId(std::string_view uuid, int slot);
// The index of the GPU of `inventory` that slot id `id` names; nullopt for an id that names none
// of them.
std::optional<int> GpuOfSlot(const NodeInventory& inventory, std::string_view id);

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
  ComputePolicy compute_policy = ComputePolicy::kFair;
};

class GpuProvider : public DeviceProvider {
 public:
  // `api`, `mig` (may be null when no GPU is in MIG mode), `limiter` (writes a shared
  // container's limit file under options.host_dir/pods), `mps` (may be null when no GPU is in
  // MPS mode; its clients are named "pods/<uid>/<container>") and `pod_resources` (the kubelet's
  // PodResources API; may be null) must outlive the provider.
  GpuProvider(AgentOptions options, NodeInventory inventory, ClusterApi* api, mig::MigBackend* mig,
              ContainerLimiter* limiter, ContainerMps* mps = nullptr,
              PodResourcesClient* pod_resources = nullptr);

  // A new view of the GPUs (health, MIG instances); the caller then tells the plugin.
  void SetInventory(NodeInventory inventory);
  // Until called, Allocate and PreferredAllocation wait (Allocate up to `ready_wait`, then
  // fails): the agent registers with the kubelet before the rest of its start is done.
  void SetReady();
  std::chrono::milliseconds ready_wait{60000};
  NodeInventory inventory() const;

  std::vector<PluginDevice> Devices() override;
  StatusOr<ContainerAllocation> Allocate(const std::vector<std::string>& device_ids) override;
  // For the container the next Allocate would be for (found as above, without the devices), one
  // available slot of each GPU it is booked on (must_include kept, topped up in order); for no
  // such container, or when the pods cannot be listed, the default.
  StatusOr<std::vector<std::string>> PreferredAllocation(
      const std::vector<std::string>& available, const std::vector<std::string>& must_include,
      int size) override;

  // Compares the slots the kubelet recorded for each live pod of `pods` (its PodResources API)
  // with the GPUs the pod is booked on. A pod with a container given slots of other GPUs (the
  // kubelet ignored the preference) gets a warning log line and a warning event
  // (kEventSlotMismatch) once. Returns how many pods were reported now; 0 without the API.
  int CheckKubeletSlots(const std::vector<nlohmann::json>& pods);

  // How many containers of `pods` that are booked on this node and not finished still wait for
  // their Allocate.
  int AwaitingAllocate(const std::vector<nlohmann::json>& pods) const;

  // Removes the limit files of pods that are no longer on this node (`live` holds the UIDs of
  // those that are), once they are five minutes old (a pod allocated after `live` was listed
  // keeps its own). Returns how many pod directories were removed.
  int CleanUp(const std::vector<std::string>& live);

 private:
  // The UUIDs container `ca` of `assignment` sees, in its grants' order (a MIG grant's instance
  // made or found there: MigUuid), and in `shares` its shares of GPUs, each with its compute
  // pair: the one the assignment carries, or for an assignment without pairs the node's policy's.
  StatusOr<std::vector<std::string>> DevicesOf(const Assignment& assignment,
                                               const ContainerAssignment& ca,
                                               const std::vector<nlohmann::json>& pods,
                                               std::vector<GpuGrant>* shares);
  // Holds the container to `shares`: its limit file under pods/<uid>/<container>, and for a
  // share on a GPU in MPS mode its MPS client there.
  Status LimitShares(const std::string& uid, const ContainerAssignment& ca,
                     const std::string& pod_key, const std::vector<GpuGrant>& shares,
                     ContainerAllocation* out);
  StatusOr<std::string> MigUuid(int gpu, const MigGrant& grant,
                                const std::vector<nlohmann::json>& pods);
  // What the kubelet lists now; nullopt without the API or when it fails (logged once until it
  // answers again). Needs no lock (a resync calls it before taking mu_: it may wait 2 s).
  std::optional<std::vector<PodResources>> KubeletPods();
  // Why no container of `pods` is the one an Allocate of `device_ids` is for, in words.
  Status NoContainerFor(const std::vector<nlohmann::json>& pods,
                        const std::vector<std::string>& device_ids) const;

  AgentOptions options_;
  ClusterApi* api_;
  mig::MigBackend* mig_;
  ContainerLimiter* limiter_;
  ContainerMps* mps_;
  PodResourcesClient* pod_resources_;
  std::mutex ready_mu_;
  std::condition_variable ready_cv_;
  bool ready_ = false;
  // Waits for SetReady; false when `ready_wait` passed first.
  bool WaitReady();
  mutable std::mutex mu_;  // Guards what follows and serialises Allocate.
  NodeInventory inventory_;
  std::atomic<bool> pod_resources_failing_{false};
  std::set<std::string> reported_;  // UIDs of the pods with a slot mismatch already reported.
};

}  // namespace gpufrac::k8s
