// The exported NVML MIG entry points: MIG mode, GPU and compute instance profiles, placements,
// creation, destruction and enumeration, and MIG device handles. The rules live in
// mig_state.cc; this file checks arguments and translates handles.
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "simgpu/core/mig_state.h"
#include "simgpu/nvml/nvml_exports.h"
#include "simgpu/nvml/nvml_state.h"

namespace {

namespace abi = gpufrac::abi;
namespace gpu = gpufrac::gpu;
namespace simgpu = gpufrac::simgpu;
using abi::nvmlReturn_t;
using simgpu::MigIds;

// A physical device handle (not a MIG device), after the init check.
nvmlReturn_t GetPhysical(abi::nvmlDevice_t handle, int* index) {
  if (nvmlReturn_t result = simgpu::NvmlCheckInit(); result != abi::NVML_SUCCESS) return result;
  const simgpu::NvmlDevice* device = simgpu::NvmlDeviceFromHandle(handle);
  if (device == nullptr) return abi::NVML_ERROR_INVALID_ARGUMENT;
  *index = static_cast<int>(device->index);
  return simgpu::NvmlCheckDevice(device->index);
}

simgpu::SharedDevice& Shared(int device) { return simgpu::NvmlMachine().devices[device]; }

bool MigOn(int device) { return Shared(device).mig_current == abi::NVML_DEVICE_MIG_ENABLE; }

// NVML names a GPU instance profile two ways: nvmlDeviceGetGpuInstanceProfileInfo takes a
// selector (NVML_GPU_INSTANCE_PROFILE_*, MigProfile::nvml_id) and returns the profile's id
// (MigProfile::profile_id, e.g. 19 for 1g.10gb on H100), which every other call takes.
const gpu::MigProfile* FindProfileById(const gpu::MigModel& model, unsigned int profile_id) {
  for (int i = 0; i < model.profile_count; ++i) {
    if (model.profiles[i].profile_id == profile_id) return &model.profiles[i];
  }
  return nullptr;
}

// The profile for a selector, on a device with MIG on: NOT_SUPPORTED without MIG (model or
// mode) or for a selector the model lacks, INVALID_ARGUMENT for one NVML does not define.
nvmlReturn_t GetProfileBySelector(int device, unsigned int selector,
                                  const gpu::MigProfile** profile) {
  const gpu::MigModel* model = simgpu::DeviceMigModel(Shared(device));
  if (model == nullptr || !MigOn(device)) return abi::NVML_ERROR_NOT_SUPPORTED;
  if (selector >= abi::NVML_GPU_INSTANCE_PROFILE_COUNT) return abi::NVML_ERROR_INVALID_ARGUMENT;
  *profile = nullptr;
  for (int i = 0; i < model->profile_count; ++i) {
    if (model->profiles[i].nvml_id == selector) *profile = &model->profiles[i];
  }
  return *profile != nullptr ? abi::NVML_SUCCESS : abi::NVML_ERROR_NOT_SUPPORTED;
}

// The profile for an id, on a device with MIG on: NOT_SUPPORTED without MIG, INVALID_ARGUMENT
// for an id the device does not have.
nvmlReturn_t GetProfile(int device, unsigned int profile_id, const gpu::MigProfile** profile) {
  const gpu::MigModel* model = simgpu::DeviceMigModel(Shared(device));
  if (model == nullptr || !MigOn(device)) return abi::NVML_ERROR_NOT_SUPPORTED;
  *profile = FindProfileById(*model, profile_id);
  return *profile != nullptr ? abi::NVML_SUCCESS : abi::NVML_ERROR_INVALID_ARGUMENT;
}

// A live GPU instance behind a handle, after the init check.
nvmlReturn_t GetGpuInstance(abi::nvmlGpuInstance_t handle, MigIds* ids) {
  if (nvmlReturn_t result = simgpu::NvmlCheckInit(); result != abi::NVML_SUCCESS) return result;
  if (!simgpu::NvmlGpuInstanceFromHandle(handle, ids) ||
      ids->device >= static_cast<int>(simgpu::NvmlDeviceCount()) ||
      Shared(ids->device).gpu_instances[ids->gpu_instance].live == 0) {
    return abi::NVML_ERROR_INVALID_ARGUMENT;
  }
  return simgpu::NvmlCheckDevice(static_cast<unsigned int>(ids->device));
}

bool ComputeInstanceLive(const MigIds& ids) {
  if (ids.device >= static_cast<int>(simgpu::NvmlDeviceCount())) return false;
  const simgpu::SharedGpuInstance& instance = Shared(ids.device).gpu_instances[ids.gpu_instance];
  return instance.live != 0 && instance.compute[ids.compute_instance].live != 0;
}

nvmlReturn_t GetComputeInstance(abi::nvmlComputeInstance_t handle, MigIds* ids) {
  if (nvmlReturn_t result = simgpu::NvmlCheckInit(); result != abi::NVML_SUCCESS) return result;
  if (!simgpu::NvmlComputeInstanceFromHandle(handle, ids) || !ComputeInstanceLive(*ids)) {
    return abi::NVML_ERROR_INVALID_ARGUMENT;
  }
  return simgpu::NvmlCheckDevice(static_cast<unsigned int>(ids->device));
}

nvmlReturn_t GetMigDevice(abi::nvmlDevice_t handle, MigIds* ids) {
  if (nvmlReturn_t result = simgpu::NvmlCheckInit(); result != abi::NVML_SUCCESS) return result;
  if (!simgpu::NvmlMigDeviceFromHandle(handle, ids) || !ComputeInstanceLive(*ids)) {
    return abi::NVML_ERROR_INVALID_ARGUMENT;
  }
  return simgpu::NvmlCheckDevice(static_cast<unsigned int>(ids->device));
}

void CopyName(const std::string& text, char* buffer) {
  const std::size_t length =
      std::min(text.size(), std::size_t{abi::kNvmlDeviceNameV2BufferSize - 1});
  std::memcpy(buffer, text.data(), length);
  buffer[length] = '\0';
}

// "MIG 1g.10gb", as NVML names GPU instance profiles.
std::string ProfileName(const gpu::MigModel& model, const gpu::MigProfile& profile) {
  char name[64];
  if (gpu::FormatMigProfileName(model, profile, name, sizeof(name)) == 0) return "MIG";
  return std::string("MIG ") + name;
}

// Engine counts are approximations: a copy engine per compute slice, decoders in proportion
// (5 on the whole GPU), JPEG and OFA only with the media extensions or the whole GPU.
void FillProfileInfo(const gpu::MigModel& model, const gpu::MigProfile& profile,
                     abi::nvmlGpuInstanceProfileInfo_v2_t* info) {
  const bool all_media = profile.media_extensions || profile.compute_slices == model.compute_slices;
  info->id = profile.profile_id;
  info->isP2pSupported = 0;
  info->sliceCount = static_cast<unsigned int>(profile.compute_slices);
  info->instanceCount = static_cast<unsigned int>(profile.max_count);
  info->multiprocessorCount = static_cast<unsigned int>(
      model.model->sm_count * profile.compute_slices / model.compute_slices);
  info->copyEngineCount = static_cast<unsigned int>(profile.compute_slices);
  info->decoderCount =
      profile.media_extensions ? 1u : static_cast<unsigned int>(profile.compute_slices * 5 / 7);
  info->encoderCount = 0;
  info->jpegCount = all_media ? 1u : 0u;
  info->ofaCount = all_media ? 1u : 0u;
  info->memorySizeMB = profile.memory_bytes >> 20;
  CopyName(ProfileName(model, profile), info->name);
}

nvmlReturn_t ProfileInfo(abi::nvmlDevice_t handle, unsigned int selector,
                         abi::nvmlGpuInstanceProfileInfo_v2_t* info) {
  int device = 0;
  if (nvmlReturn_t result = GetPhysical(handle, &device); result != abi::NVML_SUCCESS) {
    return result;
  }
  simgpu::MigLock lock(simgpu::NvmlMachine());
  const gpu::MigProfile* profile = nullptr;
  if (nvmlReturn_t result = GetProfileBySelector(device, selector, &profile);
      result != abi::NVML_SUCCESS) {
    return result;
  }
  FillProfileInfo(*simgpu::DeviceMigModel(Shared(device)), *profile, info);
  return abi::NVML_SUCCESS;
}

nvmlReturn_t CreateGpuInstance(abi::nvmlDevice_t handle, unsigned int profile_id,
                               const abi::nvmlGpuInstancePlacement_t* placement, bool placed,
                               abi::nvmlGpuInstance_t* gpu_instance) {
  int device = 0;
  if (nvmlReturn_t result = GetPhysical(handle, &device); result != abi::NVML_SUCCESS) {
    return result;
  }
  if (gpu_instance == nullptr || (placed && placement == nullptr)) {
    return abi::NVML_ERROR_INVALID_ARGUMENT;
  }
  simgpu::MigLock lock(simgpu::NvmlMachine());
  const gpu::MigProfile* profile = nullptr;
  if (nvmlReturn_t result = GetProfile(device, profile_id, &profile); result != abi::NVML_SUCCESS) {
    return result;
  }
  int id = 0;
  if (nvmlReturn_t result =
          simgpu::CreateGpuInstanceLocked(simgpu::NvmlMachine(), device, *profile, placement, &id);
      result != abi::NVML_SUCCESS) {
    return result;
  }
  *gpu_instance = simgpu::NvmlGpuInstanceHandle(device, id);
  return abi::NVML_SUCCESS;
}

// The compute instance profile `profile_id` of a live GPU instance: INVALID_ARGUMENT for ids
// NVML does not define, NOT_SUPPORTED for one the instance does not offer.
nvmlReturn_t ComputeProfileSlices(const simgpu::SharedGpuInstance& instance,
                                  unsigned int profile_id, int* slices) {
  if (profile_id >= abi::NVML_COMPUTE_INSTANCE_PROFILE_COUNT) {
    return abi::NVML_ERROR_INVALID_ARGUMENT;
  }
  *slices = simgpu::ComputeInstanceProfileSlices(profile_id);
  return simgpu::ComputeInstanceProfileOffered(static_cast<int>(instance.compute_slices), *slices)
             ? abi::NVML_SUCCESS
             : abi::NVML_ERROR_NOT_SUPPORTED;
}

nvmlReturn_t ComputeProfileInfo(abi::nvmlGpuInstance_t handle, unsigned int profile_id,
                                unsigned int engine_profile,
                                abi::nvmlComputeInstanceProfileInfo_v2_t* info) {
  MigIds ids;
  if (nvmlReturn_t result = GetGpuInstance(handle, &ids); result != abi::NVML_SUCCESS) {
    return result;
  }
  if (engine_profile != abi::NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED) {
    return abi::NVML_ERROR_INVALID_ARGUMENT;
  }
  simgpu::MigLock lock(simgpu::NvmlMachine());
  const simgpu::SharedGpuInstance& instance = Shared(ids.device).gpu_instances[ids.gpu_instance];
  int slices = 0;
  if (nvmlReturn_t result = ComputeProfileSlices(instance, profile_id, &slices);
      result != abi::NVML_SUCCESS) {
    return result;
  }
  const gpu::MigModel& model = *simgpu::DeviceMigModel(Shared(ids.device));
  const gpu::MigProfile& gi_profile = *FindProfileById(model, instance.profile_id);
  abi::nvmlGpuInstanceProfileInfo_v2_t gi_info{};
  FillProfileInfo(model, gi_profile, &gi_info);
  const int gi_slices = static_cast<int>(instance.compute_slices);
  info->id = profile_id;
  info->sliceCount = static_cast<unsigned int>(slices);
  info->instanceCount = static_cast<unsigned int>(gi_slices / slices);
  info->multiprocessorCount =
      instance.sm_count * static_cast<unsigned int>(slices) / static_cast<unsigned int>(gi_slices);
  info->sharedCopyEngineCount = gi_info.copyEngineCount;
  info->sharedDecoderCount = gi_info.decoderCount;
  info->sharedEncoderCount = gi_info.encoderCount;
  info->sharedJpegCount = gi_info.jpegCount;
  info->sharedOfaCount = gi_info.ofaCount;
  // "MIG 3g.40gb" for the whole instance, "MIG 1c.3g.40gb" for a part of it.
  std::string name = gi_info.name;
  if (slices != gi_slices) name.insert(4, std::to_string(slices) + "c.");
  CopyName(name, info->name);
  return abi::NVML_SUCCESS;
}

nvmlReturn_t ComputeInstanceInfo(abi::nvmlComputeInstance_t handle,
                                 abi::nvmlComputeInstanceInfo_t* info) {
  MigIds ids;
  if (nvmlReturn_t result = GetComputeInstance(handle, &ids); result != abi::NVML_SUCCESS) {
    return result;
  }
  if (info == nullptr) return abi::NVML_ERROR_INVALID_ARGUMENT;
  simgpu::MigLock lock(simgpu::NvmlMachine());
  const simgpu::SharedComputeInstance& compute =
      Shared(ids.device).gpu_instances[ids.gpu_instance].compute[ids.compute_instance];
  info->device = simgpu::NvmlHandle(simgpu::NvmlDeviceAt(static_cast<unsigned int>(ids.device)));
  info->gpuInstance = simgpu::NvmlGpuInstanceHandle(ids.device, ids.gpu_instance);
  info->id = static_cast<unsigned int>(ids.compute_instance);
  info->profileId = compute.profile_id;
  info->placement = {compute.slice_start, compute.slice_count};
  return abi::NVML_SUCCESS;
}

// The MIG devices (compute instances) of a device, GPU instance id first, then compute id.
std::vector<MigIds> MigDevicesLocked(int device) {
  std::vector<MigIds> found;
  const simgpu::SharedDevice& shared = Shared(device);
  for (int g = 0; g < simgpu::kMaxGpuInstances; ++g) {
    if (shared.gpu_instances[g].live == 0) continue;
    for (int c = 0; c < simgpu::kMaxComputeInstances; ++c) {
      if (shared.gpu_instances[g].compute[c].live != 0) {
        found.push_back({.device = device, .gpu_instance = g, .compute_instance = c});
      }
    }
  }
  return found;
}

// The GPU or compute instance id of a MIG device handle; NOT_SUPPORTED for a physical GPU.
nvmlReturn_t MigDeviceId(abi::nvmlDevice_t handle, unsigned int* id, bool gpu_instance) {
  if (nvmlReturn_t result = simgpu::NvmlCheckInit(); result != abi::NVML_SUCCESS) return result;
  if (id == nullptr) return abi::NVML_ERROR_INVALID_ARGUMENT;
  MigIds ids;
  if (nvmlReturn_t result = GetMigDevice(handle, &ids); result != abi::NVML_SUCCESS) {
    if (result == abi::NVML_ERROR_GPU_IS_LOST) return result;
    return simgpu::NvmlDeviceFromHandle(handle) != nullptr ? abi::NVML_ERROR_NOT_SUPPORTED
                                                           : abi::NVML_ERROR_INVALID_ARGUMENT;
  }
  *id = static_cast<unsigned int>(gpu_instance ? ids.gpu_instance : ids.compute_instance);
  return abi::NVML_SUCCESS;
}

}  // namespace

extern "C" {

nvmlReturn_t nvmlDeviceGetMigMode(abi::nvmlDevice_t handle, unsigned int* current_mode,
                                  unsigned int* pending_mode) {
  int device = 0;
  if (nvmlReturn_t result = GetPhysical(handle, &device); result != abi::NVML_SUCCESS) {
    return result;
  }
  if (current_mode == nullptr || pending_mode == nullptr) return abi::NVML_ERROR_INVALID_ARGUMENT;
  if (simgpu::DeviceMigModel(Shared(device)) == nullptr) return abi::NVML_ERROR_NOT_SUPPORTED;
  simgpu::MigLock lock(simgpu::NvmlMachine());
  *current_mode = Shared(device).mig_current;
  *pending_mode = Shared(device).mig_pending;
  return abi::NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceSetMigMode(abi::nvmlDevice_t handle, unsigned int mode,
                                  nvmlReturn_t* activation_status) {
  int device = 0;
  if (nvmlReturn_t result = GetPhysical(handle, &device); result != abi::NVML_SUCCESS) {
    return result;
  }
  simgpu::MigLock lock(simgpu::NvmlMachine());
  return simgpu::SetMigModeLocked(simgpu::NvmlMachine(), device, mode, activation_status);
}

nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfo(abi::nvmlDevice_t handle, unsigned int profile,
                                                 abi::nvmlGpuInstanceProfileInfo_t* info) {
  if (info == nullptr) {
    return simgpu::NvmlCheckInit() != abi::NVML_SUCCESS ? abi::NVML_ERROR_UNINITIALIZED
                                                        : abi::NVML_ERROR_INVALID_ARGUMENT;
  }
  abi::nvmlGpuInstanceProfileInfo_v2_t full{};
  if (nvmlReturn_t result = ProfileInfo(handle, profile, &full); result != abi::NVML_SUCCESS) {
    return result;
  }
  *info = {full.id,
           full.isP2pSupported,
           full.sliceCount,
           full.instanceCount,
           full.multiprocessorCount,
           full.copyEngineCount,
           full.decoderCount,
           full.encoderCount,
           full.jpegCount,
           full.ofaCount,
           full.memorySizeMB};
  return abi::NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfoV(abi::nvmlDevice_t handle, unsigned int profile,
                                                  abi::nvmlGpuInstanceProfileInfo_v2_t* info) {
  if (simgpu::NvmlCheckInit() != abi::NVML_SUCCESS) return abi::NVML_ERROR_UNINITIALIZED;
  if (info == nullptr || info->version != abi::kNvmlGpuInstanceProfileInfoV2Version) {
    return abi::NVML_ERROR_INVALID_ARGUMENT;
  }
  return ProfileInfo(handle, profile, info);
}

nvmlReturn_t nvmlDeviceGetGpuInstancePossiblePlacements_v2(
    abi::nvmlDevice_t handle, unsigned int profile_id, abi::nvmlGpuInstancePlacement_t* placements,
    unsigned int* count) {
  int device = 0;
  if (nvmlReturn_t result = GetPhysical(handle, &device); result != abi::NVML_SUCCESS) {
    return result;
  }
  if (count == nullptr) return abi::NVML_ERROR_INVALID_ARGUMENT;
  simgpu::MigLock lock(simgpu::NvmlMachine());
  const gpu::MigProfile* profile = nullptr;
  if (nvmlReturn_t result = GetProfile(device, profile_id, &profile); result != abi::NVML_SUCCESS) {
    return result;
  }
  // As documented, a non-null array must hold them all; *count is not read.
  if (placements != nullptr) {
    for (int i = 0; i < profile->start_count; ++i) {
      placements[i] = {static_cast<unsigned int>(profile->starts[i].start),
                       static_cast<unsigned int>(profile->starts[i].size)};
    }
  }
  *count = static_cast<unsigned int>(profile->start_count);
  return abi::NVML_SUCCESS;
}

// How many more instances of the profile fit: its count left, and placements that are free
// now and free of each other (lowest first).
nvmlReturn_t nvmlDeviceGetGpuInstanceRemainingCapacity(abi::nvmlDevice_t handle,
                                                       unsigned int profile_id,
                                                       unsigned int* count) {
  int device = 0;
  if (nvmlReturn_t result = GetPhysical(handle, &device); result != abi::NVML_SUCCESS) {
    return result;
  }
  if (count == nullptr) return abi::NVML_ERROR_INVALID_ARGUMENT;
  simgpu::MigLock lock(simgpu::NvmlMachine());
  const gpu::MigProfile* profile = nullptr;
  if (nvmlReturn_t result = GetProfile(device, profile_id, &profile); result != abi::NVML_SUCCESS) {
    return result;
  }
  const simgpu::SharedDevice& shared = Shared(device);
  std::uint32_t taken = 0;
  int existing = 0;
  for (const simgpu::SharedGpuInstance& instance : shared.gpu_instances) {
    if (instance.live == 0) continue;
    taken |= ((1u << instance.size) - 1) << instance.start;
    if (instance.profile_id == profile->profile_id) ++existing;
  }
  int fits = 0;
  for (int i = 0; i < profile->start_count; ++i) {
    const std::uint32_t mask = ((1u << profile->starts[i].size) - 1) << profile->starts[i].start;
    if ((taken & mask) != 0) continue;
    taken |= mask;
    ++fits;
  }
  *count = static_cast<unsigned int>(std::max(0, std::min(fits, profile->max_count - existing)));
  return abi::NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceCreateGpuInstance(abi::nvmlDevice_t handle, unsigned int profile_id,
                                         abi::nvmlGpuInstance_t* gpu_instance) {
  return CreateGpuInstance(handle, profile_id, nullptr, /*placed=*/false, gpu_instance);
}

nvmlReturn_t nvmlDeviceCreateGpuInstanceWithPlacement(
    abi::nvmlDevice_t handle, unsigned int profile_id,
    const abi::nvmlGpuInstancePlacement_t* placement, abi::nvmlGpuInstance_t* gpu_instance) {
  return CreateGpuInstance(handle, profile_id, placement, /*placed=*/true, gpu_instance);
}

nvmlReturn_t nvmlGpuInstanceDestroy(abi::nvmlGpuInstance_t handle) {
  MigIds ids;
  if (nvmlReturn_t result = GetGpuInstance(handle, &ids); result != abi::NVML_SUCCESS) {
    return result;
  }
  simgpu::MigLock lock(simgpu::NvmlMachine());
  return simgpu::DestroyGpuInstanceLocked(simgpu::NvmlMachine(), ids.device, ids.gpu_instance);
}

nvmlReturn_t nvmlDeviceGetGpuInstances(abi::nvmlDevice_t handle, unsigned int profile_id,
                                       abi::nvmlGpuInstance_t* gpu_instances, unsigned int* count) {
  int device = 0;
  if (nvmlReturn_t result = GetPhysical(handle, &device); result != abi::NVML_SUCCESS) {
    return result;
  }
  if (gpu_instances == nullptr || count == nullptr) return abi::NVML_ERROR_INVALID_ARGUMENT;
  simgpu::MigLock lock(simgpu::NvmlMachine());
  const gpu::MigProfile* profile = nullptr;
  if (nvmlReturn_t result = GetProfile(device, profile_id, &profile); result != abi::NVML_SUCCESS) {
    return result;
  }
  unsigned int found = 0;
  for (int g = 0; g < simgpu::kMaxGpuInstances; ++g) {
    const simgpu::SharedGpuInstance& instance = Shared(device).gpu_instances[g];
    if (instance.live != 0 && instance.profile_id == profile_id) {
      gpu_instances[found++] = simgpu::NvmlGpuInstanceHandle(device, g);
    }
  }
  *count = found;
  return abi::NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetGpuInstanceById(abi::nvmlDevice_t handle, unsigned int id,
                                          abi::nvmlGpuInstance_t* gpu_instance) {
  int device = 0;
  if (nvmlReturn_t result = GetPhysical(handle, &device); result != abi::NVML_SUCCESS) {
    return result;
  }
  if (gpu_instance == nullptr || id >= static_cast<unsigned int>(simgpu::kMaxGpuInstances)) {
    return abi::NVML_ERROR_INVALID_ARGUMENT;
  }
  if (simgpu::DeviceMigModel(Shared(device)) == nullptr || !MigOn(device)) {
    return abi::NVML_ERROR_NOT_SUPPORTED;
  }
  simgpu::MigLock lock(simgpu::NvmlMachine());
  if (Shared(device).gpu_instances[id].live == 0) return abi::NVML_ERROR_NOT_FOUND;
  *gpu_instance = simgpu::NvmlGpuInstanceHandle(device, static_cast<int>(id));
  return abi::NVML_SUCCESS;
}

nvmlReturn_t nvmlGpuInstanceGetInfo(abi::nvmlGpuInstance_t handle,
                                    abi::nvmlGpuInstanceInfo_t* info) {
  MigIds ids;
  if (nvmlReturn_t result = GetGpuInstance(handle, &ids); result != abi::NVML_SUCCESS) {
    return result;
  }
  if (info == nullptr) return abi::NVML_ERROR_INVALID_ARGUMENT;
  simgpu::MigLock lock(simgpu::NvmlMachine());
  const simgpu::SharedGpuInstance& instance = Shared(ids.device).gpu_instances[ids.gpu_instance];
  info->device = simgpu::NvmlHandle(simgpu::NvmlDeviceAt(static_cast<unsigned int>(ids.device)));
  info->id = static_cast<unsigned int>(ids.gpu_instance);
  info->profileId = instance.profile_id;
  info->placement = {instance.start, instance.size};
  return abi::NVML_SUCCESS;
}

nvmlReturn_t nvmlGpuInstanceGetComputeInstanceProfileInfo(
    abi::nvmlGpuInstance_t handle, unsigned int profile, unsigned int engine_profile,
    abi::nvmlComputeInstanceProfileInfo_t* info) {
  if (simgpu::NvmlCheckInit() != abi::NVML_SUCCESS) return abi::NVML_ERROR_UNINITIALIZED;
  if (info == nullptr) return abi::NVML_ERROR_INVALID_ARGUMENT;
  abi::nvmlComputeInstanceProfileInfo_v2_t full{};
  if (nvmlReturn_t result = ComputeProfileInfo(handle, profile, engine_profile, &full);
      result != abi::NVML_SUCCESS) {
    return result;
  }
  *info = {full.id,
           full.sliceCount,
           full.instanceCount,
           full.multiprocessorCount,
           full.sharedCopyEngineCount,
           full.sharedDecoderCount,
           full.sharedEncoderCount,
           full.sharedJpegCount,
           full.sharedOfaCount};
  return abi::NVML_SUCCESS;
}

nvmlReturn_t nvmlGpuInstanceGetComputeInstanceProfileInfoV(
    abi::nvmlGpuInstance_t handle, unsigned int profile, unsigned int engine_profile,
    abi::nvmlComputeInstanceProfileInfo_v2_t* info) {
  if (simgpu::NvmlCheckInit() != abi::NVML_SUCCESS) return abi::NVML_ERROR_UNINITIALIZED;
  if (info == nullptr || info->version != abi::kNvmlComputeInstanceProfileInfoV2Version) {
    return abi::NVML_ERROR_INVALID_ARGUMENT;
  }
  return ComputeProfileInfo(handle, profile, engine_profile, info);
}

nvmlReturn_t nvmlGpuInstanceCreateComputeInstance(abi::nvmlGpuInstance_t handle,
                                                  unsigned int profile_id,
                                                  abi::nvmlComputeInstance_t* compute_instance) {
  MigIds ids;
  if (nvmlReturn_t result = GetGpuInstance(handle, &ids); result != abi::NVML_SUCCESS) {
    return result;
  }
  if (compute_instance == nullptr) return abi::NVML_ERROR_INVALID_ARGUMENT;
  simgpu::MigLock lock(simgpu::NvmlMachine());
  int id = 0;
  if (nvmlReturn_t result = simgpu::CreateComputeInstanceLocked(simgpu::NvmlMachine(), ids.device,
                                                                ids.gpu_instance, profile_id, &id);
      result != abi::NVML_SUCCESS) {
    return result;
  }
  ids.compute_instance = id;
  *compute_instance = simgpu::NvmlComputeInstanceHandle(ids);
  return abi::NVML_SUCCESS;
}

nvmlReturn_t nvmlComputeInstanceDestroy(abi::nvmlComputeInstance_t handle) {
  MigIds ids;
  if (nvmlReturn_t result = GetComputeInstance(handle, &ids); result != abi::NVML_SUCCESS) {
    return result;
  }
  simgpu::MigLock lock(simgpu::NvmlMachine());
  return simgpu::DestroyComputeInstanceLocked(simgpu::NvmlMachine(), ids.device, ids.gpu_instance,
                                              ids.compute_instance);
}

nvmlReturn_t nvmlGpuInstanceGetComputeInstances(abi::nvmlGpuInstance_t handle,
                                                unsigned int profile_id,
                                                abi::nvmlComputeInstance_t* compute_instances,
                                                unsigned int* count) {
  MigIds ids;
  if (nvmlReturn_t result = GetGpuInstance(handle, &ids); result != abi::NVML_SUCCESS) {
    return result;
  }
  if (compute_instances == nullptr || count == nullptr) return abi::NVML_ERROR_INVALID_ARGUMENT;
  simgpu::MigLock lock(simgpu::NvmlMachine());
  const simgpu::SharedGpuInstance& instance = Shared(ids.device).gpu_instances[ids.gpu_instance];
  int slices = 0;
  if (nvmlReturn_t result = ComputeProfileSlices(instance, profile_id, &slices);
      result != abi::NVML_SUCCESS) {
    return result;
  }
  unsigned int found = 0;
  for (int c = 0; c < simgpu::kMaxComputeInstances; ++c) {
    if (instance.compute[c].live != 0 && instance.compute[c].profile_id == profile_id) {
      MigIds compute = ids;
      compute.compute_instance = c;
      compute_instances[found++] = simgpu::NvmlComputeInstanceHandle(compute);
    }
  }
  *count = found;
  return abi::NVML_SUCCESS;
}

nvmlReturn_t nvmlGpuInstanceGetComputeInstanceById(abi::nvmlGpuInstance_t handle, unsigned int id,
                                                   abi::nvmlComputeInstance_t* compute_instance) {
  MigIds ids;
  if (nvmlReturn_t result = GetGpuInstance(handle, &ids); result != abi::NVML_SUCCESS) {
    return result;
  }
  if (compute_instance == nullptr ||
      id >= static_cast<unsigned int>(simgpu::kMaxComputeInstances)) {
    return abi::NVML_ERROR_INVALID_ARGUMENT;
  }
  simgpu::MigLock lock(simgpu::NvmlMachine());
  ids.compute_instance = static_cast<int>(id);
  if (!ComputeInstanceLive(ids)) return abi::NVML_ERROR_NOT_FOUND;
  *compute_instance = simgpu::NvmlComputeInstanceHandle(ids);
  return abi::NVML_SUCCESS;
}

nvmlReturn_t nvmlComputeInstanceGetInfo(abi::nvmlComputeInstance_t handle,
                                        abi::nvmlComputeInstanceInfo_t* info) {
  return ComputeInstanceInfo(handle, info);
}

nvmlReturn_t nvmlComputeInstanceGetInfo_v2(abi::nvmlComputeInstance_t handle,
                                           abi::nvmlComputeInstanceInfo_t* info) {
  return ComputeInstanceInfo(handle, info);
}

nvmlReturn_t nvmlDeviceIsMigDeviceHandle(abi::nvmlDevice_t handle, unsigned int* is_mig_device) {
  if (nvmlReturn_t result = simgpu::NvmlCheckInit(); result != abi::NVML_SUCCESS) return result;
  if (is_mig_device == nullptr) return abi::NVML_ERROR_INVALID_ARGUMENT;
  MigIds ids;
  if (nvmlReturn_t result = GetMigDevice(handle, &ids);
      result != abi::NVML_ERROR_INVALID_ARGUMENT) {
    if (result == abi::NVML_SUCCESS) *is_mig_device = 1;
    return result;
  }
  if (simgpu::NvmlDeviceFromHandle(handle) == nullptr) return abi::NVML_ERROR_INVALID_ARGUMENT;
  *is_mig_device = 0;
  return abi::NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetGpuInstanceId(abi::nvmlDevice_t handle, unsigned int* id) {
  return MigDeviceId(handle, id, /*gpu_instance=*/true);
}

nvmlReturn_t nvmlDeviceGetComputeInstanceId(abi::nvmlDevice_t handle, unsigned int* id) {
  return MigDeviceId(handle, id, /*gpu_instance=*/false);
}

// As documented, zero when MIG is not supported or not enabled; otherwise one MIG device per
// compute slice.
nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(abi::nvmlDevice_t handle, unsigned int* count) {
  int device = 0;
  if (nvmlReturn_t result = GetPhysical(handle, &device); result != abi::NVML_SUCCESS) {
    return result;
  }
  if (count == nullptr) return abi::NVML_ERROR_INVALID_ARGUMENT;
  simgpu::MigLock lock(simgpu::NvmlMachine());
  const gpu::MigModel* model = simgpu::DeviceMigModel(Shared(device));
  *count = model != nullptr && MigOn(device) ? static_cast<unsigned int>(model->compute_slices) : 0;
  return abi::NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(abi::nvmlDevice_t handle, unsigned int index,
                                                 abi::nvmlDevice_t* mig_device) {
  int device = 0;
  if (nvmlReturn_t result = GetPhysical(handle, &device); result != abi::NVML_SUCCESS) {
    return result;
  }
  if (mig_device == nullptr) return abi::NVML_ERROR_INVALID_ARGUMENT;
  const gpu::MigModel* model = simgpu::DeviceMigModel(Shared(device));
  simgpu::MigLock lock(simgpu::NvmlMachine());
  if (model == nullptr || !MigOn(device)) return abi::NVML_ERROR_NOT_SUPPORTED;
  if (index >= static_cast<unsigned int>(model->compute_slices)) {
    return abi::NVML_ERROR_INVALID_ARGUMENT;
  }
  const std::vector<MigIds> devices = MigDevicesLocked(device);
  if (index >= devices.size()) return abi::NVML_ERROR_NOT_FOUND;
  *mig_device = simgpu::NvmlMigDeviceHandle(devices[index]);
  return abi::NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetDeviceHandleFromMigDeviceHandle(abi::nvmlDevice_t mig_device,
                                                          abi::nvmlDevice_t* device) {
  MigIds ids;
  if (nvmlReturn_t result = GetMigDevice(mig_device, &ids); result != abi::NVML_SUCCESS) {
    return result;
  }
  if (device == nullptr) return abi::NVML_ERROR_INVALID_ARGUMENT;
  *device = simgpu::NvmlHandle(simgpu::NvmlDeviceAt(static_cast<unsigned int>(ids.device)));
  return abi::NVML_SUCCESS;
}

}  // extern "C"
