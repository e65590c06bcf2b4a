// The node service's MIG lane against a fake driver: instances created on demand with the
// smallest profile, reused when idle, destroyed only when their slices are needed, never while
// they serve a job or hold a process gpufrac did not start.
#include <gtest/gtest.h>

#include <map>
#include <set>

#include "node/mig_scheduler.h"

namespace gpufrac::node {
namespace {

// A driver that keeps instances in memory and refuses overlaps, and destroying an instance with
// processes in it, like NVML.
class FakeBackend : public mig::MigBackend {
 public:
  StatusOr<std::vector<InstanceInfo>> List(int gpu) override { return gpus_[gpu]; }
  StatusOr<InstanceInfo> Create(int gpu, int profile, gpu::MigPlacement p) override {
    for (const InstanceInfo& i : gpus_[gpu]) {
      bool overlap =
          p.start < i.placement.start + i.placement.size && i.placement.start < p.start + p.size;
      if (overlap) return ResourceExhaustedError("overlap");
    }
    ++creates;
    InstanceInfo info{next_id_, profile, p, "MIG-fake-" + std::to_string(next_id_), false, {}};
    ++next_id_;
    gpus_[gpu].push_back(info);
    return info;
  }
  Status Destroy(int gpu, unsigned gi_id) override {
    ++destroy_attempts;
    auto& list = gpus_[gpu];
    for (auto it = list.begin(); it != list.end(); ++it) {
      if (it->gi_id == gi_id) {
        if (it->in_use) return FailedPreconditionError("instance in use by a workload");
        list.erase(it);
        ++destroys;
        return OkStatus();
      }
    }
    return NotFoundError("no instance");
  }
  StatusOr<bool> SetMode(int, bool) override { return false; }
  // Processes (none: `pids` empty) start or end in the instance `uuid`.
  void SetProcesses(int gpu, const std::string& uuid, std::vector<unsigned> pids) {
    for (InstanceInfo& i : gpus_[gpu]) {
      if (i.uuid == uuid) {
        i.in_use = !pids.empty();
        i.pids = std::move(pids);
        return;
      }
    }
    ADD_FAILURE() << "no instance " << uuid;
  }
  int creates = 0;
  int destroys = 0;
  int destroy_attempts = 0;

 private:
  std::map<int, std::vector<InstanceInfo>> gpus_;
  unsigned next_id_ = 1;
};

constexpr uint64_t kGiB = uint64_t{1} << 30;

class MigSchedulerTest : public ::testing::Test {
 protected:
  MigSchedulerTest() : scheduler_({{0, gpu::FindMigModel("H100-80GB")}}, &backend_) {}
  FakeBackend backend_;
  MigScheduler scheduler_;
};

TEST_F(MigSchedulerTest, CreatesTheSmallestProfileThatHoldsTheRequest) {
  scheduler_.Enqueue(1, 0, GpuRequest::Memory(10 * kGiB), 1);
  auto started = scheduler_.Schedule();
  ASSERT_EQ(started.size(), 1u);
  EXPECT_EQ(started[0].id, 1);
  EXPECT_EQ(started[0].profile, "1g.10gb");
  EXPECT_EQ(started[0].gpu, 0);
  EXPECT_GT(started[0].memory_bytes, 9ull << 30);
  EXPECT_EQ(backend_.creates, 1);
  auto slices = scheduler_.Slices();
  ASSERT_EQ(slices[0].instances.size(), 1u);
  EXPECT_EQ(slices[0].instances[0].job, 1);
}

TEST_F(MigSchedulerTest, ReusesAnIdleInstanceBeforeCreatingOne) {
  scheduler_.Enqueue(1, 0, GpuRequest::Memory(10 * kGiB), 1);
  std::string uuid = scheduler_.Schedule().at(0).uuid;
  EXPECT_TRUE(scheduler_.Finish(1));
  scheduler_.Enqueue(2, 0, GpuRequest::Mig("1g.10gb"), 2);
  auto started = scheduler_.Schedule();
  ASSERT_EQ(started.size(), 1u);
  EXPECT_EQ(started[0].uuid, uuid);
  EXPECT_EQ(backend_.creates, 1);
}

TEST_F(MigSchedulerTest, JobsStartedInOnePassNeverShareAnInstance) {
  scheduler_.Enqueue(1, 0, GpuRequest::Mig("1g.10gb"), 1);
  std::string idle = scheduler_.Schedule().at(0).uuid;
  EXPECT_TRUE(scheduler_.Finish(1));
  // One idle instance, three jobs that fit it: one reuses it, the others get new ones.
  for (int i = 2; i <= 4; ++i) scheduler_.Enqueue(i, 0, GpuRequest::Mig("1g.10gb"), i);
  auto started = scheduler_.Schedule();
  ASSERT_EQ(started.size(), 3u);
  std::set<std::string> uuids;
  for (const auto& s : started) uuids.insert(s.uuid);
  EXPECT_EQ(uuids.size(), 3u);
  EXPECT_TRUE(uuids.count(idle));
  EXPECT_EQ(backend_.creates, 3);
}

TEST_F(MigSchedulerTest, DestroysIdleInstancesOnlyWhenTheirSlicesAreNeeded) {
  for (int i = 1; i <= 7; ++i) scheduler_.Enqueue(i, 0, GpuRequest::Mig("1g.10gb"), i);
  ASSERT_EQ(scheduler_.Schedule().size(), 7u);
  for (int i = 1; i <= 7; ++i) scheduler_.Finish(i);
  EXPECT_EQ(scheduler_.Slices()[0].instances.size(), 7u) << "idle instances stay (lazy)";
  scheduler_.Enqueue(8, 0, GpuRequest::Mig("7g.80gb"), 8);
  auto started = scheduler_.Schedule();
  ASSERT_EQ(started.size(), 1u);
  EXPECT_EQ(started[0].profile, "7g.80gb");
  EXPECT_EQ(backend_.destroys, 7);
}

TEST_F(MigSchedulerTest, NeverTouchesAnInstanceThatServesAJob) {
  scheduler_.Enqueue(1, 0, GpuRequest::Mig("1g.10gb"), 1);
  ASSERT_EQ(scheduler_.Schedule().size(), 1u);
  scheduler_.Enqueue(2, 0, GpuRequest::Mig("7g.80gb"), 2);
  EXPECT_TRUE(scheduler_.Schedule().empty());
  EXPECT_EQ(backend_.destroys, 0);
  EXPECT_FALSE(scheduler_.WaitReason(2).empty());
  scheduler_.Finish(1);
  auto started = scheduler_.Schedule();
  ASSERT_EQ(started.size(), 1u);
  EXPECT_EQ(started[0].id, 2);
}

// A process gpufrac did not start (by hand with CUDA_VISIBLE_DEVICES=MIG-..., or a job of an
// earlier service whose record was lost) makes an instance as busy as one of gpufrac's jobs.
TEST_F(MigSchedulerTest, AnInstanceWithAStrangersProcessIsNeitherReusedNorDestroyed) {
  scheduler_.Enqueue(1, 0, GpuRequest::Mig("1g.10gb"), 1);
  std::string uuid = scheduler_.Schedule().at(0).uuid;
  scheduler_.Finish(1);
  backend_.SetProcesses(0, uuid, {4242});
  scheduler_.Enqueue(2, 0, GpuRequest::Mig("1g.10gb"), 2);
  auto started = scheduler_.Schedule();
  ASSERT_EQ(started.size(), 1u);
  EXPECT_NE(started[0].uuid, uuid) << "the stranger's instance must not be reused";
  EXPECT_EQ(backend_.creates, 2);
  EXPECT_EQ(backend_.destroy_attempts, 0);
  bool shown = false;
  for (const MigScheduler::SliceView::Item& i : scheduler_.Slices()[0].instances) {
    if (i.uuid != uuid) continue;
    shown = true;
    EXPECT_EQ(i.job, 0);
    EXPECT_TRUE(i.in_use);
    EXPECT_EQ(i.pids, std::vector<unsigned>{4242});
  }
  EXPECT_TRUE(shown);
  EXPECT_EQ(mig::ForeignUseText({4242}), "in use by pid 4242 (not gpufrac)");
}

TEST_F(MigSchedulerTest, ARequestThatNeedsAStrangersInstanceWaitsAndNamesIt) {
  for (int i = 1; i <= 2; ++i) scheduler_.Enqueue(i, 0, GpuRequest::Mig("1g.10gb"), i);
  auto first = scheduler_.Schedule();
  ASSERT_EQ(first.size(), 2u);
  scheduler_.Finish(1);
  scheduler_.Finish(2);
  backend_.SetProcesses(0, first[1].uuid, {4242, 4343});
  // The whole GPU needs both instances gone; one holds a stranger's processes.
  scheduler_.Enqueue(3, 0, GpuRequest::Mig("7g.80gb"), 3);
  EXPECT_TRUE(scheduler_.Schedule().empty());
  EXPECT_EQ(backend_.destroy_attempts, 0) << "not even tried: destroying could race the process";
  const std::string reason = scheduler_.WaitReason(3);
  EXPECT_NE(reason.find("in use by pids 4242, 4343 (not gpufrac)"), std::string::npos) << reason;
  EXPECT_NE(reason.find(first[1].uuid), std::string::npos) << reason;
  EXPECT_EQ(reason.find(first[0].uuid), std::string::npos) << "the idle one is not in the way";
  // Once the stranger is gone, the slices are freed as for any idle instance.
  backend_.SetProcesses(0, first[1].uuid, {});
  auto started = scheduler_.Schedule();
  ASSERT_EQ(started.size(), 1u);
  EXPECT_EQ(started[0].profile, "7g.80gb");
  EXPECT_EQ(backend_.destroys, 2);
}

TEST_F(MigSchedulerTest, HigherQueuesGoFirst) {
  scheduler_.Enqueue(1, 1, GpuRequest::Mig("4g.40gb"), 1);
  scheduler_.Enqueue(2, 0, GpuRequest::Mig("7g.80gb"), 2);
  auto started = scheduler_.Schedule();
  ASSERT_EQ(started.size(), 1u);
  EXPECT_EQ(started[0].id, 2);
}

TEST(MigScheduler, RequestsThatNoMigGpuCanHoldAreRefused) {
  FakeBackend backend;
  MigScheduler none({}, &backend);
  EXPECT_EQ(none.CheckFeasible(GpuRequest::Mig("1g.10gb")).code(), StatusCode::kFailedPrecondition);
  MigScheduler a30({{0, gpu::FindMigModel("A30-24GB")}}, &backend);
  EXPECT_TRUE(a30.CheckFeasible(GpuRequest::Memory(6 * kGiB)).ok());
  EXPECT_FALSE(a30.CheckFeasible(GpuRequest::Memory(40 * kGiB)).ok());
  EXPECT_FALSE(a30.CheckFeasible(GpuRequest::Mig("7g.80gb")).ok());
}

}  // namespace
}  // namespace gpufrac::node
