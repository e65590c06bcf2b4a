// NVIDIA's resource names: which GPUs, replicas and MIG instances they cover, flag checks, and
// Allocate.
#include "k8s/nvidia_provider.h"

#include <algorithm>
#include <chrono>
#include <set>

#include "common/gpu_request.h"
#include "common/log.h"
#include "common/units.h"
#include "gpu/catalogue.h"
#include "k8s/container_gpus.h"
#include "launch/grant_limits.h"

namespace gpufrac::k8s {
namespace {

// Base 36, for short unique workload ids.
std::string Base36(uint64_t value) {
  std::string text;
  do {
    text.insert(text.begin(), "0123456789abcdefghijklmnopqrstuvwxyz"[value % 36]);
    value /= 36;
  } while (value > 0);
  return text;
}

}  // namespace

// Each GPU (or MIG instance) of `given` once, in the order given, with how many of its replicas.
std::vector<NvidiaProvider::GpuCount> NvidiaProvider::CountsOf(
    const std::vector<NvidiaDevice>& given) {
  std::vector<GpuCount> counts;
  for (const NvidiaDevice& d : given) {
    const std::string uuid = d.replicas > 0 ? d.id.substr(0, d.id.rfind("::")) : d.id;
    auto it = std::find_if(counts.begin(), counts.end(),
                           [&uuid](const GpuCount& c) { return c.uuid == uuid; });
    if (it == counts.end()) {
      counts.push_back({.gpu = d.gpu, .uuid = uuid, .given = 0, .replicas = d.replicas});
      it = counts.end() - 1;
    }
    ++it->given;
  }
  return counts;
}

std::string NvidiaReplicaId(std::string_view uuid, int replica) {
  return std::string(uuid) + "::" + std::to_string(replica);
}

std::string NvidiaMigResource(std::string_view profile) {
  std::string name = "nvidia.com/mig-" + std::string(profile);
  std::replace(name.begin(), name.end(), '+', '.');
  return name;
}

std::string NvidiaSocketName(std::string_view resource) {
  std::string name(resource);
  if (name.rfind("nvidia.com/", 0) == 0) name = name.substr(std::string_view("nvidia.com/").size());
  for (char& c : name) {
    if (c == '/') c = '-';
  }
  return "gpufrac-nvidia-" + name + ".sock";
}

std::optional<MigStrategy> ParseMigStrategy(std::string_view text) {
  if (text == "mixed") return MigStrategy::kMixed;
  if (text == "single") return MigStrategy::kSingle;
  return std::nullopt;
}

const char* MigStrategyName(MigStrategy strategy) {
  return strategy == MigStrategy::kSingle ? "single" : "mixed";
}

StatusOr<std::string> UniformMigProfile(const NodeInventory& all,
                                        const std::vector<int>& static_mig) {
  std::string profile;
  for (int index : static_mig) {
    const GpuInfo* g = FindGpu(all, index);
    if (g == nullptr) continue;
    for (const MigInstanceInfo& m : g->mig) {
      if (profile.empty()) profile = m.profile;
      if (m.profile != profile) {
        return FailedPreconditionError(
            "the single MIG strategy needs every instance of the static MIG GPUs to be of one "
            "profile, and they have " +
            profile + " and " + m.profile + "; use a uniform layout or --mig-strategy mixed");
      }
    }
  }
  return profile;
}

bool NvidiaGpus::Contains(int index) const {
  return std::count(whole.begin(), whole.end(), index) > 0 ||
         std::count(static_mig.begin(), static_mig.end(), index) > 0;
}

Status CheckNvidiaGpus(const NodeInventory& all, const NvidiaGpus& gpus) {
  std::set<int> whole;
  for (int index : gpus.whole) {
    const GpuInfo* g = FindGpu(all, index);
    const std::string which = "--nvidia-gpus: GPU " + std::to_string(index);
    if (g == nullptr) return InvalidArgumentError(which + ": this node has no such GPU");
    if (!whole.insert(index).second) return InvalidArgumentError(which + " is listed twice");
    if (g->mode == GpuMode::kMig) {
      return InvalidArgumentError(which +
                                  " is in MIG mode; list it in --static-mig-gpus to serve "
                                  "its instances, or disable MIG on it");
    }
    if (g->mode == GpuMode::kWhole) {
      return InvalidArgumentError(which + " is also in --whole-gpus; list it in one of the two");
    }
    if (g->mode == GpuMode::kMps) {
      // NVIDIA's sharing configuration says whether its replicas run under MPS.
      return InvalidArgumentError(which +
                                  " is also in --mps-gpus; list it in one of the two (its "
                                  "replicas run under MPS with sharing.mps in the sharing "
                                  "configuration)");
    }
  }
  std::set<int> mig;
  for (int index : gpus.static_mig) {
    const GpuInfo* g = FindGpu(all, index);
    const std::string which = "--static-mig-gpus: GPU " + std::to_string(index);
    if (g == nullptr) return InvalidArgumentError(which + ": this node has no such GPU");
    if (!mig.insert(index).second) return InvalidArgumentError(which + " is listed twice");
    if (whole.count(index) > 0) {
      return InvalidArgumentError(which + " is also in --nvidia-gpus; list it in one of the two");
    }
    if (g->mode != GpuMode::kMig) {
      return InvalidArgumentError(which +
                                  " is not in MIG mode (or the driver offers no MIG "
                                  "control); enable MIG and create its instances first");
    }
  }
  if (gpus.mig_strategy == MigStrategy::kSingle && !whole.empty()) {
    return InvalidArgumentError(
        "--mig-strategy single serves the --static-mig-gpus instances as nvidia.com/gpu, which "
        "--nvidia-gpus serves too; use --mig-strategy mixed, or leave out --nvidia-gpus");
  }
  return OkStatus();
}

NodeInventory WithoutNvidiaGpus(NodeInventory all, const NvidiaGpus& gpus) {
  std::erase_if(all.gpus, [&gpus](const GpuInfo& g) { return gpus.Contains(g.index); });
  return all;
}

std::map<std::string, std::vector<NvidiaDevice>> NvidiaResources(const NodeInventory& all,
                                                                 const NvidiaGpus& gpus,
                                                                 const NvidiaSharing* sharing) {
  std::map<std::string, std::vector<NvidiaDevice>> resources;
  for (int index : gpus.whole) {
    const GpuInfo* g = FindGpu(all, index);
    if (g == nullptr) continue;
    auto shared = sharing != nullptr ? sharing->gpus.find(index)
                                     : std::map<int, NvidiaSharedGpu>::const_iterator();
    if (sharing == nullptr || shared == sharing->gpus.end()) {
      resources[std::string(kResourceNvidiaGpu)].push_back({g->uuid, g->index, g->healthy});
      continue;
    }
    std::vector<NvidiaDevice>& devices = resources[shared->second.resource];
    for (int r = 0; r < shared->second.replicas; ++r) {
      devices.push_back({.id = NvidiaReplicaId(g->uuid, r),
                         .gpu = g->index,
                         .healthy = g->healthy,
                         .replicas = shared->second.replicas});
    }
  }
  const bool single = gpus.mig_strategy == MigStrategy::kSingle;
  // NVIDIA's single strategy serves nothing of a layout that is not uniform.
  if (single && !UniformMigProfile(all, gpus.static_mig).ok()) return resources;
  for (int index : gpus.static_mig) {
    const GpuInfo* g = FindGpu(all, index);
    if (g == nullptr) continue;
    for (const MigInstanceInfo& m : g->mig) {
      if (m.uuid.empty()) continue;
      const std::string resource =
          single ? std::string(kResourceNvidiaGpu) : NvidiaMigResource(m.profile);
      resources[resource].push_back({m.uuid, g->index, g->healthy});
    }
  }
  return resources;
}

NvidiaProvider::NvidiaProvider(std::string resource, std::string dev_dir,
                               std::vector<NvidiaDevice> devices, NvidiaReplicaLimits limits)
    : resource_(std::move(resource)),
      dev_dir_(std::move(dev_dir)),
      limits_(std::move(limits)),
      devices_(std::move(devices)) {}

bool NvidiaProvider::SetDevices(std::vector<NvidiaDevice> devices) {
  std::lock_guard<std::mutex> lock(mu_);
  if (devices == devices_) return false;
  devices_ = std::move(devices);
  return true;
}

std::vector<PluginDevice> NvidiaProvider::Devices() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<PluginDevice> out;
  for (const NvidiaDevice& d : devices_) {
    out.push_back({.id = d.id, .healthy = d.healthy, .numa_node = {}});
  }
  return out;
}

StatusOr<ContainerAllocation> NvidiaProvider::Allocate(const std::vector<std::string>& device_ids) {
  GPUFRAC_ASSIGN_OR_RETURN(std::vector<NvidiaDevice> given, Given(device_ids));
  const bool any_replica =
      std::any_of(given.begin(), given.end(), [](const NvidiaDevice& d) { return d.replicas > 0; });
  if (any_replica && given.size() > 1 && limits_.fail_requests_greater_than_one) {
    // The plugin's error names the resource and the devices already.
    return InvalidArgumentError(
        "a container may take one replica of a shared GPU at most (the sharing configuration "
        "sets failRequestsGreaterThanOne), and this one asks for " +
        std::to_string(given.size()) + "; ask for " + resource_ + ": 1");
  }
  const std::vector<GpuCount> counts = CountsOf(given);
  std::vector<std::string> uuids;
  std::vector<int> indexes;
  for (const GpuCount& c : counts) {
    uuids.push_back(c.uuid);
    indexes.push_back(c.gpu);
  }
  ContainerAllocation out;
  ExposeGpus(uuids, dev_dir_, indexes, &out);
  // Limited when it shares a GPU with others: given fewer than all of some GPU's replicas.
  if (std::any_of(counts.begin(), counts.end(), [](const GpuCount& c) { return c.Shares(); })) {
    GPUFRAC_RETURN_IF_ERROR(LimitReplicas(counts, device_ids, &out));
  }
  LogInfo("allocated %s: %s", resource_.c_str(), out.envs["CUDA_VISIBLE_DEVICES"].c_str());
  return out;
}

StatusOr<std::vector<NvidiaDevice>> NvidiaProvider::Given(
    const std::vector<std::string>& device_ids) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<NvidiaDevice> given;
  for (const std::string& id : device_ids) {
    auto it = std::find_if(devices_.begin(), devices_.end(),
                           [&id](const NvidiaDevice& d) { return d.id == id; });
    if (it == devices_.end()) {
      return NotFoundError(resource_ + " has no device " + id +
                           " on this node any more (its GPU or MIG instance is gone); delete "
                           "the pod to schedule it again");
    }
    given.push_back(*it);
  }
  return given;
}

StatusOr<std::vector<launch::GpuGrant>> NvidiaProvider::ReplicaGrants(
    const std::vector<GpuCount>& counts) const {
  std::vector<launch::GpuGrant> grants;
  for (const GpuCount& c : counts) {
    const GpuInfo* info = FindGpu(limits_.gpus, c.gpu);
    if (info == nullptr) {
      return NotFoundError("GPU " + std::to_string(c.gpu) + " of " + resource_ +
                           " is not on this node any more; delete the pod to schedule it again");
    }
    launch::GpuGrant g{
        .index = c.gpu, .uuid = c.uuid, .milli = kMilliPerGpu, .memory_bytes = info->memory_bytes};
    if (c.Shares()) {
      g.memory_bytes = static_cast<uint64_t>(static_cast<unsigned __int128>(info->memory_bytes) *
                                             c.given / c.replicas);
      // k/N of the GPU's time, in thousandths (1 to 999: N is at most kMaxNvidiaReplicas).
      g.milli = static_cast<uint32_t>(kMilliPerGpu * c.given / c.replicas);
      g.compute = limits_.kind == NvidiaSharingKind::kTimeSlicing
                      // As a gpufrac.io/gpu share that gives no compute limit: the policy's.
                      ? DecideComputePair(g.milli, std::nullopt, limits_.compute_policy)
                      // NVIDIA's MPS replicas: each held to its k/N share of the SMs.
                      : std::optional<ComputePair>(ComputePair{g.milli, g.milli});
    }
    grants.push_back(std::move(g));
  }
  return grants;
}

Status NvidiaProvider::LimitReplicas(const std::vector<GpuCount>& counts,
                                     const std::vector<std::string>& device_ids,
                                     ContainerAllocation* out) {
  if (limits_.limiter == nullptr) {
    return InternalError(resource_ + " serves replicas without a limiter");
  }
  const bool mps = limits_.kind == NvidiaSharingKind::kMps;
  if (mps) {
    // One pipe directory per container: its replicas must all be of one GPU (one daemon).
    const GpuCount* shared = nullptr;
    for (const GpuCount& c : counts) {
      if (!c.Shares()) continue;
      if (shared != nullptr) {
        return InvalidArgumentError(
            "a container on MPS may take replicas of one GPU, and this one has replicas of " +
            shared->uuid + " and " + c.uuid + "; ask for replicas of one GPU");
      }
      shared = &c;
    }
    if (limits_.mps == nullptr) {
      return InternalError(resource_ + " serves MPS replicas without MPS daemons");
    }
  }
  GPUFRAC_ASSIGN_OR_RETURN(std::vector<launch::GpuGrant> grants, ReplicaGrants(counts));
  // Every GPU it sees is in its limit file (the limiter hides the others); a whole GPU beside
  // its replicas is limited by nothing but its size.
  StatusOr<launch::GrantLimits> limits = launch::LimitsOfGrants(
      grants,
      [this](int index) {
        return gpu::ContextChargeBytes(gpu::FindModel(FindGpu(limits_.gpus, index)->model));
      },
      [&](int index) {
        return mps && std::any_of(counts.begin(), counts.end(), [index](const GpuCount& c) {
                 return c.gpu == index && c.Shares();
               });
      },
      resource_ + " container");
  if (!limits.ok()) return limits.status();
  // Its smallest device id names its directory: no other live container holds that device
  // (the kubelet hands a device on when its container is gone, or from a pod's init container
  // to a container of the same pod that runs after it), and there are never more directories
  // than devices. The workload id adds the time, so that a later container on the same
  // replica is a new workload to the GPU's arbiter.
  const std::string first = *std::min_element(device_ids.begin(), device_ids.end());
  const auto now_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                          std::chrono::system_clock::now().time_since_epoch())
                          .count();
  const std::string subdir = "nvidia/" + LimiterWorkloadId(first);
  GPUFRAC_RETURN_IF_ERROR(limits_.limiter->Limit(
      subdir, LimiterWorkloadId("nv-" + Base36(static_cast<uint64_t>(now_ms)) + "-" + first),
      limits->gpus, out));
  if (!limits->mps) return OkStatus();
  return limits_.mps->Join(subdir, *limits->mps, out);
}

}  // namespace gpufrac::k8s
