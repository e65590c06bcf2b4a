// The one step from grants to a launch (launch/grant_limits.h): the limit file's GPUs with their
// compute pairs, and the MPS client a grant on a GPU in MPS mode makes.
#include <gtest/gtest.h>
#include "launch/grant_limits.h"

namespace gpufrac::launch {
namespace {

constexpr uint64_t kGiB = uint64_t{1} << 30;
constexpr char kGpu0[] = "GPU-00000000-0000-0000-0000-000000000000";
constexpr char kGpu1[] = "GPU-11111111-1111-1111-1111-111111111111";

uint64_t Context(int index) { return index == 0 ? 500ull << 20 : 700ull << 20; }

TEST(GrantLimits, EachGrantGetsItsMemoryItsGpusContextAndItsComputePair) {
  const std::vector<GpuGrant> grants = {
      {.index = 0,
       .uuid = kGpu0,
       .milli = 250,
       .memory_bytes = 10 * kGiB,
       .compute = ComputePair{.request_milli = 250, .limit_milli = 1000}},
      {.index = 1, .uuid = kGpu1, .milli = 1000, .memory_bytes = 40 * kGiB}};
  StatusOr<GrantLimits> limits = LimitsOfGrants(
      grants, Context, [](int) { return false; }, "job 7");
  ASSERT_TRUE(limits.ok()) << limits.status().message();
  ASSERT_EQ(limits->gpus.size(), 2u);
  EXPECT_EQ(limits->gpus[0].uuid, kGpu0);
  EXPECT_EQ(limits->gpus[0].limit_bytes, 10 * kGiB);
  EXPECT_EQ(limits->gpus[0].context_bytes, 500ull << 20);
  EXPECT_EQ(limits->gpus[0].compute, (ComputePair{.request_milli = 250, .limit_milli = 1000}));
  EXPECT_EQ(limits->gpus[1].context_bytes, 700ull << 20);
  EXPECT_EQ(limits->gpus[1].compute, std::nullopt);
  EXPECT_FALSE(limits->mps.has_value());
}

// On a GPU in MPS mode, MPS holds the SMs: the limiter keeps the memory only (no turns), and the
// client is held to its compute limit's percentage and its memory.
TEST(GrantLimits, AGrantOnAnMpsGpuIsAClientHeldToItsLimitAndTakesNoTurns) {
  GpuGrant share{.index = 1,
                 .uuid = kGpu1,
                 .milli = 250,
                 .memory_bytes = 10 * kGiB,
                 .compute = ComputePair{.request_milli = 250, .limit_milli = 401}};
  StatusOr<GrantLimits> limits = LimitsOfGrants(
      {share}, Context, [](int index) { return index == 1; }, "job 7");
  ASSERT_TRUE(limits.ok()) << limits.status().message();
  ASSERT_EQ(limits->gpus.size(), 1u);
  EXPECT_EQ(limits->gpus[0].compute, std::nullopt);
  EXPECT_EQ(limits->gpus[0].limit_bytes, 10 * kGiB);
  ASSERT_TRUE(limits->mps.has_value());
  EXPECT_EQ(limits->mps->index, 1);
  EXPECT_EQ(limits->mps->thread_percentage, 41u);
  EXPECT_EQ(limits->mps->pinned_mib, 10240u);
  EXPECT_EQ(MpsClientEnvironment(*limits->mps, "/run/mps/1"),
            (std::vector<std::string>{"CUDA_MPS_PIPE_DIRECTORY=/run/mps/1",
                                      "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=41",
                                      "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=10240M"}));
  // Where its time is not arbitrated (the policy off), all of the SMs.
  share.compute = std::nullopt;
  EXPECT_EQ(MpsClientOf(share).thread_percentage, 100u);
}

TEST(GrantLimits, SharesOfTwoMpsGpusAreRefusedNamingTheWorkload) {
  const std::vector<GpuGrant> grants = {
      {.index = 0, .uuid = kGpu0, .milli = 250, .memory_bytes = kGiB},
      {.index = 1, .uuid = kGpu1, .milli = 250, .memory_bytes = kGiB}};
  StatusOr<GrantLimits> limits = LimitsOfGrants(
      grants, Context, [](int) { return true; }, "container main of pod a/b");
  ASSERT_FALSE(limits.ok());
  EXPECT_EQ(limits.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(limits.status().message(),
            "container main of pod a/b is booked on shares of two GPUs in MPS mode, which one "
            "MPS client cannot use");
}

}  // namespace
}  // namespace gpufrac::launch
