// The MIG planner: for a request, the smallest GPU instance profile that holds it, and the GPU
// and placement that keep the largest future profiles creatable, reusing an idle instance of the
// right profile first and destroying idle instances only when their slices are needed. Pure (no
// NVML): the node service applies its plans, the benchmark replays streams of requests.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/gpu_request.h"
#include "common/status.h"
#include "gpu/mig_catalogue.h"

namespace gpufrac::mig {

// One GPU instance that exists on a GPU.
struct Instance {
  int profile = 0;  // Index into the GPU's MigModel::profiles.
  gpu::MigPlacement placement;
  bool busy = false;  // Serves a workload: never destroyed or reused.
  friend bool operator==(const Instance&, const Instance&) = default;
};

// A GPU in MIG mode and the instances on it.
struct MigGpu {
  int gpu = 0;  // The node's GPU index.
  const gpu::MigModel* model = nullptr;
  std::vector<Instance> instances;
};

// The smallest profile of `model` that holds `request`: --mig-profile NAME names it exactly;
// --gpu-memory X fits a profile when X is at most the size in the profile's name (10G fits
// "1g.10gb"); --gpu-fraction F fits when F is at most the profile's share of the GPU's memory
// slices and of its compute slices (0.25 of an H100 is 2g.20gb). Among the profiles that fit,
// the least memory, then the fewest compute slices. Profiles with media extensions (+me) are
// chosen only by name. Errors (one line):
// kInvalidArgument for --gpus or a request larger than the largest profile, kNotFound for a
// profile name the model does not have (listing those it has).
StatusOr<const gpu::MigProfile*> SmallestProfile(const gpu::MigModel& model,
                                                 const GpuRequest& request);

struct Plan {
  int gpu = 0;                  // MigGpu::gpu of the chosen GPU.
  int profile = 0;              // Profile index on that GPU's model.
  std::optional<int> reuse;     // Index of an idle instance of that profile to reuse; or:
  gpu::MigPlacement placement;  // where to create the new instance (on reuse: the instance's),
  std::vector<int> destroy;     // after destroying these idle instances (indexes), if any.
};

enum class PlacementRule {
  kGpufrac,      // Keep the largest future profiles creatable (the default).
  kLowestStart,  // What the driver does without an explicit placement: the lowest legal start.
};

// Where `request` goes on `gpus`: an idle instance of the chosen profile if one can be reused
// (kGpufrac skips one whose reuse would rule out a larger profile than creating on free slices
// would), else free slices, else the fewest idle slices destroyed. kResourceExhausted when it
// cannot be served now without touching a busy instance (the message says what is in the way).
// Errors of SmallestProfile when no GPU's model could ever hold it.
StatusOr<Plan> PlanRequest(const std::vector<MigGpu>& gpus, const GpuRequest& request,
                           PlacementRule rule = PlacementRule::kGpufrac);

}  // namespace gpufrac::mig
