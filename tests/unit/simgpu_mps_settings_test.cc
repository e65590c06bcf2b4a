// The values of MPS's commands and environment variables: active thread percentages, pinned
// memory limits and per-device limit lists, as nvidia-cuda-mps-control and the CUDA clients of
// the simulator parse and print them.
#include <gtest/gtest.h>

#include "simgpu/core/mps_settings.h"

namespace gpufrac::simgpu {
namespace {

constexpr std::uint64_t kMiB = std::uint64_t{1} << 20;
constexpr std::uint64_t kGiB = std::uint64_t{1} << 30;

TEST(MpsSettingsTest, PercentagesAreAboveZeroAtMostAHundredWithOneDecimal) {
  EXPECT_EQ(250u, ParseThreadPercentage("25"));
  EXPECT_EQ(125u, ParseThreadPercentage("12.5"));
  EXPECT_EQ(1000u, ParseThreadPercentage("100.0"));
  EXPECT_EQ(1u, ParseThreadPercentage("0.1"));
  for (const char* bad : {"0", "0.0", "100.1", "150", "-5", "abc", "", "12.", "12.55", "1e2"}) {
    EXPECT_FALSE(ParseThreadPercentage(bad).has_value()) << bad;
  }
  EXPECT_EQ("25.0", FormatThreadPercentage(250));
  EXPECT_EQ("12.5", FormatThreadPercentage(125));
  EXPECT_EQ("100.0", FormatThreadPercentage(1000));
}

TEST(MpsSettingsTest, ThreadPercentagesRoundSmsDownToAtLeastOne) {
  EXPECT_EQ(33, ThreadPercentageSms(132, 250));
  EXPECT_EQ(99, ThreadPercentageSms(132, 750));
  EXPECT_EQ(13, ThreadPercentageSms(132, 100));
  EXPECT_EQ(132, ThreadPercentageSms(132, 1000));
  EXPECT_EQ(1, ThreadPercentageSms(132, 1));
}

TEST(MpsSettingsTest, MemoryLimitsAreAnIntegerAndGOrM) {
  EXPECT_EQ(2 * kGiB, ParseMemLimit("2G", false));
  EXPECT_EQ(900 * kMiB, ParseMemLimit("900M", false));
  EXPECT_FALSE(ParseMemLimit("512MB", false).has_value());
  EXPECT_EQ(512 * kMiB, ParseMemLimit("512MB", true));
  EXPECT_EQ(kGiB, ParseMemLimit("1GB", true));
  for (const char* bad : {"", "0G", "G", "12", "12X", "1.5G", "-1G", "12 G", "99999999999999G"}) {
    EXPECT_FALSE(ParseMemLimit(bad, true).has_value()) << bad;
  }
  EXPECT_EQ("2G", FormatMemLimit(2 * kGiB));
  EXPECT_EQ("900M", FormatMemLimit(900 * kMiB));
  EXPECT_EQ("1536M", FormatMemLimit(1536 * kMiB));
}

TEST(MpsSettingsTest, DeviceLimitListsNameDevicesByOrdinalOrUuid) {
  std::vector<DeviceMemLimit> limits;
  std::string error;
  ASSERT_TRUE(ParseDeviceMemLimits("0=1G,1=512MB, GPU-8f2a = 2G", &limits, &error)) << error;
  ASSERT_EQ(3u, limits.size());
  EXPECT_EQ("0", limits[0].device);
  EXPECT_EQ(kGiB, limits[0].bytes);
  EXPECT_EQ("1", limits[1].device);
  EXPECT_EQ(512 * kMiB, limits[1].bytes);
  EXPECT_EQ("GPU-8f2a", limits[2].device);
  EXPECT_EQ(2 * kGiB, limits[2].bytes);
  EXPECT_TRUE(ParseDeviceMemLimits("", &limits, &error));
  EXPECT_TRUE(limits.empty());
  for (const char* bad : {"0", "0=", "=1G", "0=1X", "0=1G,,1=2G"}) {
    EXPECT_FALSE(ParseDeviceMemLimits(bad, &limits, &error)) << bad;
    EXPECT_FALSE(error.empty());
  }
}

}  // namespace
}  // namespace gpufrac::simgpu
