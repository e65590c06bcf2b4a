// The one vocabulary of sharing modes: each mode's name reads back to it, nothing else does.
#include "gpu/gpu_mode.h"

#include <gtest/gtest.h>

namespace gpufrac::gpu {
namespace {

TEST(GpuModeTest, NamesReadBackAndNothingElseParses) {
  for (GpuMode mode : {GpuMode::kWhole, GpuMode::kShared, GpuMode::kMig, GpuMode::kMps}) {
    EXPECT_EQ(ParseGpuMode(GpuModeName(mode)), mode);
  }
  EXPECT_EQ(GpuModeName(GpuMode::kWhole), "whole");
  EXPECT_EQ(GpuModeName(GpuMode::kShared), "shared");
  EXPECT_EQ(GpuModeName(GpuMode::kMig), "mig");
  EXPECT_EQ(GpuModeName(GpuMode::kMps), "mps");
  for (const char* other : {"", "Whole", "MPS", "shared "}) EXPECT_FALSE(ParseGpuMode(other));
}

}  // namespace
}  // namespace gpufrac::gpu
