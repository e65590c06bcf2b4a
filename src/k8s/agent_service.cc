// The node agent process: GPUs, limiter install, inventory publication, device plugin, resync.
#include "k8s/agent_service.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <filesystem>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <thread>

#include "common/log.h"
#include "common/paths.h"
#include "common/posix.h"
#include "gpu/health.h"
#include "gpu/mig_catalogue.h"
#include "k8s/device_plugin.h"
#include "k8s/health_endpoint.h"
#include "k8s/inventory.h"
#include "k8s/kube_cluster_api.h"
#include "k8s/mig_config_label.h"
#include "k8s/nvidia_provider.h"
#include "k8s/nvidia_sharing_config.h"
#include "k8s/object_fields.h"
#include "k8s/pod_request.h"
#include "launch/limit_file.h"
#include "machine/mig_targets.h"
#include "machine/node_gpus.h"
#include "mig/default_configs.h"

namespace gpufrac::k8s {
namespace {

namespace fs = std::filesystem;

// How long binds in flight when the inventory is withdrawn take to land, at most.
constexpr std::chrono::milliseconds kStopSettle{300};

// Copies the limiter where the kubelet can mount it from, replacing an older copy atomically
// (a container starting meanwhile sees the old or the new file, never half of one), and writes
// the ld.so.preload file that loads it.
Status InstallLimiter(const std::string& from, const std::string& host_dir) {
  std::error_code ec;
  if (from.empty() || !fs::exists(from, ec)) {
    return FailedPreconditionError("cannot find the limiter library libgpufrac.so" +
                                   (from.empty() ? std::string() : " at " + from) +
                                   "; install gpufrac completely or pass its path");
  }
  fs::create_directories(host_dir + "/lib", ec);
  std::string target = host_dir + "/lib/libgpufrac.so";
  std::string temp = target + ".new";
  fs::remove(temp, ec);
  if (!fs::copy_file(from, temp, ec) || ec) {
    return UnavailableError("cannot copy " + from + " to " + temp + ": " + ec.message());
  }
  fs::permissions(temp,
                  fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec |
                      fs::perms::others_read | fs::perms::others_exec,
                  ec);
  fs::rename(temp, target, ec);
  if (ec) return UnavailableError("cannot install " + target + ": " + ec.message());

  // What Allocate mounts as a container's /etc/ld.so.preload. Without it the container would
  // get no file there and its programs would run without the limit, so failing is an error.
  const std::string preload = host_dir + "/ld.so.preload";
  const std::string preload_temp = preload + ".new";
  fs::remove(preload_temp, ec);
  GPUFRAC_RETURN_IF_ERROR(
      launch::WriteNewFile(preload_temp, std::string(kContainerLimiter) + "\n", 0444));
  // On disk before it replaces the old one: after a power loss the kubelet may restart
  // containers before this agent runs again, and an empty file would leave them unlimited.
  if (UniqueFd fd(open(preload_temp.c_str(), O_RDONLY | O_CLOEXEC)); fd.valid()) fsync(fd.get());
  fs::rename(preload_temp, preload, ec);
  if (ec) return UnavailableError("cannot install " + preload + ": " + ec.message());
  return OkStatus();
}

// kInvalidArgument (one line) for an --mps-gpus GPU in MIG mode. (OpenNodeGpus refuses an index
// the node lacks and one also in --whole-gpus; CheckNvidiaGpus one also in --nvidia-gpus or
// --static-mig-gpus.)
Status CheckMpsGpus(const NodeInventory& all, const std::vector<int>& mps_gpus) {
  for (int index : mps_gpus) {
    const GpuInfo* g = FindGpu(all, index);
    if (g != nullptr && g->mode == GpuMode::kMig) {
      return InvalidArgumentError("--mps-gpus: GPU " + std::to_string(index) +
                                  " is in MIG mode; disable MIG on it, or leave it out");
    }
  }
  return OkStatus();
}

}  // namespace

struct AgentService::Impl {
  ApiClient* client = nullptr;
  AgentServiceOptions options;
  std::unique_ptr<machine::NodeGpus> gpus;
  std::unique_ptr<KubeClusterApi> api;
  // Limit files and arbiters of every limited container, whichever provider allocated it.
  std::unique_ptr<ContainerLimiter> limiter;
  // The MPS daemons, for both providers; null when no GPU runs under MPS. Declared before them,
  // so destroyed after them.
  std::unique_ptr<ContainerMps> mps;
  std::unique_ptr<PodResourcesClient> pod_resources;  // Null without --pod-resources-socket.
  std::unique_ptr<GpuProvider> provider;
  std::unique_ptr<DevicePlugin> plugin;
  // Serialises Publish and Stop's withdrawal of the inventory (a resync may be publishing).
  std::mutex publish_mu;
  std::string published;  // The inventory document and labels last written to the node.
  NvidiaGpus nvidia;
  NvidiaSharingConfig sharing_config;  // As read by Create(); empty without the flag.
  NvidiaSharing sharing;               // sharing_config matched to this node's GPUs at Start().
  mig::MigPartedFile mig_configs;      // What the mig.config label may name (Create()).
  std::unique_ptr<MigConfigLabel> mig_config;  // Null without static MIG GPUs.
  struct NvidiaPlugin {
    std::unique_ptr<NvidiaProvider> provider;
    std::unique_ptr<DevicePlugin> plugin;
  };
  std::mutex plugins_mu;  // Guards nvidia_plugins (Resync adds, Stop may run meanwhile).
  std::map<std::string, NvidiaPlugin> nvidia_plugins;  // By resource name.

  std::mutex mu;
  std::condition_variable cv;
  bool stop = false;
  bool health_changed = false;  // The watcher saw a GPU turn unhealthy: resync now.
  // What GET /readyz answers (options.health_listen): Start is done, Stop has not begun.
  std::atomic<bool> ready{false};
  std::unique_ptr<HealthEndpoint> probes;

  // GPU health from NVML's events (critical XIDs, double-bit ECC) and lost-GPU errors; null
  // when NVML offers no events (then every GPU counts as healthy, and the log says why).
  std::unique_ptr<gpu::HealthMonitor> health;

  // The health of every GPU now, by UUID (index for a GPU lost before the monitor opened).
  std::map<std::string, gpu::GpuHealth> HealthNow() {
    std::map<std::string, gpu::GpuHealth> out;
    if (!health) return out;
    for (gpu::GpuHealth& h : health->Check(std::chrono::milliseconds(0))) {
      // The monitor has logged the failure; its devices are reported unhealthy to the kubelet.
      std::string key = h.uuid.empty() ? "#" + std::to_string(h.index) : h.uuid;
      out[key] = std::move(h);
    }
    return out;
  }

  // The GPUs as they are now: modes, health and MIG instances (with the pods they serve).
  NodeInventory Observe(const std::vector<nlohmann::json>& pods) {
    NodeInventory inv;
    inv.slots_per_gpu = options.agent.slots_per_gpu;
    inv.compute_policy = options.agent.compute_policy;
    std::map<std::string, gpu::GpuHealth> health_now = HealthNow();
    for (const machine::NodeGpu& g : gpus->inventory.gpus) {
      GpuInfo info;
      info.index = g.index;
      info.uuid = g.uuid;
      info.model = g.model;
      info.memory_bytes = g.memory_bytes;
      info.mode = g.mode;
      auto h = health_now.find(g.uuid);
      if (h == health_now.end()) h = health_now.find("#" + std::to_string(g.index));
      info.healthy = h == health_now.end() || h->second.healthy;
      if (info.mode == GpuMode::kMig && gpus->mig_backend) {
        const gpu::MigModel* model = machine::MigTablesOf(g, gpus->mig_models);
        auto instances = gpus->mig_backend->List(g.index);
        if (instances.ok() && model != nullptr) {
          for (const auto& i : *instances) {
            MigInstanceInfo m;
            m.profile = gpu::MigProfileName(*model, model->profiles[i.profile]);
            m.start = i.placement.start;
            m.size = i.placement.size;
            m.uuid = i.uuid;
            m.pod = PodAt(pods, g.index, m.start);
            info.mig.push_back(std::move(m));
          }
        }
      }
      inv.gpus.push_back(std::move(info));
    }
    return inv;
  }

  // The live pod whose assignment holds the MIG placement at `start` on `gpu`, or "".
  std::string PodAt(const std::vector<nlohmann::json>& pods, int gpu, int start) const {
    for (const nlohmann::json& pod : pods) {
      std::optional<Assignment> a = LiveAssignmentOn(pod, options.agent.node);
      if (!a) continue;
      for (const ContainerAssignment& c : a->containers) {
        for (const GpuGrant& grant : c.gpus) {
          if (grant.index == gpu && grant.mig && grant.mig->start == start) return PodKey(pod);
        }
      }
    }
    return "";
  }

  // Publishes `all` (every GPU of the node) without the NVIDIA-named GPUs, with labels
  // describing all of them.
  Status Publish(const NodeInventory& all) {
    std::lock_guard<std::mutex> publishing(publish_mu);
    {
      std::lock_guard<std::mutex> lock(mu);
      if (stop) return OkStatus();  // Stop has withdrawn the inventory, or is about to.
    }
    std::string doc = InventoryToJson(WithoutNvidiaGpus(all, nvidia)).dump();
    nlohmann::json labels = nlohmann::json::object();
    for (const auto& [k, v] : NodeLabels(all, gpus->inventory.product_name)) labels[k] = v;
    // Only the labels with values: which of the others go is AgentRemovesLabel's to say.
    for (const auto& [k, v] : NvidiaMigLabels(all, nvidia, gpus->inventory.product_name)) {
      if (v) labels[k] = *v;
    }
    // The extender makes no reservation pods where this agent serves nvidia.com/gpu itself.
    if (!nvidia.whole.empty()) labels[std::string(kLabelServesNvidiaGpu)] = "true";
    const std::string now_published = doc + labels.dump();
    if (now_published == published) return OkStatus();
    std::set<std::string> keys;
    for (const auto& [key, value] : labels.items()) keys.insert(key);
    // Labels this agent (or an earlier one) wrote and no longer publishes (a profile no longer
    // served, MIG labels after the static MIG GPUs went) go; GFD's and the operator's stay.
    StatusOr<nlohmann::json> node = client->Get("/api/v1/nodes/" + options.agent.node);
    if (!node.ok()) return NodeError(node.status(), "reading the node's labels");
    const nlohmann::json* meta = FieldOf(*node, "metadata");
    const nlohmann::json* annotations = meta != nullptr ? FieldOf(*meta, "annotations") : nullptr;
    std::optional<std::set<std::string>> written;
    if (annotations != nullptr && annotations->contains(std::string(kAnnotationAgentLabels))) {
      written = ParseLabelRecord(AnnotationOf(*node, kAnnotationAgentLabels));
    }
    const nlohmann::json* on_node = meta != nullptr ? FieldOf(*meta, "labels") : nullptr;
    if (on_node != nullptr && on_node->is_object()) {
      for (const auto& [key, value] : on_node->items()) {
        if (!keys.contains(key) &&
            AgentRemovesLabel(key, written, /*mig_state=*/mig_config == nullptr)) {
          labels[key] = nullptr;
        }
      }
    }
    nlohmann::json patch = {{"metadata",
                             {{"labels", labels},
                              {"annotations",
                               {{std::string(kAnnotationInventory), doc},
                                {std::string(kAnnotationAgentLabels), LabelRecord(keys)}}}}}};
    StatusOr<nlohmann::json> done = client->Patch("/api/v1/nodes/" + options.agent.node, patch);
    if (!done.ok()) return NodeError(done.status(), "publishing the GPU inventory");
    published = now_published;
    return OkStatus();
  }

  // A failed read or write of the agent's node, `doing` what.
  Status NodeError(const Status& status, const std::string& doing) const {
    if (status.code() == StatusCode::kNotFound) {
      return NotFoundError("node " + options.agent.node +
                           " does not exist; run the agent with --node set to this node's "
                           "name (the DaemonSet passes spec.nodeName as NODE_NAME)");
    }
    return status.WithContext(doing);
  }

  // Makes `mps`, the MPS daemons (none started yet: StartMps): one for each GPU of `inv` (what
  // gpufrac schedules) in MPS mode, and one for each GPU NVIDIA's sharing configuration shares
  // under `mps`. `mps_uuids` gets those GPUs.
  Status MakeMps(const NodeInventory& inv, std::map<int, std::string>* mps_uuids) {
    std::map<int, std::string>& uuids = *mps_uuids;
    for (const GpuInfo& g : inv.gpus) {
      if (g.mode == GpuMode::kMps) uuids[g.index] = g.uuid;
    }
    if (sharing.kind == NvidiaSharingKind::kMps) {
      for (const auto& [index, shared] : sharing.gpus) {
        for (const machine::NodeGpu& g : gpus->inventory.gpus) {
          if (g.index == index) uuids[index] = g.uuid;
        }
      }
    }
    if (uuids.empty()) return OkStatus();
    const std::string control =
        machine::FindMpsControl(options.mps_control, gpus->inventory.simulated);
    if (control.empty()) {
      return FailedPreconditionError(
          "GPUs run under MPS here but there is no nvidia-cuda-mps-control on PATH: install the "
          "NVIDIA driver's compute utilities in the agent's image, or pass --mps-control PATH");
    }
    std::error_code ec;
    if (access(control.c_str(), X_OK) != 0) {
      return FailedPreconditionError("--mps-control " + control + ": not an executable file");
    }
    if (!options.mps_shm_dir.empty() &&
        (options.mps_shm_dir[0] != '/' || !fs::is_directory(options.mps_shm_dir, ec))) {
      // The kubelet mounts it by its path on the host.
      return InvalidArgumentError("--mps-shm-dir " + options.mps_shm_dir +
                                  ": no such directory on this node (give its absolute path)");
    }
    mps = std::make_unique<ContainerMps>(
        ContainerMpsOptions{.daemons = {.dir = options.agent.host_dir + "/mps",
                                        .control = control,
                                        .env = gpus->inventory.job_env},
                            .shm_dir = options.mps_shm_dir});
    return OkStatus();
  }

  // Starts the daemons MakeMps made.
  Status StartMps(const std::map<int, std::string>& uuids) {
    for (const auto& [index, uuid] : uuids) {
      if (Status started = mps->Start(index, uuid); !started.ok()) {
        return started.WithContext("GPU " + std::to_string(index) + " runs under MPS");
      }
      LogInfo("GPU %d: shares run under MPS, daemon pipe directory %s/mps/%d/pipe", index,
              options.agent.host_dir.c_str(), index);
    }
    return OkStatus();
  }

  // Serves NVIDIA's resource names for the devices they have now: a plugin per resource (one
  // for a MIG profile that appears later too), and an empty list for a profile that is gone.
  // The devices of GPUs the mig.config label is about to change are listed unhealthy.
  Status SyncNvidia(const NodeInventory& all) {
    std::map<std::string, std::vector<NvidiaDevice>> resources =
        NvidiaResources(all, nvidia, &sharing);
    for (auto& [resource, devices] : resources) {
      for (NvidiaDevice& d : devices) {
        if (mig_config && mig_config->Withdrawn(d.gpu)) d.healthy = false;
      }
    }
    std::lock_guard<std::mutex> lock(plugins_mu);
    for (auto& [resource, entry] : nvidia_plugins) {
      if (resources.count(resource) == 0 && entry.provider->SetDevices({})) {
        entry.plugin->DevicesChanged();
      }
    }
    for (auto& [resource, devices] : resources) {
      auto it = nvidia_plugins.find(resource);
      if (it != nvidia_plugins.end()) {
        if (it->second.provider->SetDevices(std::move(devices)))
          it->second.plugin->DevicesChanged();
        continue;
      }
      NvidiaPlugin entry;
      const size_t count = devices.size();
      NvidiaReplicaLimits limits{
          .limiter = limiter.get(),
          .gpus = all,
          .kind = sharing.kind,
          .fail_requests_greater_than_one = sharing.fail_requests_greater_than_one,
          .compute_policy = options.agent.compute_policy,
          .mps = mps.get()};
      entry.provider = std::make_unique<NvidiaProvider>(resource, options.agent.dev_dir,
                                                        std::move(devices), std::move(limits));
      DevicePluginOptions plugin_options;
      plugin_options.resource_name = resource;
      plugin_options.kubelet_dir = options.kubelet_dir;
      plugin_options.socket_name = NvidiaSocketName(resource);
      plugin_options.preferred_allocation = false;
      entry.plugin = std::make_unique<DevicePlugin>(plugin_options, entry.provider.get());
      GPUFRAC_RETURN_IF_ERROR(entry.plugin->Start());
      LogInfo("serving %s: %zu device(s), device plugin at %s", resource.c_str(), count,
              entry.plugin->socket_path().c_str());
      nvidia_plugins[resource] = std::move(entry);
    }
    return OkStatus();
  }

  // Opens the node's GPUs and the watch of their health.
  Status OpenGpus() {
    std::string warning;
    GPUFRAC_ASSIGN_OR_RETURN(
        gpus, machine::OpenNodeGpus({.sim = options.sim,
                                     // One simulated machine per host directory.
                                     .sim_namespace = "k8s-" + StateDirTag(options.agent.host_dir),
                                     .whole_gpus = options.whole_gpus,
                                     .mps_gpus = options.mps_gpus},
                                    &warning));
    if (!warning.empty()) LogWarning("%s", warning.c_str());
    // After OpenNodeGpus, which names the simulated machine when GPUs are simulated.
    if (auto monitor = gpu::HealthMonitor::Open(gpus->inventory.nvml_library); monitor.ok()) {
      health = std::move(*monitor);
    } else {
      LogWarning("GPU health is not watched (%s); every GPU is reported healthy",
                 monitor.status().message().c_str());
    }
    return OkStatus();
  }

  // The static MIG GPUs' label handler, and the NVIDIA resources' sharing, for `all`.
  Status SetUpNvidia(const NodeInventory& all) {
    if (!nvidia.static_mig.empty()) {
      if (nvidia.mig_strategy == MigStrategy::kSingle) {
        if (auto uniform = UniformMigProfile(all, nvidia.static_mig); !uniform.ok()) {
          LogWarning("%s (until then no instance is served as nvidia.com/gpu)",
                     uniform.status().message().c_str());
        }
      }
      mig_config = std::make_unique<MigConfigLabel>(
          client, gpus.get(),
          MigConfigLabelOptions{.node = options.agent.node,
                                .configs = mig_configs,
                                .configmap_file = options.mig_parted_config,
                                .gpus = nvidia});
    }
    for (const std::string& line : sharing_config.notices) LogWarning("%s", line.c_str());
    GPUFRAC_ASSIGN_OR_RETURN(sharing, ResolveNvidiaSharing(sharing_config, all, nvidia.whole));
    for (const auto& [index, shared] : sharing.gpus) {
      LogInfo("GPU %d: %d replicas served as %s (%s), each container limited to its share", index,
              shared.replicas, shared.resource.c_str(), NvidiaSharingKindName(sharing.kind));
    }
    return OkStatus();
  }

  // gpufrac.io/gpu's provider and device plugin, serving `inv`.
  void MakeGpuPlugin(const NodeInventory& inv) {
    limiter = std::make_unique<ContainerLimiter>(options.agent.host_dir);
    if (!options.pod_resources_socket.empty()) {
      pod_resources = std::make_unique<PodResourcesClient>(options.pod_resources_socket);
    }
    provider = std::make_unique<GpuProvider>(options.agent, inv, api.get(), gpus->mig_backend.get(),
                                             limiter.get(), mps.get(), pod_resources.get());
    DevicePluginOptions plugin_options;
    plugin_options.resource_name = std::string(kResourceGpu);
    plugin_options.kubelet_dir = options.kubelet_dir;
    plugin_options.socket_name = "gpufrac-gpu.sock";
    // Steers the kubelet to slots of the GPUs a container is booked on.
    plugin_options.preferred_allocation = true;
    plugin = std::make_unique<DevicePlugin>(plugin_options, provider.get());
  }
};

AgentService::AgentService(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
AgentService::~AgentService() { Stop(); }

StatusOr<std::unique_ptr<AgentService>> AgentService::Create(ApiClient* client,
                                                             AgentServiceOptions options) {
  if (options.agent.node.empty()) {
    return InvalidArgumentError("the node's name is not known: pass --node NAME or set NODE_NAME");
  }
  if (options.agent.slots_per_gpu < 1 || options.agent.slots_per_gpu > 64) {
    return InvalidArgumentError("--slots-per-gpu " + std::to_string(options.agent.slots_per_gpu) +
                                ": give 1 to 64 pods per GPU");
  }
  std::optional<ComputePolicy> policy = ParseComputePolicy(options.compute_policy);
  if (!policy) {
    return InvalidArgumentError("--gpu-compute-policy " + options.compute_policy +
                                ": expected fair, strict or off");
  }
  options.agent.compute_policy = *policy;
  auto impl = std::make_unique<Impl>();
  if (!options.nvidia_sharing_config.empty()) {
    GPUFRAC_ASSIGN_OR_RETURN(impl->sharing_config,
                             LoadNvidiaSharingConfig(options.nvidia_sharing_config));
  }
  std::optional<MigStrategy> strategy = ParseMigStrategy(options.mig_strategy);
  if (!strategy) {
    return InvalidArgumentError("--mig-strategy " + options.mig_strategy +
                                ": expected mixed or single");
  }
  impl->mig_configs = mig::DefaultMigConfigs();
  if (!options.mig_parted_config.empty()) {
    GPUFRAC_ASSIGN_OR_RETURN(mig::MigPartedFile file,
                             mig::LoadMigParted(options.mig_parted_config));
    impl->mig_configs = mig::MergeMigConfigs(std::move(impl->mig_configs), file);
  }
  impl->client = client;
  impl->nvidia = {.whole = options.nvidia_gpus,
                  .static_mig = options.static_mig_gpus,
                  .mig_strategy = *strategy};
  impl->options = std::move(options);
  impl->api = std::make_unique<KubeClusterApi>(client);
  return std::unique_ptr<AgentService>(new AgentService(std::move(impl)));
}

Status AgentService::Start() {
  Impl& s = *impl_;
  if (!s.options.health_listen.empty() && !s.probes) {
    GPUFRAC_ASSIGN_OR_RETURN(
        s.probes, HealthEndpoint::Start(s.options.health_listen, [&s] { return s.ready.load(); }));
  }
  GPUFRAC_RETURN_IF_ERROR(s.OpenGpus());
  // The GPUs as they are; which pods hold MIG instances is filled in below.
  NodeInventory all = s.Observe({});
  GPUFRAC_RETURN_IF_ERROR(CheckMpsGpus(all, s.options.mps_gpus));
  GPUFRAC_RETURN_IF_ERROR(CheckNvidiaGpus(all, s.nvidia));
  GPUFRAC_RETURN_IF_ERROR(s.SetUpNvidia(all));
  NodeInventory inv = WithoutNvidiaGpus(all, s.nvidia);
  std::map<int, std::string> mps_uuids;
  GPUFRAC_RETURN_IF_ERROR(s.MakeMps(inv, &mps_uuids));
  s.MakeGpuPlugin(inv);
  // Registered before the slow rest of the start (the limiter's install, MPS daemons, the API
  // server): from a restart on, the kubelet has no devices of gpufrac.io/gpu and fails every pod
  // it admits meanwhile (UnexpectedAdmissionError), while an Allocate that comes early waits
  // until the start is done (GpuProvider::SetReady).
  GPUFRAC_RETURN_IF_ERROR(s.plugin->Start());
  GPUFRAC_RETURN_IF_ERROR(InstallLimiter(s.options.limiter_path, s.options.agent.host_dir));
  GPUFRAC_RETURN_IF_ERROR(s.StartMps(mps_uuids));
  StatusOr<std::vector<nlohmann::json>> pods = s.api->ListPodsOnNode(s.options.agent.node);
  if (!pods.ok()) return pods.status().WithContext("listing the pods on this node");
  all = s.Observe(*pods);
  GPUFRAC_RETURN_IF_ERROR(s.Publish(all));
  s.provider->SetInventory(WithoutNvidiaGpus(all, s.nvidia));
  s.provider->SetReady();
  LogInfo(
      "gpufrac agent on node %s: %zu GPU(s), %d slots each, compute policy %s, device "
      "plugin at %s",
      s.options.agent.node.c_str(), inv.gpus.size(), s.options.agent.slots_per_gpu,
      ComputePolicyName(s.options.agent.compute_policy), s.plugin->socket_path().c_str());
  GPUFRAC_RETURN_IF_ERROR(s.SyncNvidia(all));
  // The kubelet has the devices and the extender the GPUs: the pod may be Ready.
  s.ready = true;
  return OkStatus();
}

Status AgentService::Resync() {
  Impl& s = *impl_;
  if (!s.provider) return FailedPreconditionError("the agent has not started");
  GPUFRAC_ASSIGN_OR_RETURN(std::vector<nlohmann::json> pods,
                           s.api->ListPodsOnNode(s.options.agent.node));
  if (s.mig_config) s.mig_config->Sync(pods);  // Observe reads the instances it leaves.
  NodeInventory all = s.Observe(pods);
  NodeInventory inv = WithoutNvidiaGpus(all, s.nvidia);
  if (!(inv == s.provider->inventory())) {
    s.provider->SetInventory(inv);
    s.plugin->DevicesChanged();
  }
  GPUFRAC_RETURN_IF_ERROR(s.SyncNvidia(all));
  GPUFRAC_RETURN_IF_ERROR(s.Publish(all));
  std::vector<std::string> live;
  for (const nlohmann::json& pod : pods) {
    if (!PodFinished(pod)) live.push_back(MetaOf(pod, "uid"));
  }
  s.provider->CleanUp(live);
  s.provider->CheckKubeletSlots(pods);
  if (s.mps) {
    for (const machine::MpsDaemons::Ended& e : s.mps->Watch()) {
      LogWarning("the MPS daemon of GPU %d %s", e.index, e.how.c_str());
    }
    // A pod's client is forgotten with its limit file, which CleanUp keeps for a while after
    // the pod has gone (a pod allocated after `pods` was listed keeps its own).
    const std::string host_dir = s.options.agent.host_dir;
    s.mps->Forget([&host_dir](const std::string& client) {
      std::error_code ec;
      return client.rfind("pods/", 0) == 0 && !fs::exists(host_dir + "/" + client, ec) && !ec;
    });
  }
  return OkStatus();
}

Status AgentService::Run() {
  GPUFRAC_RETURN_IF_ERROR(Start());
  Impl& s = *impl_;
  // Waits for health events, so that a failing GPU is reported within a second rather than at
  // the next resync.
  std::thread watcher;
  if (s.health) {
    watcher = std::thread([&s] {
      size_t unhealthy = 0;
      for (;;) {
        {
          std::lock_guard<std::mutex> lock(s.mu);
          if (s.stop) return;
        }
        size_t now = 0;
        for (const gpu::GpuHealth& h : s.health->Check(std::chrono::milliseconds(500))) {
          now += !h.healthy;
        }
        if (now != unhealthy) {
          unhealthy = now;
          std::lock_guard<std::mutex> lock(s.mu);
          s.health_changed = true;
          s.cv.notify_all();
        }
      }
    });
  }
  std::unique_lock<std::mutex> lock(s.mu);
  while (!s.stop) {
    s.cv.wait_for(lock, s.options.resync, [&s] { return s.stop || s.health_changed; });
    if (s.stop) break;
    s.health_changed = false;
    lock.unlock();
    if (Status st = Resync(); !st.ok()) LogWarning("resync: %s", st.message().c_str());
    lock.lock();
  }
  lock.unlock();
  if (watcher.joinable()) watcher.join();
  return OkStatus();
}

void AgentService::Stop() {
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    if (impl_->stop) return;
    impl_->stop = true;
  }
  impl_->ready = false;
  impl_->cv.notify_all();
  // Once the plugin has gone the kubelet fails every pod it admits here (no healthy devices of
  // gpufrac.io/gpu, UnexpectedAdmissionError) until the next agent registers, and its node
  // status shows that only at its next update (10 s). So the inventory is withdrawn first, which
  // stops the extender binding pods here (the next agent publishes it again, and the extender
  // then has the pods that waited tried again at once), and the pods bound before are served
  // (binds in flight land within kStopSettle; for options.stop_drain at most) before the plugin
  // goes.
  std::unique_lock<std::mutex> publishing(impl_->publish_mu);
  if (!impl_->published.empty()) {
    const std::string node = impl_->options.agent.node;
    nlohmann::json patch = {
        {"metadata", {{"annotations", {{std::string(kAnnotationInventory), nullptr}}}}}};
    StatusOr<nlohmann::json> done = impl_->client->Patch("/api/v1/nodes/" + node, patch);
    if (!done.ok()) {
      LogWarning("cannot withdraw the GPU inventory of node %s: %s", node.c_str(),
                 done.status().message().c_str());
    }
    impl_->published.clear();
    publishing.unlock();
    const auto drain = impl_->options.stop_drain;
    const auto settle = std::min<std::chrono::milliseconds>(kStopSettle, drain);
    const auto start = std::chrono::steady_clock::now();
    while (std::chrono::steady_clock::now() - start < drain) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      if (std::chrono::steady_clock::now() - start < settle) continue;
      StatusOr<std::vector<nlohmann::json>> pods = impl_->api->ListPodsOnNode(node);
      if (!pods.ok() || impl_->provider == nullptr ||
          impl_->provider->AwaitingAllocate(*pods) == 0) {
        break;
      }
    }
  }
  if (impl_->plugin) impl_->plugin->Stop();
  {
    std::lock_guard<std::mutex> lock(impl_->plugins_mu);
    for (auto& [resource, entry] : impl_->nvidia_plugins) entry.plugin->Stop();
  }
  if (impl_->mps) impl_->mps->StopIdle();
  impl_->probes.reset();
}

ContainerMps* AgentService::mps() const { return impl_->mps.get(); }

NodeInventory AgentService::inventory() const {
  return impl_->provider ? impl_->provider->inventory() : NodeInventory{};
}

}  // namespace gpufrac::k8s
