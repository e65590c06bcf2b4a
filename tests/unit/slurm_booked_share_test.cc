// A step's limits against what Slurm booked for it: shards of a configured size, or a percentage
// of the GPU's MPS units; whole GPUs unchecked (slurm/booked_share.h).
#include <gtest/gtest.h>

#include "slurm/booked_share.h"

namespace gpufrac::slurm {
namespace {

constexpr uint64_t kGiB = uint64_t{1} << 30;

std::vector<gpu::DeviceInfo> OneGpu(uint64_t memory = 40 * kGiB) {
  gpu::DeviceInfo d;
  d.index = 1;
  d.uuid = "GPU-00000001-1111-2222-3333-444444444444";
  d.memory_total = memory;
  return {d};
}

std::vector<launch::LimitedGpu> Limit(uint64_t bytes) {
  return {{.uuid = "GPU-00000001-1111-2222-3333-444444444444", .limit_bytes = bytes}};
}

// Issue 29's review (M5): a user may add either variable to a step, never remove Slurm's. With
// both, the smaller booking on the step's GPU wins: 100000 shards exported into a step on 10 MPS
// units stay 10 units, and a percentage of 100 exported into a step on 2 shards stays 2 shards.
TEST(SlurmBookedShare, AnExportedVariableCannotRaiseWhatSlurmBooked) {
  auto units = BookingFromEnvironment("100000", "10", SharingGres::kEither, 5 * kGiB, OneGpu());
  ASSERT_TRUE(units.ok()) << units.status().message();
  EXPECT_EQ(units->kind, Booking::Kind::kMpsPercent);
  EXPECT_EQ(units->count, 10u);
  auto shards = BookingFromEnvironment("2", "100", SharingGres::kEither, 5 * kGiB, OneGpu());
  ASSERT_TRUE(shards.ok()) << shards.status().message();
  EXPECT_EQ(shards->kind, Booking::Kind::kShards);
  EXPECT_EQ(shards->count, 2u);
}

// plugstack.conf's gres= names the node's sharing GRES: only its variable is read, so a user's
// other one (even one Slurm would never write) changes nothing.
TEST(SlurmBookedShare, OnlyTheNodesSharingGresIsRead) {
  auto mps = BookingFromEnvironment("1", "10", SharingGres::kMps, 5 * kGiB, OneGpu());
  ASSERT_TRUE(mps.ok());
  EXPECT_EQ(mps->kind, Booking::Kind::kMpsPercent);
  EXPECT_EQ(mps->count, 10u);
  auto shard = BookingFromEnvironment("8", "12.5", SharingGres::kShard, 5 * kGiB, OneGpu());
  ASSERT_TRUE(shard.ok()) << shard.status().message();
  EXPECT_EQ(shard->kind, Booking::Kind::kShards);
  EXPECT_EQ(shard->count, 8u);
  EXPECT_EQ(BookingFromEnvironment("8", std::nullopt, SharingGres::kMps)->kind,
            Booking::Kind::kWholeGpus);
  EXPECT_EQ(*ParseSharingGres("shard"), SharingGres::kShard);
  EXPECT_EQ(*ParseSharingGres("mps"), SharingGres::kMps);
  StatusOr<SharingGres> bad = ParseSharingGres("gpu");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("shard or mps"), std::string::npos);
}

TEST(SlurmBookedShare, ReadsWhatSlurmSet) {
  auto shards = BookingFromEnvironment("2", std::nullopt);
  ASSERT_TRUE(shards.ok());
  EXPECT_EQ(shards->kind, Booking::Kind::kShards);
  EXPECT_EQ(shards->count, 2u);
  auto mps = BookingFromEnvironment(std::nullopt, "25");
  ASSERT_TRUE(mps.ok());
  EXPECT_EQ(mps->kind, Booking::Kind::kMpsPercent);
  EXPECT_EQ(mps->count, 25u);
  // Slurm's percentage from the node's shard count when both are declared: held to the GPU.
  EXPECT_EQ(BookingFromEnvironment(std::nullopt, "312")->count, 100u);
  EXPECT_EQ(BookingFromEnvironment("3", "312")->kind, Booking::Kind::kShards);
  EXPECT_EQ(BookingFromEnvironment(std::nullopt, std::nullopt)->kind, Booking::Kind::kWholeGpus);
  EXPECT_FALSE(BookingFromEnvironment("two", std::nullopt).ok());
  EXPECT_FALSE(BookingFromEnvironment(std::nullopt, "-5").ok());
}

// A job booked one 5 GiB shard (plain --gres=shard:1, or --gpu-memory 1G on sbatch): a step
// asking 39 GiB is refused, saying what it may ask; one within its shards runs.
TEST(SlurmBookedShare, AStepGetsNoMoreThanItsShardsHold) {
  const Booking one{.kind = Booking::Kind::kShards, .count = 1};
  Status refused = CheckWithinBooking(one, 5 * kGiB, Limit(39 * kGiB), OneGpu());
  ASSERT_EQ(refused.code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(refused.message(),
            "the step's memory limit on GPU 1, 39 GiB, is more than its 1 shard of 5 GiB hold "
            "(5 GiB): ask for at most 5 GiB, or book more for the job (--gpu-memory or "
            "--gpu-fraction on sbatch/salloc, or --gres=shard:N)");
  EXPECT_TRUE(CheckWithinBooking(one, 5 * kGiB, Limit(5 * kGiB), OneGpu()).ok());
  const Booking two{.kind = Booking::Kind::kShards, .count = 2};
  EXPECT_TRUE(CheckWithinBooking(two, 5 * kGiB, Limit(10 * kGiB), OneGpu()).ok());
  EXPECT_FALSE(CheckWithinBooking(two, 5 * kGiB, Limit(10 * kGiB + 1), OneGpu()).ok());
  // Without the shard size there is nothing to check against: refused, naming the fix.
  Status unknown = CheckWithinBooking(two, 0, Limit(kGiB), OneGpu());
  EXPECT_NE(unknown.message().find("shard_memory="), std::string::npos) << unknown.message();
  // A huge count does not wrap around.
  const Booking many{.kind = Booking::Kind::kShards, .count = UINT32_MAX};
  EXPECT_TRUE(CheckWithinBooking(many, uint64_t{1} << 40, Limit(39 * kGiB), OneGpu()).ok());
}

TEST(SlurmBookedShare, UnderMpsAStepGetsItsPercentageOfTheGpu) {
  const Booking quarter{.kind = Booking::Kind::kMpsPercent, .count = 25};
  EXPECT_TRUE(CheckWithinBooking(quarter, 0, Limit(10 * kGiB), OneGpu()).ok());
  Status refused = CheckWithinBooking(quarter, 0, Limit(11 * kGiB), OneGpu());
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.message().find("25% of the GPU's MPS units hold (10 GiB)"), std::string::npos)
      << refused.message();
  EXPECT_NE(refused.message().find("--gres=mps:N"), std::string::npos) << refused.message();
}

TEST(SlurmBookedShare, WholeGpusAreTheStepsWhole) {
  EXPECT_TRUE(CheckWithinBooking(Booking{}, 0, Limit(40 * kGiB), OneGpu()).ok());
}

// A step that gave none of gpufrac's options is held to all it booked (issue 29: a plain
// --gres=shard:1 job allocated 11 GiB): its shards' memory, at most the GPU's; its MPS
// percentage of the GPU; whole GPUs stay whole. Shards without shard_memory= are refused.
TEST(SlurmBookedShare, AStepWithoutOptionsIsHeldToWhatItBooked) {
  auto shards = BookedRequest({.kind = Booking::Kind::kShards, .count = 2}, 5 * kGiB, OneGpu());
  ASSERT_TRUE(shards.ok()) << shards.status().message();
  ASSERT_TRUE(shards->has_value());
  EXPECT_EQ((*shards)->kind, GpuRequest::Kind::kMemory);
  EXPECT_EQ((*shards)->memory_bytes, 10 * kGiB);
  // 80 shards of 1 GiB on an H100-80GB's 79.6 GiB: the whole GPU, not more.
  auto all =
      BookedRequest({.kind = Booking::Kind::kShards, .count = 80}, kGiB, OneGpu(81559ull << 20));
  ASSERT_TRUE(all.ok() && all->has_value());
  EXPECT_EQ((*all)->memory_bytes, 81559ull << 20);
  auto mps = BookedRequest({.kind = Booking::Kind::kMpsPercent, .count = 25}, 0, OneGpu());
  ASSERT_TRUE(mps.ok() && mps->has_value());
  EXPECT_EQ((*mps)->kind, GpuRequest::Kind::kFraction);
  EXPECT_EQ((*mps)->fraction_milli, 250u);
  auto whole = BookedRequest({}, 5 * kGiB, OneGpu());
  ASSERT_TRUE(whole.ok());
  EXPECT_FALSE(whole->has_value());
  auto unsized = BookedRequest({.kind = Booking::Kind::kShards, .count = 2}, 0, OneGpu());
  ASSERT_FALSE(unsized.ok());
  EXPECT_NE(unsized.status().message().find("no shard_memory="), std::string::npos)
      << unsized.status().message();
}

}  // namespace
}  // namespace gpufrac::slurm
