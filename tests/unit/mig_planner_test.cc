// The MIG planner's rules on hand-made GPUs: smallest-profile choice, reuse of idle instances,
// fragmentation-aware placement against the driver's lowest-start rule, no stranded slices,
// arrival sequences served whole, demand weighting, lazy destruction, refusal to touch busy
// instances, and nodes mixing A30 and H100 GPUs.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "mig/planner.h"

namespace gpufrac::mig {
namespace {

constexpr uint64_t kGiB = uint64_t{1} << 30;

const gpu::MigModel& Model(const char* name) {
  const gpu::MigModel* model = gpu::FindMigModel(name);
  if (model == nullptr) ADD_FAILURE() << "no MIG model " << name;
  return *model;
}
const gpu::MigModel& H100() { return Model("H100-80GB"); }
const gpu::MigModel& A30() { return Model("A30-24GB"); }

int Index(const gpu::MigModel& model, const std::string& name) {
  const gpu::MigProfile* p = gpu::FindMigProfile(model, name);
  EXPECT_NE(p, nullptr) << name;
  return p == nullptr ? -1 : static_cast<int>(p - model.profiles);
}

std::string Name(const gpu::MigModel& model, int profile) {
  return gpu::MigProfileName(model, model.profiles[profile]);
}

// An instance of `name` at memory slice `start` (which must be a legal start).
Instance Make(const gpu::MigModel& model, const std::string& name, int start, bool busy) {
  int p = Index(model, name);
  return Instance{.profile = p,
                  .placement = {.start = start, .size = model.profiles[p].memory_slices},
                  .busy = busy};
}
Instance Busy(const gpu::MigModel& m, const std::string& name, int start) {
  return Make(m, name, start, true);
}
Instance Idle(const gpu::MigModel& m, const std::string& name, int start) {
  return Make(m, name, start, false);
}

MigGpu Gpu(int index, const gpu::MigModel& model, std::vector<Instance> instances = {}) {
  return MigGpu{.gpu = index, .model = &model, .instances = std::move(instances)};
}

// The name of the profile SmallestProfile picks, or the error's code name.
std::string Smallest(const gpu::MigModel& model, const GpuRequest& request) {
  StatusOr<const gpu::MigProfile*> p = SmallestProfile(model, request);
  if (!p.ok()) return std::string(StatusCodeName(p.status().code()));
  return gpu::MigProfileName(model, **p);
}

TEST(SmallestProfileTest, MemoryFitsTheSizeInTheName) {
  EXPECT_EQ(Smallest(H100(), GpuRequest::Memory(1)), "1g.10gb");
  EXPECT_EQ(Smallest(H100(), GpuRequest::Memory(10 * kGiB)), "1g.10gb");
  EXPECT_EQ(Smallest(H100(), GpuRequest::Memory(10 * kGiB + 1)), "1g.20gb");
  EXPECT_EQ(Smallest(H100(), GpuRequest::Memory(11 * kGiB)), "1g.20gb");
  EXPECT_EQ(Smallest(H100(), GpuRequest::Memory(20 * kGiB)), "1g.20gb");
  // 3g.40gb and 4g.40gb have the same memory: the one with fewer compute slices.
  EXPECT_EQ(Smallest(H100(), GpuRequest::Memory(21 * kGiB)), "3g.40gb");
  EXPECT_EQ(Smallest(H100(), GpuRequest::Memory(80 * kGiB)), "7g.80gb");
  EXPECT_EQ(Smallest(A30(), GpuRequest::Memory(10 * kGiB)), "2g.12gb");
}

TEST(SmallestProfileTest, FractionIsAShareOfMemoryAndCompute) {
  EXPECT_EQ(Smallest(H100(), GpuRequest::Fraction(100)), "1g.10gb");
  EXPECT_EQ(Smallest(H100(), GpuRequest::Fraction(125)), "1g.10gb");
  // 1g.20gb has a quarter of the memory but a seventh of the compute.
  EXPECT_EQ(Smallest(H100(), GpuRequest::Fraction(250)), "2g.20gb");
  EXPECT_EQ(Smallest(H100(), GpuRequest::Fraction(500)), "4g.40gb");
  EXPECT_EQ(Smallest(H100(), GpuRequest::Fraction(999)), "7g.80gb");
  EXPECT_EQ(Smallest(A30(), GpuRequest::Fraction(250)), "1g.6gb");
}

TEST(SmallestProfileTest, ProfileNamedExactlyIncludingMediaExtensions) {
  EXPECT_EQ(Smallest(H100(), GpuRequest::Mig("3g.40gb")), "3g.40gb");
  EXPECT_EQ(Smallest(H100(), GpuRequest::Mig("1g.10gb+me")), "1g.10gb+me");
  EXPECT_TRUE(SmallestProfile(H100(), GpuRequest::Mig("1g.10gb+me")).value()->media_extensions);
  // Never chosen for a size: a small memory request gets the plain 1g profile.
  EXPECT_FALSE(SmallestProfile(H100(), GpuRequest::Memory(kGiB)).value()->media_extensions);
}

TEST(SmallestProfileTest, Errors) {
  GpuRequest whole = GpuRequest::Whole(1);
  EXPECT_EQ(SmallestProfile(H100(), whole).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(SmallestProfile(H100(), GpuRequest::Memory(81 * kGiB)).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(SmallestProfile(A30(), GpuRequest::Memory(25 * kGiB)).status().code(),
            StatusCode::kInvalidArgument);

  Status unknown = SmallestProfile(H100(), GpuRequest::Mig("5g.50gb")).status();
  EXPECT_EQ(unknown.code(), StatusCode::kNotFound);
  EXPECT_NE(unknown.message().find("5g.50gb"), std::string::npos) << unknown;
  EXPECT_NE(unknown.message().find("1g.10gb"), std::string::npos) << unknown;
  EXPECT_NE(unknown.message().find("7g.80gb"), std::string::npos) << unknown;
  // A profile of another model.
  EXPECT_EQ(SmallestProfile(A30(), GpuRequest::Mig("1g.10gb")).status().code(),
            StatusCode::kNotFound);
  EXPECT_EQ(unknown.message().find('\n'), std::string::npos);
}

TEST(PlanRequestTest, ReusesAnIdleInstanceBeforeCreating) {
  // Slice 4 is as good a place for a new 1g.10gb as slice 5: reusing costs nothing more than
  // creating.
  std::vector<MigGpu> gpus = {Gpu(0, H100(), {Idle(H100(), "1g.10gb", 4)})};
  Plan plan = PlanRequest(gpus, GpuRequest::Memory(5 * kGiB)).value();
  EXPECT_EQ(plan.gpu, 0);
  ASSERT_TRUE(plan.reuse.has_value());
  EXPECT_EQ(*plan.reuse, 0);
  EXPECT_TRUE(plan.destroy.empty());
  // The lowest-start baseline reuses too.
  EXPECT_EQ(
      PlanRequest(gpus, GpuRequest::Memory(5 * kGiB), PlacementRule::kLowestStart).value().reuse,
      0);
}

TEST(PlanRequestTest, CreatesRatherThanReuseAnInstanceThatBlocksA4g) {
  const gpu::MigModel& m = H100();
  // A job on the idle 1g.10gb at slice 3 would keep the 4g.40gb (slices 0-3) uncreatable while
  // it runs; a new 1g.10gb at slice 4 leaves it creatable, and the idle one can still be
  // destroyed when a 4g.40gb comes.
  std::vector<MigGpu> gpus = {Gpu(0, m, {Idle(m, "1g.10gb", 3)})};
  Plan plan = PlanRequest(gpus, GpuRequest::Mig("1g.10gb")).value();
  EXPECT_FALSE(plan.reuse.has_value());
  EXPECT_TRUE(plan.destroy.empty());
  EXPECT_EQ(plan.placement.start, 4);
  gpus[0].instances.push_back(Busy(m, "1g.10gb", plan.placement.start));
  Plan four = PlanRequest(gpus, GpuRequest::Mig("4g.40gb")).value();
  EXPECT_EQ(four.destroy, std::vector<int>{0});
  // The baseline reuses whatever it finds.
  gpus[0].instances.pop_back();
  EXPECT_EQ(
      PlanRequest(gpus, GpuRequest::Mig("1g.10gb"), PlacementRule::kLowestStart).value().reuse, 0);
}

TEST(PlanRequestTest, ReusesOnTheFullestGpu) {
  // GPU 0 holds only an idle 1g.10gb: once that goes, it is a whole 7g again. GPU 1's idle
  // 1g.10gb sits among busy instances, where its slice is of little use to anyone else.
  std::vector<MigGpu> gpus = {
      Gpu(0, H100(), {Idle(H100(), "1g.10gb", 0)}),
      Gpu(1, H100(),
          {Busy(H100(), "4g.40gb", 0), Busy(H100(), "2g.20gb", 4), Idle(H100(), "1g.10gb", 6)})};
  Plan plan = PlanRequest(gpus, GpuRequest::Mig("1g.10gb")).value();
  EXPECT_EQ(plan.gpu, 1);
  EXPECT_EQ(plan.reuse, 2);
}

TEST(PlanRequestTest, DoesNotReuseWhereThatRulesOutALargerProfile) {
  const gpu::MigModel& m = H100();
  // Reusing GPU 0's idle 1g.10gb would keep a job on a GPU that can otherwise take a 7g.80gb;
  // creating one at GPU 1's free slices 4-7 only costs a 3g.40gb there.
  std::vector<MigGpu> gpus = {Gpu(0, m, {Idle(m, "1g.10gb", 0)}),
                              Gpu(1, m, {Busy(m, "3g.40gb", 0)})};
  Plan plan = PlanRequest(gpus, GpuRequest::Mig("1g.10gb")).value();
  EXPECT_EQ(plan.gpu, 1);
  EXPECT_FALSE(plan.reuse.has_value());
  EXPECT_TRUE(plan.destroy.empty());
  // The baseline reuses whatever it finds first.
  EXPECT_EQ(
      PlanRequest(gpus, GpuRequest::Mig("1g.10gb"), PlacementRule::kLowestStart).value().reuse, 0);
}

TEST(PlanRequestTest, NeverReusesABusyInstance) {
  std::vector<MigGpu> gpus = {Gpu(0, H100(), {Busy(H100(), "1g.10gb", 0)})};
  for (PlacementRule rule : {PlacementRule::kGpufrac, PlacementRule::kLowestStart}) {
    Plan plan = PlanRequest(gpus, GpuRequest::Mig("1g.10gb"), rule).value();
    EXPECT_FALSE(plan.reuse.has_value());
    EXPECT_TRUE(plan.destroy.empty());
    EXPECT_NE(plan.placement.start, 0);
  }
  // An idle instance of another profile is not reused either.
  gpus = {Gpu(0, H100(), {Idle(H100(), "1g.20gb", 0)})};
  EXPECT_FALSE(PlanRequest(gpus, GpuRequest::Mig("1g.10gb")).value().reuse.has_value());
}

TEST(PlanRequestTest, KeepsA4gCreatableWhereLowestStartDoesNot) {
  const gpu::MigModel& m = H100();
  std::vector<MigGpu> gpus = {Gpu(0, m)};
  // A 3g.40gb at slices 0-3 rules out the only 4g.40gb placement; at 4-7 it leaves it.
  Plan ours = PlanRequest(gpus, GpuRequest::Mig("3g.40gb")).value();
  Plan lowest = PlanRequest(gpus, GpuRequest::Mig("3g.40gb"), PlacementRule::kLowestStart).value();
  EXPECT_EQ(ours.placement.start, 4);
  EXPECT_EQ(lowest.placement.start, 0);

  std::vector<MigGpu> after_ours = {Gpu(0, m, {Busy(m, "3g.40gb", ours.placement.start)})};
  std::vector<MigGpu> after_lowest = {Gpu(0, m, {Busy(m, "3g.40gb", lowest.placement.start)})};
  Plan four = PlanRequest(after_ours, GpuRequest::Mig("4g.40gb")).value();
  EXPECT_EQ(four.placement.start, 0);
  EXPECT_EQ(PlanRequest(after_lowest, GpuRequest::Mig("4g.40gb"), PlacementRule::kLowestStart)
                .status()
                .code(),
            StatusCode::kResourceExhausted);
}

TEST(PlanRequestTest, SmallInstanceGoesWhereItCostsTheLeast) {
  const gpu::MigModel& m = H100();
  std::vector<MigGpu> gpus = {Gpu(0, m)};
  // Slices 4 and 5 are the single slices whose use leaves the 4g.40gb and strands nothing
  // (slice 6 would also leave all three 2g.20gb, but slice 7 to no profile); the lower is taken.
  EXPECT_EQ(PlanRequest(gpus, GpuRequest::Mig("1g.10gb")).value().placement.start, 4);
  EXPECT_EQ(PlanRequest(gpus, GpuRequest::Mig("1g.10gb"), PlacementRule::kLowestStart)
                .value()
                .placement.start,
            0);
}

TEST(PlanRequestTest, PacksBeforeSpreading) {
  const gpu::MigModel& m = H100();
  // GPU 0 is empty (it can still take a 7g.80gb); GPU 1 already serves a 3g.40gb.
  std::vector<MigGpu> gpus = {Gpu(0, m), Gpu(1, m, {Busy(m, "3g.40gb", 0)})};
  Plan ours = PlanRequest(gpus, GpuRequest::Mig("1g.10gb")).value();
  EXPECT_EQ(ours.gpu, 1);
  EXPECT_GE(ours.placement.start, 4);
  Plan lowest = PlanRequest(gpus, GpuRequest::Mig("1g.10gb"), PlacementRule::kLowestStart).value();
  EXPECT_EQ(lowest.gpu, 0);
  EXPECT_EQ(lowest.placement.start, 0);
}

TEST(PlanRequestTest, DestroysIdleInstancesOnlyWhenNeeded) {
  const gpu::MigModel& m = H100();
  // A 3g.40gb fits at 4-7 next to the idle 2g.20gb: nothing is destroyed.
  std::vector<MigGpu> gpus = {Gpu(0, m, {Idle(m, "2g.20gb", 0)})};
  Plan plan = PlanRequest(gpus, GpuRequest::Mig("3g.40gb")).value();
  EXPECT_TRUE(plan.destroy.empty());
  EXPECT_EQ(plan.placement.start, 4);
  // A 7g.80gb needs every slice: the idle 2g.20gb goes.
  plan = PlanRequest(gpus, GpuRequest::Mig("7g.80gb")).value();
  EXPECT_EQ(plan.destroy, std::vector<int>{0});
  EXPECT_EQ(plan.placement.start, 0);
}

TEST(PlanRequestTest, DestroysIdleInstancesOnlyWhenNothingElseServes) {
  const gpu::MigModel& m = H100();
  // GPU 0's slices 4-7 hold an idle 3g.40gb; GPU 1 is empty. Destroying the idle 3g.40gb would
  // keep GPU 1 whole, but free slices can serve the 2g.20gb, so nothing is destroyed (lazy
  // destruction: creating an instance takes seconds on a real GPU, and the idle one may be
  // reused). Both rules agree.
  std::vector<MigGpu> gpus = {Gpu(0, m, {Busy(m, "4g.40gb", 0), Idle(m, "3g.40gb", 4)}), Gpu(1, m)};
  for (PlacementRule rule : {PlacementRule::kGpufrac, PlacementRule::kLowestStart}) {
    Plan plan = PlanRequest(gpus, GpuRequest::Mig("2g.20gb"), rule).value();
    EXPECT_EQ(plan.gpu, 1);
    EXPECT_TRUE(plan.destroy.empty());
  }
  // Once GPU 1 is busy too, the idle 3g.40gb's slices are needed, and it goes.
  gpus[1] = Gpu(1, m, {Busy(m, "7g.80gb", 0)});
  Plan plan = PlanRequest(gpus, GpuRequest::Mig("2g.20gb")).value();
  EXPECT_EQ(plan.gpu, 0);
  EXPECT_EQ(plan.placement.start, 4);
  EXPECT_EQ(plan.destroy, std::vector<int>{1});
}

TEST(PlanRequestTest, DestroysTheFewestIdleSlices) {
  const gpu::MigModel& m = H100();
  // A 2g.20gb can only go at slices 4-5 on either GPU. On GPU 0 that destroys an idle 3g.40gb
  // (4 slices), on GPU 1 two idle 1g.10gb (2 slices); GPU 1's idle 1g.10gb at slice 6 is not in
  // the way and stays.
  std::vector<MigGpu> gpus = {
      Gpu(0, m, {Busy(m, "4g.40gb", 0), Idle(m, "3g.40gb", 4)}),
      Gpu(1, m,
          {Busy(m, "4g.40gb", 0), Idle(m, "1g.10gb", 4), Idle(m, "1g.10gb", 5),
           Idle(m, "1g.10gb", 6)}),
  };
  for (PlacementRule rule : {PlacementRule::kGpufrac, PlacementRule::kLowestStart}) {
    Plan plan = PlanRequest(gpus, GpuRequest::Mig("2g.20gb"), rule).value();
    EXPECT_EQ(plan.gpu, 1);
    EXPECT_EQ(plan.placement.start, 4);
    EXPECT_EQ(plan.destroy, (std::vector<int>{1, 2}));
    EXPECT_FALSE(plan.reuse.has_value());
  }
}

TEST(PlanRequestTest, DemandWeighsWhatAPlacementRulesOut) {
  const gpu::MigModel& m = H100();
  // GPU 0 is empty; GPU 1 serves a 3g.40gb at slices 4-7, so a 1g.10gb there takes one of the
  // slices 0-3 and rules out its 4g.40gb (and a 3g.40gb and a 2g.20gb); on GPU 0 it rules out
  // the 7g.80gb (and a 3g.40gb).
  std::vector<MigGpu> gpus = {Gpu(0, m), Gpu(1, m, {Busy(m, "3g.40gb", 4)})};
  // Without demand a larger profile always counts more: GPU 0 keeps its 7g.80gb.
  EXPECT_EQ(PlanRequest(gpus, GpuRequest::Mig("1g.10gb")).value().gpu, 1);

  // Nobody asks for 7g.80gb, many for 4g.40gb and 2g.20gb: GPU 1 keeps its 4g.40gb.
  ProfileDemand no_7g{.model = &m, .weight = {}};
  no_7g.weight[Index(m, "1g.10gb")] = 5;
  no_7g.weight[Index(m, "2g.20gb")] = 3;
  no_7g.weight[Index(m, "4g.40gb")] = 3;
  std::vector<ProfileDemand> demand = {no_7g};
  Plan plan =
      PlanRequest(gpus, GpuRequest::Mig("1g.10gb"), PlacementRule::kGpufrac, demand).value();
  EXPECT_EQ(plan.gpu, 0);
  // And on GPU 0, where it does not break the 4g.40gb either.
  EXPECT_GE(plan.placement.start, 4);

  // Mostly 7g.80gb: GPU 0 keeps it, as without demand.
  ProfileDemand big{.model = &m, .weight = {}};
  big.weight[Index(m, "7g.80gb")] = 1;
  demand = {big};
  EXPECT_EQ(
      PlanRequest(gpus, GpuRequest::Mig("1g.10gb"), PlacementRule::kGpufrac, demand).value().gpu,
      1);

  // Demand for another model, or all zero, is no demand.
  ProfileDemand other{.model = &A30(), .weight = {}};
  other.weight[0] = 1;
  ProfileDemand zero{.model = &m, .weight = {}};
  for (const ProfileDemand& d : {other, zero}) {
    demand = {d};
    EXPECT_EQ(
        PlanRequest(gpus, GpuRequest::Mig("1g.10gb"), PlacementRule::kGpufrac, demand).value().gpu,
        1);
  }
  // The baseline ignores demand.
  demand = {no_7g};
  EXPECT_EQ(PlanRequest(gpus, GpuRequest::Mig("1g.10gb"), PlacementRule::kLowestStart, demand)
                .value()
                .gpu,
            0);
  EXPECT_EQ(PlanRequest(gpus, GpuRequest::Mig("1g.10gb"), PlacementRule::kLowestStart, demand)
                .value()
                .placement.start,
            0);
}

// Serves `profiles` one after another on one empty GPU of `model` under `rule`, every instance
// staying busy (arrivals only). Returns the placements as "1g.10gb@6 3g.40gb@0 ...", ending
// with "!" and the profile that found no room, if one did not.
std::string ServeInOrder(const gpu::MigModel& model, const std::vector<std::string>& profiles,
                         PlacementRule rule = PlacementRule::kGpufrac) {
  std::vector<MigGpu> gpus = {Gpu(0, model)};
  std::string layout;
  for (const std::string& name : profiles) {
    if (!layout.empty()) layout += ' ';
    StatusOr<Plan> plan = PlanRequest(gpus, GpuRequest::Mig(name), rule);
    if (!plan.ok()) return layout + "!" + name;
    EXPECT_FALSE(plan->reuse.has_value());
    EXPECT_TRUE(plan->destroy.empty());
    gpus[0].instances.push_back(Busy(model, name, plan->placement.start));
    layout += name + "@" + std::to_string(plan->placement.start);
  }
  return layout;
}

TEST(PlanRequestTest, DoesNotStrandSliceSeven) {
  const gpu::MigModel& m = H100();
  // Issue 19: a first 1g.10gb at slice 6 leaves slice 7 to no profile (1g.20gb, 3g.40gb and
  // 7g.80gb, the only ones that use it, all use slice 6 too), so the 1g.20gb found slices 5 and
  // 7 free and no room. The driver's lowest start serves all four.
  std::vector<std::string> issue = {"1g.10gb", "1g.10gb", "3g.40gb", "1g.20gb"};
  EXPECT_EQ(ServeInOrder(m, issue), "1g.10gb@4 1g.10gb@5 3g.40gb@0 1g.20gb@6");
  EXPECT_EQ(ServeInOrder(m, issue, PlacementRule::kLowestStart),
            "1g.10gb@0 1g.10gb@1 3g.40gb@4 1g.20gb@2");
  // Slice 6 is still taken when nothing else is free, and once the GPU's compute slices are all
  // in use a free slice 7 strands nothing: no profile could use it wherever the instances were.
  std::vector<MigGpu> gpus = {Gpu(0, m, {Busy(m, "4g.40gb", 0), Busy(m, "2g.20gb", 4)})};
  EXPECT_EQ(PlanRequest(gpus, GpuRequest::Mig("1g.10gb")).value().placement.start, 6);
  gpus = {Gpu(0, m, {Busy(m, "4g.40gb", 0), Busy(m, "2g.20gb", 4)}), Gpu(1, m)};
  EXPECT_EQ(PlanRequest(gpus, GpuRequest::Mig("1g.10gb")).value().gpu, 0);
  // With a compute slice left over, the empty GPU takes it rather than strand slice 7.
  gpus = {Gpu(0, m, {Busy(m, "3g.40gb", 0), Busy(m, "2g.20gb", 4)}), Gpu(1, m)};
  EXPECT_EQ(PlanRequest(gpus, GpuRequest::Mig("1g.10gb")).value().gpu, 1);
}

TEST(PlanRequestTest, NoEightSliceModelStrandsSliceSeven) {
  // The issue's sequence on every model with H100's slice map (A100, H100, H200, B200, ...).
  int models = 0;
  for (const gpu::MigModel& m : gpu::AllMigModels()) {
    if (m.memory_slices != 8) continue;
    ++models;
    // The profile of `compute` and `memory` slices, without media extensions.
    auto name = [&](int compute, int memory) {
      for (int p = 0; p < m.profile_count; ++p) {
        const gpu::MigProfile& profile = m.profiles[p];
        if (profile.compute_slices == compute && profile.memory_slices == memory &&
            !profile.media_extensions) {
          return Name(m, p);
        }
      }
      ADD_FAILURE() << "no " << compute << "g profile of " << memory << " memory slices";
      return std::string();
    };
    std::string layout = ServeInOrder(m, {name(1, 1), name(1, 1), name(3, 4), name(1, 2)});
    EXPECT_EQ(layout.find('!'), std::string::npos) << m.model->short_name << ": " << layout;
  }
  EXPECT_GE(models, 4);
}

TEST(PlanRequestTest, ServesArrivalSequencesThatALegalLayoutHolds) {
  // Each sequence fits one GPU in some legal layout; gpufrac serves it whole in arrival order.
  const std::vector<std::vector<std::string>> h100 = {
      {"1g.10gb", "4g.40gb", "1g.20gb", "1g.10gb"},
      {"1g.10gb", "1g.10gb", "4g.40gb", "1g.20gb"},
      {"1g.10gb", "2g.20gb", "2g.20gb", "1g.20gb", "1g.10gb"},
      {"1g.10gb", "1g.20gb", "1g.20gb", "1g.20gb", "1g.10gb"},
      {"1g.10gb", "3g.40gb", "1g.10gb", "1g.20gb"},
      {"2g.20gb", "2g.20gb", "1g.10gb", "1g.20gb"},
      {"1g.10gb", "1g.10gb", "1g.10gb", "1g.10gb", "1g.10gb", "1g.10gb", "1g.10gb"},
      {"1g.20gb", "1g.20gb", "1g.20gb", "1g.20gb"},
      {"3g.40gb", "4g.40gb"},
  };
  for (const std::vector<std::string>& sequence : h100) {
    std::string layout = ServeInOrder(H100(), sequence);
    EXPECT_EQ(layout.find('!'), std::string::npos) << layout;
  }
  const std::vector<std::vector<std::string>> a30 = {
      {"1g.6gb", "2g.12gb", "1g.6gb"},
      {"1g.6gb", "1g.6gb", "2g.12gb"},
      {"1g.6gb+me", "2g.12gb", "1g.6gb"},
  };
  for (const std::vector<std::string>& sequence : a30) {
    std::string layout = ServeInOrder(A30(), sequence);
    EXPECT_EQ(layout.find('!'), std::string::npos) << layout;
  }
}

TEST(PlanRequestTest, NeverDestroysABusyInstance) {
  const gpu::MigModel& m = H100();
  // Everything is idle but one busy 1g.10gb: a 7g.80gb would need it gone.
  std::vector<MigGpu> gpus = {
      Gpu(0, m, {Idle(m, "3g.40gb", 0), Busy(m, "1g.10gb", 4), Idle(m, "1g.10gb", 5)})};
  for (PlacementRule rule : {PlacementRule::kGpufrac, PlacementRule::kLowestStart}) {
    StatusOr<Plan> plan = PlanRequest(gpus, GpuRequest::Mig("7g.80gb"), rule);
    EXPECT_EQ(plan.status().code(), StatusCode::kResourceExhausted);
    // A 4g.40gb can have slices 0-3 once the idle 3g.40gb is destroyed.
    Plan four = PlanRequest(gpus, GpuRequest::Mig("4g.40gb"), rule).value();
    EXPECT_EQ(four.destroy, std::vector<int>{0});
  }
}

TEST(PlanRequestTest, ExhaustedWhenBusyInstancesFillTheGpus) {
  const gpu::MigModel& m = H100();
  std::vector<MigGpu> gpus = {Gpu(0, m, {Busy(m, "4g.40gb", 0), Busy(m, "3g.40gb", 4)}),
                              Gpu(1, m, {Busy(m, "7g.80gb", 0)})};
  Status status = PlanRequest(gpus, GpuRequest::Memory(kGiB)).status();
  EXPECT_EQ(status.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(status.message().find("1g.10gb"), std::string::npos) << status;
  EXPECT_EQ(status.message().find('\n'), std::string::npos);
}

TEST(PlanRequestTest, RespectsTheMaximumCount) {
  const gpu::MigModel& m = H100();
  // There is one set of media engines: a second 1g.10gb+me cannot be created, free slices or not.
  std::vector<MigGpu> gpus = {Gpu(0, m, {Busy(m, "1g.10gb+me", 0)})};
  EXPECT_EQ(PlanRequest(gpus, GpuRequest::Mig("1g.10gb+me")).status().code(),
            StatusCode::kResourceExhausted);
  EXPECT_TRUE(PlanRequest(gpus, GpuRequest::Mig("1g.10gb")).ok());
}

TEST(PlanRequestTest, WholeGpusAndUnknownProfilesAreErrors) {
  std::vector<MigGpu> gpus = {Gpu(0, H100())};
  GpuRequest whole = GpuRequest::Whole(1);
  EXPECT_EQ(PlanRequest(gpus, whole).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(PlanRequest(gpus, GpuRequest::Mig("9g.99gb")).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(PlanRequest(gpus, GpuRequest::Memory(100 * kGiB)).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(PlanRequest({}, GpuRequest::Memory(kGiB)).status().code(),
            StatusCode::kFailedPrecondition);
}

TEST(PlanRequestTest, MixedModels) {
  const gpu::MigModel& a30 = A30();
  const gpu::MigModel& h100 = H100();
  std::vector<MigGpu> gpus = {Gpu(0, a30), Gpu(1, h100)};

  // 5 GiB: 1g.6gb on the A30 wastes less than 1g.10gb on the H100.
  Plan plan = PlanRequest(gpus, GpuRequest::Memory(5 * kGiB)).value();
  EXPECT_EQ(plan.gpu, 0);
  EXPECT_EQ(Name(a30, plan.profile), "1g.6gb");
  // A profile only one model has goes to that model.
  plan = PlanRequest(gpus, GpuRequest::Mig("2g.20gb")).value();
  EXPECT_EQ(plan.gpu, 1);
  EXPECT_EQ(Name(h100, plan.profile), "2g.20gb");
  plan = PlanRequest(gpus, GpuRequest::Mig("2g.12gb")).value();
  EXPECT_EQ(plan.gpu, 0);
  // 30 GiB is more than an A30 has, but an H100's 3g.40gb holds it.
  plan = PlanRequest(gpus, GpuRequest::Memory(30 * kGiB)).value();
  EXPECT_EQ(plan.gpu, 1);
  EXPECT_EQ(Name(h100, plan.profile), "3g.40gb");
  // --gpu-model restricts the choice.
  GpuRequest on_h100 = GpuRequest::Memory(5 * kGiB);
  on_h100.gpu_model = "h100-80gb";
  plan = PlanRequest(gpus, on_h100).value();
  EXPECT_EQ(plan.gpu, 1);
  EXPECT_EQ(Name(h100, plan.profile), "1g.10gb");
  on_h100.gpu_model = "B200";
  EXPECT_EQ(PlanRequest(gpus, on_h100).status().code(), StatusCode::kNotFound);

  // The A30 full of busy instances: a 1g.6gb cannot be served, a memory request moves on to the
  // H100.
  gpus[0].instances = {Busy(a30, "4g.24gb", 0)};
  EXPECT_EQ(PlanRequest(gpus, GpuRequest::Mig("1g.6gb")).status().code(),
            StatusCode::kResourceExhausted);
  EXPECT_EQ(PlanRequest(gpus, GpuRequest::Memory(5 * kGiB)).value().gpu, 1);
  // The lowest-start baseline takes the first GPU with room.
  gpus[0].instances.clear();
  EXPECT_EQ(
      PlanRequest(gpus, GpuRequest::Memory(5 * kGiB), PlacementRule::kLowestStart).value().gpu, 0);
  gpus[1].instances = {Busy(h100, "1g.10gb", 0)};
  EXPECT_EQ(PlanRequest(gpus, GpuRequest::Mig("1g.10gb"), PlacementRule::kLowestStart).value().gpu,
            1);
}

TEST(PlanRequestTest, Deterministic) {
  const gpu::MigModel& m = H100();
  std::vector<MigGpu> gpus = {Gpu(0, m, {Busy(m, "2g.20gb", 2), Idle(m, "1g.10gb", 6)}),
                              Gpu(1, m, {Idle(m, "3g.40gb", 4)}), Gpu(2, m)};
  Plan a = PlanRequest(gpus, GpuRequest::Mig("2g.20gb")).value();
  for (int i = 0; i < 10; ++i) {
    Plan b = PlanRequest(gpus, GpuRequest::Mig("2g.20gb")).value();
    EXPECT_EQ(a.gpu, b.gpu);
    EXPECT_EQ(a.placement.start, b.placement.start);
    EXPECT_EQ(a.destroy, b.destroy);
  }
}

}  // namespace
}  // namespace gpufrac::mig
