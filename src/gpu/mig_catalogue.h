// The MIG (Multi-Instance GPU) facts of each MIG-capable model: its GPU instance profiles (name,
// compute and memory slices, memory, how many can exist, where they may be placed). Pure
// constexpr-friendly data with no heap and no exceptions, so the simulated driver links it too.
// On a real GPU the same facts are read from NVML (nvmlDeviceGetGpuInstanceProfileInfoV,
// nvmlDeviceGetGpuInstancePossiblePlacements_v2); these tables are the fallback and what the
// simulated GPU serves.
//
// Placements are in memory slices: an instance of a profile occupies [start, start + size) of
// the GPU's memory slices (8 on A100/H100/H200/B200, 4 on A30), and may only start at the
// profile's legal starts. Instances may not overlap.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "gpu/catalogue.h"

namespace gpufrac::gpu {

inline constexpr int kMaxMigProfiles = 16;
inline constexpr int kMaxMigStarts = 8;

struct MigPlacement {
  int start = 0;  // First memory slice.
  int size = 0;   // Memory slices.
};

struct MigProfile {
  // NVML's GPU instance profile id (NVML_GPU_INSTANCE_PROFILE_1_SLICE = 0, ...).
  unsigned nvml_id = 0;
  int compute_slices = 0;         // The "1g" of "1g.10gb".
  int memory_slices = 0;          // Memory slices it occupies (the placement size).
  uint64_t memory_bytes = 0;      // What a process in the instance sees as total memory.
  int max_count = 0;              // Most instances of this profile on one GPU.
  bool media_extensions = false;  // "+me": the GPU's one set of media engines.
  int start_count = 0;
  MigPlacement starts[kMaxMigStarts];  // Legal placements, lowest start first.
  // The profile's own id (nvmlGpuInstanceProfileInfo_t.id, the "ID" column of
  // `nvidia-smi mig -lgip`): what nvmlDeviceCreateGpuInstance and the placement queries take.
  unsigned profile_id = 0;
};

struct MigModel {
  const GpuModel* model = nullptr;  // The catalogue model.
  int memory_slices = 0;            // 8 or 4.
  int compute_slices = 0;           // 7 or 4.
  int profile_count = 0;
  MigProfile profiles[kMaxMigProfiles];  // Smallest first.
  // The marketing memory size in GB ("80" for H100-80GB, "180" for B200) that profile names are
  // fractions of.
  int nominal_memory_gb = 0;
};

// The MIG facts of `model`, or nullptr when it has no MIG (L4, T4, ...).
const MigModel* FindMigModel(const GpuModel& model);
// The MIG facts by short name ("H100-80GB"), ignoring case; nullptr if none.
const MigModel* FindMigModel(std::string_view short_name);
// Every MIG-capable model.
std::span<const MigModel> AllMigModels();

// The profile's name as nvidia-smi and mig-parted print it, derived from its slices and the
// memory it has: "1g.10gb", "3g.40gb", "1g.10gb+me", "7g.80gb". The memory figure is the
// instance's memory in GB rounded the way NVIDIA names them (to the nearest whole GB of the
// marketing size: memory_slices/total_slices of the model's nominal size).
std::string MigProfileName(const MigModel& model, const MigProfile& profile);
// The same without the heap (for the simulated driver): writes the NUL-terminated name into
// `buf` and returns its length, or 0 if it does not fit.
size_t FormatMigProfileName(const MigModel& model, const MigProfile& profile, char* buf,
                            size_t len);
// The profile called `name` (as MigProfileName prints it, any case) on `model`; nullptr if the
// model has no such profile.
const MigProfile* FindMigProfile(const MigModel& model, std::string_view name);

}  // namespace gpufrac::gpu
