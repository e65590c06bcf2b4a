// CUDA_VISIBLE_DEVICES inside a workload: whatever the process asks for, the result names only
// the GPUs of its limit file, keeping the order and subset it asked for among them, and ends
// where the request names anything else.
#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "limiter/limit_config.h"
#include "limiter/visible_devices.h"

namespace gpufrac::limiter {
namespace {

constexpr const char* kA = "GPU-aaaa0000-1b3c-4d5e-8f90-a1b2c3d4e5f6";
constexpr const char* kB = "GPU-bbbb0000-1b3c-4d5e-8f90-a1b2c3d4e5f6";
constexpr const char* kMig = "MIG-cccc0000-2222-3333-4444-555555555555";

LimitConfig Workload(std::initializer_list<const char*> uuids) {
  LimitConfig config{};
  std::strcpy(config.workload, "w");
  for (const char* uuid : uuids) {
    std::strcpy(config.gpus[config.gpu_count].uuid, uuid);
    EXPECT_TRUE(ParseUuid(uuid, config.gpus[config.gpu_count].uuid_bytes));
    config.gpus[config.gpu_count++].limit_bytes = 1;
  }
  return config;
}

struct Result {
  std::string value;
  int count;
  std::string refused;
};

Result Restrict(const char* requested, const LimitConfig& config) {
  VisibleDevices out;
  RestrictVisibleDevices(requested, config, &out);
  return {out.value, out.count, out.refused};
}

std::string Join(const char* a, const char* b) { return std::string(a) + "," + b; }

TEST(VisibleDevicesTest, UnsetMeansEveryGpuOfTheWorkloadInLimitFileOrder) {
  Result r = Restrict(nullptr, Workload({kB, kA}));
  EXPECT_EQ(r.value, Join(kB, kA));
  EXPECT_EQ(r.count, 2);
  EXPECT_EQ(r.refused, "");
}

TEST(VisibleDevicesTest, TheLaunchersOwnValueIsKeptAsItIs) {
  const std::string launcher = Join(kA, kB);
  Result r = Restrict(launcher.c_str(), Workload({kA, kB}));
  EXPECT_EQ(r.value, launcher);
  EXPECT_EQ(r.refused, "");
}

TEST(VisibleDevicesTest, IndexesAndUuidPrefixesSelectAmongTheWorkloadsGpus) {
  const LimitConfig config = Workload({kA, kB});
  EXPECT_EQ(Restrict("1,0", config).value, Join(kB, kA));
  EXPECT_EQ(Restrict("1", config).value, kB);
  EXPECT_EQ(Restrict(" 1 ,\t0 ", config).value, Join(kB, kA));
  EXPECT_EQ(Restrict("GPU-BBBB", config).value, kB);  // a unique prefix, in any case
  EXPECT_EQ(Restrict(kB, config).value, kB);
  EXPECT_EQ(Restrict("gpu-aaaa0000,1", config).value, Join(kA, kB));
  EXPECT_EQ(Restrict(kMig, Workload({kMig})).value, kMig);
  EXPECT_EQ(Restrict("0", Workload({kMig})).value, kMig);
}

// Issue 16: a workload given GPU 0 that asks for GPU 1, by index or by UUID, gets no device.
TEST(VisibleDevicesTest, AnotherGpuIsNeverVisible) {
  const LimitConfig config = Workload({kA});
  for (const char* other : {"1", kB, "GPU-bbbb", "7", "15", "123"}) {
    SCOPED_TRACE(other);
    Result r = Restrict(other, config);
    EXPECT_EQ(r.value, "-1");
    EXPECT_EQ(r.count, 0);
    EXPECT_EQ(r.refused, other);
  }
  // The list ends at the first entry outside the workload, as the driver's does at an invalid
  // one: what comes after is not visible either.
  Result r = Restrict((std::string("0,") + kB + ",1").c_str(), Workload({kA, kB}));
  EXPECT_EQ(r.value, Join(kA, kB));
  r = Restrict((std::string("0,GPU-dddd,1")).c_str(), Workload({kA, kB}));
  EXPECT_EQ(r.value, kA);
  EXPECT_EQ(r.refused, "GPU-dddd");
}

TEST(VisibleDevicesTest, EntriesTheDriverWouldRejectEndTheListWithoutComplaint) {
  const LimitConfig config = Workload({kA, kB});
  for (const char* request : {"", "-1", "-1,0", ",0", "GPU-", "x", "0x1"}) {
    SCOPED_TRACE(request);
    Result r = Restrict(request, config);
    EXPECT_EQ(r.value, "-1");
    EXPECT_EQ(r.refused, "");
  }
  EXPECT_EQ(Restrict("0,-1,1", config).value, kA);
  EXPECT_EQ(Restrict("0,0,1", config).value, kA);  // repeated
  EXPECT_EQ(Restrict("1,", config).value, kB);
  // A prefix shared by two of the workload's GPUs names neither.
  EXPECT_EQ(Restrict("GPU-", Workload({kA, kB})).value, "-1");
  const LimitConfig twins = Workload(
      {"GPU-aaaa0000-1b3c-4d5e-8f90-000000000001", "GPU-aaaa0000-1b3c-4d5e-8f90-000000000002"});
  EXPECT_EQ(Restrict("GPU-aaaa", twins).value, "-1");
}

TEST(VisibleDevicesTest, SixteenGpusFit) {
  LimitConfig config{};
  for (int g = 0; g < kMaxLimitedGpus; ++g) {
    std::snprintf(config.gpus[g].uuid, sizeof(config.gpus[g].uuid),
                  "GPU-%08d-1b3c-4d5e-8f90-a1b2c3d4e5f6", g);
  }
  config.gpu_count = kMaxLimitedGpus;
  Result r = Restrict(nullptr, config);
  EXPECT_EQ(r.count, kMaxLimitedGpus);
  EXPECT_EQ(r.value.size(), kMaxLimitedGpus * 41u - 1);
  EXPECT_EQ(Restrict("15", config).value, config.gpus[15].uuid);
}

}  // namespace
}  // namespace gpufrac::limiter
