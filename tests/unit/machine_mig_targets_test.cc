// A machine's GPUs as MIG apply targets: the driver's profile tables win over the catalogue's,
// and a GPU of no known model has neither.
#include <gtest/gtest.h>

#include "gpu/catalogue.h"
#include "machine/mig_targets.h"

namespace gpufrac::machine {
namespace {

NodeGpu Gpu(int index, const std::string& model, gpu::GpuMode mode) {
  return {.index = index, .uuid = "GPU-" + std::to_string(index), .model = model, .mode = mode};
}

TEST(MigTargetsTest, TheDriversTablesWinOverTheCatalogues) {
  const gpu::MigModel* catalogue = gpu::FindMigModel("H100-80GB");
  ASSERT_NE(catalogue, nullptr);
  const gpu::MigModel driver_tables = *catalogue;
  const DriverMigTables driver = {{1, &driver_tables}};
  EXPECT_EQ(MigTablesOf(Gpu(0, "H100-80GB", gpu::GpuMode::kShared), driver), catalogue);
  EXPECT_EQ(MigTablesOf(Gpu(1, "H100-80GB", gpu::GpuMode::kMig), driver), &driver_tables);
  EXPECT_EQ(MigTablesOf(Gpu(2, "", gpu::GpuMode::kShared), driver), nullptr);
  EXPECT_EQ(MigTablesOf(Gpu(3, "L4", gpu::GpuMode::kShared), driver), nullptr);
}

TEST(MigTargetsTest, ATargetIsTheGpuAsItIsNow) {
  const gpu::MigModel driver_tables = *gpu::FindMigModel("A100-80GB");
  const DriverMigTables driver = {{4, &driver_tables}};
  mig::ApplyTarget t = MigApplyTarget(Gpu(4, "A100-80GB", gpu::GpuMode::kMig), driver, true);
  EXPECT_EQ(t.index, 4);
  EXPECT_EQ(t.model, gpu::FindModel("A100-80GB"));
  EXPECT_TRUE(t.mig_enabled);
  EXPECT_EQ(t.mig_model, &driver_tables);
  EXPECT_TRUE(t.busy);
  mig::ApplyTarget unknown = MigApplyTarget(Gpu(5, "", gpu::GpuMode::kShared), driver, false);
  EXPECT_EQ(unknown.model, nullptr);
  EXPECT_FALSE(unknown.mig_enabled);
  EXPECT_EQ(unknown.mig_model, nullptr);
  EXPECT_FALSE(unknown.busy);
}

}  // namespace
}  // namespace gpufrac::machine
