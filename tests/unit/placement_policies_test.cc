// The policies' rules on small hand-made nodes: the typical workload's cut, FGD's fragmentation
// measure, and the tiers and preferences of each baseline as the FGD paper's simulator defines
// them.
#include <gtest/gtest.h>

#include "placement/cluster.h"
#include "placement/fit.h"
#include "placement/fragmentation.h"
#include "placement/policies.h"
#include "placement/typical_workload.h"

namespace gpufrac::placement {
namespace {

constexpr uint64_t kGiB = uint64_t{1} << 30;

Request Share(uint32_t milli, uint64_t cpu = 1000) { return {cpu, kGiB, 1, milli, 0, 0}; }
Request Whole(uint32_t count, uint64_t cpu = 1000) { return {cpu, kGiB, count, 1000, 0, 0}; }
Request CpuOnly(uint64_t cpu) { return {cpu, kGiB, 0, 0, 0, 0}; }

Node MakeNode(std::vector<uint32_t> free_milli, uint64_t cpu_free = 64000) {
  Node n;
  n.spec = {"n", 64000, 256 * kGiB, 0, static_cast<int>(free_milli.size()), 0};
  n.cpu_free = cpu_free;
  n.memory_free = 256 * kGiB;
  for (size_t g = 0; g < free_milli.size(); ++g) n.gpu_free_milli[g] = free_milli[g];
  return n;
}

std::vector<Request> Repeat(const Request& r, int times) { return std::vector<Request>(times, r); }

TEST(TypicalWorkload, KeepsTheMostFrequentKindsUpToTheOneCrossingTheCoverage) {
  std::vector<Request> in;
  for (auto [r, n] :
       {std::pair{Share(500), 50}, {Whole(1), 30}, {CpuOnly(2000), 15}, {Whole(8), 5}}) {
    auto more = Repeat(r, n);
    in.insert(in.end(), more.begin(), more.end());
  }
  TypicalWorkload w = TypicalWorkload::FromRequests(in, 0.95);
  ASSERT_EQ(w.classes().size(), 3u);  // 50 + 30 + 15 = 95 reaches 95%; Whole(8) is left out.
  EXPECT_EQ(w.classes()[0].request.gpu_milli, 500u);
  EXPECT_NEAR(w.classes()[0].popularity, 50.0 / 95, 1e-12);
  EXPECT_NEAR(w.classes()[2].popularity, 15.0 / 95, 1e-12);
  // Host memory is not part of a kind.
  Request big_memory = Share(500);
  big_memory.memory_bytes = 100 * kGiB;
  in.push_back(big_memory);
  EXPECT_EQ(TypicalWorkload::FromRequests(in, 0.5).classes().size(), 1u);
}

TEST(Fragmentation, CountsFreeShareTheTypicalWorkloadCannotUse) {
  Node n = MakeNode({1000, 300});
  EXPECT_DOUBLE_EQ(NodeFragmentation(n, TypicalWorkload::FromRequests({Share(500)})), 300);
  EXPECT_DOUBLE_EQ(NodeFragmentation(n, TypicalWorkload::FromRequests({Whole(1)})), 300);
  // Cannot run at all: every free thousandth is a fragment.
  EXPECT_DOUBLE_EQ(NodeFragmentation(n, TypicalWorkload::FromRequests({Whole(2)})), 1300);
  EXPECT_DOUBLE_EQ(NodeFragmentation(n, TypicalWorkload::FromRequests({CpuOnly(1)})), 1300);
  EXPECT_DOUBLE_EQ(
      NodeFragmentation(MakeNode({1000, 300}, 500), TypicalWorkload::FromRequests({Share(500)})),
      1300);
  // Weighted by popularity.
  TypicalWorkload mix = TypicalWorkload::FromRequests({Share(500), Whole(2)}, 1.0);
  EXPECT_DOUBLE_EQ(NodeFragmentation(n, mix), 0.5 * 300 + 0.5 * 1300);
}

TEST(Fragmentation, AfterAHypotheticalPlacementMatchesARecount) {
  TypicalWorkload mix =
      TypicalWorkload::FromRequests({Share(500), Share(200), Whole(1), Whole(2), CpuOnly(8000)}, 1);
  Node n = MakeNode({1000, 700, 450, 1000}, 10000);
  FragmentationView view(n, mix);
  for (int g = 0; g < 4; ++g) {
    Node after = n;
    after.gpu_free_milli[g] -= 400;
    after.cpu_free -= 3000;
    EXPECT_DOUBLE_EQ(view.After(3000, GpuSet{1} << g, 400), NodeFragmentation(after, mix)) << g;
  }
  Node after = n;
  after.gpu_free_milli[0] = after.gpu_free_milli[3] = 0;
  EXPECT_DOUBLE_EQ(view.After(0, 0b1001, 1000), NodeFragmentation(after, mix));
}

TEST(FgdPolicy, AvoidsLeavingAGpuTooSmallForTheTypicalWorkload) {
  TypicalWorkload w = TypicalWorkload::FromRequests({Share(500)});
  auto fgd = NewFgdPolicy(&w);
  Node empty = MakeNode({1000});
  Node partly = MakeNode({600});
  // 200 on the partly used GPU leaves 400, useless to a 500 request: 100*sigmoid(-0.4) = 40.
  EXPECT_EQ(fgd->Score(partly, Share(200)), 40);
  EXPECT_EQ(fgd->Score(empty, Share(200)), 50);  // No change in fragmentation.
  // On a node with both, it picks the GPU that keeps a 500-sized hole.
  Node both = MakeNode({600, 1000});
  EXPECT_EQ(fgd->ChooseGpus(both, Share(200)), 0b10u);
  EXPECT_EQ(fgd->ChooseGpus(both, Share(100)), 0b01u);  // 500 left still fits the typical pod.
}

TEST(GpuPackingPolicy, FillsPartlyUsedGpusThenFreeGpusThenIdleNodes) {
  auto packing = NewGpuPackingPolicy();
  EXPECT_EQ(packing->Score(MakeNode({1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000}), Share(300)),
            25);  // Idle 8-GPU node: max(33 - 8, 8).
  EXPECT_EQ(packing->Score(MakeNode({1000, 1000}), Share(300)), 31);
  EXPECT_EQ(packing->Score(MakeNode({1000, 500}), Whole(1)), 49);  // One free GPU taken.
  // Only a partly used GPU: 100 - floor(floor(500*100/1000) / 10) = 95.
  EXPECT_EQ(packing->Score(MakeNode({1000, 500}), Share(300)), 95);
  EXPECT_EQ(packing->Score(MakeNode({1000, 500}), CpuOnly(1000)), 0);
}

TEST(GpuClusteringPolicy, GroupsWorkloadsOfTheSameKind) {
  auto clustering = NewGpuClusteringPolicy();
  Node same = MakeNode({500, 1000, 1000, 1000, 1000, 1000, 1000, 1000});
  same.gpu_workloads[0] = 1;  // One shared-GPU workload.
  Node mixed = same;
  mixed.gpu_workloads[1] = 1;
  Node idle = MakeNode({1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000});
  // base = 25 * (8000 - free) / 8000.
  EXPECT_EQ(clustering->Score(same, Share(100)), 1 + 75);
  EXPECT_EQ(clustering->Score(mixed, Share(100)), 1 + 50);
  EXPECT_EQ(clustering->Score(idle, Share(100)), 0 + 25);
  EXPECT_EQ(clustering->Score(same, Whole(1)), 1 + 0);
  EXPECT_EQ(clustering->Score(same, CpuOnly(100)), 0);
}

TEST(BestFitAndDotProduct, PreferTheNodeWithLessLeftOver) {
  auto bestfit = NewBestFitPolicy();
  auto dotprod = NewDotProductPolicy();
  Node tight = MakeNode({1000, 0}, 16000);
  Node roomy = MakeNode({1000, 1000}, 64000);
  EXPECT_GT(bestfit->Score(tight, Whole(1)), bestfit->Score(roomy, Whole(1)));
  EXPECT_GT(dotprod->Score(tight, Whole(1)), dotprod->Score(roomy, Whole(1)));
  // floor(100 * (1 - (0.5 * 15000/128000 + 0.5 * 0/8000))) = 94.
  EXPECT_EQ(bestfit->Score(tight, Whole(1)), 94);
}

TEST(GpufracPolicy, PutsASharedRequestWhereItsLeftoverCanStillBeFilled) {
  std::vector<Request> in;
  for (uint32_t milli : {470, 320, 650}) {
    auto more = Repeat(Share(milli), 10);
    in.insert(in.end(), more.begin(), more.end());
  }
  TypicalWorkload w = TypicalWorkload::FromRequests(in, 1.0);
  ModelNames models;
  ASSERT_TRUE(models.Intern("A").ok());
  StatusOr<Cluster> cluster = Cluster::Create(models, {{"n", 64000, 256 * kGiB, 0, 2, 0}});
  ASSERT_TRUE(cluster.ok());
  auto gpufrac = NewGpufracPolicy(w, *cluster);
  // GPU 0 holds a 470 (530 free), GPU 1 a 650 (350 free). A 320 on GPU 0 leaves 210, which no
  // common size fills; on GPU 1 it fills the GPU to 970. Best fit would agree here, FGD not.
  Node n = MakeNode({530, 350});
  EXPECT_EQ(gpufrac->ChooseGpus(n, Share(320)), 0b10u);
  // A 470 fits only GPU 0 and pairs with the 470 already there.
  EXPECT_EQ(gpufrac->ChooseGpus(n, Share(470)), 0b01u);
}

TEST(GpufracPolicy, LeavesModelsThatConstrainedRequestsNeedToThem) {
  ModelNames models;
  ASSERT_TRUE(models.Intern("scarce").ok());
  ASSERT_TRUE(models.Intern("plenty").ok());
  StatusOr<Cluster> cluster = Cluster::Create(
      models, {{"a", 64000, 256 * kGiB, 0, 8, 0}, {"b", 64000, 256 * kGiB, 1, 8, 0}});
  ASSERT_TRUE(cluster.ok());
  Request needs_scarce = Whole(1);
  needs_scarce.models = ModelSet{1} << 0;
  std::vector<Request> in = Repeat(Whole(1), 6);
  auto constrained = Repeat(needs_scarce, 4);
  in.insert(in.end(), constrained.begin(), constrained.end());
  TypicalWorkload w = TypicalWorkload::FromRequests(in, 1.0);
  auto gpufrac = NewGpufracPolicy(w, *cluster);
  auto fgd = NewFgdPolicy(&w);
  const Node& scarce = cluster->node(0);
  const Node& plenty = cluster->node(1);
  // Both prefer "plenty" for an unconstrained request (FGD because the constrained class counts
  // all of plenty's free share as fragment), gpufrac by a wider margin: the pressure term.
  double fgd_margin = fgd->Score(plenty, Whole(1)) - fgd->Score(scarce, Whole(1));
  double gpufrac_margin = gpufrac->Score(plenty, Whole(1)) - gpufrac->Score(scarce, Whole(1));
  EXPECT_GT(fgd_margin, 0);
  EXPECT_GT(gpufrac_margin, fgd_margin);
  // The constrained request itself is not charged for the pressure it creates.
  EXPECT_EQ(gpufrac->Score(scarce, needs_scarce), fgd->Score(scarce, needs_scarce));
}

TEST(GpufracPolicy, KeepsCpuForTheGpusThatNeedIt) {
  // Two partly used 8-GPU nodes with 4 whole GPUs free each; "tight" has CPU for only 3 of them
  // (14 cores a GPU), "roomy" for all. A CPU-heavy CPU-only request should go where it strands
  // no GPU; FGD sees no difference (its typical workload's CPU needs are small).
  ModelNames models;
  ASSERT_TRUE(models.Intern("A").ok());
  StatusOr<Cluster> cluster = Cluster::Create(
      models, {{"tight", 96000, 256 * kGiB, 0, 8, 0}, {"roomy", 96000, 256 * kGiB, 0, 8, 0}});
  ASSERT_TRUE(cluster.ok());
  std::vector<Request> in = Repeat(Whole(1, 1000), 8);
  auto cpu = Repeat(CpuOnly(1000), 2);
  in.insert(in.end(), cpu.begin(), cpu.end());
  TypicalWorkload w = TypicalWorkload::FromRequests(in, 1.0);
  auto gpufrac = NewGpufracPolicy(w, *cluster);
  auto fgd = NewFgdPolicy(&w);
  Node tight = MakeNode({0, 0, 0, 0, 1000, 1000, 1000, 1000}, 50000);
  Node roomy = MakeNode({0, 0, 0, 0, 1000, 1000, 1000, 1000}, 90000);
  Request heavy = CpuOnly(30000);  // Leaves tight with 20 cores (1.4 GPUs' worth), roomy 60.
  EXPECT_EQ(fgd->Score(tight, heavy), fgd->Score(roomy, heavy));
  EXPECT_GT(gpufrac->Score(roomy, heavy), gpufrac->Score(tight, heavy));
}

}  // namespace
}  // namespace gpufrac::placement
