// The cluster model, the fit rules and the scheduler: placements take exactly what they ask for,
// never over-commit, ties go to the ranking, and the cached scores always give the same answer
// as scoring every node from scratch.
#include <gtest/gtest.h>

#include <bit>
#include <limits>

#include "common/random.h"
#include "placement/cluster.h"
#include "placement/fit.h"
#include "placement/policies.h"
#include "placement/scheduler.h"

namespace gpufrac::placement {
namespace {

constexpr uint64_t kGiB = uint64_t{1} << 30;

Cluster MakeCluster(const std::vector<std::pair<int, int>>& gpus_and_model,
                    uint64_t cpu_milli = 64000) {
  ModelNames models;
  EXPECT_TRUE(models.Intern("A").ok());
  EXPECT_TRUE(models.Intern("B").ok());
  std::vector<NodeSpec> specs;
  for (size_t i = 0; i < gpus_and_model.size(); ++i) {
    specs.push_back({"n" + std::to_string(i), cpu_milli, 256 * kGiB, gpus_and_model[i].second,
                     gpus_and_model[i].first, 0});
  }
  StatusOr<Cluster> c = Cluster::Create(models, specs);
  EXPECT_TRUE(c.ok()) << c.status();
  return std::move(*c);
}

Request Share(uint32_t milli, uint64_t cpu = 1000) { return {cpu, kGiB, 1, milli, 0, 0}; }
Request Whole(uint32_t count, uint64_t cpu = 1000) { return {cpu, kGiB, count, 1000, 0, 0}; }

TEST(Fit, SharedGpuNeedsOneGpuWithEnoughFreeShare) {
  Cluster c = MakeCluster({{2, 0}});
  c.Apply({0, 0b01}, Share(700));
  c.Apply({0, 0b10}, Share(500));
  EXPECT_TRUE(Fits(c.node(0), Share(500)));
  EXPECT_EQ(GpusThatFit(c.node(0), Share(500)), 0b10u);
  EXPECT_FALSE(Fits(c.node(0), Share(501)));
  EXPECT_FALSE(Fits(c.node(0), Whole(1)));
}

TEST(Fit, WholeGpusMustBeCompletelyFreeAndOfAnAllowedModel) {
  Cluster c = MakeCluster({{4, 1}});
  c.Apply({0, 0b0100}, Share(10));
  EXPECT_TRUE(Fits(c.node(0), Whole(3)));
  EXPECT_FALSE(Fits(c.node(0), Whole(4)));
  EXPECT_EQ(LowestGpus(GpusThatFit(c.node(0), Whole(3)), 3), 0b1011u);
  Request only_a = Whole(1);
  only_a.models = ModelSet{1} << 0;
  EXPECT_FALSE(Fits(c.node(0), only_a));
  only_a.models |= ModelSet{1} << 1;
  EXPECT_TRUE(Fits(c.node(0), only_a));
}

TEST(Fit, HostCpuAndMemoryMustFitEvenForCpuOnlyRequests) {
  Cluster c = MakeCluster({{1, 0}}, 4000);
  EXPECT_TRUE(Fits(c.node(0), Request{4000, kGiB, 0, 0, 0, 0}));
  EXPECT_FALSE(Fits(c.node(0), Request{4001, kGiB, 0, 0, 0, 0}));
  EXPECT_FALSE(Fits(c.node(0), Request{1, 257 * kGiB, 0, 0, 0, 0}));
}

TEST(Fit, TightestGpuIsTheFullestOneThatFits) {
  Cluster c = MakeCluster({{4, 0}});
  c.Apply({0, 0b0010}, Share(600));
  c.Apply({0, 0b0100}, Share(300));
  c.Apply({0, 0b1000}, Share(600));
  EXPECT_EQ(TightestGpus(c.node(0), Share(400)), 0b0010u);  // 400 free; GPU 3 ties, lower wins.
  EXPECT_EQ(TightestGpus(c.node(0), Share(500)), 0b0100u);
  EXPECT_EQ(TightestGpus(c.node(0), Whole(1)), 0b0001u);
}

TEST(Cluster, ApplyAndReleaseRestoreTheNodeExactly) {
  Cluster c = MakeCluster({{8, 0}});
  Node before = c.node(0);
  Request r = Whole(3, 5000);
  c.Apply({0, 0b111000}, r);
  EXPECT_EQ(c.node(0).cpu_free, before.cpu_free - 5000);
  EXPECT_EQ(c.node(0).WholeFreeGpus(), 5);
  EXPECT_EQ(c.GpuMilliAllocated(), 3000u);
  c.Release({0, 0b111000}, r);
  EXPECT_EQ(c.node(0).cpu_free, before.cpu_free);
  EXPECT_EQ(c.node(0).gpu_free_milli, before.gpu_free_milli);
  EXPECT_EQ(c.node(0).gpu_workloads, before.gpu_workloads);
  EXPECT_EQ(c.GpuMilliAllocated(), 0u);
  EXPECT_EQ(c.change_log().size(), 2u);
}

// A decision on a copy of a node (the containers of one pod) sees what the cluster will hold.
TEST(Fit, TakeOnACopyLeavesItAsClusterApplyLeavesTheNode) {
  Cluster c = MakeCluster({{4, 0}});
  Node copy = c.node(0);
  Take(copy, 0b0100, Share(300));
  Take(copy, 0b0011, Whole(2));
  c.Apply({0, 0b0100}, Share(300));
  c.Apply({0, 0b0011}, Whole(2));
  const Node& applied = c.node(0);
  EXPECT_EQ(copy.cpu_free, applied.cpu_free);
  EXPECT_EQ(copy.memory_free, applied.memory_free);
  EXPECT_EQ(copy.gpu_free_milli, applied.gpu_free_milli);
  EXPECT_EQ(copy.gpu_free_memory, applied.gpu_free_memory);
  EXPECT_EQ(copy.gpu_workloads, applied.gpu_workloads);
  EXPECT_EQ(copy.gpu_free_milli[2], 700u);
}

TEST(FitDeathTest, TakeNeverOvercommits) {
  Cluster c = MakeCluster({{1, 0}});
  Node copy = c.node(0);
  Take(copy, 0b1, Share(600));
  EXPECT_DEATH(Take(copy, 0b1, Share(600)), "does not fit");
}

TEST(ClusterDeathTest, APlacementThatDoesNotFitIsNeverApplied) {
  Cluster c = MakeCluster({{1, 0}});
  c.Apply({0, 0b1}, Share(600));
  EXPECT_DEATH(c.Apply({0, 0b1}, Share(600)), "does not fit");
  EXPECT_DEATH(c.Release({0, 0b1}, Share(700)), "frees more");
}

TEST(Cluster, RejectsNodesWithTooManyGpusOrUnknownModels) {
  ModelNames models;
  ASSERT_TRUE(models.Intern("A").ok());
  EXPECT_FALSE(Cluster::Create(models, {{"big", 1, 1, 0, kMaxGpusPerNode + 1, 0}}).ok());
  EXPECT_FALSE(Cluster::Create(models, {{"odd", 1, 1, 5, 1, 0}}).ok());
}

// A policy that scores by a fixed table, to test the scheduler's choice and tie-break alone.
class TablePolicy : public Policy {
 public:
  explicit TablePolicy(std::vector<double> scores) : scores_(std::move(scores)) {}
  std::string_view name() const override { return "table"; }
  double Score(const Node& n, const Request&) override {
    return scores_[std::stoi(n.spec.name.substr(1))];
  }
  GpuSet ChooseGpus(const Node& n, const Request& r) override { return TightestGpus(n, r); }

 private:
  std::vector<double> scores_;
};

TEST(Scheduler, TakesTheBestScoreAndBreaksTiesByRank) {
  Cluster c = MakeCluster({{1, 0}, {1, 0}, {1, 0}, {1, 0}});
  TablePolicy policy({5, 9, 9, 1});
  Scheduler s(&c, &policy, {3, 2, 1, 0});  // Node 2 outranks node 1.
  EXPECT_EQ(s.Choose(Whole(1))->node, 2);
  ASSERT_EQ(s.Place(Whole(1))->node, 2);
  EXPECT_EQ(s.Place(Whole(1))->node, 1);  // Node 2 is full now.
  EXPECT_EQ(s.Place(Whole(1))->node, 0);
  EXPECT_EQ(s.Place(Whole(1))->node, 3);
  EXPECT_FALSE(s.Place(Whole(1)).has_value());
  EXPECT_EQ(c.GpuMilliAllocated(), 4000u);
}

// The choice a scheduler must make, worked out the plain way: every node in rank order, the first
// with the highest score among those the request fits.
std::optional<Placement> ReferenceChoice(const Cluster& c, Policy& policy,
                                         const std::vector<int>& rank, const Request& r) {
  std::vector<int> by_rank(rank.size());
  for (size_t node = 0; node < rank.size(); ++node) by_rank[rank[node]] = static_cast<int>(node);
  std::optional<int> best;
  double best_score = -std::numeric_limits<double>::infinity();
  for (int node : by_rank) {
    if (!Fits(c.node(node), r)) continue;
    double score = policy.Score(c.node(node), r);
    if (!best || score > best_score) {
      best = node;
      best_score = score;
    }
  }
  if (!best) return std::nullopt;
  return Placement{*best, policy.ChooseGpus(c.node(*best), r)};
}

// Random placements and releases on a mixed cluster of 40 nodes: every choice of the cached
// scheduler must equal the plain rescan above, for every policy with fixed scores.
TEST(Scheduler, CachedChoicesEqualAFullRescan) {
  std::vector<Request> kinds = {Share(470),
                                Share(810),
                                Share(230, 30000),
                                Whole(1),
                                Whole(2),
                                Whole(8, 8000),
                                Request{4000, 8 * kGiB, 0, 0, 0, 0}};
  kinds[2].models = ModelSet{1} << 1;
  std::vector<Request> typical_input;
  for (size_t i = 0; i < kinds.size(); ++i) {
    for (size_t k = 0; k <= i; ++k) typical_input.push_back(kinds[i]);
  }
  TypicalWorkload typical = TypicalWorkload::FromRequests(typical_input);
  std::vector<std::pair<int, int>> shapes;
  for (int i = 0; i < 40; ++i) shapes.push_back({std::vector<int>{8, 2, 4, 8, 1, 2}[i % 6], i % 2});
  Random random(7);
  std::vector<int> rank = random.Permutation(40);
  for (std::string_view name : PolicyNames()) {
    if (name == "random") continue;  // Not a function of node state; never cached.
    Cluster cluster = MakeCluster(shapes);
    auto cached_policy = MakePolicy(name, {&typical, 1, &cluster});
    auto reference_policy = MakePolicy(name, {&typical, 1, &cluster});
    ASSERT_TRUE(cached_policy.ok() && reference_policy.ok());
    Scheduler cached(&cluster, cached_policy->get(), rank);
    std::vector<std::pair<Placement, Request>> placed;
    int failures = 0;
    for (int step = 0; step < 1500; ++step) {
      if (!placed.empty() && random.Uniform(4) == 0) {
        size_t victim = random.Uniform(placed.size());
        cached.Release(placed[victim].first, placed[victim].second);
        placed.erase(placed.begin() + static_cast<long>(victim));
        continue;
      }
      const Request& r = kinds[random.Uniform(kinds.size())];
      std::optional<Placement> want = ReferenceChoice(cluster, **reference_policy, rank, r);
      std::optional<Placement> got = cached.Place(r);
      ASSERT_EQ(got.has_value(), want.has_value()) << name << " step " << step;
      if (!got) {
        ++failures;
        continue;
      }
      ASSERT_EQ(got->node, want->node) << name << " step " << step;
      ASSERT_EQ(got->gpus, want->gpus) << name << " step " << step;
      placed.push_back({*got, r});
    }
    EXPECT_GT(placed.size(), 100u) << name;
    EXPECT_GT(failures, 0) << name;  // The cluster filled up at times.
  }
}

TEST(Policies, UnknownNamesAreRejectedWithTheList) {
  StatusOr<std::unique_ptr<Policy>> p = MakePolicy("tetris", {});
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("bestfit"), std::string::npos);
  EXPECT_FALSE(MakePolicy("fgd", {}).ok());  // Needs a typical workload.
}

}  // namespace
}  // namespace gpufrac::placement
