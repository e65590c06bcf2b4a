// gpufrac's control of MIG (Multi-Instance GPU) through NVML, loaded with dlopen like
// ListDevices: MIG mode, the GPU instance profiles and placements the driver reports, and GPU
// instances each with one compute instance covering it (together a MIG device, which a job
// selects with CUDA_VISIBLE_DEVICES=MIG-<uuid>).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "gpu/devices.h"
#include "gpu/mig_catalogue.h"

namespace gpufrac::gpu {

struct MigMode {
  bool current = false;
  // The mode after the next activation; differs from `current` while a change waits.
  bool pending = false;
};

struct MigModeChange {
  MigMode mode;  // After the call.
  // The change did not take effect: the GPU was in use (or, when disabling, still had
  // instances), or it needs a GPU reset or a VM reboot. `reason` says which, in one line.
  bool waiting = false;
  bool reset_required = false;  // Waiting only for a GPU reset (not for processes to end).
  std::string reason;
};

// One GPU instance profile as the driver reports it.
struct MigProfileInfo {
  unsigned selector = 0;    // NVML_GPU_INSTANCE_PROFILE_* it was read with.
  unsigned profile_id = 0;  // The driver's id for it, which CreateInstance takes.
  std::string name;         // "1g.10gb" (without NVML's "MIG " prefix).
  int compute_slices = 0;
  int max_count = 0;
  uint64_t memory_bytes = 0;
  std::vector<MigPlacement> placements;  // Legal placements, as the driver lists them.
};

// One GPU instance and its compute instances.
struct MigInstance {
  unsigned gi_id = 0;  // Unique on its GPU while it exists.
  unsigned profile_id = 0;
  MigPlacement placement;
  std::vector<unsigned> ci_ids;
  std::string uuid;  // "MIG-..." of its first compute instance; "" when it has none.
  // The instance's memory (NVML on the MIG device). A process's memory shows up in
  // `memory_used`, but drivers may hold some too: `pids` is the evidence of a workload.
  uint64_t memory_total = 0;
  uint64_t memory_used = 0;
  // Processes with a CUDA context in any of its compute instances, as NVML lists them on its MIG
  // devices (host pids), ascending. Empty when none run, and when the driver could not list them
  // (InstancePids says why).
  std::vector<unsigned> pids;
};

struct MigNvmlApi;  // The NVML entry points MigControl uses (mig_device.cc).

// The catalogue's `model` with what the driver reports put in its place: for every profile the
// driver lists that the catalogue also has (same profile id), the driver's memory, compute
// slices, maximum count and legal placements. Profiles the driver does not list are dropped
// (this GPU or driver does not offer them); ones the catalogue lacks are left out, since
// gpufrac cannot name them reliably. This is how a real GPU's own tables win over the built-in
// ones.
MigModel MigModelFromDriver(const MigModel& model, const std::vector<MigProfileInfo>& driver);

// NVML loaded and initialised for the object's lifetime. Thread-safe (NVML is). GPUs are named
// by NVML index. Errors name the NVML call and GPU in one line:
//  - kFailedPrecondition "... GPU N (<model>) has no MIG" for a GPU without MIG;
//    "... MIG mode is off on GPU N" for instance calls on a GPU in whole-GPU mode;
//    "... instance in use by a workload" when NVML answers NVML_ERROR_IN_USE;
//  - kResourceExhausted when a placement overlaps an instance or a profile's count is used up;
//  - kInvalidArgument for an illegal placement or a profile the GPU lacks; kNotFound for an
//    unknown GPU or instance; kPermissionDenied (MIG changes need root on real GPUs);
//  - as ListDevices for a library that cannot be loaded or is too old.
class MigControl {
 public:
  // Loads NVML from `library` (a path, or a name the dynamic loader resolves).
  static StatusOr<std::unique_ptr<MigControl>> Open(const std::string& library = kNvmlLibraryName);
  ~MigControl();
  MigControl(const MigControl&) = delete;
  MigControl& operator=(const MigControl&) = delete;

  StatusOr<MigMode> GetMigMode(unsigned gpu) const;
  // Asks for MIG mode on or off. Changing it needs an idle GPU; when the driver cannot activate
  // the change now, the result says so (`waiting`) rather than failing.
  StatusOr<MigModeChange> SetMigMode(unsigned gpu, bool enabled) const;

  // The GPU's instance profiles (smallest selector first), read from the driver. MIG mode must
  // be on: the driver reports profiles only then.
  StatusOr<std::vector<MigProfileInfo>> Profiles(unsigned gpu) const;
  // Every GPU instance, by id.
  StatusOr<std::vector<MigInstance>> ListInstances(unsigned gpu) const;
  // Creates a GPU instance of `profile_id` at `placement` and a compute instance covering it.
  // On failure nothing created is left behind.
  StatusOr<MigInstance> CreateInstance(unsigned gpu, unsigned profile_id,
                                       MigPlacement placement) const;
  // The processes with a CUDA context in GPU instance `gi_id` (any of its compute instances),
  // ascending: nvmlDeviceGetComputeRunningProcesses on each of its MIG device handles. kNotFound
  // for an instance that does not exist; kFailedPrecondition when the driver has no process
  // listing.
  StatusOr<std::vector<unsigned>> InstancePids(unsigned gpu, unsigned gi_id) const;
  // Destroys the GPU instance's compute instances, then the instance. Refused while a process
  // runs in it (for CreateInstance's instances, which have one compute instance, nothing is
  // destroyed then).
  Status DestroyInstance(unsigned gpu, unsigned gi_id) const;

 private:
  explicit MigControl(std::unique_ptr<MigNvmlApi> api);
  std::unique_ptr<MigNvmlApi> api_;
};

}  // namespace gpufrac::gpu
