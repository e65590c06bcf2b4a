// The MIG planner: for a request, the smallest GPU instance profile that holds it, and the GPU
// and placement that keep the most useful future profiles creatable, reusing an idle instance of
// the right profile and destroying idle instances only when their slices are worth more free.
// Pure (no NVML): the node service applies its plans, the benchmark replays streams of requests.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>
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

// The share of the GPU an instance of `profile` stands for, in thousandths: its memory slices
// over the model's (what a MIG booking counts as in shares and quotas).
uint32_t ProfileMilli(const gpu::MigModel& model, const gpu::MigProfile& profile);

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
  kGpufrac,      // Keep the most useful future profiles creatable (the default).
  kLowestStart,  // What the driver does without an explicit placement: the lowest legal start.
};

// How often each profile of one model has been asked for recently: weight[i] for profile index i
// of `*model` (MigModel::profiles). Only ratios matter; weights must be finite and >= 0 (+me
// profiles' weights are ignored; all zero counts as no demand). A caller that has no history
// passes none: the rule is then the same for every mix.
struct ProfileDemand {
  const gpu::MigModel* model = nullptr;
  std::array<double, gpu::kMaxMigProfiles> weight{};
};

// Where `request` goes on `gpus`.
//
// kLowestStart: an idle instance of the chosen profile if there is one (the first), else the
// first GPU and lowest legal start on free slices, else the fewest idle slices destroyed.
//
// kGpufrac: among reusing an idle instance of the chosen profile, creating on free slices and
// creating after destroying idle instances, the plan that strands the fewest memory slices, then
// among those the plan that rules out the least future capacity (creatable instances of each
// profile). Both are judged on busy instances only (idle ones can be destroyed). A free memory
// slice is stranded when its GPU still has a free compute slice but no instance could be created
// that uses the slice: no profile below its maximum count and needing no more compute slices
// than are free has a legal placement that covers the slice and lies on free slices only. Only
// slices a plan newly strands count. On an H100 that is slice 7 when a 1g.10gb sits at slice 6
// and 7 is free (1g.20gb, 3g.40gb and 7g.80gb, the only profiles that use slice 7, use slice 6
// too): such a plan loses to any that strands nothing, even one that rules out larger profiles.
// Memory left when every compute slice is in use is not stranded: nothing could use it wherever
// the instances were. (The driver checks placements in memory slices; on the catalogued models
// every legal layout fits the GPU's compute slices.) With `demand` for the GPU's model,
// capacity is weighed by it: ruling out one instance of profile k costs weight[k] x k's memory
// slices (the expected slices a future request could not have; FGD's expected fragmentation),
// and the lexicographic rule below breaks ties. Without it, the loss of a larger profile always
// outweighs any loss of smaller ones. At equal loss it reuses rather than creates, and destroys
// the fewest idle slices. Idle instances are destroyed only by a plan's `destroy`, never on
// their own.
//
// Both: never a busy instance. kResourceExhausted when the request cannot be served now without
// touching a busy instance (the message says what is in the way). Errors of SmallestProfile
// when no GPU's model could ever hold it. `demand` entries for models not on the node are
// ignored; the first entry for a model counts.
StatusOr<Plan> PlanRequest(const std::vector<MigGpu>& gpus, const GpuRequest& request,
                           PlacementRule rule = PlacementRule::kGpufrac,
                           std::span<const ProfileDemand> demand = {});

}  // namespace gpufrac::mig
