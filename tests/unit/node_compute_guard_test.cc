// ComputeGuard: which workloads are over their compute shares, from measured GPU time, and how
// long each is to be held.
#include "node/compute_guard.h"

#include <gtest/gtest.h>

#include <map>
#include <vector>

namespace gpufrac::node {
namespace {

// One GPU's workloads, advanced a window at a time by the part of it each used.
class OneGpu {
 public:
  explicit OneGpu(ComputeGuard* guard) : guard_(guard) {}
  void Add(int64_t job, uint32_t request, uint32_t limit) { pairs_[job] = {request, limit}; }
  void Window(const std::map<int64_t, double>& used) {
    if (now_ms_ == 0) Feed();  // the first totals
    now_ms_ += ComputeGuard::kWindowMs;
    for (const auto& [job, part] : used) {
      total_ns_[job] += static_cast<uint64_t>(part * ComputeGuard::kWindowMs * 1e6);
    }
    Feed();
  }
  ComputeGuard::Verdict Of(int64_t job) const { return guard_->Of(job, 0).value(); }
  int64_t now_ms() const { return now_ms_ + 1; }  // the time of the last window's end

 private:
  void Feed() {
    std::vector<ComputeGuard::Workload> workloads;
    for (const auto& [job, pair] : pairs_) {
      workloads.push_back({.job = job, .compute = pair, .used_ns = total_ns_[job]});
    }
    guard_->Observe(0, now_ms_ + 1, workloads);
  }
  ComputeGuard* guard_;
  std::map<int64_t, ComputePair> pairs_;
  std::map<int64_t, uint64_t> total_ns_;
  int64_t now_ms_ = 0;
};

TEST(ComputeGuardTest, AWorkloadOverItsLimitIsFlaggedAfterTwoWindowsAndLetGoAfterTwoWithin) {
  ComputeGuard guard(false);
  OneGpu gpu(&guard);
  gpu.Add(1, 250, 250);  // strict: never more than a quarter
  gpu.Window({{1, 0.60}});
  EXPECT_EQ(gpu.Of(1).over, ComputeGuard::Over::kNo) << "one window is not enough";
  EXPECT_NEAR(gpu.Of(1).used, 0.60, 1e-6);
  gpu.Window({{1, 0.60}});
  EXPECT_EQ(gpu.Of(1).over, ComputeGuard::Over::kLimit);
  EXPECT_EQ(gpu.Of(1).held, 0) << "not enforcing: flagged only";
  gpu.Window({{1, 0.28}});  // within the tolerance
  EXPECT_EQ(gpu.Of(1).over, ComputeGuard::Over::kLimit);
  gpu.Window({{1, 0.25}});
  EXPECT_EQ(gpu.Of(1).over, ComputeGuard::Over::kNo);
}

TEST(ComputeGuardTest, OverItsRequestOnlyWhileANeighbourThatWantsTheGpuGetsLessThanItsOwn) {
  ComputeGuard guard(false);
  OneGpu gpu(&guard);
  gpu.Add(1, 250, 1000);
  gpu.Add(2, 750, 1000);
  // A neighbour that removed the limiter halves the GPU with one that kept it.
  gpu.Window({{1, 0.5}, {2, 0.5}});
  gpu.Window({{1, 0.5}, {2, 0.5}});
  EXPECT_EQ(gpu.Of(1).over, ComputeGuard::Over::kRequest);
  EXPECT_EQ(gpu.Of(2).over, ComputeGuard::Over::kNo);
  // Idle time on the GPU: nobody was kept from it, so taking more than a request is fair.
  gpu.Window({{1, 0.5}, {2, 0.3}});
  gpu.Window({{1, 0.5}, {2, 0.3}});
  EXPECT_EQ(gpu.Of(1).over, ComputeGuard::Over::kNo);
  // A neighbour that used nothing did not want the GPU: the whole of it is fair.
  gpu.Window({{1, 1.0}, {2, 0.0}});
  gpu.Window({{1, 1.0}, {2, 0.0}});
  EXPECT_EQ(gpu.Of(1).over, ComputeGuard::Over::kNo);
}

TEST(ComputeGuardTest, EnforcingHoldsAWorkloadToWhatItsStarvedNeighbourIsShortAndLetsItGo) {
  ComputeGuard guard(true);
  OneGpu gpu(&guard);
  gpu.Add(1, 250, 1000);
  gpu.Add(2, 750, 1000);
  gpu.Window({{1, 0.5}, {2, 0.5}});
  gpu.Window({{1, 0.5}, {2, 0.5}});
  // Its neighbour is 0.25 short: it is to run half the time, at a quarter of the GPU.
  EXPECT_NEAR(gpu.Of(1).held, 0.5, 1e-6);
  EXPECT_NEAR(guard.Held(1, gpu.now_ms()), 0.5, 1e-6);
  // Samples that stop coming hold nobody.
  EXPECT_EQ(guard.Held(1, gpu.now_ms() + ComputeGuard::kStaleMs + 1), 0);
  EXPECT_EQ(gpu.Of(2).held, 0);
  // Held, each gets its request and the GPU stays busy: the hold stays.
  gpu.Window({{1, 0.25}, {2, 0.75}});
  EXPECT_NEAR(gpu.Of(1).held, 0.5, 1e-6);
  // Its neighbour ended its work: the idle time is given back.
  gpu.Window({{1, 0.25}, {2, 0.0}});
  EXPECT_EQ(gpu.Of(1).held, 0);
  // Alone, what the samples' noise asks (a share read a little above 1) holds nothing.
  gpu.Window({{1, 0.5}, {2, 0.5}});
  gpu.Window({{1, 0.5}, {2, 0.5}});
  ASSERT_GT(gpu.Of(1).held, 0);
  gpu.Window({{1, 0.999 * (1 - gpu.Of(1).held) / (1 - 0.0125)}, {2, 0.0}});
  gpu.Window({{1, 0.999}, {2, 0.0}});
  EXPECT_EQ(gpu.Of(1).held, 0);
  guard.Forget(1);
  EXPECT_FALSE(guard.Of(1, 0).has_value());
}

TEST(ComputeGuardTest, ANeighbourThatWantsLessThanItsRequestCostsOneHeldWindow) {
  // The neighbour wants a tenth of the GPU, which the samples cannot tell from starving at first:
  // one window held shows it took no more when it could, and the hold is not tried again.
  ComputeGuard guard(true);
  OneGpu gpu(&guard);
  gpu.Add(1, 250, 1000);
  gpu.Add(2, 750, 1000);
  int held_windows = 0;
  for (int i = 0; i < 20; ++i) {
    const double used = 0.9 * (1 - guard.Held(1, gpu.now_ms()));  // what the hold leaves
    if (used < 0.85) ++held_windows;
    gpu.Window({{1, used}, {2, 0.1}});
  }
  EXPECT_EQ(held_windows, 1);
  EXPECT_EQ(guard.Held(1, gpu.now_ms()), 0);
}

TEST(ComputeGuardTest, AWorkloadThatArrivesInAWindowIsJudgedFromTheNext) {
  ComputeGuard guard(false);
  constexpr int64_t kWindow = ComputeGuard::kWindowMs;
  constexpr uint64_t kFifthNs = kWindow * 1'000'000 / 5;  // a fifth of a window's time
  std::vector<ComputeGuard::Workload> one = {{.job = 1, .compute = {250, 250}, .used_ns = 0}};
  guard.Observe(0, 0, one);
  one.push_back({.job = 2, .compute = {250, 250}, .used_ns = 25 * kFifthNs});  // earlier use
  guard.Observe(0, kWindow / 2, one);
  one[0].used_ns = kFifthNs;
  one[1].used_ns += kFifthNs;
  guard.Observe(0, kWindow, one);
  EXPECT_NEAR(guard.Of(1, 0)->used, 0.2, 1e-6);
  // Half a window's use would read as a starved neighbour's: it is judged from the next window.
  EXPECT_FALSE(guard.Of(2, 0).has_value());
  one[0].used_ns += kFifthNs;
  one[1].used_ns += 2 * kFifthNs;
  guard.Observe(0, 2 * kWindow, one);
  EXPECT_NEAR(guard.Of(2, 0)->used, 0.4, 1e-6) << "its use before it was seen is not its window's";
}

TEST(ComputeGuardTest, AHoldWaitsForTheFlagAndNeverKeepsAWorkloadBelowItsRequest) {
  ComputeGuard guard(true);
  OneGpu gpu(&guard);
  gpu.Add(1, 250, 1000);
  gpu.Add(2, 750, 1000);
  gpu.Window({{1, 0.5}, {2, 0.5}});
  EXPECT_EQ(gpu.Of(1).held, 0) << "one window over is not a hold";
  gpu.Window({{1, 0.5}, {2, 0.5}});
  EXPECT_NEAR(gpu.Of(1).held, 0.5, 1e-6);
  // Held, it got less than its request (its neighbour took more): after a second such window,
  // it is held less.
  gpu.Window({{1, 0.15}, {2, 0.85}});
  EXPECT_NEAR(gpu.Of(1).held, 0.5, 1e-6);
  gpu.Window({{1, 0.15}, {2, 0.85}});
  EXPECT_NEAR(gpu.Of(1).held, 1 - 0.25 / 0.3, 1e-6);
}

TEST(ComputeGuardTest, TwoWorkloadsOverTheirRequestsShareTheShortfall) {
  ComputeGuard guard(true);
  OneGpu gpu(&guard);
  gpu.Add(1, 100, 1000);
  gpu.Add(2, 100, 1000);
  gpu.Add(3, 800, 1000);
  for (int i = 0; i < 2; ++i) gpu.Window({{1, 0.4}, {2, 0.4}, {3, 0.2}});
  // Short 0.6 of its neighbour's 0.8, each gives up 0.3: 0.1 left, its request.
  EXPECT_NEAR(gpu.Of(1).held, 1 - 0.1 / 0.4, 1e-6);
  EXPECT_NEAR(gpu.Of(2).held, 1 - 0.1 / 0.4, 1e-6);
}

}  // namespace
}  // namespace gpufrac::node
