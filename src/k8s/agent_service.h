// `gpufrac k8s agent`: the node agent as a process (a DaemonSet pod on every GPU node). Finds
// the node's GPUs (or simulated ones), installs the limiter library where containers can mount
// it, publishes the GPU inventory for the extender (node annotation gpufrac.io/gpus) with GPU
// feature discovery style labels, serves the kubelet device plugin for gpufrac.io/gpu (and, for
// GPUs the operator keeps out of gpufrac's scheduling, NVIDIA's nvidia.com/gpu, its replicas as
// NVIDIA's sharing configuration makes them, and nvidia.com/mig-<profile>: nvidia_provider.h),
// runs an MPS control daemon for every GPU whose shares or replicas run under MPS, and every
// resync period applies the node's nvidia.com/mig.config label to the static MIG GPUs
// (mig_config_label.h), refreshes MIG instances and GPU health, restarts an MPS daemon that
// ended, republishes what changed and removes the limit files of pods that are gone.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "k8s/api_client.h"
#include "k8s/container_mps.h"
#include "k8s/gpu_provider.h"
#include "k8s/node_labels.h"
#include "k8s/pod_resources.h"

namespace gpufrac::k8s {

struct AgentServiceOptions {
  AgentOptions agent;
  std::string kubelet_dir = "/var/lib/kubelet/device-plugins";
  std::string sim;              // Simulated GPUs ("2xH100-80GB"); "" for this machine's.
  std::vector<int> whole_gpus;  // GPUs that serve whole-GPU pods only.
  // GPUs whose gpufrac.io/gpu shares run under MPS (--mps-gpus, as gpufracd's): each a client of
  // the GPU's MPS control daemon, which the agent runs (container_mps.h), as it does for the GPUs
  // NVIDIA's sharing configuration shares under `mps`.
  std::vector<int> mps_gpus;
  // nvidia-cuda-mps-control (--mps-control); "": found as gpufracd finds it
  // (machine::FindMpsControl: with `sim`, the simulated one; else on PATH).
  std::string mps_control;
  // A host directory mounted as /dev/shm in every MPS container (--mps-shm-dir; "" for none): it
  // must be the agent's own /dev/shm, which its daemons use (see docs/kubernetes.md).
  std::string mps_shm_dir;
  // GPUs served under NVIDIA's resource names instead of gpufrac.io/gpu: whole as nvidia.com/gpu,
  // and GPUs in MIG mode whose existing instances are served as nvidia.com/mig-<profile>. Left
  // out of the inventory published for the extender, so gpufrac never books them.
  std::vector<int> nvidia_gpus;
  std::vector<int> static_mig_gpus;
  // --mig-strategy: how their instances are named, "mixed" (nvidia.com/mig-<profile>) or
  // "single" (nvidia.com/gpu; needs one profile throughout), as NVIDIA's device plugin does.
  std::string mig_strategy = "mixed";
  // An operator's mig-parted file (--mig-parted-config; "" for none; NVIDIA's MIG manager's
  // ConfigMap mounted as a file): its configurations join the defaults (mig/default_configs.h),
  // replacing those of the same name, as what the node's nvidia.com/mig.config label may name
  // for the static MIG GPUs (mig_config_label.h). Read once, at Create.
  std::string mig_parted_config;
  // NVIDIA's device plugin configuration file (--nvidia-sharing-config; "" for none): its
  // sharing section serves GPUs of nvidia_gpus as replicas, each container held to its share
  // (nvidia_sharing_config.h, nvidia_provider.h).
  std::string nvidia_sharing_config;
  // --gpu-compute-policy: fair, strict or off (sets agent.compute_policy; see gpu_provider.h).
  std::string compute_policy = "fair";
  std::string limiter_path;  // libgpufrac.so to install into host_dir/lib.
  // The kubelet's PodResources socket ("" for none; --pod-resources-socket, whose default is the
  // kubelet's, kDefaultPodResourcesSocket): which pod an Allocate is for, and the check of the
  // slots the kubelet recorded (gpu_provider.h). None by default here, so that an agent made in
  // a test never talks to a kubelet of the machine it runs on.
  std::string pod_resources_socket;
  std::chrono::milliseconds resync{10000};
  // At Stop, how long pods bound to the node may take to be allocated (the kubelet would fail
  // them once the plugin is gone) after the inventory is withdrawn. 0: none waits.
  std::chrono::milliseconds stop_drain{5000};
  // HOST:PORT of the probe endpoint (--health-listen; "" for none, health_endpoint.h): GET
  // /readyz is 200 from the end of a successful Start (registered with the kubelet, inventory
  // published) until Stop begins.
  std::string health_listen;
};

class AgentService {
 public:
  // `client` must outlive the service.
  static StatusOr<std::unique_ptr<AgentService>> Create(ApiClient* client,
                                                        AgentServiceOptions options);
  ~AgentService();

  // Discovers the GPUs, installs the limiter, starts the MPS daemons, publishes the inventory
  // and starts the device plugins. Errors say what to fix, on one line (no GPUs, no kubelet
  // directory, node not found, a GPU given to NVIDIA's resource names that cannot be (or
  // --mig-strategy single beside --nvidia-gpus), an
  // --mps-gpus GPU the node lacks or that is also whole, MIG or NVIDIA's, a sharing
  // configuration that does not fit the node, no MPS control binary, a daemon that does not
  // start, ...).
  Status Start();
  // One resync: the mig.config label, MIG instances, health, republish on change, clean-up, the
  // kubelet's record of the slots (GpuProvider::CheckKubeletSlots). Run() calls it periodically;
  // tests call it directly.
  Status Resync();
  // Start, then Resync every period until Stop().
  Status Run();
  // Stops serving; the MPS daemons that serve no container are stopped, the others left to the
  // containers using them (and taken back by the next agent).
  void Stop();

  // The GPUs gpufrac schedules (the published inventory: without the NVIDIA-named ones).
  NodeInventory inventory() const;
  // The agent's MPS daemons (null when no GPU runs under MPS), for tests and diagnostics.
  ContainerMps* mps() const;

 private:
  struct Impl;
  explicit AgentService(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace gpufrac::k8s
