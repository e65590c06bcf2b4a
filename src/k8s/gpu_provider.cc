// The node agent's resource manager: slots named after their GPU, the slots to prefer, the pod an
// Allocate is for, MIG instances on demand, limit files and what the container gets, and the check
// of the slots the kubelet recorded.
#include "k8s/gpu_provider.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <tuple>

#include "common/gpu_request.h"
#include "common/log.h"
#include "common/text.h"
#include "common/units.h"
#include "gpu/catalogue.h"
#include "gpu/mig_catalogue.h"
#include "k8s/container_gpus.h"
#include "k8s/nvidia_provider.h"
#include "k8s/object_fields.h"
#include "k8s/pod_request.h"
#include "launch/grant_limits.h"
#include "launch/limit_file.h"

namespace gpufrac::k8s {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

// The limiter's workload id: unique per container (a pod's uid is unique on the node).
std::string WorkloadId(const std::string& uid, const std::string& container) {
  return LimiterWorkloadId("k8s-" + uid.substr(0, 18) + "-" + container);
}

json AllocatedOf(const json& pod) {
  std::string text = AnnotationOf(pod, kAnnotationAllocated);
  json doc = text.empty() ? json::object() : json::parse(text, nullptr, false);
  return doc.is_object() ? doc : json::object();
}

bool Overlaps(const gpu::MigPlacement& a, int start, int size) {
  return a.start < start + size && start < a.start + a.size;
}

// The GPU indexes of `grants`, sorted: what the slots of a container booked on them name.
std::vector<int> GpuIndexes(const std::vector<GpuGrant>& grants) {
  std::vector<int> out;
  for (const GpuGrant& g : grants) out.push_back(g.index);
  std::sort(out.begin(), out.end());
  return out;
}

// The GPUs the slot ids name, sorted; nullopt when one of them names no GPU of `inventory`.
std::optional<std::vector<int>> SlotGpus(const NodeInventory& inventory,
                                         const std::vector<std::string>& ids) {
  std::vector<int> out;
  for (const std::string& id : ids) {
    std::optional<int> gpu = GpuOfSlot(inventory, id);
    if (!gpu) return std::nullopt;
    out.push_back(*gpu);
  }
  std::sort(out.begin(), out.end());
  return out;
}

// The pod `pod` as the kubelet lists it, or nullptr.
const PodResources* Listed(const std::vector<PodResources>& kubelet_pods, const json& pod) {
  const std::string ns = MetaOf(pod, "namespace"), name = MetaOf(pod, "name");
  for (const PodResources& p : kubelet_pods) {
    if (p.ns == ns && p.name == name) return &p;
  }
  return nullptr;
}

// Why a container was taken for an Allocate, for the log.
enum class FoundBy { kPodResources, kSlots, kOrder, kAgain };

const char* FoundByText(FoundBy by) {
  switch (by) {
    case FoundBy::kPodResources:
      return "the kubelet is admitting it";
    case FoundBy::kSlots:
      return "its GPUs' slots";
    case FoundBy::kOrder:
      break;
    case FoundBy::kAgain:
      return "allocated before with these devices: the kubelet asks again, as after its restart";
  }
  return "bound first";
}

// One container of a pod that a kubelet Allocate may be for.
struct Candidate {
  bool fresh;      // Not allocated yet (else allocated before with the very devices given).
  bool admitting;  // The kubelet lists its pod without its devices: it is starting it.
  bool on_slots;   // Booked on the GPUs the kubelet's slots name.
  int64_t time_ms;
  std::string key;
  size_t pod;        // Index into the listed pods.
  size_t container;  // Index into the pod's assignment.
  Assignment assignment;

  FoundBy found_by() const {
    return !fresh      ? FoundBy::kAgain
           : admitting ? FoundBy::kPodResources
           : on_slots  ? FoundBy::kSlots
                       : FoundBy::kOrder;
  }
  // The order of the rules in gpu_provider.h.
  bool Better(const Candidate& o) const {
    return std::tie(o.fresh, o.admitting, o.on_slots, time_ms, key, container) <
           std::tie(fresh, admitting, on_slots, o.time_ms, o.key, o.container);
  }
};

// Whether the kubelet recorded `devices` for `container` in the pod's allocation record.
bool AllocatedWith(const json& allocated, const std::string& container,
                   const std::vector<std::string>& devices) {
  const json* entry = FieldOf(allocated, container);
  const json* ids = entry != nullptr ? FieldOf(*entry, "devices") : nullptr;
  if (ids == nullptr || !ids->is_array() || ids->size() != devices.size()) return false;
  std::vector<std::string> recorded;
  for (const json& id : *ids) recorded.push_back(id.is_string() ? id.get<std::string>() : "");
  std::vector<std::string> given = devices;
  std::sort(recorded.begin(), recorded.end());
  std::sort(given.begin(), given.end());
  return recorded == given;
}

// The container of `pods` a kubelet Allocate of `count` devices is for: of the containers booked
// on `node` on `count` GPUs that ask for gpufrac.io/gpu and are not allocated yet, the best by
// Candidate's order; else one allocated before with exactly `devices` (the kubelet asking again
// for a container it started, after its restart: served the same again). `slot_gpus`: the GPUs
// of the devices given (nullopt: unknown); `devices`: their ids (null: unknown);
// `kubelet_pods`: what the kubelet lists (nullopt: unknown).
std::optional<Candidate> ChooseContainer(const std::vector<json>& pods, const std::string& node,
                                         size_t count,
                                         const std::optional<std::vector<int>>& slot_gpus,
                                         const std::optional<std::vector<PodResources>>& listed,
                                         const std::vector<std::string>* devices = nullptr) {
  std::optional<Candidate> chosen;
  for (size_t p = 0; p < pods.size(); ++p) {
    std::optional<Assignment> a = LiveAssignmentOn(pods[p], node);
    if (!a) continue;
    json allocated = AllocatedOf(pods[p]);
    const PodResources* kubelet_pod = listed ? Listed(*listed, pods[p]) : nullptr;
    for (size_t c = 0; c < a->containers.size(); ++c) {
      const ContainerAssignment& ca = a->containers[c];
      if (!ca.device_plugin || ca.gpus.size() != count) continue;
      const bool fresh = !allocated.contains(ca.container);
      if (!fresh && (devices == nullptr || !AllocatedWith(allocated, ca.container, *devices))) {
        continue;
      }
      // A container the kubelet lists with devices of ours already is not the one starting.
      const ContainerResources* kc =
          kubelet_pod != nullptr ? kubelet_pod->Container(ca.container) : nullptr;
      const bool admitting =
          kubelet_pod != nullptr && (kc == nullptr || kc->DevicesOf(kResourceGpu).empty());
      const bool on_slots = slot_gpus && *slot_gpus == GpuIndexes(ca.gpus);
      Candidate cand{fresh, admitting, on_slots, a->time_ms, PodKey(pods[p]), p, c, *a};
      if (!chosen || cand.Better(*chosen)) chosen = std::move(cand);
    }
  }
  return chosen;
}

// Records on `pod` that `container` was allocated `devices` (gpufrac.io/allocated), so that
// the next Allocate does not pick it again. The write is conditional on the pod's
// resourceVersion (so records of two containers cannot overwrite each other); the kubelet
// updates a starting pod's status often, so a conflict means "read again", not failure.
Status RecordAllocation(ClusterApi& api, const json& pod, const std::string& container,
                        const std::vector<std::string>& devices,
                        const std::vector<std::string>& uuids) {
  const std::string ns = MetaOf(pod, "namespace"), name = MetaOf(pod, "name");
  json current = pod;
  Status noted;
  for (int attempt = 0; attempt < 5; ++attempt) {
    json allocated = AllocatedOf(current);
    allocated[container] = {{"devices", devices}, {"uuids", uuids}};
    noted = api.AnnotatePod(ns, name, MetaOf(current, "resourceVersion"),
                            {{std::string(kAnnotationAllocated), allocated.dump()}});
    if (noted.code() != StatusCode::kAborted) break;
    StatusOr<json> reread = api.GetPod(ns, name);
    if (!reread.ok()) {
      noted = reread.status();
      break;
    }
    current = std::move(*reread);
  }
  if (!noted.ok()) {
    return UnavailableError("cannot record the allocation on pod " + PodKey(pod) + ": " +
                            noted.message());
  }
  return OkStatus();
}

}  // namespace

std::string GpuSlotId(std::string_view uuid, int slot) { return NvidiaReplicaId(uuid, slot); }

std::optional<int> GpuOfSlot(const NodeInventory& inventory, std::string_view id) {
  const size_t sep = id.rfind("::");
  if (sep == std::string_view::npos || sep + 2 == id.size()) return std::nullopt;
  for (char c : id.substr(sep + 2)) {
    if (c < '0' || c > '9') return std::nullopt;
  }
  const std::string_view uuid = id.substr(0, sep);
  for (const GpuInfo& g : inventory.gpus) {
    if (!g.uuid.empty() && g.uuid == uuid) return g.index;
  }
  return std::nullopt;
}

GpuProvider::GpuProvider(AgentOptions options, NodeInventory inventory, ClusterApi* api,
                         mig::MigBackend* mig, ContainerLimiter* limiter, ContainerMps* mps,
                         PodResourcesClient* pod_resources)
    : options_(std::move(options)),
      api_(api),
      mig_(mig),
      limiter_(limiter),
      mps_(mps),
      pod_resources_(pod_resources),
      inventory_(std::move(inventory)) {}

void GpuProvider::SetInventory(NodeInventory inventory) {
  std::lock_guard<std::mutex> lock(mu_);
  inventory_ = std::move(inventory);
}

void GpuProvider::SetReady() {
  {
    std::lock_guard<std::mutex> lock(ready_mu_);
    ready_ = true;
  }
  ready_cv_.notify_all();
}

bool GpuProvider::WaitReady() {
  std::unique_lock<std::mutex> lock(ready_mu_);
  return ready_cv_.wait_for(lock, ready_wait, [this] { return ready_; });
}

NodeInventory GpuProvider::inventory() const {
  std::lock_guard<std::mutex> lock(mu_);
  return inventory_;
}

std::vector<PluginDevice> GpuProvider::Devices() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<PluginDevice> devices;
  for (const GpuInfo& g : inventory_.gpus) {
    for (int s = 0; s < options_.slots_per_gpu; ++s) {
      devices.push_back({.id = GpuSlotId(g.uuid, s), .healthy = g.healthy, .numa_node = {}});
    }
  }
  return devices;
}

StatusOr<ContainerAllocation> GpuProvider::Allocate(const std::vector<std::string>& device_ids) {
  if (!WaitReady()) {
    return UnavailableError("the gpufrac agent on node " + options_.node + " is still starting");
  }
  std::lock_guard<std::mutex> lock(mu_);
  StatusOr<std::vector<json>> listed = api_->ListPodsOnNode(options_.node);
  if (!listed.ok()) {
    return UnavailableError("cannot list the pods on node " + options_.node + ": " +
                            listed.status().message());
  }
  const std::vector<json>& pods = *listed;

  std::optional<Candidate> chosen =
      ChooseContainer(pods, options_.node, device_ids.size(), SlotGpus(inventory_, device_ids),
                      KubeletPods(), &device_ids);
  if (!chosen) return NoContainerFor(pods, device_ids);
  const json& pod = pods[chosen->pod];
  const ContainerAssignment& ca = chosen->assignment.containers[chosen->container];

  ContainerAllocation out;
  std::vector<GpuGrant> shares;
  GPUFRAC_ASSIGN_OR_RETURN(std::vector<std::string> uuids,
                           DevicesOf(chosen->assignment, ca, pods, &shares));
  GPUFRAC_RETURN_IF_ERROR(LimitShares(MetaOf(pod, "uid"), ca, chosen->key, shares, &out));
  std::vector<int> indexes;
  for (const GpuGrant& g : ca.gpus) indexes.push_back(g.index);
  ExposeGpus(uuids, options_.dev_dir, indexes, &out);
  GPUFRAC_RETURN_IF_ERROR(RecordAllocation(*api_, pod, ca.container, device_ids, uuids));
  LogInfo("allocated %s container %s (%s): %s", Printable(chosen->key).c_str(),
          Printable(ca.container).c_str(), FoundByText(chosen->found_by()),
          out.envs["CUDA_VISIBLE_DEVICES"].c_str());
  return out;
}

StatusOr<std::vector<std::string>> GpuProvider::DevicesOf(const Assignment& assignment,
                                                          const ContainerAssignment& ca,
                                                          const std::vector<json>& pods,
                                                          std::vector<GpuGrant>* shares) {
  std::vector<std::string> uuids;
  for (const GpuGrant& g : ca.gpus) {
    if (g.mig) {
      GPUFRAC_ASSIGN_OR_RETURN(std::string uuid, MigUuid(g.index, *g.mig, pods));
      uuids.push_back(uuid);
      continue;
    }
    uuids.push_back(g.uuid);
    if (g.milli >= kMilliPerGpu) continue;
    GpuGrant share = g;
    // Decided by the extender and carried; an assignment without its policy carries none (an
    // extender before the pairs): decided here, as then.
    if (!assignment.compute_policy) {
      share.compute = DecideComputePair(g.milli, ca.compute_limit_milli, options_.compute_policy);
    }
    shares->push_back(std::move(share));
  }
  return uuids;
}

Status GpuProvider::LimitShares(const std::string& uid, const ContainerAssignment& ca,
                                const std::string& pod_key, const std::vector<GpuGrant>& shares,
                                ContainerAllocation* out) {
  // A share on a GPU in MPS mode is an MPS client there (as under gpufracd; a whole GPU in MPS
  // mode runs alone, outside MPS).
  StatusOr<launch::GrantLimits> limits = launch::LimitsOfGrants(
      shares,
      [this](int index) {
        const GpuInfo* info = FindGpu(inventory_, index);
        return gpu::ContextChargeBytes(info != nullptr ? gpu::FindModel(info->model) : nullptr);
      },
      [this](int index) {
        const GpuInfo* info = FindGpu(inventory_, index);
        return info != nullptr && info->mode == GpuMode::kMps;
      },
      "container " + ca.container + " of pod " + pod_key);
  if (!limits.ok()) {
    return FailedPreconditionError(limits.status().message() +
                                   "; delete the pod to schedule it again");
  }
  const std::string subdir = "pods/" + uid + "/" + ca.container;
  if (!limits->gpus.empty()) {
    GPUFRAC_RETURN_IF_ERROR(
        limiter_->Limit(subdir, WorkloadId(uid, ca.container), limits->gpus, out));
  }
  if (!limits->mps) return OkStatus();
  if (mps_ == nullptr) {
    return FailedPreconditionError("GPU " + std::to_string(limits->mps->index) + " of node " +
                                   options_.node +
                                   " is in MPS mode but the agent runs no MPS daemons");
  }
  return mps_->Join(subdir, *limits->mps, out);
}

StatusOr<std::vector<std::string>> GpuProvider::PreferredAllocation(
    const std::vector<std::string>& available, const std::vector<std::string>& must_include,
    int size) {
  if (size <= 0 || !WaitReady()) {
    return DeviceProvider::PreferredAllocation(available, must_include, size);
  }
  std::lock_guard<std::mutex> lock(mu_);
  StatusOr<std::vector<json>> listed = api_->ListPodsOnNode(options_.node);
  if (!listed.ok()) {
    LogWarning("cannot list the pods on node %s to prefer slots: %s", options_.node.c_str(),
               listed.status().message().c_str());
    return DeviceProvider::PreferredAllocation(available, must_include, size);
  }
  std::optional<Candidate> chosen = ChooseContainer(
      *listed, options_.node, static_cast<size_t>(size), std::nullopt, KubeletPods());
  if (!chosen) return DeviceProvider::PreferredAllocation(available, must_include, size);

  // One slot of each GPU it is booked on, those of must_include counted.
  std::vector<int> wanted = GpuIndexes(chosen->assignment.containers[chosen->container].gpus);
  std::vector<std::string> picked = must_include;
  std::set<std::string> taken(must_include.begin(), must_include.end());
  for (const std::string& id : must_include) {
    std::optional<int> gpu = GpuOfSlot(inventory_, id);
    auto it = gpu ? std::find(wanted.begin(), wanted.end(), *gpu) : wanted.end();
    if (it != wanted.end()) wanted.erase(it);
  }
  for (int gpu : wanted) {
    for (const std::string& id : available) {
      if (taken.count(id) == 0 && GpuOfSlot(inventory_, id) == gpu) {
        taken.insert(id);
        picked.push_back(id);
        break;
      }
    }
  }
  // A GPU without a free slot (the kubelet offers only healthy, unallocated ones): the rest in
  // order, as the default would; Allocate still gives the booked GPU.
  return DeviceProvider::PreferredAllocation(available, picked, size);
}

Status GpuProvider::NoContainerFor(const std::vector<json>& pods,
                                   const std::vector<std::string>& device_ids) const {
  const std::string asked = std::to_string(device_ids.size()) + " GPU(s)";
  std::string started;  // Containers booked through the extender and started already.
  for (const json& pod : pods) {
    std::optional<Assignment> a = LiveAssignmentOn(pod, options_.node);
    if (!a) continue;
    json allocated = AllocatedOf(pod);
    for (const ContainerAssignment& ca : a->containers) {
      if (ca.device_plugin && ca.gpus.size() == device_ids.size() &&
          allocated.contains(ca.container)) {
        started += (started.empty() ? "" : ", ") + Printable(PodKey(pod) + "/" + ca.container);
      }
    }
  }
  if (!started.empty()) {
    return FailedPreconditionError(
        "every container booked on " + asked + " on node " + options_.node +
        " through gpufrac's scheduler extender has started already with other devices (" + started +
        "); the kubelet gave devices none of them holds (its record of them was " +
        "lost?): delete the pod the kubelet is admitting to schedule it again");
  }
  return FailedPreconditionError(
      "no pod bound to node " + options_.node + " has a container booked on " + asked +
      " that is waiting to start; pods that ask for gpufrac.io/gpu must be scheduled through "
      "gpufrac's scheduler extender (see docs/kubernetes.md)");
}

std::optional<std::vector<PodResources>> GpuProvider::KubeletPods() {
  if (pod_resources_ == nullptr) return std::nullopt;
  StatusOr<std::vector<PodResources>> pods = pod_resources_->List();
  if (!pods.ok()) {
    if (!pod_resources_failing_.exchange(true)) {
      LogWarning(
          "%s; until it answers, the pod an Allocate is for is found by its slots' GPUs and "
          "by the order pods were bound",
          pods.status().message().c_str());
    }
    return std::nullopt;
  }
  if (pod_resources_failing_.exchange(false)) {
    LogInfo("the kubelet's PodResources socket %s answers again",
            pod_resources_->socket_path().c_str());
  }
  return std::move(*pods);
}

int GpuProvider::CheckKubeletSlots(const std::vector<json>& pods) {
  // Asked before the lock: an Allocate must not wait on the kubelet's answer to a resync.
  std::optional<std::vector<PodResources>> listed = KubeletPods();
  if (!listed) return 0;
  std::unique_lock<std::mutex> lock(mu_);
  // Posted once the lock is released, so that an Allocate does not wait on the API server.
  std::vector<std::pair<const json*, std::string>> events;
  std::set<std::string> live;
  for (const json& pod : pods) {
    std::optional<Assignment> a = LiveAssignmentOn(pod, options_.node);
    if (!a) continue;
    const std::string uid = MetaOf(pod, "uid");
    live.insert(uid);
    const PodResources* kubelet_pod = Listed(*listed, pod);
    if (kubelet_pod == nullptr || reported_.count(uid) > 0) continue;
    std::string mismatch;
    for (const ContainerAssignment& ca : a->containers) {
      const ContainerResources* kc = kubelet_pod->Container(ca.container);
      if (!ca.device_plugin || kc == nullptr) continue;
      const std::vector<std::string> ids = kc->DevicesOf(kResourceGpu);
      // Not recorded yet, or ids this agent does not make (an older agent's): nothing to compare.
      std::optional<std::vector<int>> recorded = SlotGpus(inventory_, ids);
      if (ids.empty() || !recorded || *recorded == GpuIndexes(ca.gpus)) continue;
      auto list = [](const std::vector<int>& gpus) {
        std::string text;
        for (int g : gpus) text += (text.empty() ? "" : ",") + std::to_string(g);
        return text;
      };
      mismatch += std::string(mismatch.empty() ? "" : "; ") + "container " +
                  Printable(ca.container) + " runs on GPU " + list(GpuIndexes(ca.gpus)) +
                  " but the kubelet gave it slots of GPU " + list(*recorded);
    }
    if (mismatch.empty()) continue;
    const std::string message =
        mismatch +
        ": the kubelet did not take the slots the agent preferred, so its PodResources API (and "
        "DCGM exporter's pod metrics) name the wrong GPU for this pod; the pod itself is not "
        "affected";
    LogWarning("pod %s: %s", Printable(PodKey(pod)).c_str(), message.c_str());
    events.emplace_back(&pod, message);
    reported_.insert(uid);
  }
  // Forget the pods that are gone.
  for (auto it = reported_.begin(); it != reported_.end();) {
    it = live.count(*it) > 0 ? std::next(it) : reported_.erase(it);
  }
  lock.unlock();
  for (const auto& [pod, message] : events) {
    api_->PodEvent(*pod, std::string(kEventSlotMismatch), message, /*warning=*/true);
  }
  return static_cast<int>(events.size());
}

StatusOr<std::string> GpuProvider::MigUuid(int gpu, const MigGrant& grant,
                                           const std::vector<json>& pods) {
  const GpuInfo* info = FindGpu(inventory_, gpu);
  const gpu::MigModel* model = info != nullptr ? gpu::FindMigModel(info->model) : nullptr;
  if (info == nullptr || info->mode != GpuMode::kMig || model == nullptr) {
    return FailedPreconditionError("GPU " + std::to_string(gpu) + " of node " + options_.node +
                                   " is not a MIG GPU any more; delete the pod to reschedule it");
  }
  if (mig_ == nullptr) {
    return FailedPreconditionError("the gpufrac agent on node " + options_.node +
                                   " cannot control MIG (no NVML MIG access)");
  }
  const gpu::MigProfile* profile = gpu::FindMigProfile(*model, grant.profile);
  if (profile == nullptr) {
    return InvalidArgumentError(info->model + " has no MIG profile " + grant.profile);
  }
  const int profile_index = static_cast<int>(profile - model->profiles);
  GPUFRAC_ASSIGN_OR_RETURN(std::vector<mig::MigBackend::InstanceInfo> instances, mig_->List(gpu));
  // A process gpufrac did not start (NVML lists it) keeps its instance: never handed to a pod,
  // never destroyed.
  auto stranger = [&](const mig::MigBackend::InstanceInfo& i) {
    return FailedPreconditionError(
        "the MIG instance at slices " + std::to_string(i.placement.start) + "-" +
        std::to_string(i.placement.start + i.placement.size - 1) + " of GPU " +
        std::to_string(gpu) + " (" + i.uuid + ") is " + mig::ForeignUseText(i.pids) +
        "; delete the pod to place it elsewhere");
  };
  for (const auto& i : instances) {
    if (i.profile == profile_index && i.placement.start == grant.start) {
      if (i.in_use) return stranger(i);
      return i.uuid;
    }
  }
  // Placements other live pods hold on this GPU: never destroyed.
  std::set<int> held;
  for (const json& pod : pods) {
    std::optional<Assignment> a = LiveAssignmentOn(pod, options_.node);
    if (!a) continue;
    for (const ContainerAssignment& c : a->containers) {
      for (const GpuGrant& g : c.gpus) {
        if (g.index == gpu && g.mig && !(g.mig->start == grant.start)) held.insert(g.mig->start);
      }
    }
  }
  for (const auto& i : instances) {
    if (!Overlaps(i.placement, grant.start, grant.size)) continue;
    if (i.in_use) return stranger(i);
    if (held.count(i.placement.start) > 0) {
      return AbortedError("MIG slices " + std::to_string(grant.start) + "-" +
                          std::to_string(grant.start + grant.size - 1) + " of GPU " +
                          std::to_string(gpu) + " are held by another pod's instance");
    }
    GPUFRAC_RETURN_IF_ERROR(mig_->Destroy(gpu, i.gi_id));
  }
  GPUFRAC_ASSIGN_OR_RETURN(mig::MigBackend::InstanceInfo made,
                           mig_->Create(gpu, profile_index, {grant.start, grant.size}));
  return made.uuid;
}

int GpuProvider::AwaitingAllocate(const std::vector<json>& pods) const {
  int waiting = 0;
  for (const json& pod : pods) {
    std::optional<Assignment> a = LiveAssignmentOn(pod, options_.node);
    if (!a) continue;
    const json allocated = AllocatedOf(pod);
    for (const ContainerAssignment& ca : a->containers) {
      waiting += ca.device_plugin && !allocated.contains(ca.container);
    }
  }
  return waiting;
}

int GpuProvider::CleanUp(const std::vector<std::string>& live) {
  // `live` was listed before this call: a pod allocated since is not in it, so its directory is
  // kept while young (the runtime mounts its limit file when the container starts).
  constexpr auto kGrace = std::chrono::minutes(5);
  std::lock_guard<std::mutex> lock(mu_);
  std::set<std::string> keep(live.begin(), live.end());
  std::error_code ec;
  int removed = 0;
  const auto now = fs::file_time_type::clock::now();
  for (const auto& entry : fs::directory_iterator(options_.host_dir + "/pods", ec)) {
    if (keep.count(entry.path().filename().string()) > 0) continue;
    std::error_code time_ec;
    auto written = fs::last_write_time(entry.path(), time_ec);
    if (time_ec || now - written < kGrace) continue;
    if (fs::remove_all(entry.path(), ec) > 0 && !ec) ++removed;
  }
  return removed;
}

}  // namespace gpufrac::k8s
