// NVIDIA's resource names served by gpufrac's node agent, for GPUs the operator keeps out of
// gpufrac's own scheduling: whole GPUs as `nvidia.com/gpu` and the existing instances of GPUs in
// static MIG as `nvidia.com/mig-<profile>`, with the device ids and environment NVIDIA's device
// plugin uses (GPU or MIG UUIDs; the envvar device-list strategy), so pods written for NVIDIA's
// plugin run unchanged. With NVIDIA's sharing configuration (nvidia_sharing_config.h) a GPU is
// served as N replicas, as NVIDIA's plugin serves it, and a container given k of them is held to
// k/N of the GPU by gpufrac's limiter, which NVIDIA's plugin does not do.
#pragma once

#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/compute_share.h"
#include "common/status.h"
#include "k8s/container_limiter.h"
#include "k8s/container_mps.h"
#include "k8s/device_provider.h"
#include "k8s/inventory.h"
#include "k8s/nvidia_sharing_config.h"
#include "launch/gpu_grant.h"

namespace gpufrac::k8s {

inline constexpr std::string_view kResourceNvidiaGpu = "nvidia.com/gpu";

// "nvidia.com/mig-1g.10gb". A resource name may not hold "+", so a media-extension profile
// "1g.10gb+me" becomes "nvidia.com/mig-1g.10gb.me", as NVIDIA's plugin names it.
std::string NvidiaMigResource(std::string_view profile);
// The plugin's socket in the kubelet's directory: "gpufrac-nvidia-gpu.sock",
// "gpufrac-nvidia-mig-1g.10gb.sock".
std::string NvidiaSocketName(std::string_view resource);

// How the instances of static MIG GPUs are named (--mig-strategy), as in NVIDIA's device plugin:
// mixed, one nvidia.com/mig-<profile> per profile; single, every instance as nvidia.com/gpu,
// which needs every instance of those GPUs to be of one profile.
enum class MigStrategy { kMixed, kSingle };
// "mixed" or "single"; nullopt for anything else.
std::optional<MigStrategy> ParseMigStrategy(std::string_view text);
const char* MigStrategyName(MigStrategy strategy);

// The GPUs the operator gave to NVIDIA's resource names (--nvidia-gpus, --static-mig-gpus).
struct NvidiaGpus {
  std::vector<int> whole;       // Served as nvidia.com/gpu.
  std::vector<int> static_mig;  // Their MIG instances served per `mig_strategy`.
  MigStrategy mig_strategy = MigStrategy::kMixed;
  bool Contains(int index) const;
};

// The one profile of every instance of the static MIG GPUs ("" when they have none), as the
// single strategy needs; kFailedPrecondition naming two profiles when they differ.
StatusOr<std::string> UniformMigProfile(const NodeInventory& all,
                                        const std::vector<int>& static_mig);

// kInvalidArgument (one line, naming the flag) for an index the node lacks, a GPU listed twice,
// a GPU in both lists or also in --whole-gpus or --mps-gpus, an --nvidia-gpus GPU in MIG mode, a
// --static-mig-gpus GPU not in MIG mode, or --mig-strategy single with --nvidia-gpus (both would
// serve nvidia.com/gpu). `all` is every GPU of the node as observed.
Status CheckNvidiaGpus(const NodeInventory& all, const NvidiaGpus& gpus);
// `all` without the GPUs of `gpus`: what gpufrac schedules and publishes.
NodeInventory WithoutNvidiaGpus(NodeInventory all, const NvidiaGpus& gpus);

// A replica's device id, as NVIDIA's plugin makes it: "<GPU UUID>::<n>", n from 0 to N-1.
std::string NvidiaReplicaId(std::string_view uuid, int replica);

// One device of an NVIDIA resource.
struct NvidiaDevice {
  // The GPU's UUID ("GPU-...") or the MIG instance's ("MIG-..."); for a replica of a shared GPU,
  // NvidiaReplicaId.
  std::string id;
  int gpu = 0;  // Index of the physical GPU (its device node).
  bool healthy = true;
  int replicas = 0;  // > 0: one of the `replicas` replicas of GPU `gpu`.
  friend bool operator==(const NvidiaDevice&, const NvidiaDevice&) = default;
};

// Resource name -> its devices, from the GPUs as observed now: nvidia.com/gpu for the GPUs of
// `gpus.whole` that `sharing` (may be null) does not share, the replicas of each shared GPU under
// the name its entry serves them as, and one nvidia.com/mig-<profile> per profile with instances
// on a static MIG GPU (under the single strategy, those instances as nvidia.com/gpu instead, and
// none of them while they are not all of one profile: UniformMigProfile). A device is as healthy
// as its physical GPU. A name appears only with at least one device.
std::map<std::string, std::vector<NvidiaDevice>> NvidiaResources(
    const NodeInventory& all, const NvidiaGpus& gpus, const NvidiaSharing* sharing = nullptr);

// What Allocate needs to hold a container given replicas to its share of their GPUs.
struct NvidiaReplicaLimits {
  ContainerLimiter* limiter = nullptr;  // Must outlive the provider.
  NodeInventory gpus;                   // The node's GPUs: UUID, memory and model of each.
  NvidiaSharingKind kind = NvidiaSharingKind::kTimeSlicing;
  bool fail_requests_greater_than_one = false;
  ComputePolicy compute_policy = ComputePolicy::kFair;  // --gpu-compute-policy
  // The daemons of the GPUs shared under MPS (kind kMps; must outlive the provider). Its clients
  // are named "nvidia/<the container's smallest device id>".
  ContainerMps* mps = nullptr;
};

// The resource manager of one NVIDIA resource: lists its devices and answers Allocate with
// CUDA_VISIBLE_DEVICES and NVIDIA_VISIBLE_DEVICES set to the GPU or MIG UUIDs of the ids given
// (each once, in the order given) and the device nodes that exist. Whole GPUs and MIG instances
// get no limiter. A container given k of the N replicas of a GPU (k < N; with all N it has the
// GPU to itself) is limited (ContainerLimiter; its limit file in
// host_dir/nvidia/<its smallest device id>) to k/N of the GPU's memory and, under time-slicing, to
// a compute request of k/N with the limit
// --gpu-compute-policy gives it (as a gpufrac.io/gpu share without a compute limit); replicas of
// several GPUs are each limited by their own count, and a whole GPU beside them by nothing but
// its size. Under MPS it is instead a client of the GPU's MPS daemon, the agent's
// (container_mps.h): the daemon's pipe directory, CUDA_MPS_ACTIVE_THREAD_PERCENTAGE = 100 k/N
// (rounded up) and CUDA_MPS_PINNED_DEVICE_MEM_LIMIT = k/N of the GPU's memory, and no compute
// pair; its replicas must then all be of one GPU.
class NvidiaProvider : public DeviceProvider {
 public:
  // `limits` is needed only for a resource with replicas.
  NvidiaProvider(std::string resource, std::string dev_dir, std::vector<NvidiaDevice> devices,
                 NvidiaReplicaLimits limits = {});

  // A new view of the devices; true when it differs (the caller then tells the plugin).
  bool SetDevices(std::vector<NvidiaDevice> devices);

  std::vector<PluginDevice> Devices() override;
  // kNotFound for an id this resource does not have (the kubelet's view is out of date);
  // kInvalidArgument for more than one device with a replica among them under
  // failRequestsGreaterThanOne, or under MPS for replicas of two GPUs; the MPS daemon's error
  // when it cannot be started or refuses the limits.
  StatusOr<ContainerAllocation> Allocate(const std::vector<std::string>& device_ids) override;

 private:
  // How many of the replicas of one GPU a container was given.
  struct GpuCount {
    int gpu = 0;
    std::string uuid;  // The GPU's (a MIG instance's for an instance).
    int given = 0;
    int replicas = 0;  // 0: the whole GPU (not shared).
    // It has part of the GPU, shared with others (with all N replicas it has the GPU alone).
    bool Shares() const { return replicas > 0 && given < replicas; }
  };
  static std::vector<GpuCount> CountsOf(const std::vector<NvidiaDevice>& given);
  // The devices of `device_ids`; kNotFound for one this resource does not have.
  StatusOr<std::vector<NvidiaDevice>> Given(const std::vector<std::string>& device_ids) const;
  // What the container holds of each GPU as the launchers' grants: a share's k/N of the memory
  // and of the time (its compute pair: the policy's limit under time-slicing, k/N under MPS);
  // a GPU whose replicas it has all, the whole GPU.
  StatusOr<std::vector<launch::GpuGrant>> ReplicaGrants(const std::vector<GpuCount>& counts) const;
  // Holds a container given part of some GPU to its grants (launch::LimitsOfGrants): its limit
  // file and under MPS its client of the GPU's daemon.
  Status LimitReplicas(const std::vector<GpuCount>& counts,
                       const std::vector<std::string>& device_ids, ContainerAllocation* out);

  const std::string resource_;
  const std::string dev_dir_;
  const NvidiaReplicaLimits limits_;
  mutable std::mutex mu_;
  std::vector<NvidiaDevice> devices_;
};

}  // namespace gpufrac::k8s
