// gpu/mig_device (gpufrac's NVML MIG client) against the simulated NVML: errors for GPUs without
// MIG or with MIG mode off, a mode change that waits for a busy GPU, profiles read from the
// driver matching the catalogue, instances created, listed and destroyed (refused while a
// process runs in one), and the processes running in each instance.
#include <signal.h>
#include <sys/wait.h>

#include <string>

#include "gpu/mig_catalogue.h"
#include "gpu/mig_device.h"
#include "harness.h"
#include "simgpu/core/shared_machine.h"
#include "simgpu_test_util.h"

namespace gpufrac::simgpu::testing {
namespace {

using gpu::MigControl;
using gpu::MigPlacement;
using GpuMigDeviceTest = SimGpuTest;

const std::string kNvml = std::string(GPUFRAC_SIMGPU_DIR) + "/libnvidia-ml.so.1";

std::unique_ptr<MigControl> OpenControl() {
  auto control = MigControl::Open(kNvml);
  EXPECT_TRUE(control.ok()) << control.status().message();
  return control.ok() ? std::move(*control) : nullptr;
}

bool Contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

const gpu::MigProfile& Profile(std::string_view model, std::string_view name) {
  return *gpu::FindMigProfile(*gpu::FindMigModel(model), name);
}

TEST(GpuMigDeviceOpenTest, MissingLibraryIsUnavailable) {
  auto control = MigControl::Open("/nonexistent/libnvidia-ml.so.1");
  ASSERT_FALSE(control.ok());
  EXPECT_EQ(StatusCode::kUnavailable, control.status().code());
}

TEST_F(GpuMigDeviceTest, GpuWithoutMig) {
  RunInChild("1xL4", [] {
    auto control = OpenControl();
    ASSERT_NE(nullptr, control);
    auto mode = control->GetMigMode(0);
    ASSERT_FALSE(mode.ok());
    EXPECT_EQ(StatusCode::kFailedPrecondition, mode.status().code());
    EXPECT_TRUE(Contains(mode.status().message(), "GPU 0 (NVIDIA L4) has no MIG"))
        << mode.status().message();
    auto profiles = control->Profiles(0);
    ASSERT_FALSE(profiles.ok());
    EXPECT_TRUE(Contains(profiles.status().message(), "has no MIG"));
    EXPECT_EQ(StatusCode::kNotFound, control->GetMigMode(3).status().code());
  });
}

TEST_F(GpuMigDeviceTest, ModeOffRefusesInstancesUntilTurnedOn) {
  RunInChild("1xA100-40GB", [] {
    auto control = OpenControl();
    ASSERT_NE(nullptr, control);
    auto profiles = control->Profiles(0);
    ASSERT_FALSE(profiles.ok());
    EXPECT_EQ(StatusCode::kFailedPrecondition, profiles.status().code());
    EXPECT_TRUE(Contains(profiles.status().message(), "MIG mode is off on GPU 0"))
        << profiles.status().message();
    auto change = control->SetMigMode(0, true);
    ASSERT_TRUE(change.ok()) << change.status().message();
    EXPECT_FALSE(change->waiting);
    EXPECT_TRUE(change->mode.current);
    EXPECT_TRUE(control->Profiles(0).ok());
    change = control->SetMigMode(0, false);
    ASSERT_TRUE(change.ok());
    EXPECT_FALSE(change->mode.current);
  });
}

TEST_F(GpuMigDeviceTest, ModeChangeWaitsForABusyGpu) {
  RunInChild("1xH100-80GB", [] {
    auto control = OpenControl();
    ASSERT_NE(nullptr, control);
    Helper user([](Helper& self) {
      InitAndUsePrimary();
      self.Send('R');
      self.Receive();
    });
    ASSERT_EQ('R', user.Receive());
    auto change = control->SetMigMode(0, true);
    ASSERT_TRUE(change.ok()) << change.status().message();
    EXPECT_TRUE(change->waiting);
    EXPECT_FALSE(change->mode.current);
    EXPECT_TRUE(change->mode.pending);
    EXPECT_TRUE(Contains(change->reason, "in use")) << change->reason;
    user.Send('X');
    EXPECT_EQ(0, user.Wait());
    change = control->SetMigMode(0, true);
    ASSERT_TRUE(change.ok());
    EXPECT_FALSE(change->waiting);
    EXPECT_TRUE(change->mode.current);
  });
}

// What the driver reports is what the catalogue says, for every MIG model.
TEST_F(GpuMigDeviceTest, ProfilesReadFromTheDriverMatchTheCatalogue) {
  for (const gpu::MigModel& model : gpu::AllMigModels()) {
    SCOPED_TRACE(std::string(model.model->short_name));
    RunInChild("1x" + std::string(model.model->short_name) + ":mig", [&model] {
      auto control = OpenControl();
      ASSERT_NE(nullptr, control);
      auto profiles = control->Profiles(0);
      ASSERT_TRUE(profiles.ok()) << profiles.status().message();
      ASSERT_EQ(static_cast<size_t>(model.profile_count), profiles->size());
      for (const gpu::MigProfileInfo& read : *profiles) {
        const gpu::MigProfile* expected = nullptr;
        for (int i = 0; i < model.profile_count; ++i) {
          if (model.profiles[i].profile_id == read.profile_id) expected = &model.profiles[i];
        }
        ASSERT_NE(nullptr, expected) << read.name;
        EXPECT_EQ(expected->nvml_id, read.selector);
        EXPECT_EQ(gpu::MigProfileName(model, *expected), read.name);
        EXPECT_EQ(expected->compute_slices, read.compute_slices);
        EXPECT_EQ(expected->max_count, read.max_count);
        EXPECT_EQ(expected->memory_bytes, read.memory_bytes);
        ASSERT_EQ(static_cast<size_t>(expected->start_count), read.placements.size());
        for (int s = 0; s < expected->start_count; ++s) {
          EXPECT_EQ(expected->starts[s].start, read.placements[s].start);
          EXPECT_EQ(expected->starts[s].size, read.placements[s].size);
        }
      }
    });
    RemoveSharedMachine(name_space());
  }
}

TEST_F(GpuMigDeviceTest, CreateListAndDestroy) {
  RunInChild("1xH100-80GB:mig", [] {
    auto control = OpenControl();
    ASSERT_NE(nullptr, control);
    const gpu::MigProfile& three = Profile("H100-80GB", "3g.40gb");
    auto created = control->CreateInstance(0, three.profile_id, MigPlacement{4, 4});
    ASSERT_TRUE(created.ok()) << created.status().message();
    EXPECT_EQ(2u, created->gi_id);
    EXPECT_EQ(std::vector<unsigned>{0}, created->ci_ids);
    EXPECT_TRUE(created->uuid.starts_with("MIG-")) << created->uuid;
    EXPECT_EQ(three.memory_bytes, created->memory_total);
    EXPECT_EQ(0u, created->memory_used);

    auto overlap =
        control->CreateInstance(0, Profile("H100-80GB", "1g.10gb").profile_id, MigPlacement{5, 1});
    ASSERT_FALSE(overlap.ok());
    EXPECT_EQ(StatusCode::kResourceExhausted, overlap.status().code());
    EXPECT_TRUE(Contains(overlap.status().message(), "nvmlDeviceCreateGpuInstanceWithPlacement"))
        << overlap.status().message();
    auto illegal = control->CreateInstance(0, three.profile_id, MigPlacement{2, 4});
    ASSERT_FALSE(illegal.ok());
    EXPECT_EQ(StatusCode::kInvalidArgument, illegal.status().code());

    auto listed = control->ListInstances(0);
    ASSERT_TRUE(listed.ok()) << listed.status().message();
    ASSERT_EQ(1u, listed->size());
    EXPECT_EQ(created->uuid, (*listed)[0].uuid);
    EXPECT_EQ(three.profile_id, (*listed)[0].profile_id);
    EXPECT_EQ(4, (*listed)[0].placement.start);
    EXPECT_EQ(4, (*listed)[0].placement.size);

    std::string seen;
    const pid_t probe = gpufrac::testing::Start(
        {gpufrac::testing::ProbePath(), "hold", "1073741824"},
        {{"LD_LIBRARY_PATH", GPUFRAC_SIMGPU_DIR}, {"CUDA_VISIBLE_DEVICES", created->uuid}},
        "hold=", &seen);
    ASSERT_GT(probe, 0);
    ASSERT_TRUE(Contains(seen, "hold=0")) << seen;
    listed = control->ListInstances(0);
    ASSERT_TRUE(listed.ok());
    EXPECT_GE((*listed)[0].memory_used, kGiB);
    const Status busy = control->DestroyInstance(0, created->gi_id);
    EXPECT_EQ(StatusCode::kFailedPrecondition, busy.code());
    EXPECT_TRUE(Contains(busy.message(), "instance in use by a workload")) << busy.message();
    EXPECT_TRUE(Contains(busy.message(), "GPU 0")) << busy.message();
    listed = control->ListInstances(0);
    ASSERT_TRUE(listed.ok());
    ASSERT_EQ(1u, listed->size());
    EXPECT_EQ(std::vector<unsigned>{0}, (*listed)[0].ci_ids);  // nothing was destroyed

    ::kill(probe, SIGKILL);
    ::waitpid(probe, nullptr, 0);
    const Status destroyed = control->DestroyInstance(0, created->gi_id);
    EXPECT_TRUE(destroyed.ok()) << destroyed.message();
    listed = control->ListInstances(0);
    ASSERT_TRUE(listed.ok());
    EXPECT_TRUE(listed->empty());
    EXPECT_EQ(StatusCode::kNotFound, control->DestroyInstance(0, created->gi_id).code());
  });
}

// A process started by hand in an instance (CUDA_VISIBLE_DEVICES=MIG-...) is listed in it, by
// ListInstances and InstancePids, and nowhere else; once it is dead it is gone.
TEST_F(GpuMigDeviceTest, ListsTheProcessesInAnInstance) {
  RunInChild("1xA100-40GB:mig", [] {
    auto control = OpenControl();
    ASSERT_NE(nullptr, control);
    auto busy =
        control->CreateInstance(0, Profile("A100-40GB", "1g.5gb").profile_id, MigPlacement{0, 1});
    ASSERT_TRUE(busy.ok()) << busy.status().message();
    auto idle =
        control->CreateInstance(0, Profile("A100-40GB", "2g.10gb").profile_id, MigPlacement{4, 2});
    ASSERT_TRUE(idle.ok()) << idle.status().message();
    auto none = control->InstancePids(0, busy->gi_id);
    ASSERT_TRUE(none.ok()) << none.status().message();
    EXPECT_TRUE(none->empty());

    std::string seen;
    const pid_t probe = gpufrac::testing::Start(
        {gpufrac::testing::ProbePath(), "hold", "1048576"},
        {{"LD_LIBRARY_PATH", GPUFRAC_SIMGPU_DIR}, {"CUDA_VISIBLE_DEVICES", busy->uuid}},
        "hold=", &seen);
    ASSERT_GT(probe, 0);
    ASSERT_TRUE(Contains(seen, "hold=0")) << seen;
    const std::vector<unsigned> expected = {static_cast<unsigned>(probe)};
    auto pids = control->InstancePids(0, busy->gi_id);
    ASSERT_TRUE(pids.ok()) << pids.status().message();
    EXPECT_EQ(expected, *pids);
    pids = control->InstancePids(0, idle->gi_id);
    ASSERT_TRUE(pids.ok()) << pids.status().message();
    EXPECT_TRUE(pids->empty());
    auto listed = control->ListInstances(0);
    ASSERT_TRUE(listed.ok()) << listed.status().message();
    ASSERT_EQ(2u, listed->size());
    for (const gpu::MigInstance& instance : *listed) {
      EXPECT_EQ(instance.gi_id == busy->gi_id ? expected : std::vector<unsigned>{}, instance.pids)
          << instance.gi_id;
    }
    EXPECT_EQ(StatusCode::kNotFound, control->InstancePids(0, 9).status().code());

    ::kill(probe, SIGKILL);
    ::waitpid(probe, nullptr, 0);
    pids = control->InstancePids(0, busy->gi_id);
    ASSERT_TRUE(pids.ok()) << pids.status().message();
    EXPECT_TRUE(pids->empty());
  });
}

}  // namespace
}  // namespace gpufrac::simgpu::testing

namespace gpufrac::gpu {
namespace {

TEST(MigModelFromDriverTest, TheDriversTablesWinOverTheCatalogues) {
  const MigModel& h100 = *FindMigModel("H100-80GB");
  const MigProfile* small = FindMigProfile(h100, "1g.10gb");
  const MigProfile* full = FindMigProfile(h100, "7g.80gb");
  ASSERT_TRUE(small && full);
  MigProfileInfo driver_small;
  driver_small.profile_id = small->profile_id;
  driver_small.compute_slices = 1;
  driver_small.max_count = 3;
  driver_small.memory_bytes = 9000ull << 20;
  driver_small.placements = {{0, 1}, {2, 1}, {4, 1}};
  MigProfileInfo driver_full;
  driver_full.profile_id = full->profile_id;
  driver_full.compute_slices = 7;
  driver_full.max_count = 1;
  driver_full.memory_bytes = full->memory_bytes;
  driver_full.placements = {{0, 8}};
  MigProfileInfo unknown;
  unknown.profile_id = 999;
  unknown.placements = {{0, 1}};
  MigModel merged = MigModelFromDriver(h100, {driver_full, unknown, driver_small});
  ASSERT_EQ(merged.profile_count, 2);
  EXPECT_EQ(merged.profiles[0].profile_id, small->profile_id) << "catalogue order is kept";
  EXPECT_EQ(merged.profiles[0].memory_bytes, 9000ull << 20);
  EXPECT_EQ(merged.profiles[0].max_count, 3);
  ASSERT_EQ(merged.profiles[0].start_count, 3);
  EXPECT_EQ(merged.profiles[0].starts[2].start, 4);
  EXPECT_EQ(MigProfileName(merged, merged.profiles[0]), "1g.10gb");
  EXPECT_EQ(merged.profiles[1].profile_id, full->profile_id);
}

}  // namespace
}  // namespace gpufrac::gpu
