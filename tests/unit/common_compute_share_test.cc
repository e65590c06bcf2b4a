// The compute pair's one rule (common/compute_share.h): what placement books of a shared GPU's
// time, what the limiter is then given under each policy, and MPS's share of the SMs.
#include <gtest/gtest.h>

#include "common/compute_share.h"

namespace gpufrac {
namespace {

GpuRequest Quarter(std::optional<uint32_t> compute = std::nullopt,
                   std::optional<uint32_t> limit = std::nullopt) {
  GpuRequest r = GpuRequest::Fraction(250);
  r.compute_milli = compute;
  r.compute_limit_milli = limit;
  return r;
}

TEST(ComputeShare, TheRequestIsTheMemorysShareUnlessGivenAndNeverAboveTheLimit) {
  EXPECT_EQ(ComputeRequestMilli(Quarter(), 250), 250u);
  EXPECT_EQ(ComputeRequestMilli(Quarter(100), 250), 100u);
  EXPECT_EQ(ComputeRequestMilli(Quarter(600), 250), 600u);  // More time than memory is a request.
  EXPECT_EQ(ComputeRequestMilli(Quarter(std::nullopt, 200), 250), 200u);
  EXPECT_EQ(ComputeRequestMilli(Quarter(300, 500), 250), 300u);
}

TEST(ComputeShare, ThePolicyGivesTheLimitThePodOrJobDidNot) {
  EXPECT_EQ(DecideComputePair(250, std::nullopt, ComputePolicy::kFair), (ComputePair{250, 1000}));
  EXPECT_EQ(DecideComputePair(250, std::nullopt, ComputePolicy::kStrict), (ComputePair{250, 250}));
  EXPECT_EQ(DecideComputePair(250, 600, ComputePolicy::kStrict), (ComputePair{250, 600}));
  EXPECT_EQ(DecideComputePair(250, 600, ComputePolicy::kFair), (ComputePair{250, 600}));
  // A limit below the request (a record placement did not write) is the request.
  EXPECT_EQ(DecideComputePair(250, 100, ComputePolicy::kFair), (ComputePair{250, 250}));
}

TEST(ComputeShare, NothingIsArbitratedWithThePolicyOffOrOnAllOfAGpu) {
  EXPECT_EQ(DecideComputePair(250, 600, ComputePolicy::kOff), std::nullopt);
  EXPECT_EQ(DecideComputePair(1000, std::nullopt, ComputePolicy::kFair), std::nullopt);
  EXPECT_EQ(DecideComputePair(0, std::nullopt, ComputePolicy::kStrict), std::nullopt);
}

TEST(ComputeShare, PoliciesAreNamedAsTheFlagsAndQueuesSpellThem) {
  for (ComputePolicy p : {ComputePolicy::kFair, ComputePolicy::kStrict, ComputePolicy::kOff}) {
    EXPECT_EQ(ParseComputePolicy(ComputePolicyName(p)), p);
  }
  EXPECT_EQ(ParseComputePolicy("Fair"), std::nullopt);
  EXPECT_EQ(ParseComputePolicy(""), std::nullopt);
}

TEST(ComputeShare, MpsGetsWholePercentsRoundedUp) {
  EXPECT_EQ(MpsThreadPercentage(1), 1u);
  EXPECT_EQ(MpsThreadPercentage(250), 25u);
  EXPECT_EQ(MpsThreadPercentage(251), 26u);
  EXPECT_EQ(MpsThreadPercentage(1000), 100u);
}

}  // namespace
}  // namespace gpufrac
