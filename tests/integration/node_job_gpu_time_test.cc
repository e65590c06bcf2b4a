// node::JobGpuTime on the simulated GPU: what it reports for jobs it cannot measure. (What it
// measures for jobs it can is checked through the service, NodeService.StatusShowsTheGpuTime...)
#include "node/job_gpu_time.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <thread>

#include "harness.h"

namespace gpufrac::node {
namespace {

using namespace std::chrono_literals;

// A job whose cgroup is not there (a service that is not root makes none) is not measured: its
// GPU time is unknown, not 0, so that status falls back to what its arbiter charged.
TEST(JobGpuTime, AJobWhoseCgroupIsNotFoundIsNotMeasured) {
  testing::SimMachine machine;
  for (const auto& [name, value] : machine.Env()) setenv(name.c_str(), value.c_str(), 1);
  auto meter = gpu::GpuTimeMeter::Open(testing::BuildPath("lib/simgpu/libnvidia-ml.so.1"), {0});
  ASSERT_TRUE(meter.ok()) << meter.status();
  JobGpuTime time(std::move(*meter));
  time.Track(7, "gpufrac-test-no-such-workload");
  std::this_thread::sleep_for(4 * JobGpuTime::kPollInterval);
  EXPECT_FALSE(time.UsedNs(7, 0).has_value());
  EXPECT_FALSE(time.UsedNs(8, 0).has_value()) << "not tracked";
  time.Forget(7);
  EXPECT_FALSE(time.UsedNs(7, 0).has_value());
}

// Without a meter (no NVML, or one without per-process samples) nothing is measured.
TEST(JobGpuTime, WithoutAMeterNothingIsMeasured) {
  JobGpuTime time(nullptr);
  time.Track(1, "w");
  EXPECT_FALSE(time.UsedNs(1, 0).has_value());
}

}  // namespace
}  // namespace gpufrac::node
