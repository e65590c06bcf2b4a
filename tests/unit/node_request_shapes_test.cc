// The queue scheduler's shape cache: equal requests share one translation, worked out once per
// group, and it goes with the last job that uses it.
#include <gtest/gtest.h>

#include "node/request_shapes.h"

namespace gpufrac::node {
namespace {

constexpr uint64_t kGiB = uint64_t{1} << 30;

TEST(RequestShapesTest, EqualRequestsShareOneTranslationPerGroup) {
  std::vector<placement::GpuGroup> groups = *placement::GroupHostGpus(
      {{"A30-24GB", 24 * kGiB, kGiB, false}, {"H100-80GB", 80 * kGiB, kGiB, false}});
  RequestShapes shapes(&groups);
  RequestShape* a = shapes.Acquire(GpuRequest::Memory(20 * kGiB));
  RequestShape* b = shapes.Acquire(GpuRequest::Memory(20 * kGiB));
  EXPECT_EQ(a, b);
  EXPECT_EQ(shapes.size(), 1u);
  ASSERT_EQ(a->on.size(), 2u);
  EXPECT_TRUE(a->on[0].ok);
  EXPECT_EQ(a->on[0].request.gpu_milli, 834u);  // ceil(1000 x 20 / 24).
  EXPECT_EQ(a->on[1].request.gpu_milli, 250u);
  EXPECT_EQ(a->valid, 0b11u);
  ASSERT_TRUE(a->MixKey());
  EXPECT_EQ(a->MixKey()->gpu_milli, 834u);  // On the first (smallest) group that holds it.

  RequestShape* big = shapes.Acquire(GpuRequest::Memory(40 * kGiB));
  EXPECT_FALSE(big->on[0].ok);
  EXPECT_EQ(big->valid, 0b10u);
  RequestShape* never = shapes.Acquire(GpuRequest::Memory(100 * kGiB));
  EXPECT_EQ(never->valid, 0u);
  EXPECT_FALSE(never->MixKey());

  shapes.Release(a);
  EXPECT_EQ(shapes.size(), 3u);  // b still holds it.
  shapes.Release(b);
  shapes.Release(big);
  shapes.Release(never);
  EXPECT_EQ(shapes.size(), 0u);
}

}  // namespace
}  // namespace gpufrac::node
