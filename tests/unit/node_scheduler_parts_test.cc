// The queue scheduler's parts, each by itself: the node's GPUs grouped by model and named in
// messages (ModelGroups), a queue's quota arithmetic within a pass (QueueUsage), and one pass's
// reservations (SchedulingPass).
#include <gtest/gtest.h>

#include "node/model_groups.h"
#include "node/queue_usage.h"
#include "node/request_shapes.h"
#include "node/scheduling_pass.h"

namespace gpufrac::node {
namespace {

constexpr uint64_t kGiB = uint64_t{1} << 30;

machine::NodeGpu Gpu(int index, const std::string& model, uint64_t memory,
                     gpu::GpuMode mode = gpu::GpuMode::kShared) {
  return {index, "GPU-" + std::to_string(index), model, memory, kGiB / 2, mode};
}

TEST(ModelGroupsTest, GroupsByModelSmallestFirstAndKnowsEachGpusPlace) {
  auto groups = ModelGroups::Create({Gpu(3, "H100-80GB", 80 * kGiB), Gpu(0, "A30-24GB", 24 * kGiB),
                                     Gpu(1, "H100-80GB", 80 * kGiB)});
  ASSERT_TRUE(groups.ok()) << groups.status().message();
  // By index: 0 (A30), 1, 3 (H100).
  ASSERT_EQ(groups->gpus().size(), 3u);
  EXPECT_EQ(groups->gpus()[2].index, 3);
  ASSERT_EQ(groups->groups().size(), 2u);
  EXPECT_EQ(groups->groups()[0].model, "A30-24GB");
  EXPECT_EQ(groups->groups()[1].members, (std::vector<int>{1, 2}));
  EXPECT_EQ(groups->PositionOf(3), 2);
  EXPECT_EQ(groups->PositionOf(2), -1);
  EXPECT_EQ(groups->group_of(2), 1);
  EXPECT_EQ(groups->slot_of(2), 1);
  EXPECT_EQ(groups->ModelSummary(0b11), "1 A30-24GB and 2 H100-80GB");
  EXPECT_EQ(groups->GpuList(1, 0b11), "1, 3");

  auto cluster = groups->MakeCluster();
  ASSERT_TRUE(cluster.ok());
  ASSERT_EQ(cluster->size(), 2);
  EXPECT_EQ(cluster->node(1).spec.gpu_count, 2);
  EXPECT_EQ(cluster->node(0).spec.gpu_memory_bytes, 24 * kGiB);
}

TEST(ModelGroupsTest, RefusesADuplicateIndex) {
  auto groups =
      ModelGroups::Create({Gpu(0, "A30-24GB", 24 * kGiB), Gpu(0, "H100-80GB", 80 * kGiB)});
  ASSERT_FALSE(groups.ok());
  EXPECT_EQ(groups.status().message(), "GPU index 0 appears twice");
}

TEST(ModelGroupsTest, SaysWhyARequestCanNeverRun) {
  auto groups = ModelGroups::Create(
      {Gpu(0, "A30-24GB", 24 * kGiB), Gpu(1, "H100-80GB", 80 * kGiB, gpu::GpuMode::kWhole)});
  ASSERT_TRUE(groups.ok());
  auto l4 = groups->AllowedGroups(GpuRequest::Whole(1).OnModel("L4"));
  ASSERT_FALSE(l4.ok());
  EXPECT_EQ(l4.status().message(), "--gpu-model L4: no such GPU here (A30-24GB, H100-80GB)");
  // The whole-only H100 takes no share.
  auto shared = groups->AllowedGroups(GpuRequest::Memory(10 * kGiB));
  ASSERT_TRUE(shared.ok());
  EXPECT_EQ(*shared, 0b01u);
  EXPECT_EQ(groups->WhyNoGroupHolds(GpuRequest::Memory(40 * kGiB), *shared).message(),
            "--gpu-memory 40GiB is more than any GPU here has (largest: A30-24GB, 24 GiB)");
  EXPECT_EQ(groups->WhyNoGroupHolds(GpuRequest::Whole(3), 0b11).message(),
            "--gpus 3 asks for 3 GPUs; this node has 1 A30-24GB and 1 H100-80GB");
}

TEST(QueueUsageTest, AQuotaCountsRunningJobsAndWhatAPassKeepsForReservations) {
  QueueUsage usage(0.5, 4);  // 2 of 4 GPUs.
  EXPECT_EQ(usage.quota(), 2000u);
  EXPECT_TRUE(usage.CouldHold(2000));
  EXPECT_FALSE(usage.CouldHold(2001));
  usage.Start(1500);
  EXPECT_EQ(usage.running(), 1u);
  EXPECT_TRUE(usage.Allows(1, 500));
  usage.Keep(1, 250);  // A reservation in pass 1 ...
  EXPECT_FALSE(usage.Allows(1, 500));
  EXPECT_EQ(usage.StateText(1),
            "at its quota (1.5 of 2 GPUs in use, 0.25 kept for its jobs waiting for GPUs)");
  EXPECT_TRUE(usage.Allows(2, 500));  // ... is kept in that pass only.
  EXPECT_EQ(usage.StateText(2), "at its quota (1.5 of 2 GPUs in use)");
  usage.End(1500);
  EXPECT_EQ(usage.in_use(), 0u);
  EXPECT_EQ(usage.running(), 0u);

  usage.Block(3, 42);
  EXPECT_TRUE(usage.BlockedIn(3));
  EXPECT_FALSE(usage.BlockedIn(4));
  EXPECT_EQ(usage.blocked_by(), 42);
}

TEST(QueueUsageTest, AFullQuotaIsNoLimit) {
  QueueUsage usage(1.0, 2);
  usage.Start(2000);
  usage.Keep(1, 1000);
  EXPECT_TRUE(usage.Allows(1, 1000));
}

TEST(QueueUsageTest, SaysWhenAQuotaCanNeverHoldAJob) {
  QueueSpec spec;
  spec.name = "interactive";
  spec.quota = 0.25;
  EXPECT_TRUE(QueueUsage::CheckHolds(spec, 4, 1000, "--gpus 1").ok());
  EXPECT_EQ(QueueUsage::CheckHolds(spec, 4, 2000, "--gpus 2").message(),
            "queue interactive's quota (0.25 of 4 GPUs) is less than --gpus 2");
}

TEST(SchedulingPassTest, AReservationHidesItsGpusFromLaterJobsAndSticksWhileFree) {
  auto groups = ModelGroups::Create({Gpu(0, "A30-24GB", 24 * kGiB), Gpu(1, "A30-24GB", 24 * kGiB)});
  ASSERT_TRUE(groups.ok());
  auto cluster = groups->MakeCluster();
  ASSERT_TRUE(cluster.ok());
  // GPU 0 is half taken: the job wanting a whole GPU reserves GPU 1 (more free share).
  placement::Request half{.gpu_count = 1, .gpu_milli = 500};
  cluster->Apply({.node = 0, .gpus = 0b01}, half);
  RequestShapes shapes(&groups->groups());
  RequestShape* whole = shapes.Acquire(GpuRequest::Whole(1));
  std::vector<std::vector<int64_t>> jobs_on(2);

  SchedulingPass pass(&*groups, &*cluster);
  pass.Begin();
  EXPECT_EQ(pass.number(), 1u);
  EXPECT_TRUE(pass.can_start());
  auto r = pass.Reserve(7, *whole, 0b1, -1, 0, jobs_on);
  EXPECT_EQ(r.group, 0);
  EXPECT_EQ(r.gpus, 0b10u);
  EXPECT_EQ(pass.reserved_for(1), 7);
  EXPECT_EQ(pass.view(0).gpu_free_milli[1], 0u);  // Later jobs see nothing free there.
  EXPECT_TRUE(pass.can_start());                  // GPU 0 still has room for a share.
  // A second whole-GPU job gets GPU 0, the only one left; then nothing is unreserved.
  auto second = pass.Reserve(8, *whole, 0b1, -1, 0, jobs_on);
  EXPECT_EQ(second.gpus, 0b01u);
  EXPECT_FALSE(pass.can_start());
  EXPECT_FALSE(pass.KeepGoing());
  auto third = pass.Reserve(9, *whole, 0b1, -1, 0, jobs_on);
  EXPECT_EQ(third.group, -1);

  // Next pass: job 8 keeps GPU 0 although GPU 1 now has more free share.
  pass.Begin();
  EXPECT_FALSE(pass.reserved_for(0).has_value());
  auto again = pass.Reserve(8, *whole, 0b1, second.group, second.gpus, jobs_on);
  EXPECT_EQ(again.gpus, 0b01u);
  pass.Forget(8);
  EXPECT_FALSE(pass.reserved_for(0).has_value());
  shapes.Release(whole);
}

TEST(SchedulingPassTest, StopsAfterALongRunOfJobsThatGetNothingOnceNothingCanStart) {
  auto groups = ModelGroups::Create({Gpu(0, "A30-24GB", 24 * kGiB), Gpu(1, "A30-24GB", 24 * kGiB)});
  ASSERT_TRUE(groups.ok());
  auto cluster = groups->MakeCluster();
  ASSERT_TRUE(cluster.ok());
  cluster->Apply({.node = 0, .gpus = 0b11}, {.gpu_count = 2, .gpu_milli = 1000});
  SchedulingPass pass(&*groups, &*cluster);
  pass.Begin();
  EXPECT_FALSE(pass.can_start());
  for (int i = 0; i < SchedulingPass::kFruitlessLimit; ++i) {
    EXPECT_TRUE(pass.KeepGoing()) << i;
    pass.Count(false);
  }
  EXPECT_FALSE(pass.KeepGoing());
  pass.Count(true);
  EXPECT_TRUE(pass.KeepGoing());
}

}  // namespace
}  // namespace gpufrac::node
