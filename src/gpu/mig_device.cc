// MIG control through NVML loaded with dlopen (see mig_device.h). NVML names a GPU instance
// profile by a selector (NVML_GPU_INSTANCE_PROFILE_*) when asked for its info and by the id
// that info returns everywhere else; compute instance profiles work the same way.
#include "gpu/mig_device.h"

#include <algorithm>
#include <map>
#include <utility>
#include <vector>

#include "abi/nvml_abi.h"
#include "common/log.h"
#include "gpu/nvml_library.h"

namespace gpufrac::gpu {

struct MigNvmlApi {
  std::unique_ptr<NvmlSession> nvml;
  abi::nvmlDeviceGetHandleByIndex_v2_t get_handle = nullptr;
  abi::nvmlDeviceGetName_t get_name = nullptr;
  abi::nvmlDeviceGetUUID_t get_uuid = nullptr;
  abi::nvmlDeviceGetMemoryInfo_t get_memory = nullptr;
  abi::nvmlDeviceGetMigMode_t get_mig_mode = nullptr;
  abi::nvmlDeviceSetMigMode_t set_mig_mode = nullptr;
  abi::nvmlDeviceGetGpuInstanceProfileInfoV_t gi_profile_info = nullptr;
  abi::nvmlDeviceGetGpuInstancePossiblePlacements_v2_t gi_placements = nullptr;
  abi::nvmlDeviceCreateGpuInstanceWithPlacement_t create_gi = nullptr;
  abi::nvmlGpuInstanceDestroy_t destroy_gi = nullptr;
  abi::nvmlDeviceGetGpuInstances_t get_gis = nullptr;
  abi::nvmlDeviceGetGpuInstanceById_t get_gi_by_id = nullptr;
  abi::nvmlGpuInstanceGetInfo_t gi_info = nullptr;
  abi::nvmlGpuInstanceGetComputeInstanceProfileInfoV_t ci_profile_info = nullptr;
  abi::nvmlGpuInstanceCreateComputeInstance_t create_ci = nullptr;
  abi::nvmlComputeInstanceDestroy_t destroy_ci = nullptr;
  abi::nvmlGpuInstanceGetComputeInstances_t get_cis = nullptr;
  abi::nvmlComputeInstanceGetInfo_v2_t ci_info = nullptr;
  abi::nvmlDeviceGetMaxMigDeviceCount_t max_mig_devices = nullptr;
  abi::nvmlDeviceGetMigDeviceHandleByIndex_t mig_device_by_index = nullptr;
  abi::nvmlDeviceGetGpuInstanceId_t mig_gi_id = nullptr;
  abi::nvmlDeviceGetComputeInstanceId_t mig_ci_id = nullptr;
  // nvmlDeviceGetComputeRunningProcesses_v2, else _v3 (same layout; see nvml_abi.h for why _v2
  // first). Null when the driver has neither.
  abi::nvmlDeviceGetComputeRunningProcesses_v2_t running_processes = nullptr;
  const char* running_processes_name = "";

  std::string ErrorText(abi::nvmlReturn_t rc) const { return nvml->ErrorText(rc); }
};

namespace {

using Api = MigNvmlApi;

std::string GpuLabel(unsigned gpu) { return "GPU " + std::to_string(gpu); }

std::string PlacementText(MigPlacement placement) {
  return std::to_string(placement.start) + ":" + std::to_string(placement.size);
}

// The NVML error of `call` as a Status; `call` reads like "nvmlGpuInstanceDestroy(GPU 0,
// instance 3)" and `gpu` like "GPU 0 (NVIDIA A100-SXM4-40GB)".
Status MigError(const Api& api, abi::nvmlReturn_t rc, const std::string& call,
                const std::string& gpu) {
  const std::string failed = call + " failed: " + api.ErrorText(rc);
  switch (rc) {
    case abi::NVML_ERROR_IN_USE:
      return FailedPreconditionError(failed + ": instance in use by a workload");
    case abi::NVML_ERROR_NOT_SUPPORTED:
      return FailedPreconditionError(failed + ": " + gpu + " has no MIG");
    case abi::NVML_ERROR_INSUFFICIENT_RESOURCES:
      return ResourceExhaustedError(failed +
                                    ": the placement overlaps an instance, or the profile's "
                                    "instance count is used up");
    case abi::NVML_ERROR_INVALID_ARGUMENT:
      return InvalidArgumentError(failed);
    case abi::NVML_ERROR_NOT_FOUND:
      return NotFoundError(failed);
    case abi::NVML_ERROR_NO_PERMISSION:
      return PermissionDeniedError(failed + ": changing MIG needs root");
    default:
      return api.nvml->CallError(rc, call);
  }
}

// A GPU's handle and a label for messages.
struct Gpu {
  unsigned index = 0;
  abi::nvmlDevice_t handle = nullptr;
  std::string label;  // "GPU 0 (NVIDIA A100-SXM4-40GB)"

  std::string Call(const char* function, const std::string& more = "") const {
    return std::string(function) + "(" + GpuLabel(index) + (more.empty() ? "" : ", " + more) + ")";
  }
};

StatusOr<Gpu> GetGpu(const Api& api, unsigned index) {
  Gpu gpu{.index = index, .label = GpuLabel(index)};
  if (auto rc = api.get_handle(index, &gpu.handle); rc != abi::NVML_SUCCESS) {
    if (rc == abi::NVML_ERROR_INVALID_ARGUMENT) {
      return NotFoundError("no GPU with index " + std::to_string(index));
    }
    return MigError(api, rc, gpu.Call("nvmlDeviceGetHandleByIndex_v2"), gpu.label);
  }
  char name[abi::kNvmlDeviceNameV2BufferSize] = {};
  if (api.get_name(gpu.handle, name, sizeof(name)) == abi::NVML_SUCCESS) {
    name[sizeof(name) - 1] = '\0';
    gpu.label += " (" + std::string(name) + ")";
  }
  return gpu;
}

// The GPU, after checking that MIG mode is on: the instance calls answer NOT_SUPPORTED
// otherwise, which would read as "no MIG".
StatusOr<Gpu> GetMigGpu(const Api& api, unsigned index) {
  GPUFRAC_ASSIGN_OR_RETURN(Gpu gpu, GetGpu(api, index));
  unsigned current = 0;
  unsigned pending = 0;
  if (auto rc = api.get_mig_mode(gpu.handle, &current, &pending); rc != abi::NVML_SUCCESS) {
    return MigError(api, rc, gpu.Call("nvmlDeviceGetMigMode"), gpu.label);
  }
  if (current != abi::NVML_DEVICE_MIG_ENABLE) {
    return FailedPreconditionError("MIG mode is off on " + gpu.label +
                                   " (turn it on with `gpufrac mig enable --gpu " +
                                   std::to_string(index) + "`)");
  }
  return gpu;
}

struct GpuInstanceProfile {
  unsigned selector = 0;
  abi::nvmlGpuInstanceProfileInfo_v2_t info{};
};

// Every GPU instance profile the GPU has.
StatusOr<std::vector<GpuInstanceProfile>> GpuInstanceProfiles(const Api& api, const Gpu& gpu) {
  std::vector<GpuInstanceProfile> profiles;
  for (unsigned selector = 0; selector < abi::NVML_GPU_INSTANCE_PROFILE_COUNT; ++selector) {
    GpuInstanceProfile profile{.selector = selector};
    profile.info.version = abi::kNvmlGpuInstanceProfileInfoV2Version;
    const auto rc = api.gi_profile_info(gpu.handle, selector, &profile.info);
    // A selector the GPU lacks is NOT_SUPPORTED; one an older driver does not know is
    // INVALID_ARGUMENT.
    if (rc == abi::NVML_ERROR_NOT_SUPPORTED || rc == abi::NVML_ERROR_INVALID_ARGUMENT) continue;
    if (rc != abi::NVML_SUCCESS) {
      return MigError(
          api, rc,
          gpu.Call("nvmlDeviceGetGpuInstanceProfileInfoV", "profile " + std::to_string(selector)),
          gpu.label);
    }
    profile.info.name[sizeof(profile.info.name) - 1] = '\0';
    profiles.push_back(profile);
  }
  return profiles;
}

// Every compute instance profile the GPU instance offers.
StatusOr<std::vector<abi::nvmlComputeInstanceProfileInfo_v2_t>> ComputeProfiles(
    const Api& api, const Gpu& gpu, abi::nvmlGpuInstance_t gi) {
  std::vector<abi::nvmlComputeInstanceProfileInfo_v2_t> profiles;
  for (unsigned selector = 0; selector < abi::NVML_COMPUTE_INSTANCE_PROFILE_COUNT; ++selector) {
    abi::nvmlComputeInstanceProfileInfo_v2_t info{};
    info.version = abi::kNvmlComputeInstanceProfileInfoV2Version;
    const auto rc =
        api.ci_profile_info(gi, selector, abi::NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED, &info);
    if (rc == abi::NVML_ERROR_NOT_SUPPORTED || rc == abi::NVML_ERROR_INVALID_ARGUMENT) continue;
    if (rc != abi::NVML_SUCCESS) {
      return MigError(api, rc, gpu.Call("nvmlGpuInstanceGetComputeInstanceProfileInfoV"),
                      gpu.label);
    }
    profiles.push_back(info);
  }
  return profiles;
}

// The GPU instance's compute instances by id.
StatusOr<std::map<unsigned, abi::nvmlComputeInstance_t>> ComputeInstances(
    const Api& api, const Gpu& gpu, abi::nvmlGpuInstance_t gi) {
  GPUFRAC_ASSIGN_OR_RETURN(auto profiles, ComputeProfiles(api, gpu, gi));
  std::map<unsigned, abi::nvmlComputeInstance_t> found;
  for (const auto& profile : profiles) {
    // NVML fills as many as the profile allows without being told the buffer's size.
    std::vector<abi::nvmlComputeInstance_t> handles(std::max(1u, profile.instanceCount));
    unsigned count = 0;
    if (auto rc = api.get_cis(gi, profile.id, handles.data(), &count); rc != abi::NVML_SUCCESS) {
      return MigError(api, rc, gpu.Call("nvmlGpuInstanceGetComputeInstances"), gpu.label);
    }
    for (unsigned i = 0; i < count && i < handles.size(); ++i) {
      abi::nvmlComputeInstanceInfo_t info{};
      if (auto rc = api.ci_info(handles[i], &info); rc != abi::NVML_SUCCESS) {
        return MigError(api, rc, gpu.Call("nvmlComputeInstanceGetInfo_v2"), gpu.label);
      }
      found.emplace(info.id, handles[i]);
    }
  }
  return found;
}

// The pids NVML lists on a GPU or MIG device handle, ascending. The list can grow between the
// call that sizes it and the one that fills it; a few retries cover that.
StatusOr<std::vector<unsigned>> RunningPids(const Api& api, const Gpu& gpu,
                                            abi::nvmlDevice_t handle, const std::string& what) {
  if (api.running_processes == nullptr) {
    return FailedPreconditionError(api.nvml->library_name() +
                                   " has no nvmlDeviceGetComputeRunningProcesses_v2 or _v3; the "
                                   "NVIDIA driver is too old to list processes (update it)");
  }
  const std::string call = gpu.Call(api.running_processes_name, what);
  unsigned count = 0;
  auto rc = api.running_processes(handle, &count, nullptr);
  std::vector<abi::nvmlProcessInfo_v2_t> infos;
  for (int attempt = 0; rc == abi::NVML_ERROR_INSUFFICIENT_SIZE && attempt < 4; ++attempt) {
    count += 4;  // room for processes that start meanwhile
    infos.assign(count, abi::nvmlProcessInfo_v2_t{});
    rc = api.running_processes(handle, &count, infos.data());
  }
  if (rc != abi::NVML_SUCCESS) return MigError(api, rc, call, gpu.label);
  std::vector<unsigned> pids;
  for (unsigned i = 0; i < count && i < infos.size(); ++i) pids.push_back(infos[i].pid);
  std::sort(pids.begin(), pids.end());
  pids.erase(std::unique(pids.begin(), pids.end()), pids.end());
  return pids;
}

// What the MIG device handles say about each (GPU instance id, compute instance id).
struct MigDeviceFacts {
  abi::nvmlDevice_t handle = nullptr;
  std::string uuid;
  uint64_t total = 0;
  uint64_t used = 0;
  // The processes in it; empty when the driver could not list them (logged).
  std::vector<unsigned> pids;
};
using MigDeviceMap = std::map<std::pair<unsigned, unsigned>, MigDeviceFacts>;

StatusOr<MigDeviceMap> MigDevices(const Api& api, const Gpu& gpu) {
  MigDeviceMap found;
  unsigned max = 0;
  if (auto rc = api.max_mig_devices(gpu.handle, &max); rc != abi::NVML_SUCCESS) {
    return MigError(api, rc, gpu.Call("nvmlDeviceGetMaxMigDeviceCount"), gpu.label);
  }
  for (unsigned i = 0; i < max; ++i) {
    abi::nvmlDevice_t mig = nullptr;
    const auto rc = api.mig_device_by_index(gpu.handle, i, &mig);
    if (rc == abi::NVML_ERROR_NOT_FOUND) continue;
    if (rc != abi::NVML_SUCCESS) {
      return MigError(api, rc, gpu.Call("nvmlDeviceGetMigDeviceHandleByIndex", std::to_string(i)),
                      gpu.label);
    }
    unsigned gi = 0;
    unsigned ci = 0;
    char uuid[abi::kNvmlDeviceUuidV2BufferSize] = {};
    abi::nvmlMemory_t memory{};
    abi::nvmlReturn_t failed = abi::NVML_SUCCESS;
    const char* call = "";
    if ((failed = api.mig_gi_id(mig, &gi)) != abi::NVML_SUCCESS) {
      call = "nvmlDeviceGetGpuInstanceId";
    } else if ((failed = api.mig_ci_id(mig, &ci)) != abi::NVML_SUCCESS) {
      call = "nvmlDeviceGetComputeInstanceId";
    } else if ((failed = api.get_uuid(mig, uuid, sizeof(uuid))) != abi::NVML_SUCCESS) {
      call = "nvmlDeviceGetUUID";
    } else if ((failed = api.get_memory(mig, &memory)) != abi::NVML_SUCCESS) {
      call = "nvmlDeviceGetMemoryInfo";
    }
    if (failed != abi::NVML_SUCCESS) {
      return MigError(api, failed, gpu.Call(call, "MIG device " + std::to_string(i)), gpu.label);
    }
    uuid[sizeof(uuid) - 1] = '\0';
    MigDeviceFacts facts{
        .handle = mig, .uuid = uuid, .total = memory.total, .used = memory.used, .pids = {}};
    // A listing that fails must not hide the instances: the pids stay unknown (empty), and
    // DestroyInstance's refusal remains the last word.
    auto pids = RunningPids(api, gpu, mig, "MIG device " + std::to_string(i));
    if (pids.ok()) {
      facts.pids = std::move(*pids);
    } else {
      LogDebug("%s", pids.status().message().c_str());
    }
    found[{gi, ci}] = std::move(facts);
  }
  return found;
}

// The GPU instance behind `gi` as a MigInstance.
StatusOr<MigInstance> Describe(const Api& api, const Gpu& gpu, abi::nvmlGpuInstance_t gi,
                               const MigDeviceMap& mig_devices) {
  abi::nvmlGpuInstanceInfo_t info{};
  if (auto rc = api.gi_info(gi, &info); rc != abi::NVML_SUCCESS) {
    return MigError(api, rc, gpu.Call("nvmlGpuInstanceGetInfo"), gpu.label);
  }
  MigInstance instance;
  instance.gi_id = info.id;
  instance.profile_id = info.profileId;
  instance.placement = MigPlacement{.start = static_cast<int>(info.placement.start),
                                    .size = static_cast<int>(info.placement.size)};
  GPUFRAC_ASSIGN_OR_RETURN(auto computes, ComputeInstances(api, gpu, gi));
  for (const auto& [id, handle] : computes) {
    instance.ci_ids.push_back(id);
    auto facts = mig_devices.find({info.id, id});
    if (facts == mig_devices.end()) continue;
    if (instance.uuid.empty()) {
      instance.uuid = facts->second.uuid;
      instance.memory_total = facts->second.total;
      instance.memory_used = facts->second.used;
    }
    instance.pids.insert(instance.pids.end(), facts->second.pids.begin(), facts->second.pids.end());
  }
  std::sort(instance.pids.begin(), instance.pids.end());
  instance.pids.erase(std::unique(instance.pids.begin(), instance.pids.end()), instance.pids.end());
  return instance;
}

// The GPU instance `gi_id` of `gpu`: kNotFound when there is none.
StatusOr<abi::nvmlGpuInstance_t> GpuInstanceById(const MigNvmlApi& api, const Gpu& gpu,
                                                 unsigned gi_id) {
  abi::nvmlGpuInstance_t gi = nullptr;
  if (auto rc = api.get_gi_by_id(gpu.handle, gi_id, &gi); rc != abi::NVML_SUCCESS) {
    if (rc == abi::NVML_ERROR_NOT_FOUND || rc == abi::NVML_ERROR_INVALID_ARGUMENT) {
      return NotFoundError(gpu.label + " has no GPU instance " + std::to_string(gi_id));
    }
    return MigError(api, rc,
                    gpu.Call("nvmlDeviceGetGpuInstanceById", "instance " + std::to_string(gi_id)),
                    gpu.label);
  }
  return gi;
}

}  // namespace

MigControl::MigControl(std::unique_ptr<MigNvmlApi> api) : api_(std::move(api)) {}

MigControl::~MigControl() = default;

StatusOr<std::unique_ptr<MigControl>> MigControl::Open(const std::string& library) {
  auto api = std::make_unique<MigNvmlApi>();
  GPUFRAC_ASSIGN_OR_RETURN(api->nvml, NvmlSession::Open(library, "MIG control"));
  const NvmlSession& nvml = *api->nvml;
  GPUFRAC_RETURN_IF_ERROR(nvml.Resolve("nvmlDeviceGetHandleByIndex_v2", &api->get_handle));
  GPUFRAC_RETURN_IF_ERROR(nvml.Resolve("nvmlDeviceGetName", &api->get_name));
  GPUFRAC_RETURN_IF_ERROR(nvml.Resolve("nvmlDeviceGetUUID", &api->get_uuid));
  GPUFRAC_RETURN_IF_ERROR(nvml.Resolve("nvmlDeviceGetMemoryInfo", &api->get_memory));
  GPUFRAC_RETURN_IF_ERROR(nvml.Resolve("nvmlDeviceGetMigMode", &api->get_mig_mode));
  GPUFRAC_RETURN_IF_ERROR(nvml.Resolve("nvmlDeviceSetMigMode", &api->set_mig_mode));
  GPUFRAC_RETURN_IF_ERROR(
      nvml.Resolve("nvmlDeviceGetGpuInstanceProfileInfoV", &api->gi_profile_info));
  GPUFRAC_RETURN_IF_ERROR(
      nvml.Resolve("nvmlDeviceGetGpuInstancePossiblePlacements_v2", &api->gi_placements));
  GPUFRAC_RETURN_IF_ERROR(
      nvml.Resolve("nvmlDeviceCreateGpuInstanceWithPlacement", &api->create_gi));
  GPUFRAC_RETURN_IF_ERROR(nvml.Resolve("nvmlGpuInstanceDestroy", &api->destroy_gi));
  GPUFRAC_RETURN_IF_ERROR(nvml.Resolve("nvmlDeviceGetGpuInstances", &api->get_gis));
  GPUFRAC_RETURN_IF_ERROR(nvml.Resolve("nvmlDeviceGetGpuInstanceById", &api->get_gi_by_id));
  GPUFRAC_RETURN_IF_ERROR(nvml.Resolve("nvmlGpuInstanceGetInfo", &api->gi_info));
  GPUFRAC_RETURN_IF_ERROR(
      nvml.Resolve("nvmlGpuInstanceGetComputeInstanceProfileInfoV", &api->ci_profile_info));
  GPUFRAC_RETURN_IF_ERROR(nvml.Resolve("nvmlGpuInstanceCreateComputeInstance", &api->create_ci));
  GPUFRAC_RETURN_IF_ERROR(nvml.Resolve("nvmlComputeInstanceDestroy", &api->destroy_ci));
  GPUFRAC_RETURN_IF_ERROR(nvml.Resolve("nvmlGpuInstanceGetComputeInstances", &api->get_cis));
  GPUFRAC_RETURN_IF_ERROR(nvml.Resolve("nvmlComputeInstanceGetInfo_v2", &api->ci_info));
  GPUFRAC_RETURN_IF_ERROR(nvml.Resolve("nvmlDeviceGetMaxMigDeviceCount", &api->max_mig_devices));
  GPUFRAC_RETURN_IF_ERROR(
      nvml.Resolve("nvmlDeviceGetMigDeviceHandleByIndex", &api->mig_device_by_index));
  GPUFRAC_RETURN_IF_ERROR(nvml.Resolve("nvmlDeviceGetGpuInstanceId", &api->mig_gi_id));
  GPUFRAC_RETURN_IF_ERROR(nvml.Resolve("nvmlDeviceGetComputeInstanceId", &api->mig_ci_id));
  // Optional: without it MIG control still works, and instances' processes are unknown.
  for (const char* symbol :
       {"nvmlDeviceGetComputeRunningProcesses_v2", "nvmlDeviceGetComputeRunningProcesses_v3"}) {
    if (api->running_processes == nullptr && nvml.Resolve(symbol, &api->running_processes).ok()) {
      api->running_processes_name = symbol;
    }
  }
  return std::unique_ptr<MigControl>(new MigControl(std::move(api)));
}

StatusOr<MigMode> MigControl::GetMigMode(unsigned index) const {
  GPUFRAC_ASSIGN_OR_RETURN(Gpu gpu, GetGpu(*api_, index));
  unsigned current = 0;
  unsigned pending = 0;
  if (auto rc = api_->get_mig_mode(gpu.handle, &current, &pending); rc != abi::NVML_SUCCESS) {
    return MigError(*api_, rc, gpu.Call("nvmlDeviceGetMigMode"), gpu.label);
  }
  return MigMode{.current = current == abi::NVML_DEVICE_MIG_ENABLE,
                 .pending = pending == abi::NVML_DEVICE_MIG_ENABLE};
}

StatusOr<MigModeChange> MigControl::SetMigMode(unsigned index, bool enabled) const {
  GPUFRAC_ASSIGN_OR_RETURN(Gpu gpu, GetGpu(*api_, index));
  abi::nvmlReturn_t activation = abi::NVML_SUCCESS;
  const unsigned mode = enabled ? abi::NVML_DEVICE_MIG_ENABLE : abi::NVML_DEVICE_MIG_DISABLE;
  if (auto rc = api_->set_mig_mode(gpu.handle, mode, &activation); rc != abi::NVML_SUCCESS) {
    return MigError(*api_, rc, gpu.Call("nvmlDeviceSetMigMode", enabled ? "on" : "off"), gpu.label);
  }
  MigModeChange change;
  GPUFRAC_ASSIGN_OR_RETURN(change.mode, GetMigMode(index));
  if (activation == abi::NVML_SUCCESS && change.mode.current == enabled) return change;
  change.waiting = true;
  const std::string what =
      std::string("MIG mode ") + (enabled ? "on" : "off") + " on " + gpu.label + " is pending";
  switch (activation) {
    case abi::NVML_ERROR_IN_USE:
      change.reason = what + ": the GPU is in use (stop its processes" +
                      (enabled ? std::string() : std::string(" and destroy its MIG instances")) +
                      ", then ask again, or reset the GPU)";
      break;
    case abi::NVML_ERROR_RESET_REQUIRED:
      change.reset_required = true;
      change.reason = what + ": the GPU needs a reset (or, in a VM, a reboot) to apply it";
      break;
    default:
      change.reason = what + ": activation failed with " + api_->ErrorText(activation);
  }
  return change;
}

StatusOr<std::vector<MigProfileInfo>> MigControl::Profiles(unsigned index) const {
  GPUFRAC_ASSIGN_OR_RETURN(Gpu gpu, GetMigGpu(*api_, index));
  GPUFRAC_ASSIGN_OR_RETURN(auto found, GpuInstanceProfiles(*api_, gpu));
  std::vector<MigProfileInfo> profiles;
  for (const GpuInstanceProfile& each : found) {
    const abi::nvmlGpuInstanceProfileInfo_v2_t& info = each.info;
    MigProfileInfo profile;
    profile.selector = each.selector;
    profile.profile_id = info.id;
    profile.name = info.name;
    if (profile.name.starts_with("MIG ")) profile.name.erase(0, 4);
    profile.compute_slices = static_cast<int>(info.sliceCount);
    profile.max_count = static_cast<int>(info.instanceCount);
    profile.memory_bytes = info.memorySizeMB << 20;
    unsigned count = 0;
    const std::string call = gpu.Call("nvmlDeviceGetGpuInstancePossiblePlacements_v2",
                                      "profile " + std::to_string(info.id));
    if (auto rc = api_->gi_placements(gpu.handle, info.id, nullptr, &count);
        rc != abi::NVML_SUCCESS) {
      return MigError(*api_, rc, call, gpu.label);
    }
    std::vector<abi::nvmlGpuInstancePlacement_t> placements(count);
    if (count != 0) {
      if (auto rc = api_->gi_placements(gpu.handle, info.id, placements.data(), &count);
          rc != abi::NVML_SUCCESS) {
        return MigError(*api_, rc, call, gpu.label);
      }
    }
    for (unsigned p = 0; p < count && p < placements.size(); ++p) {
      profile.placements.push_back(MigPlacement{.start = static_cast<int>(placements[p].start),
                                                .size = static_cast<int>(placements[p].size)});
    }
    profiles.push_back(std::move(profile));
  }
  return profiles;
}

StatusOr<std::vector<MigInstance>> MigControl::ListInstances(unsigned index) const {
  GPUFRAC_ASSIGN_OR_RETURN(Gpu gpu, GetMigGpu(*api_, index));
  GPUFRAC_ASSIGN_OR_RETURN(auto profiles, GpuInstanceProfiles(*api_, gpu));
  GPUFRAC_ASSIGN_OR_RETURN(auto mig_devices, MigDevices(*api_, gpu));
  std::vector<MigInstance> instances;
  for (const GpuInstanceProfile& profile : profiles) {
    // NVML fills as many as the profile allows without being told the buffer's size.
    std::vector<abi::nvmlGpuInstance_t> handles(std::max(1u, profile.info.instanceCount));
    unsigned count = 0;
    if (auto rc = api_->get_gis(gpu.handle, profile.info.id, handles.data(), &count);
        rc != abi::NVML_SUCCESS) {
      return MigError(
          *api_, rc,
          gpu.Call("nvmlDeviceGetGpuInstances", "profile " + std::to_string(profile.info.id)),
          gpu.label);
    }
    for (unsigned i = 0; i < count && i < handles.size(); ++i) {
      GPUFRAC_ASSIGN_OR_RETURN(MigInstance instance, Describe(*api_, gpu, handles[i], mig_devices));
      instances.push_back(std::move(instance));
    }
  }
  std::sort(instances.begin(), instances.end(),
            [](const MigInstance& a, const MigInstance& b) { return a.gi_id < b.gi_id; });
  return instances;
}

StatusOr<MigInstance> MigControl::CreateInstance(unsigned index, unsigned profile_id,
                                                 MigPlacement placement) const {
  GPUFRAC_ASSIGN_OR_RETURN(Gpu gpu, GetMigGpu(*api_, index));
  const std::string what =
      "profile " + std::to_string(profile_id) + " at " + PlacementText(placement);
  const abi::nvmlGpuInstancePlacement_t wanted{static_cast<unsigned>(placement.start),
                                               static_cast<unsigned>(placement.size)};
  abi::nvmlGpuInstance_t gi = nullptr;
  if (auto rc = api_->create_gi(gpu.handle, profile_id, &wanted, &gi); rc != abi::NVML_SUCCESS) {
    return MigError(*api_, rc, gpu.Call("nvmlDeviceCreateGpuInstanceWithPlacement", what),
                    gpu.label);
  }
  // Whatever fails from here on, what was created goes again.
  abi::nvmlComputeInstance_t ci = nullptr;
  auto undo = [&](Status status) -> Status {
    if (ci != nullptr) {
      if (auto rc = api_->destroy_ci(ci); rc != abi::NVML_SUCCESS) {
        LogWarning("could not destroy the compute instance just created on %s (%s): %s",
                   gpu.label.c_str(), what.c_str(), api_->ErrorText(rc).c_str());
      }
    }
    if (auto rc = api_->destroy_gi(gi); rc != abi::NVML_SUCCESS) {
      LogWarning("could not destroy the GPU instance just created on %s (%s): %s",
                 gpu.label.c_str(), what.c_str(), api_->ErrorText(rc).c_str());
    }
    return status;
  };
  auto computes = ComputeProfiles(*api_, gpu, gi);
  if (!computes.ok()) return undo(computes.status());
  // The compute instance covering the GPU instance is its largest profile.
  const abi::nvmlComputeInstanceProfileInfo_v2_t* full = nullptr;
  for (const auto& compute : *computes) {
    if (full == nullptr || compute.sliceCount > full->sliceCount) full = &compute;
  }
  if (full == nullptr) {
    return undo(
        InternalError("the driver offers no compute instance in the GPU instance just "
                      "created on " +
                      gpu.label + " (" + what + ")"));
  }
  if (auto rc = api_->create_ci(gi, full->id, &ci); rc != abi::NVML_SUCCESS) {
    ci = nullptr;
    return undo(
        MigError(*api_, rc, gpu.Call("nvmlGpuInstanceCreateComputeInstance", what), gpu.label));
  }
  auto mig_devices = MigDevices(*api_, gpu);
  if (!mig_devices.ok()) return undo(mig_devices.status());
  auto instance = Describe(*api_, gpu, gi, *mig_devices);
  if (!instance.ok()) return undo(instance.status());
  if (instance->uuid.empty()) {
    return undo(InternalError("the driver lists no MIG device for the instance just created on " +
                              gpu.label + " (" + what + ")"));
  }
  return instance;
}

StatusOr<std::vector<unsigned>> MigControl::InstancePids(unsigned index, unsigned gi_id) const {
  GPUFRAC_ASSIGN_OR_RETURN(Gpu gpu, GetMigGpu(*api_, index));
  const std::string what = "instance " + std::to_string(gi_id);
  GPUFRAC_RETURN_IF_ERROR(GpuInstanceById(*api_, gpu, gi_id).status());
  GPUFRAC_ASSIGN_OR_RETURN(auto mig_devices, MigDevices(*api_, gpu));
  std::vector<unsigned> pids;
  for (const auto& [ids, facts] : mig_devices) {
    if (ids.first != gi_id) continue;
    // Asked again, so that a failure is reported rather than read as "no processes".
    GPUFRAC_ASSIGN_OR_RETURN(
        auto found, RunningPids(*api_, gpu, facts.handle,
                                what + ", compute instance " + std::to_string(ids.second)));
    pids.insert(pids.end(), found.begin(), found.end());
  }
  std::sort(pids.begin(), pids.end());
  pids.erase(std::unique(pids.begin(), pids.end()), pids.end());
  return pids;
}

Status MigControl::DestroyInstance(unsigned index, unsigned gi_id) const {
  GPUFRAC_ASSIGN_OR_RETURN(Gpu gpu, GetMigGpu(*api_, index));
  const std::string what = "instance " + std::to_string(gi_id);
  GPUFRAC_ASSIGN_OR_RETURN(abi::nvmlGpuInstance_t gi, GpuInstanceById(*api_, gpu, gi_id));
  GPUFRAC_ASSIGN_OR_RETURN(auto computes, ComputeInstances(*api_, gpu, gi));
  for (const auto& [id, handle] : computes) {
    if (auto rc = api_->destroy_ci(handle); rc != abi::NVML_SUCCESS) {
      return MigError(
          *api_, rc,
          gpu.Call("nvmlComputeInstanceDestroy", what + ", compute instance " + std::to_string(id)),
          gpu.label);
    }
  }
  if (auto rc = api_->destroy_gi(gi); rc != abi::NVML_SUCCESS) {
    return MigError(*api_, rc, gpu.Call("nvmlGpuInstanceDestroy", what), gpu.label);
  }
  return OkStatus();
}

MigModel MigModelFromDriver(const MigModel& model, const std::vector<MigProfileInfo>& driver) {
  MigModel out = model;
  out.profile_count = 0;
  for (int p = 0; p < model.profile_count; ++p) {
    const MigProfile& known = model.profiles[p];
    for (const MigProfileInfo& info : driver) {
      if (info.profile_id != known.profile_id || info.placements.empty()) continue;
      MigProfile merged = known;
      merged.memory_bytes = info.memory_bytes;
      merged.compute_slices = info.compute_slices;
      merged.max_count = info.max_count;
      merged.memory_slices = info.placements[0].size;
      merged.start_count = 0;
      for (const MigPlacement& placement : info.placements) {
        if (merged.start_count == kMaxMigStarts) break;
        merged.starts[merged.start_count++] = placement;
      }
      out.profiles[out.profile_count++] = merged;
      break;
    }
  }
  return out;
}

}  // namespace gpufrac::gpu
