// The MIG planner: smallest profile for a request, then reuse, creation or lazy destruction on
// the GPUs' slice maps. The placement score (kGpufrac) is described above `CapacityVector` and
// `DemandCost`.
#include "mig/planner.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstddef>
#include <string>
#include <string_view>
#include <tuple>

#include "common/text.h"
#include "common/units.h"

namespace gpufrac::mig {
namespace {

using gpu::kMaxMigProfiles;
using gpu::MigModel;
using gpu::MigPlacement;
using gpu::MigProfile;

constexpr uint64_t kGiB = uint64_t{1} << 30;

// Memory slices as bits: bit i is slice i. Models have at most 8, so 32 bits are plenty.
using SliceMask = uint32_t;

SliceMask MaskOf(const MigPlacement& p) { return ((SliceMask{1} << p.size) - 1) << p.start; }

// The number in the profile's name ("10" of "1g.10gb"): what --gpu-memory is compared with, so
// that "--gpu-memory 10G" fits "1g.10gb" although the instance really has a little less.
uint64_t NamedGigabytes(const MigModel& model, const MigProfile& profile) {
  std::string name = gpu::MigProfileName(model, profile);
  size_t i = name.find('.');
  uint64_t gb = 0;
  if (i == std::string::npos) return 0;
  for (++i; i < name.size() && name[i] >= '0' && name[i] <= '9'; ++i)
    gb = gb * 10 + (name[i] - '0');
  return gb;
}

std::string ProfileNames(const MigModel& model) {
  std::string names;
  for (int p = 0; p < model.profile_count; ++p) {
    if (!names.empty()) names += ", ";
    names += gpu::MigProfileName(model, model.profiles[p]);
  }
  return names;
}

std::string_view ModelName(const MigModel& model) {
  return model.model != nullptr ? model.model->short_name : std::string_view("this GPU");
}

// What occupies one GPU: the slices in use and how many instances of each profile exist. Built
// either from every instance (what blocks a creation now) or from busy ones only (what will
// still block once idle instances are destroyed, which lazy destruction does on demand).
struct Occupancy {
  SliceMask used = 0;
  int count[kMaxMigProfiles] = {};
  int used_slices = 0;
  int used_compute = 0;

  void Add(const MigModel& model, const Instance& instance) {
    used |= MaskOf(instance.placement);
    ++count[instance.profile];
    used_slices += model.profiles[instance.profile].memory_slices;
    used_compute += model.profiles[instance.profile].compute_slices;
  }
};

Occupancy OccupancyOf(const MigGpu& gpu, bool busy_only) {
  Occupancy o;
  for (const Instance& instance : gpu.instances) {
    if (!busy_only || instance.busy) o.Add(*gpu.model, instance);
  }
  return o;
}

// How many more instances of `profile` could be created on a GPU occupied as `o`: non-overlapping
// free legal starts, capped by the profile's maximum count. The legal placements of one profile
// all have the same size and come lowest start first, so taking every free one greedily is the
// maximum (interval scheduling).
int Creatable(const MigProfile& profile, int profile_index, const Occupancy& o) {
  int room = profile.max_count - o.count[profile_index];
  SliceMask used = o.used;
  int n = 0;
  for (int s = 0; s < profile.start_count && n < room; ++s) {
    SliceMask m = MaskOf(profile.starts[s]);
    if ((used & m) == 0) {
      used |= m;
      ++n;
    }
  }
  return n;
}

// Free memory slices of a GPU occupied as `o` that no instance could ever use while those there
// stay: no profile below its maximum count, with no more compute slices than are free, has a
// legal placement on free slices that covers them (see PlanRequest). None once every compute
// slice is in use: then the memory left is no placement's fault. On an H100 only slice 7 can be
// stranded, by a 1g instance at slice 6: every placement that uses slice 7 uses slice 6 too.
int StrandedSlices(const MigModel& model, const Occupancy& o) {
  const int free_compute = model.compute_slices - o.used_compute;
  if (free_compute <= 0) return 0;
  SliceMask usable = 0;
  for (int p = 0; p < model.profile_count; ++p) {
    const MigProfile& profile = model.profiles[p];
    if (o.count[p] >= profile.max_count || profile.compute_slices > free_compute) continue;
    for (int s = 0; s < profile.start_count; ++s) {
      SliceMask m = MaskOf(profile.starts[s]);
      if ((o.used & m) == 0) usable |= m;
    }
  }
  const SliceMask all = (SliceMask{1} << model.memory_slices) - 1;
  return std::popcount(all & ~o.used & ~usable);
}

// The slices stranded on a GPU occupied as `after` that were not before (`stranded_before` of
// them were). Never negative: a plan that takes the last compute slices unstrands nothing.
int NewlyStranded(const MigModel& model, int stranded_before, const Occupancy& after) {
  return std::max(0, StrandedSlices(model, after) - stranded_before);
}

// The placement score of kGpufrac. A GPU's capacity vector lists, for each profile from the largest
// to the smallest (memory slices, then compute slices; +me profiles left out: they are one-off
// variants of 1g profiles), how many instances of it could still be created there (Creatable). A
// node's future capacity is the sum of its GPUs' vectors. A placement changes only its own GPU's
// vector, so among candidate placements gpufrac picks the one that strands the fewest slices
// (NewlyStranded: the vector counts each profile on its own and does not see a slice that none can
// use any more), then the one whose loss (vector before minus vector after, on its GPU) costs
// least: with demand, by DemandCost first; then (and without demand, only) lexicographically, so
// that it never gives up a larger profile to keep smaller ones, and at equal loss of large profiles
// it keeps the most small ones. That rule alone packs before it spreads: a first small instance on
// an empty GPU costs that GPU its 7g profile, the same instance on a GPU already in use usually
// costs nothing that large. The vector is computed on busy instances only: idle ones are destroyed
// when that saves capacity, so their slices are future capacity. Only then comes the destruction
// cost (idle slices, then instances, destroyed: at equal loss, keep idle instances for reuse), then
// the vector computed again with idle instances counted (keep room that needs no destruction);
// remaining ties go to the fuller GPU (packing), then the lowest GPU index and start. Before all of
// this, on a node mixing models, comes the chosen profile's memory (the least over-provisioned
// model first).
using Capacity = std::array<int, kMaxMigProfiles>;

// Profile indexes of `model` from the largest to the smallest, +me profiles left out.
struct ProfileOrder {
  int count = 0;
  int index[kMaxMigProfiles] = {};
};

ProfileOrder OrderOf(const MigModel& model) {
  ProfileOrder order;
  for (int p = 0; p < model.profile_count; ++p) {
    if (!model.profiles[p].media_extensions) order.index[order.count++] = p;
  }
  std::stable_sort(order.index, order.index + order.count, [&](int a, int b) {
    const MigProfile& pa = model.profiles[a];
    const MigProfile& pb = model.profiles[b];
    if (pa.memory_slices != pb.memory_slices) return pa.memory_slices > pb.memory_slices;
    return pa.compute_slices > pb.compute_slices;
  });
  return order;
}

Capacity CapacityVector(const MigModel& model, const ProfileOrder& order, const Occupancy& o) {
  Capacity c{};
  for (int i = 0; i < order.count; ++i) {
    c[i] = Creatable(model.profiles[order.index[i]], order.index[i], o);
  }
  return c;
}

// Demand weights of one GPU's profiles, in ProfileOrder positions, normalised to sum to 1 and
// multiplied by the profile's memory slices; absent when the caller gave no demand for the model.
using DemandWeights = std::optional<std::array<double, kMaxMigProfiles>>;

DemandWeights WeightsOf(const MigModel& model, const ProfileOrder& order,
                        std::span<const ProfileDemand> demand) {
  for (const ProfileDemand& d : demand) {
    if (d.model != &model) continue;
    double total = 0;
    for (int i = 0; i < order.count; ++i) total += d.weight[order.index[i]];
    if (!(total > 0) || !std::isfinite(total)) return std::nullopt;
    std::array<double, kMaxMigProfiles> w{};
    for (int i = 0; i < order.count; ++i) {
      w[i] = d.weight[order.index[i]] / total * model.profiles[order.index[i]].memory_slices;
    }
    return w;
  }
  return std::nullopt;
}

// The expected-fragmentation cost of a loss (FGD, Weng et al., ATC'23, on MIG slice maps): for a
// future request of profile k (probability p_k), the GPU's slices it cannot use grow by k's
// memory slices for each k instance the plan rules out, so the expected growth is the sum of
// p_k x slices_k x loss_k. Unlike the lexicographic order it lets a loss of a rarely requested
// large profile weigh less than several losses of often requested small ones; in the issue-5
// benchmark that serves 0.1-0.2 points more requests than the lexicographic order alone, at the
// price of fewer 7g.80gb (docs/mig-planner-benchmark.md). In millionths of a slice, so that
// equal losses tie exactly and the key stays integral.
int64_t DemandCost(const DemandWeights& weights, const Capacity& loss) {
  if (!weights) return 0;
  double cost = 0;
  for (int i = 0; i < kMaxMigProfiles; ++i) cost += (*weights)[i] * loss[i];
  return std::llround(cost * 1e6);
}

Capacity LossOf(const Capacity& before, const Capacity& after) {
  Capacity loss{};
  for (int i = 0; i < kMaxMigProfiles; ++i) loss[i] = before[i] - after[i];
  return loss;
}

// A candidate plan and the key it is ranked by (smaller is better, lexicographically).
inline constexpr int kKeySize = 2 * kMaxMigProfiles + 10;
using Key = std::array<int64_t, kKeySize>;

struct Candidate {
  Key key;
  Plan plan;
  // The slices the plan strands and what it rules out on its GPU (busy-only occupancy), and the
  // demand cost of that loss; kGpufrac only.
  int stranded = 0;
  int64_t cost = 0;
  Capacity loss{};
};

class KeyBuilder {
 public:
  KeyBuilder& Add(int64_t v) {
    key_[n_++] = v;
    return *this;
  }
  KeyBuilder& AddLoss(const Capacity& loss) {
    for (int i = 0; i < kMaxMigProfiles; ++i) key_[n_++] = loss[i];
    return *this;
  }
  Key Build() const { return key_; }

 private:
  Key key_{};
  int n_ = 0;
};

void Offer(std::optional<Candidate>& best, Key key, Plan plan, int stranded = 0, int64_t cost = 0,
           const Capacity& loss = {}) {
  if (!best || key < best->key) best = Candidate{key, std::move(plan), stranded, cost, loss};
}

// Everything PlanRequest needs about one eligible GPU, computed once.
struct GpuState {
  const MigGpu* gpu = nullptr;
  const MigProfile* profile = nullptr;
  int profile_index = 0;
  ProfileOrder order;
  Occupancy all;   // Every instance.
  Occupancy busy;  // Busy instances only.
  Capacity all_capacity{};
  Capacity busy_capacity{};
  int busy_stranded = 0;
  DemandWeights weights;
};

std::string GpuList(const std::vector<GpuState>& states) {
  std::string list;
  for (const GpuState& s : states) {
    if (!list.empty()) list += ", ";
    list += std::to_string(s.gpu->gpu);
  }
  return list;
}

// Step 1: the GPUs of the request's model (any, when it names none) whose profiles can hold it,
// with the smallest profile that does on each. Errors when there is none.
StatusOr<std::vector<GpuState>> EligibleGpus(const std::vector<MigGpu>& gpus,
                                             const GpuRequest& request, bool gpufrac,
                                             std::span<const ProfileDemand> demand) {
  std::vector<GpuState> states;
  states.reserve(gpus.size());
  std::optional<Status> first_error;
  bool model_matched = false;
  for (const MigGpu& g : gpus) {
    if (g.model == nullptr) continue;
    if (!request.gpu_model.empty() &&
        (g.model->model == nullptr ||
         !EqualsIgnoreCase(g.model->model->short_name, request.gpu_model))) {
      continue;
    }
    model_matched = true;
    StatusOr<const MigProfile*> profile = SmallestProfile(*g.model, request);
    if (!profile.ok()) {
      if (!first_error) first_error = profile.status().WithContext("GPU " + std::to_string(g.gpu));
      continue;
    }
    GpuState s;
    s.gpu = &g;
    s.profile = *profile;
    s.profile_index = static_cast<int>(*profile - g.model->profiles);
    s.order = OrderOf(*g.model);
    s.all = OccupancyOf(g, /*busy_only=*/false);
    s.busy = OccupancyOf(g, /*busy_only=*/true);
    if (gpufrac) {
      s.all_capacity = CapacityVector(*g.model, s.order, s.all);
      s.busy_capacity = CapacityVector(*g.model, s.order, s.busy);
      s.busy_stranded = StrandedSlices(*g.model, s.busy);
      s.weights = WeightsOf(*g.model, s.order, demand);
    }
    states.push_back(s);
  }
  if (states.empty()) {
    if (first_error) return *first_error;
    if (!request.gpu_model.empty() && !model_matched && !gpus.empty()) {
      return NotFoundError("no MIG GPU of model " + request.gpu_model + " on this node");
    }
    return FailedPreconditionError("no GPU is in MIG mode");
  }

  return states;
}

// Step 2: the idle instance of exactly the chosen profile to reuse, if any: it saves creating
// one (seconds on a real GPU). gpufrac ranks idle instances by what their reuse rules out (their
// slices turn busy), which usually picks one on the fullest GPU; the baseline takes the first.
std::optional<Candidate> BestReuse(const std::vector<GpuState>& states, bool gpufrac) {
  std::optional<Candidate> reuse;
  for (const GpuState& s : states) {
    const MigGpu& g = *s.gpu;
    for (size_t i = 0; i < g.instances.size(); ++i) {
      const Instance& instance = g.instances[i];
      if (instance.busy || instance.profile != s.profile_index) continue;
      KeyBuilder key;
      int stranded = 0;
      int64_t cost = 0;
      Capacity loss{};
      if (gpufrac) {
        Occupancy after = s.busy;
        after.Add(*g.model, instance);
        stranded = NewlyStranded(*g.model, s.busy_stranded, after);
        loss = LossOf(s.busy_capacity, CapacityVector(*g.model, s.order, after));
        cost = DemandCost(s.weights, loss);
        key.Add(static_cast<int64_t>(s.profile->memory_bytes))
            .Add(stranded)
            .Add(cost)
            .AddLoss(loss)
            .Add(-s.busy.used_slices);
      }
      key.Add(g.gpu).Add(static_cast<int64_t>(i));
      Offer(reuse, key.Build(),
            Plan{.gpu = g.gpu,
                 .profile = s.profile_index,
                 .reuse = static_cast<int>(i),
                 .placement = instance.placement,
                 .destroy = {}},
            stranded, cost, loss);
    }
  }
  return reuse;
}

// Step 3: the best placement to create the chosen profile on: on free slices, or (`destroying`)
// after destroying the idle instances in the way, as few slices as possible. gpufrac ranks
// placements by what they rule out first.
std::optional<Candidate> BestCreate(const std::vector<GpuState>& states, bool gpufrac,
                                    bool destroying) {
  std::optional<Candidate> best;
  for (const GpuState& s : states) {
    const MigGpu& g = *s.gpu;
    const MigProfile& profile = *s.profile;
    for (int st = 0; st < profile.start_count; ++st) {
      const MigPlacement& placement = profile.starts[st];
      SliceMask mask = MaskOf(placement);
      std::vector<int> destroy;
      int destroyed_slices = 0;
      int count = s.all.count[s.profile_index];
      if (!destroying) {
        if ((s.all.used & mask) != 0) continue;
      } else {
        if ((s.busy.used & mask) != 0) continue;  // Never a busy instance.
        for (size_t i = 0; i < g.instances.size(); ++i) {
          const Instance& instance = g.instances[i];
          if (instance.busy || (MaskOf(instance.placement) & mask) == 0) continue;
          destroy.push_back(static_cast<int>(i));
          destroyed_slices += g.model->profiles[instance.profile].memory_slices;
          if (instance.profile == s.profile_index) --count;
        }
        if (destroy.empty()) continue;  // Found without destroying.
      }
      if (count >= profile.max_count) continue;
      KeyBuilder key;
      int stranded = 0;
      int64_t cost = 0;
      Capacity loss{};
      if (gpufrac) {
        Occupancy busy_after = s.busy;
        busy_after.Add(*g.model, Instance{s.profile_index, placement, true});
        // With idle instances counted, after destroying those in the way.
        Occupancy all_after;
        for (size_t i = 0; i < g.instances.size(); ++i) {
          if (std::find(destroy.begin(), destroy.end(), static_cast<int>(i)) == destroy.end()) {
            all_after.Add(*g.model, g.instances[i]);
          }
        }
        all_after.Add(*g.model, Instance{s.profile_index, placement, true});
        stranded = NewlyStranded(*g.model, s.busy_stranded, busy_after);
        loss = LossOf(s.busy_capacity, CapacityVector(*g.model, s.order, busy_after));
        cost = DemandCost(s.weights, loss);
        key.Add(static_cast<int64_t>(profile.memory_bytes))
            .Add(stranded)
            .Add(cost)
            .AddLoss(loss)
            .Add(destroyed_slices)
            .Add(static_cast<int64_t>(destroy.size()))
            .AddLoss(LossOf(s.all_capacity, CapacityVector(*g.model, s.order, all_after)))
            .Add(-s.busy.used_slices)
            .Add(-s.all.used_slices);
      } else {
        key.Add(destroyed_slices).Add(static_cast<int64_t>(destroy.size()));
      }
      key.Add(g.gpu).Add(placement.start);
      Offer(best, key.Build(),
            Plan{.gpu = g.gpu,
                 .profile = s.profile_index,
                 .reuse = std::nullopt,
                 .placement = placement,
                 .destroy = std::move(destroy)},
            stranded, cost, loss);
    }
  }
  return best;
}

}  // namespace

uint32_t ProfileMilli(const MigModel& model, const MigProfile& profile) {
  return static_cast<uint32_t>(kMilliPerGpu * profile.memory_slices / model.memory_slices);
}

StatusOr<const gpu::MigProfile*> SmallestProfile(const gpu::MigModel& model,
                                                 const GpuRequest& request) {
  if (request.kind == GpuRequest::Kind::kWholeGpus) {
    return InvalidArgumentError(
        "--gpus asks for whole GPUs, which a MIG instance is not; use "
        "--gpu-memory, --gpu-fraction or --mig-profile on a MIG GPU");
  }
  if (request.kind == GpuRequest::Kind::kMigProfile) {
    const MigProfile* profile = gpu::FindMigProfile(model, request.mig_profile);
    if (profile == nullptr) {
      return NotFoundError(std::string(ModelName(model)) + " has no MIG profile \"" +
                           request.mig_profile + "\"; it has " + ProfileNames(model));
    }
    return profile;
  }
  const MigProfile* best = nullptr;
  for (int p = 0; p < model.profile_count; ++p) {
    const MigProfile& profile = model.profiles[p];
    if (profile.media_extensions) continue;  // Only when named: it takes the media engines.
    bool fits;
    if (request.kind == GpuRequest::Kind::kMemory) {
      fits = request.memory_bytes <= NamedGigabytes(model, profile) * kGiB;
    } else {
      // A share of a GPU is a share of its memory and of its compute: 0.25 of an H100 is
      // 2g.20gb, not 1g.20gb, whose one compute slice is a seventh of the GPU.
      uint64_t f = request.fraction_milli;
      fits = f * model.memory_slices <= uint64_t{kMilliPerGpu} * profile.memory_slices &&
             f * model.compute_slices <= uint64_t{kMilliPerGpu} * profile.compute_slices;
    }
    if (!fits) continue;
    if (best == nullptr || profile.memory_bytes < best->memory_bytes ||
        (profile.memory_bytes == best->memory_bytes &&
         profile.compute_slices < best->compute_slices)) {
      best = &profile;
    }
  }
  if (best == nullptr) {
    std::string what = request.kind == GpuRequest::Kind::kMemory
                           ? "--gpu-memory " + FormatSize(request.memory_bytes)
                           : "--gpu-fraction " + FormatMilli(request.fraction_milli);
    return InvalidArgumentError(what + " is more than the largest MIG profile of " +
                                std::string(ModelName(model)) + " holds");
  }
  return best;
}

StatusOr<Plan> PlanRequest(const std::vector<MigGpu>& gpus, const GpuRequest& request,
                           PlacementRule rule, std::span<const ProfileDemand> demand) {
  if (request.kind == GpuRequest::Kind::kWholeGpus) {
    return InvalidArgumentError(
        "--gpus asks for whole GPUs, which a MIG instance is not; use "
        "--gpu-memory, --gpu-fraction or --mig-profile on a MIG GPU");
  }
  const bool gpufrac = rule == PlacementRule::kGpufrac;
  GPUFRAC_ASSIGN_OR_RETURN(std::vector<GpuState> states,
                           EligibleGpus(gpus, request, gpufrac, demand));
  std::optional<Candidate> reuse = BestReuse(states, gpufrac);
  if (reuse && !gpufrac) return reuse->plan;
  // Create on free slices; only when nothing can be reused or created there, create after
  // destroying idle instances (lazy destruction: destroying and creating takes seconds on a real
  // GPU). gpufrac reuses unless creating rules out strictly less (typically the last idle 1g on
  // an otherwise unused GPU, whose reuse costs a 7g while a GPU in use has room).
  for (bool destroying : {false, true}) {
    std::optional<Candidate> best = BestCreate(states, gpufrac, destroying);
    if (!gpufrac) {
      if (best) return best->plan;
      continue;
    }
    if (reuse && best) {
      // Models differ only on a node mixing them; there the least memory comes first, as above.
      auto rank = [](const Candidate& c) { return std::tie(c.key[0], c.stranded, c.cost, c.loss); };
      return rank(*best) < rank(*reuse) ? best->plan : reuse->plan;
    }
    if (reuse) return reuse->plan;
    if (best) return best->plan;
  }

  std::string name = gpu::MigProfileName(*states.front().gpu->model, *states.front().profile);
  return ResourceExhaustedError("no room for " + name + " on MIG GPU(s) " + GpuList(states) +
                                ": busy instances hold the slices it needs or its maximum "
                                "count is reached");
}

}  // namespace gpufrac::mig
