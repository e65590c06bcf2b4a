// Simulated compute engine: without gpufrac, processes sharing a GPU are time-sliced as NVIDIA's
// scheduler does it. Saturating processes get equal shares whatever else they do, an idle one
// gets nothing, a long kernel is preempted at slice ends, a killed process stalls nobody, and
// separate GPUs or MIG instances do not slow each other down. Shares are read from the
// simulator's ground truth (engine_truth.h).
#include <grp.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <map>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "../progs/spin_kernel.h"
#include "gpu/catalogue.h"
#include "gpu/process_gpu_time.h"
#include "simgpu/core/engine.h"
#include "simgpu/core/engine_truth.h"
#include "simgpu/core/shared_machine.h"
#include "simgpu/core/sim_time.h"
#include "simgpu_test_util.h"

namespace gpufrac::simgpu::testing {
namespace {

using Clock = std::chrono::steady_clock;

#define ASSERT_NVML(expr) ASSERT_EQ(::gpufrac::abi::NVML_SUCCESS, (expr))
#define EXPECT_NVML(expr) EXPECT_EQ(::gpufrac::abi::NVML_SUCCESS, (expr))

double MillisecondsSince(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

void SleepMs(int ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }

abi::CUfunction LoadKernel() {
  abi::CUmodule module = nullptr;
  EXPECT_CU(cuModuleLoadData(&module, kSpinPtx));
  abi::CUfunction function = nullptr;
  EXPECT_CU(cuModuleGetFunction(&function, module, "spin"));
  return function;
}

// The SM count of the current context's device.
int SmCount() {
  abi::CUdevice device = 0;
  EXPECT_CU(cuCtxGetDevice(&device));
  int sms = 0;
  EXPECT_CU(cuDeviceGetAttribute(&sms, abi::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, device));
  return sms;
}

// Queues `count` kernels of about `ms` each, back to back on the legacy stream.
void LaunchKernels(abi::CUfunction kernel, int count, double ms) {
  const double threads =
      (ms * 1000 - kKernelLaunchLatencyNs / 1000.0) * SmCount() * kResidentThreadsPerSm;
  const auto blocks = static_cast<unsigned int>(threads / 1024);
  for (int i = 0; i < count; ++i) {
    ASSERT_CU(cuLaunchKernel(kernel, blocks, 1, 1, 1024, 1, 1, 0, nullptr, nullptr, nullptr));
  }
}

// Milliseconds the GPU spends on the work `queue` puts on the legacy stream, read from two
// events recorded around it. A 20 ms lead kernel keeps the stream busy while the host queues the
// first event, the work and the second, so a busy host's late wake-ups are not counted.
template <typename Queue>
double GpuMsOf(abi::CUfunction kernel, Queue queue) {
  abi::CUevent begin = nullptr, end = nullptr;
  EXPECT_CU(cuEventCreate(&begin, abi::CU_EVENT_DEFAULT));
  EXPECT_CU(cuEventCreate(&end, abi::CU_EVENT_DEFAULT));
  LaunchKernels(kernel, 1, 20.0);
  EXPECT_CU(cuEventRecord(begin, nullptr));
  queue();
  EXPECT_CU(cuEventRecord(end, nullptr));
  EXPECT_CU(cuEventSynchronize(end));
  float ms = -1;
  EXPECT_CU(cuEventElapsedTime(&ms, begin, end));
  EXPECT_CU(cuEventDestroy_v2(begin));
  EXPECT_CU(cuEventDestroy_v2(end));
  return ms;
}

// A helper that queues `seconds` of 1 ms kernels on device `ordinal`, says 'R', and exits
// (dropping what is still queued) when told anything.
void Saturate(Helper& self, double seconds, int ordinal = 0) {
  InitAndUsePrimary(ordinal);
  LaunchKernels(LoadKernel(), static_cast<int>(seconds * 1000), 1.0);
  self.Send('R');
  self.Receive();
}

std::uint64_t ProcessNs(pid_t pid, unsigned int gpu = 0) {
  unsigned long long ns = 0;
  EXPECT_NVML(simgpuGetProcessEngineTime(gpu, static_cast<unsigned int>(pid), &ns));
  return ns;
}

std::uint64_t BusyNs(unsigned int gpu = 0) {
  unsigned long long ns = 0;
  EXPECT_NVML(simgpuGetEngineBusyTime(gpu, &ns));
  return ns;
}

// Each helper's engine time over `window_ms` of wall time, as fractions of the window; also the
// device's busy fraction over it.
std::vector<double> MeasureShares(const std::vector<Helper*>& helpers, int window_ms,
                                  double* busy_fraction) {
  std::vector<std::uint64_t> before;
  for (Helper* helper : helpers) before.push_back(ProcessNs(helper->pid()));
  const std::uint64_t busy_before = BusyNs();
  const Clock::time_point start = Clock::now();
  SleepMs(window_ms);
  // As fractions of the time that passed: a loaded host oversleeps the window.
  std::vector<std::uint64_t> after;
  for (Helper* helper : helpers) after.push_back(ProcessNs(helper->pid()));
  const std::uint64_t busy_after = BusyNs();
  const double elapsed = MillisecondsSince(start);
  std::vector<double> shares;
  for (std::size_t i = 0; i < helpers.size(); ++i) {
    shares.push_back((after[i] - before[i]) / 1e6 / elapsed);
  }
  *busy_fraction = (busy_after - busy_before) / 1e6 / elapsed;
  return shares;
}

// From here on the process is user `uid` (the test runs as root).
void BecomeUser(uid_t uid) {
  ASSERT_EQ(0, ::setgroups(0, nullptr));
  ASSERT_EQ(0, ::setgid(uid));
  ASSERT_EQ(0, ::setuid(uid));
}

// Two saturating helpers (`what`) each get half of the GPU over 400 ms, which stays busy; then
// they are told to end, and end cleanly.
void ExpectHalvesThenStop(const char* what, Helper& a, Helper& b) {
  double busy = 0;
  const std::vector<double> shares = MeasureShares({&a, &b}, 400, &busy);
  std::printf("%s: %.3f / %.3f of the GPU, busy %.3f\n", what, shares[0], shares[1], busy);
  EXPECT_NEAR(0.5, shares[0], 0.03);
  EXPECT_NEAR(0.5, shares[1], 0.03);
  EXPECT_NEAR(1.0, busy, 0.03);
  a.Send('Q');
  b.Send('Q');
  EXPECT_EQ(0, a.Wait());
  EXPECT_EQ(0, b.Wait());
}

using SimGpuEngineTest = SimGpuTest;

TEST_F(SimGpuEngineTest, TwoSaturatingProcessesSplitTheGpuInHalves) {
  RunInChild("1xH100-80GB", [] {
    Helper a([](Helper& self) { Saturate(self, 2.0); });
    Helper b([](Helper& self) { Saturate(self, 2.0); });
    ASSERT_EQ('R', a.Receive());
    ASSERT_EQ('R', b.Receive());
    ExpectHalvesThenStop("two processes", a, b);
  });
}

// One GPU for every user of the host: two users' saturating processes split its engine time, and
// what one user's process holds of its memory the other's cannot have.
TEST_F(SimGpuEngineTest, TwoUsersSaturatingProcessesShareOneGpu) {
  if (::getuid() != 0) GTEST_SKIP() << "needs root to run processes as two users";
  RunInChild("1xH100-80GB", [] {
    // The first to start creates the machine, the other joins it.
    Helper a([](Helper& self) {
      BecomeUser(65534);
      ASSERT_FALSE(::testing::Test::HasFatalFailure()) << "still root: not a second user";
      InitAndUsePrimary(0);
      abi::CUdeviceptr held = 0;
      ASSERT_CU(cuMemAlloc_v2(&held, 60 * kGiB));
      Saturate(self, 2.0);
    });
    ASSERT_EQ('R', a.Receive());
    Helper b([](Helper& self) {
      BecomeUser(65533);
      ASSERT_FALSE(::testing::Test::HasFatalFailure()) << "still root: not a second user";
      InitAndUsePrimary(0);
      std::size_t free = 0, total = 0;
      ASSERT_CU(cuMemGetInfo_v2(&free, &total));
      EXPECT_LT(free, 20 * kGiB) << "the other user's 60 GiB are in use";
      abi::CUdeviceptr pointer = 0;
      EXPECT_EQ(abi::CUDA_ERROR_OUT_OF_MEMORY, cuMemAlloc_v2(&pointer, 30 * kGiB));
      Saturate(self, 2.0);
    });
    ASSERT_EQ('R', b.Receive());
    ExpectHalvesThenStop("two users' processes", a, b);
  });
}

TEST_F(SimGpuEngineTest, ThreeSaturatingProcessesGetAThirdEach) {
  RunInChild("1xH100-80GB", {{"SIMGPU_TIMESLICE_US", "1000"}}, [] {
    Helper a([](Helper& self) { Saturate(self, 2.0); });
    Helper b([](Helper& self) { Saturate(self, 2.0); });
    Helper c([](Helper& self) { Saturate(self, 2.0); });
    ASSERT_EQ('R', a.Receive());
    ASSERT_EQ('R', b.Receive());
    ASSERT_EQ('R', c.Receive());
    double busy = 0;
    const std::vector<double> shares = MeasureShares({&a, &b, &c}, 450, &busy);
    std::printf("three processes: %.3f / %.3f / %.3f, busy %.3f\n", shares[0], shares[1], shares[2],
                busy);
    for (double share : shares) EXPECT_NEAR(1.0 / 3, share, 0.03);
    EXPECT_NEAR(1.0, busy, 0.03);
    for (Helper* helper : {&a, &b, &c}) helper->Send('Q');
  });
}

TEST_F(SimGpuEngineTest, ALongKernelIsTimeSlicedWithAnotherProcess) {
  RunInChild("1xH100-80GB", [] {
    Helper busy([](Helper& self) { Saturate(self, 2.0); });
    ASSERT_EQ('R', busy.Receive());
    const pid_t other = busy.pid();
    Helper longer([other](Helper& self) {
      const abi::CUcontext context = InitAndUsePrimary();
      abi::CUfunction kernel = LoadKernel();
      const std::uint64_t other_before = ProcessNs(other);
      const double took = GpuMsOf(kernel, [&] { LaunchKernels(kernel, 1, 100.0); });  // 50 slices
      const double other_ms = (ProcessNs(other) - other_before) / 1e6;
      unsigned long long own = 0;
      ASSERT_CU(simgpuCtxGetEngineTime(context, &own));
      std::printf(
          "100 ms kernel next to a busy process: done after %.1f ms on the GPU; it ran %.1f ms, "
          "the other %.1f ms\n",
          took, own / 1e6, other_ms);
      // Half of the GPU: twice as long, with the other process progressing all along (at least
      // the other half meanwhile; more when this host woke the test late).
      EXPECT_NEAR(200.0, took, 2.0);
      EXPECT_NEAR(120.0, own / 1e6, 1.0);  // with the 20 ms lead kernel
      EXPECT_GE(other_ms, 98.0);
      self.Send('D');
    });
    EXPECT_EQ('D', longer.Receive());
    EXPECT_EQ(0, longer.Wait());
    busy.Send('Q');
  });
}

TEST_F(SimGpuEngineTest, AnIdleProcessGetsNothingAndTheOtherGetsEverything) {
  RunInChild("1xH100-80GB", [] {
    Helper idle([](Helper& self) {
      InitAndUsePrimary();
      self.Send('R');
      self.Receive();
    });
    Helper busy([](Helper& self) { Saturate(self, 2.0); });
    ASSERT_EQ('R', idle.Receive());
    ASSERT_EQ('R', busy.Receive());
    double fraction = 0;
    const std::vector<double> shares = MeasureShares({&idle, &busy}, 300, &fraction);
    std::printf("idle and busy: %.3f / %.3f\n", shares[0], shares[1]);
    EXPECT_EQ(0.0, shares[0]);
    EXPECT_NEAR(1.0, shares[1], 0.02);
    idle.Send('Q');
    busy.Send('Q');
  });
}

TEST_F(SimGpuEngineTest, AKilledProcessDoesNotStallTheOthers) {
  RunInChild("1xH100-80GB", [] {
    InitAndUsePrimary();
    abi::CUfunction kernel = LoadKernel();
    Helper victim([](Helper& self) { Saturate(self, 30.0); });
    ASSERT_EQ('R', victim.Receive());
    ASSERT_EQ(0, ::kill(victim.pid(), SIGKILL));
    victim.Wait();
    // Its 30 s of queued work went with it: 100 ms of work takes 100 ms on the GPU, not 200.
    const double took = GpuMsOf(kernel, [&] { LaunchKernels(kernel, 100, 1.0); });
    std::printf("100 ms of work after the other process was killed: %.1f ms on the GPU\n", took);
    EXPECT_NEAR(100.0, took, 2.0);
  });
}

// Killed processes leave no contexts behind: more of them than the engine has room for, none of
// which ever waited on the GPU (nothing else looked for dead contexts meanwhile), do not keep a
// new process from making its context.
TEST_F(SimGpuEngineTest, KilledProcessesContextsDoNotFillTheGpu) {
  RunInChild("1xH100-80GB", [] {
    for (int i = 0; i < kEngineClientsPerDevice + 8; ++i) {
      Helper victim([](Helper& self) {
        self.Send(InitAndUsePrimary() != nullptr ? 'R' : 'F');
        self.Receive();
      });
      ASSERT_EQ('R', victim.Receive()) << "process " << i << " got no context";
      ASSERT_EQ(0, ::kill(victim.pid(), SIGKILL));
      victim.Wait();
    }
    EXPECT_NE(nullptr, InitAndUsePrimary());
  });
}

TEST_F(SimGpuEngineTest, ASingleProcessRunsAtFullSpeedWhateverTheSlice) {
  RunInChild("1xH100-80GB", {{"SIMGPU_TIMESLICE_US", "500"}}, [] {
    const abi::CUcontext context = InitAndUsePrimary();
    abi::CUfunction kernel = LoadKernel();
    abi::CUevent begin = nullptr, end = nullptr;
    ASSERT_CU(cuEventCreate(&begin, abi::CU_EVENT_DEFAULT));
    ASSERT_CU(cuEventCreate(&end, abi::CU_EVENT_DEFAULT));
    // Ten groups of 5 ms of work, each queued on an idle GPU and timed by the GPU's own events,
    // so a busy host's late wake-ups are not counted. Slices that held the lone process back
    // would lengthen every group; a host descheduled between the first event and the first
    // launch lengthens only that group: the median must be the work's time.
    unsigned long long own_before = 0, own = 0;
    ASSERT_CU(simgpuCtxGetEngineTime(context, &own_before));
    const std::uint64_t busy_before = BusyNs();
    const Clock::time_point start = Clock::now();
    std::vector<double> groups;
    for (int i = 0; i < 10; ++i) {
      ASSERT_CU(cuEventRecord(begin, nullptr));
      LaunchKernels(kernel, 5, 1.0);
      ASSERT_CU(cuEventRecord(end, nullptr));
      ASSERT_CU(cuEventSynchronize(end));
      float ms = 0;
      ASSERT_CU(cuEventElapsedTime(&ms, begin, end));
      groups.push_back(ms);
    }
    const double took = MillisecondsSince(start);
    ASSERT_CU(simgpuCtxGetEngineTime(context, &own));
    std::sort(groups.begin(), groups.end());
    std::printf(
        "50 ms of work alone in 10 groups: %.2f ms, engine time %.2f ms, groups on the GPU "
        "%.3f (fastest) / %.3f (median) / %.3f (slowest) ms\n",
        took, (own - own_before) / 1e6, groups.front(), groups[5], groups.back());
    EXPECT_GE(took, 50.0);
    EXPECT_NEAR(50.0, (own - own_before) / 1e6, 0.01);
    EXPECT_NEAR(50.0, (BusyNs() - busy_before) / 1e6, 0.01);
    EXPECT_NEAR(5.0, groups[5], 0.05);
    EXPECT_GE(groups.front(), 4.99);
    EXPECT_CU(cuEventDestroy_v2(begin));
    EXPECT_CU(cuEventDestroy_v2(end));
  });
}

TEST_F(SimGpuEngineTest, UtilizationIsTheBusyPartOfTheLastSamplePeriod) {
  RunInChild("1xH100-80GB", [] {
    ASSERT_NVML(nvmlInit_v2());
    abi::nvmlDevice_t device = nullptr;
    ASSERT_NVML(nvmlDeviceGetHandleByIndex_v2(0, &device));
    abi::nvmlUtilization_t utilization{};
    ASSERT_NVML(nvmlDeviceGetUtilizationRates(device, &utilization));
    EXPECT_EQ(0u, utilization.gpu);
    EXPECT_EQ(abi::NVML_ERROR_INVALID_ARGUMENT, nvmlDeviceGetUtilizationRates(device, nullptr));
    {
      Helper busy([](Helper& self) { Saturate(self, 2.0); });
      ASSERT_EQ('R', busy.Receive());
      SleepMs(350);  // two sample periods
      ASSERT_NVML(nvmlDeviceGetUtilizationRates(device, &utilization));
      EXPECT_EQ(100u, utilization.gpu);
      EXPECT_EQ(0u, utilization.memory);
      busy.Send('Q');
      EXPECT_EQ(0, busy.Wait());
    }
    SleepMs(350);
    ASSERT_NVML(nvmlDeviceGetUtilizationRates(device, &utilization));
    EXPECT_EQ(0u, utilization.gpu);
    EXPECT_NVML(nvmlShutdown());
  });
}

// NVML's per-process samples: one per process that had engine time in the last complete sample
// period, its part of the period in percent, stamped with the period's end; a process without
// work has none, and a caller gets only samples newer than the last one it saw.
TEST_F(SimGpuEngineTest, ProcessUtilizationIsEachProcesssPartOfTheLastSamplePeriod) {
  RunInChild("1xH100-80GB", [] {
    ASSERT_NVML(nvmlInit_v2());
    abi::nvmlDevice_t device = nullptr;
    ASSERT_NVML(nvmlDeviceGetHandleByIndex_v2(0, &device));
    unsigned int count = 0;
    EXPECT_EQ(abi::NVML_ERROR_NOT_FOUND, nvmlDeviceGetProcessUtilization(device, nullptr, &count, 0));
    EXPECT_EQ(abi::NVML_ERROR_INVALID_ARGUMENT,
              nvmlDeviceGetProcessUtilization(device, nullptr, nullptr, 0));
    Helper a([](Helper& self) { Saturate(self, 2.0); });
    Helper b([](Helper& self) { Saturate(self, 2.0); });
    Helper idle([](Helper& self) {
      InitAndUsePrimary();
      self.Send('R');
      self.Receive();
    });
    ASSERT_EQ('R', a.Receive());
    ASSERT_EQ('R', b.Receive());
    ASSERT_EQ('R', idle.Receive());
    SleepMs(350);  // two sample periods
    ASSERT_EQ(abi::NVML_ERROR_INSUFFICIENT_SIZE,
              nvmlDeviceGetProcessUtilization(device, nullptr, &count, 0));
    EXPECT_EQ(2u, count);
    abi::nvmlProcessUtilizationSample_t samples[4] = {};
    count = 1;
    EXPECT_EQ(abi::NVML_ERROR_INSUFFICIENT_SIZE,
              nvmlDeviceGetProcessUtilization(device, samples, &count, 0));
    EXPECT_EQ(2u, count);
    count = 4;
    ASSERT_NVML(nvmlDeviceGetProcessUtilization(device, samples, &count, 0));
    ASSERT_EQ(2u, count);
    const auto real_us = static_cast<unsigned long long>(
        std::chrono::duration_cast<std::chrono::microseconds>(
            std::chrono::system_clock::now().time_since_epoch())
            .count());
    for (unsigned int i = 0; i < count; ++i) {
      std::printf("pid %u: sm %u%% at %llu us\n", samples[i].pid, samples[i].smUtil,
                  samples[i].timeStamp);
      EXPECT_TRUE(samples[i].pid == static_cast<unsigned int>(a.pid()) ||
                  samples[i].pid == static_cast<unsigned int>(b.pid()));
      EXPECT_NEAR(50.0, samples[i].smUtil, 3.0);
      EXPECT_EQ(0u, samples[i].memUtil);
      EXPECT_LE(samples[i].timeStamp, real_us);
      EXPECT_GE(samples[i].timeStamp + kUtilizationPeriodNs / 1000 + 50000, real_us);
      EXPECT_EQ(samples[0].timeStamp, samples[i].timeStamp) << "one period for all";
    }
    EXPECT_NE(samples[0].pid, samples[1].pid);
    // Only newer samples: none, or those of a period that ended since.
    const unsigned long long seen = samples[0].timeStamp;
    count = 4;
    const abi::nvmlReturn_t again = nvmlDeviceGetProcessUtilization(device, samples, &count, seen);
    if (again == abi::NVML_SUCCESS) {
      for (unsigned int i = 0; i < count; ++i) EXPECT_GT(samples[i].timeStamp, seen);
    } else {
      EXPECT_EQ(abi::NVML_ERROR_NOT_FOUND, again);
    }
    a.Send('Q');
    b.Send('Q');
    idle.Send('Q');
    EXPECT_EQ(0, a.Wait());
    EXPECT_EQ(0, b.Wait());
    EXPECT_EQ(0, idle.Wait());
    EXPECT_NVML(nvmlShutdown());
  });
}

// gpufrac's meter of the driver's samples (gpu/process_gpu_time.h), polled every 50 ms, adds up
// to each process's engine time within a sample period at each end of the window.
TEST_F(SimGpuEngineTest, TheGpuTimeMeterAddsUpEachProcesssSamples) {
  RunInChild("1xH100-80GB", [] {
    Helper a([](Helper& self) { Saturate(self, 3.0); });
    Helper b([](Helper& self) { Saturate(self, 3.0); });
    ASSERT_EQ('R', a.Receive());
    ASSERT_EQ('R', b.Receive());
    auto meter =
        gpu::GpuTimeMeter::Open(std::string(GPUFRAC_SIMGPU_DIR) + "/libnvidia-ml.so.1", {0});
    ASSERT_TRUE(meter.ok()) << meter.status();
    SleepMs(350);
    (*meter)->Poll();  // what came before the window
    const unsigned long long counted_from = (*meter)->CountedUntilUs().at(0).second;
    const std::uint64_t a_before = ProcessNs(a.pid()), b_before = ProcessNs(b.pid());
    std::map<pid_t, std::uint64_t> measured;
    for (int i = 0; i < 30; ++i) {
      SleepMs(50);
      for (const gpu::GpuTimeMeter::Use& use : (*meter)->Poll()) {
        EXPECT_EQ(0, use.gpu);
        measured[use.pid] += use.ns;
      }
    }
    const double truth_a = (ProcessNs(a.pid()) - a_before) / 1e9;
    const double truth_b = (ProcessNs(b.pid()) - b_before) / 1e9;
    const double got_a = measured[a.pid()] / 1e9, got_b = measured[b.pid()] / 1e9;
    std::printf("engine time %.3f / %.3f s, the meter's %.3f / %.3f s\n", truth_a, truth_b, got_a,
                got_b);
    // Half of a period at each end of the window, at the process's half of the engine.
    const double slack = kUtilizationPeriodNs / 1e9 / 2;
    EXPECT_NEAR(truth_a, got_a, slack);
    EXPECT_NEAR(truth_b, got_b, slack);
    EXPECT_GT(got_a, 0.3);
    EXPECT_EQ(measured.size(), 2u) << "no one else used the GPU";
    // The counts come a period at a time; over the time they are counted for (not the time
    // between the polls) the two saturating processes used the whole GPU.
    const double counted_s = ((*meter)->CountedUntilUs().at(0).second - counted_from) / 1e6;
    std::printf("counted over %.3f s: %.4f of the GPU\n", counted_s, (got_a + got_b) / counted_s);
    EXPECT_NEAR((got_a + got_b) / counted_s, 1.0, 0.02);
    a.Send('Q');
    b.Send('Q');
    EXPECT_EQ(0, a.Wait());
    EXPECT_EQ(0, b.Wait());
  });
}

// Each helper waits for 'G', runs 100 ms of work on its device and checks it took 100 ms.
void RunAlone(Helper& self, const char* visible) {
  if (visible != nullptr) ::setenv("CUDA_VISIBLE_DEVICES", visible, 1);
  const abi::CUcontext context = InitAndUsePrimary();
  abi::CUfunction kernel = LoadKernel();
  self.Send('R');
  ASSERT_EQ('G', self.Receive());
  const double took = GpuMsOf(kernel, [&] { LaunchKernels(kernel, 100, 1.0); });
  unsigned long long own = 0;
  ASSERT_CU(simgpuCtxGetEngineTime(context, &own));
  std::printf("100 ms of work next to another device's: %.1f ms on the GPU (engine time %.1f ms)\n",
              took, own / 1e6);
  EXPECT_NEAR(120.0, own / 1e6, 0.5);  // with the 20 ms lead kernel
  EXPECT_NEAR(100.0, took, 1.0);
  self.Send('D');
}

TEST_F(SimGpuEngineTest, TwoGpusDoNotSlowEachOtherDown) {
  RunInChild("2xH100-80GB", [] {
    Helper a([](Helper& self) { RunAlone(self, "0"); });
    Helper b([](Helper& self) { RunAlone(self, "1"); });
    ASSERT_EQ('R', a.Receive());
    ASSERT_EQ('R', b.Receive());
    a.Send('G');
    b.Send('G');
    EXPECT_EQ('D', a.Receive());
    EXPECT_EQ('D', b.Receive());
    EXPECT_EQ(0, a.Wait());
    EXPECT_EQ(0, b.Wait());
  });
}

TEST_F(SimGpuEngineTest, TwoMigInstancesDoNotSlowEachOtherDown) {
  RunInChild("1xA100-40GB:mig", [] {
    ASSERT_NVML(nvmlInit_v2());
    abi::nvmlDevice_t gpu = nullptr;
    ASSERT_NVML(nvmlDeviceGetHandleByIndex_v2(0, &gpu));
    abi::nvmlGpuInstanceProfileInfo_t profile{};
    ASSERT_NVML(
        nvmlDeviceGetGpuInstanceProfileInfo(gpu, abi::NVML_GPU_INSTANCE_PROFILE_3_SLICE, &profile));
    std::vector<std::string> uuids;
    for (int i = 0; i < 2; ++i) {
      abi::nvmlGpuInstance_t instance = nullptr;
      ASSERT_NVML(nvmlDeviceCreateGpuInstance(gpu, profile.id, &instance));
      abi::nvmlComputeInstanceProfileInfo_t compute_profile{};
      ASSERT_NVML(nvmlGpuInstanceGetComputeInstanceProfileInfo(
          instance, abi::NVML_COMPUTE_INSTANCE_PROFILE_3_SLICE,
          abi::NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED, &compute_profile));
      abi::nvmlComputeInstance_t compute = nullptr;
      ASSERT_NVML(nvmlGpuInstanceCreateComputeInstance(instance, compute_profile.id, &compute));
      abi::nvmlDevice_t mig = nullptr;
      ASSERT_NVML(nvmlDeviceGetMigDeviceHandleByIndex(gpu, static_cast<unsigned int>(i), &mig));
      char uuid[96] = {};
      ASSERT_NVML(nvmlDeviceGetUUID(mig, uuid, sizeof(uuid)));
      uuids.push_back(uuid);
    }
    const std::string first = uuids[0];
    const std::string second = uuids[1];
    Helper a([&first](Helper& self) { RunAlone(self, first.c_str()); });
    Helper b([&second](Helper& self) { RunAlone(self, second.c_str()); });
    ASSERT_EQ('R', a.Receive());
    ASSERT_EQ('R', b.Receive());
    a.Send('G');
    b.Send('G');
    EXPECT_EQ('D', a.Receive());
    EXPECT_EQ('D', b.Receive());
    EXPECT_EQ(0, a.Wait());
    EXPECT_EQ(0, b.Wait());
    EXPECT_NVML(nvmlShutdown());
  });
}

}  // namespace
}  // namespace gpufrac::simgpu::testing
