// Applying a mig-parted configuration through the MIG control: all checked before anything
// changes, and a failure part-way puts back what the GPUs had.
#include <gtest/gtest.h>

#include <map>
#include <vector>

#include "mig/apply.h"

namespace gpufrac::mig {
namespace {

// The driver's instances per GPU; call number `fail_create_at` of Create fails (0: none).
class FakeBackend : public MigBackend {
 public:
  StatusOr<std::vector<InstanceInfo>> List(int gpu) override { return gpus[gpu]; }
  StatusOr<InstanceInfo> Create(int gpu, int profile, gpu::MigPlacement p) override {
    if (++creates == fail_create_at) {
      return ResourceExhaustedError("the driver refused");
    }
    InstanceInfo i{.gi_id = next_id++, .profile = profile, .placement = p, .uuid = "", .pids = {}};
    gpus[gpu].push_back(i);
    return i;
  }
  Status Destroy(int gpu, unsigned gi_id) override {
    std::erase_if(gpus[gpu], [&](const InstanceInfo& i) { return i.gi_id == gi_id; });
    return OkStatus();
  }
  StatusOr<bool> SetMode(int, bool) override { return false; }

  std::map<int, std::vector<InstanceInfo>> gpus;
  int fail_create_at = 0;
  int creates = 0;
  unsigned next_id = 100;
};

constexpr char kFile[] = R"(version: v1
mig-configs:
  halves:
    - devices: all
      mig-enabled: true
      mig-devices:
        "3g.40gb": 2
  off:
    - devices: all
      mig-enabled: false
)";

class MigApplyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    StatusOr<MigPartedFile> file = ParseMigParted(kFile, "mig.yaml");
    ASSERT_TRUE(file.ok()) << file.status();
    file_ = *file;
    model_ = gpu::FindModel("H100-80GB");
    mig_ = gpu::FindMigModel("H100-80GB");
    ASSERT_NE(model_, nullptr);
    ASSERT_NE(mig_, nullptr);
    // GPU 0 holds one 7g.80gb instance before the apply.
    const gpu::MigProfile* whole = gpu::FindMigProfile(*mig_, "7g.80gb");
    ASSERT_NE(whole, nullptr);
    backend_.gpus[0] = {{.gi_id = 1,
                         .profile = static_cast<int>(whole - mig_->profiles),
                         .placement = {0, 8},
                         .uuid = "",
                         .pids = {}}};
  }
  std::vector<ApplyTarget> Targets(bool mig_enabled = true, bool busy = false) {
    return {
        {.index = 0, .model = model_, .mig_enabled = mig_enabled, .mig_model = mig_, .busy = busy}};
  }
  const MigPartedConfig& Config(const std::string& name) { return **ChooseConfig(file_, name); }

  MigPartedFile file_;
  const gpu::GpuModel* model_ = nullptr;
  const gpu::MigModel* mig_ = nullptr;
  FakeBackend backend_;
};

TEST_F(MigApplyTest, ReplacesTheLayoutAndReportsIt) {
  StatusOr<std::vector<std::string>> report = ApplyConfig(Config("halves"), Targets(), backend_);
  ASSERT_TRUE(report.ok()) << report.status();
  ASSERT_EQ(report->size(), 1u);
  EXPECT_EQ((*report)[0], "GPU 0: 3g.40gb@0 3g.40gb@4");
  EXPECT_EQ(backend_.gpus[0].size(), 2u);
}

TEST_F(MigApplyTest, RefusesBeforeChangingAnything) {
  Status busy = ApplyConfig(Config("halves"), Targets(true, /*busy=*/true), backend_).status();
  EXPECT_EQ(busy.code(), StatusCode::kFailedPrecondition);
  Status mode = ApplyConfig(Config("off"), Targets(), backend_).status();
  EXPECT_NE(mode.message().find("mig disable --gpu 0"), std::string::npos) << mode;
  ASSERT_EQ(backend_.gpus[0].size(), 1u);  // Untouched.
  EXPECT_EQ(backend_.gpus[0][0].gi_id, 1u);
}

TEST_F(MigApplyTest, AFailurePartWayPutsTheOldLayoutBack) {
  backend_.fail_create_at = 2;  // The first half is made, the second refused; restoring works.
  Status failed = ApplyConfig(Config("halves"), Targets(), backend_).status();
  EXPECT_EQ(failed.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(failed.message().find("1 of the 1 it removed restored"), std::string::npos) << failed;
  // The created half is gone and the 7g.80gb is back (as a new instance, same placement).
  ASSERT_EQ(backend_.gpus[0].size(), 1u);
  EXPECT_EQ(gpu::MigProfileName(*mig_, mig_->profiles[backend_.gpus[0][0].profile]), "7g.80gb");
  EXPECT_EQ(backend_.gpus[0][0].placement.start, 0);
}

TEST_F(MigApplyTest, ChoosesTheNamedOrOnlyConfiguration) {
  EXPECT_EQ(ChooseConfig(file_, "").status().code(), StatusCode::kInvalidArgument);
  Status missing = ChooseConfig(file_, "nope").status();
  EXPECT_EQ(missing.code(), StatusCode::kNotFound);
  EXPECT_NE(missing.message().find("halves, off"), std::string::npos) << missing;
}

}  // namespace
}  // namespace gpufrac::mig
