// Faults on the simulated GPU: NVML event sets (registration, waiting, delivery only to what is
// registered), lost GPUs and faults injected from another process; and gpu::HealthMonitor's
// verdicts on them (application and critical XIDs, ECC errors, lost GPUs, stickiness).
#include <sys/wait.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>

#include "gpu/health.h"
#include "simgpu/core/uuid.h"
#include "simgpu/nvml/fault_injection.h"
#include "simgpu_test_util.h"

namespace gpufrac::simgpu::testing {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

const std::string kNvml = std::string(GPUFRAC_SIMGPU_DIR) + "/libnvidia-ml.so.1";

abi::nvmlDevice_t Handle(unsigned index) {
  abi::nvmlDevice_t device = nullptr;
  EXPECT_EQ(abi::NVML_SUCCESS, nvmlDeviceGetHandleByIndex_v2(index, &device));
  return device;
}

// A new event set with `types` registered on `device`.
abi::nvmlEventSet_t SetFor(abi::nvmlDevice_t device, unsigned long long types) {
  abi::nvmlEventSet_t set = nullptr;
  EXPECT_EQ(abi::NVML_SUCCESS, nvmlEventSetCreate(&set));
  EXPECT_EQ(abi::NVML_SUCCESS, nvmlDeviceRegisterEvents(device, types, set));
  return set;
}

milliseconds Since(Clock::time_point start) {
  return std::chrono::duration_cast<milliseconds>(Clock::now() - start);
}

bool ExitedCleanly(int status) { return WIFEXITED(status) && WEXITSTATUS(status) == 0; }

using SimGpuEventTest = SimGpuTest;

TEST_F(SimGpuEventTest, SupportedTypesAndBadArguments) {
  RunInChild("2xA100-40GB", [] {
    abi::nvmlEventSet_t set = nullptr;
    EXPECT_EQ(abi::NVML_ERROR_UNINITIALIZED, nvmlEventSetCreate(&set));
    ASSERT_EQ(abi::NVML_SUCCESS, nvmlInit_v2());
    abi::nvmlDevice_t gpu = Handle(0);

    unsigned long long types = 0;
    ASSERT_EQ(abi::NVML_SUCCESS, nvmlDeviceGetSupportedEventTypes(gpu, &types));
    EXPECT_NE(0u, types & abi::nvmlEventTypeXidCriticalError);
    EXPECT_NE(0u, types & abi::nvmlEventTypeDoubleBitEccError);
    EXPECT_NE(0u, types & abi::nvmlEventTypeSingleBitEccError);
    EXPECT_EQ(0u, types & abi::nvmlEventTypeClock);  // Kepler only
    EXPECT_EQ(abi::NVML_ERROR_INVALID_ARGUMENT, nvmlDeviceGetSupportedEventTypes(gpu, nullptr));
    EXPECT_EQ(abi::NVML_ERROR_INVALID_ARGUMENT, nvmlEventSetCreate(nullptr));

    ASSERT_EQ(abi::NVML_SUCCESS, nvmlEventSetCreate(&set));
    // A mask with an unsupported type registers nothing, and the set stays usable.
    EXPECT_EQ(abi::NVML_ERROR_NOT_SUPPORTED,
              nvmlDeviceRegisterEvents(
                  gpu, abi::nvmlEventTypeXidCriticalError | abi::nvmlEventTypeClock, set));
    ASSERT_EQ(abi::NVML_SUCCESS, simgpuInjectXid(0, 79));
    abi::nvmlEventData_t data{};
    EXPECT_EQ(abi::NVML_ERROR_TIMEOUT, nvmlEventSetWait_v2(set, &data, 0));

    int not_a_device = 0;
    EXPECT_EQ(abi::NVML_ERROR_INVALID_ARGUMENT,
              nvmlDeviceRegisterEvents(reinterpret_cast<abi::nvmlDevice_t>(&not_a_device),
                                       abi::nvmlEventTypeXidCriticalError, set));
    EXPECT_EQ(abi::NVML_ERROR_INVALID_ARGUMENT, nvmlEventSetWait_v2(set, nullptr, 0));
    EXPECT_EQ(abi::NVML_SUCCESS, nvmlEventSetFree(set));

    EXPECT_EQ(abi::NVML_ERROR_INVALID_ARGUMENT, simgpuInjectXid(2, 79));
    EXPECT_EQ(abi::NVML_ERROR_INVALID_ARGUMENT, simgpuInjectEccError(2, 1));
    EXPECT_EQ(abi::NVML_ERROR_INVALID_ARGUMENT, simgpuSetGpuLost(2, 1));
    EXPECT_STREQ("Timeout", nvmlErrorString(abi::NVML_ERROR_TIMEOUT));
  });
}

TEST_F(SimGpuEventTest, WaitReturnsTimeoutAfterTheTimeout) {
  RunInChild("1xL4", [] {
    ASSERT_EQ(abi::NVML_SUCCESS, nvmlInit_v2());
    abi::nvmlEventSet_t set = SetFor(Handle(0), abi::nvmlEventTypeXidCriticalError);
    abi::nvmlEventData_t data{};
    const auto start = Clock::now();
    EXPECT_EQ(abi::NVML_ERROR_TIMEOUT, nvmlEventSetWait_v2(set, &data, 100));
    EXPECT_GE(Since(start), milliseconds(100));
    EXPECT_LT(Since(start), milliseconds(2000));
    EXPECT_EQ(abi::NVML_SUCCESS, nvmlEventSetFree(set));
    EXPECT_EQ(abi::NVML_SUCCESS, nvmlShutdown());
  });
}

TEST_F(SimGpuEventTest, EventsBeforeRegistrationAreNotRecorded) {
  RunInChild("1xH100-80GB", [] {
    ASSERT_EQ(abi::NVML_SUCCESS, nvmlInit_v2());
    abi::nvmlEventSet_t set = nullptr;
    ASSERT_EQ(abi::NVML_SUCCESS, nvmlEventSetCreate(&set));
    ASSERT_EQ(abi::NVML_SUCCESS, simgpuInjectXid(0, 62));
    ASSERT_EQ(abi::NVML_SUCCESS,
              nvmlDeviceRegisterEvents(Handle(0), abi::nvmlEventTypeXidCriticalError, set));
    abi::nvmlEventData_t data{};
    EXPECT_EQ(abi::NVML_ERROR_TIMEOUT, nvmlEventSetWait_v2(set, &data, 0));
    ASSERT_EQ(abi::NVML_SUCCESS, simgpuInjectXid(0, 63));
    ASSERT_EQ(abi::NVML_SUCCESS, nvmlEventSetWait_v2(set, &data, 0));
    EXPECT_EQ(63u, data.eventData);
    EXPECT_EQ(abi::NVML_ERROR_TIMEOUT, nvmlEventSetWait_v2(set, &data, 0));
  });
}

TEST_F(SimGpuEventTest, FaultsFromAnotherProcessReachOnlyRegisteredSets) {
  RunInChild("2xH100-80GB", [] {
    ASSERT_EQ(abi::NVML_SUCCESS, nvmlInit_v2());
    abi::nvmlDevice_t gpu0 = Handle(0);
    abi::nvmlDevice_t gpu1 = Handle(1);
    abi::nvmlEventSet_t xids_on_1 = SetFor(gpu1, abi::nvmlEventTypeXidCriticalError);
    abi::nvmlEventSet_t dbe_on_0 = SetFor(gpu0, abi::nvmlEventTypeDoubleBitEccError);

    Helper injector([](Helper& self) {
      ASSERT_EQ('G', self.Receive());
      std::this_thread::sleep_for(milliseconds(150));            // the test is waiting by now
      EXPECT_EQ(abi::NVML_SUCCESS, simgpuInjectXid(0, 48));      // GPU 0: not registered
      EXPECT_EQ(abi::NVML_SUCCESS, simgpuInjectEccError(1, 0));  // SBE: not registered
      EXPECT_EQ(abi::NVML_SUCCESS, simgpuInjectXid(1, 79));
      EXPECT_EQ(abi::NVML_SUCCESS, simgpuInjectEccError(0, 1));
      self.Send('D');
    });
    const auto start = Clock::now();
    injector.Send('G');
    abi::nvmlEventData_t data{};
    ASSERT_EQ(abi::NVML_SUCCESS, nvmlEventSetWait_v2(xids_on_1, &data, 5000));
    EXPECT_GE(Since(start), milliseconds(100));   // it blocked until the injection
    EXPECT_LT(Since(start), milliseconds(4000));  // and woke for it
    EXPECT_EQ(gpu1, data.device);
    EXPECT_EQ(abi::nvmlEventTypeXidCriticalError, data.eventType);
    EXPECT_EQ(79u, data.eventData);
    EXPECT_EQ(abi::kNvmlEventNoInstanceId, data.gpuInstanceId);
    EXPECT_EQ(abi::kNvmlEventNoInstanceId, data.computeInstanceId);

    ASSERT_EQ('D', injector.Receive());
    EXPECT_EQ(abi::NVML_ERROR_TIMEOUT, nvmlEventSetWait_v2(xids_on_1, &data, 0));
    ASSERT_EQ(abi::NVML_SUCCESS, nvmlEventSetWait_v2(dbe_on_0, &data, 0));
    EXPECT_EQ(gpu0, data.device);
    EXPECT_EQ(abi::nvmlEventTypeDoubleBitEccError, data.eventType);
    EXPECT_EQ(0u, data.eventData);
    EXPECT_EQ(abi::NVML_ERROR_TIMEOUT, nvmlEventSetWait_v2(dbe_on_0, &data, 0));
    EXPECT_TRUE(ExitedCleanly(injector.Wait()));
  });
}

TEST_F(SimGpuEventTest, LostGpuFailsQueriesAndWaits) {
  RunInChild("2xA100-40GB", [] {
    ASSERT_EQ(abi::NVML_SUCCESS, nvmlInit_v2());
    abi::nvmlDevice_t gpu0 = Handle(0);
    abi::nvmlDevice_t gpu1 = Handle(1);
    abi::nvmlEventSet_t set0 = SetFor(gpu0, abi::nvmlEventTypeXidCriticalError);
    abi::nvmlEventSet_t set1 = SetFor(gpu1, abi::nvmlEventTypeXidCriticalError);

    Helper other([](Helper& self) {
      ASSERT_EQ('G', self.Receive());
      std::this_thread::sleep_for(milliseconds(150));
      EXPECT_EQ(abi::NVML_SUCCESS, simgpuInjectXid(0, 79));
      EXPECT_EQ(abi::NVML_SUCCESS, simgpuSetGpuLost(0, 1));
      self.Send('L');
      ASSERT_EQ('C', self.Receive());
      EXPECT_EQ(abi::NVML_SUCCESS, simgpuSetGpuLost(0, 0));
      self.Send('R');
    });
    other.Send('G');
    // The event recorded before the loss still comes, then the loss ends the wait.
    abi::nvmlEventData_t data{};
    ASSERT_EQ(abi::NVML_SUCCESS, nvmlEventSetWait_v2(set0, &data, 5000));
    EXPECT_EQ(79u, data.eventData);
    ASSERT_EQ('L', other.Receive());
    const auto start = Clock::now();
    EXPECT_EQ(abi::NVML_ERROR_GPU_IS_LOST, nvmlEventSetWait_v2(set0, &data, 2000));
    EXPECT_LT(Since(start), milliseconds(1000));
    EXPECT_EQ(abi::NVML_ERROR_TIMEOUT, nvmlEventSetWait_v2(set1, &data, 0));

    unsigned count = 0;
    EXPECT_EQ(abi::NVML_SUCCESS, nvmlDeviceGetCount_v2(&count));
    EXPECT_EQ(2u, count);  // still counted
    abi::nvmlDevice_t again = nullptr;
    EXPECT_EQ(abi::NVML_ERROR_GPU_IS_LOST, nvmlDeviceGetHandleByIndex_v2(0, &again));
    abi::nvmlMemory_t memory{};
    EXPECT_EQ(abi::NVML_ERROR_GPU_IS_LOST, nvmlDeviceGetMemoryInfo(gpu0, &memory));
    char name[abi::kNvmlDeviceNameV2BufferSize];
    EXPECT_EQ(abi::NVML_ERROR_GPU_IS_LOST, nvmlDeviceGetName(gpu0, name, sizeof(name)));
    unsigned current = 0;
    unsigned pending = 0;
    EXPECT_EQ(abi::NVML_ERROR_GPU_IS_LOST, nvmlDeviceGetMigMode(gpu0, &current, &pending));
    unsigned long long types = 0;
    EXPECT_EQ(abi::NVML_ERROR_GPU_IS_LOST, nvmlDeviceGetSupportedEventTypes(gpu0, &types));
    EXPECT_EQ(abi::NVML_ERROR_GPU_IS_LOST,
              nvmlDeviceRegisterEvents(gpu0, abi::nvmlEventTypeXidCriticalError, set1));
    EXPECT_EQ(abi::NVML_SUCCESS, nvmlDeviceGetMemoryInfo(gpu1, &memory));

    other.Send('C');
    ASSERT_EQ('R', other.Receive());
    EXPECT_EQ(abi::NVML_SUCCESS, nvmlDeviceGetHandleByIndex_v2(0, &again));
    EXPECT_EQ(gpu0, again);
    EXPECT_EQ(abi::NVML_SUCCESS, nvmlDeviceGetMemoryInfo(gpu0, &memory));
    EXPECT_EQ(abi::NVML_ERROR_TIMEOUT, nvmlEventSetWait_v2(set0, &data, 0));
    EXPECT_TRUE(ExitedCleanly(other.Wait()));
  });
}

// ---- gpu::HealthMonitor ------------------------------------------------------------------------

using gpu::GpuHealth;
using gpu::HealthMonitor;
using GpuHealthTest = SimGpuTest;

std::unique_ptr<HealthMonitor> OpenMonitor() {
  auto monitor = HealthMonitor::Open(kNvml);
  EXPECT_TRUE(monitor.ok()) << monitor.status().message();
  return monitor.ok() ? std::move(*monitor) : nullptr;
}

TEST(GpuHealthOpenTest, MissingLibraryIsUnavailable) {
  auto monitor = HealthMonitor::Open("/nonexistent/libnvidia-ml.so.1");
  ASSERT_FALSE(monitor.ok());
  EXPECT_EQ(StatusCode::kUnavailable, monitor.status().code());
}

TEST_F(GpuHealthTest, EveryGpuIsHealthyByDefault) {
  const std::string ns = name_space();
  RunInChild("2xH100-80GB", [ns] {
    auto monitor = OpenMonitor();
    ASSERT_NE(nullptr, monitor);
    const auto start = Clock::now();
    std::vector<GpuHealth> health = monitor->Check(milliseconds(100));
    EXPECT_GE(Since(start), milliseconds(100));  // nothing happened: it waited
    ASSERT_EQ(2u, health.size());
    for (unsigned i = 0; i < 2; ++i) {
      EXPECT_EQ(i, health[i].index);
      EXPECT_EQ(FormatGpuUuid(DeviceUuid(ns, static_cast<int>(i))), health[i].uuid);
      EXPECT_TRUE(health[i].healthy);
      EXPECT_EQ("", health[i].reason);
    }
  });
}

TEST_F(GpuHealthTest, ApplicationXidsKeepTheGpuHealthy) {
  RunInChild("1xA100-80GB", [] {
    auto monitor = OpenMonitor();
    ASSERT_NE(nullptr, monitor);
    for (unsigned long long xid : {13, 31, 43, 45, 68, 109}) {
      ASSERT_EQ(abi::NVML_SUCCESS, simgpuInjectXid(0, xid));
    }
    std::vector<GpuHealth> health = monitor->Check(milliseconds(0));
    ASSERT_EQ(1u, health.size());
    EXPECT_TRUE(health[0].healthy) << health[0].reason;
  });
}

TEST_F(GpuHealthTest, CriticalXidFromAnotherProcessMarksOnlyThatGpuForGood) {
  RunInChild("2xH100-80GB", [] {
    auto monitor = OpenMonitor();
    ASSERT_NE(nullptr, monitor);
    Helper injector([](Helper& self) {
      ASSERT_EQ('G', self.Receive());
      std::this_thread::sleep_for(milliseconds(100));
      EXPECT_EQ(abi::NVML_SUCCESS, simgpuInjectXid(1, 79));
      self.Send('D');
    });
    injector.Send('G');
    const auto start = Clock::now();
    std::vector<GpuHealth> health = monitor->Check(milliseconds(5000));
    EXPECT_LT(Since(start), milliseconds(4000));  // the event ended the wait
    ASSERT_EQ(2u, health.size());
    EXPECT_TRUE(health[0].healthy);
    EXPECT_FALSE(health[1].healthy);
    EXPECT_EQ("XID 79 (GPU has fallen off the bus)", health[1].reason);
    EXPECT_TRUE(ExitedCleanly(injector.Wait()));

    // Sticky, and the first cause is kept.
    ASSERT_EQ(abi::NVML_SUCCESS, simgpuInjectXid(1, 48));
    health = monitor->Check(milliseconds(0));
    EXPECT_FALSE(health[1].healthy);
    EXPECT_EQ("XID 79 (GPU has fallen off the bus)", health[1].reason);
    EXPECT_TRUE(health[0].healthy);
  });
}

// The agent's resync asks Check(0) while its watcher thread waits in a long Check: it gets the
// last known states at once instead of queueing behind the wait.
TEST_F(GpuHealthTest, ZeroWaitCheckDoesNotWaitBehindAWaitingOne) {
  RunInChild("1xH100-80GB", [] {
    auto monitor = OpenMonitor();
    ASSERT_NE(nullptr, monitor);
    std::atomic<bool> waiter_done{false};
    std::vector<GpuHealth> waited;
    std::thread waiter([&] {
      waited = monitor->Check(milliseconds(10000));
      waiter_done = true;
    });
    std::this_thread::sleep_for(milliseconds(200));  // the waiter is in NVML's wait by now
    std::vector<GpuHealth> health = monitor->Check(milliseconds(0));
    EXPECT_FALSE(waiter_done);  // it answered while the other Check still waited
    ASSERT_EQ(1u, health.size());
    EXPECT_TRUE(health[0].healthy);

    // The running Check takes the event; the next Check(0) sees what it found.
    ASSERT_EQ(abi::NVML_SUCCESS, simgpuInjectXid(0, 79));
    waiter.join();
    ASSERT_EQ(1u, waited.size());
    EXPECT_FALSE(waited[0].healthy);
    health = monitor->Check(milliseconds(0));
    EXPECT_FALSE(health[0].healthy);
    EXPECT_EQ("XID 79 (GPU has fallen off the bus)", health[0].reason);
  });
}

TEST_F(GpuHealthTest, DoubleBitEccErrorIsFatalSingleBitIsNot) {
  RunInChild("2xA30-24GB", [] {
    auto monitor = OpenMonitor();
    ASSERT_NE(nullptr, monitor);
    ASSERT_EQ(abi::NVML_SUCCESS, simgpuInjectEccError(0, 0));
    ASSERT_EQ(abi::NVML_SUCCESS, simgpuInjectEccError(1, 1));
    std::vector<GpuHealth> health = monitor->Check(milliseconds(0));
    ASSERT_EQ(2u, health.size());
    EXPECT_TRUE(health[0].healthy) << health[0].reason;
    EXPECT_FALSE(health[1].healthy);
    EXPECT_NE(std::string::npos, health[1].reason.find("double-bit ECC error")) << health[1].reason;
  });
}

TEST_F(GpuHealthTest, LostGpuIsUnhealthyAndStaysSoAfterItComesBack) {
  RunInChild("2xA100-40GB", [] {
    auto monitor = OpenMonitor();
    ASSERT_NE(nullptr, monitor);
    Helper other([](Helper& self) {
      ASSERT_EQ('G', self.Receive());
      std::this_thread::sleep_for(milliseconds(100));
      EXPECT_EQ(abi::NVML_SUCCESS, simgpuSetGpuLost(0, 1));
      self.Send('D');
    });
    other.Send('G');
    const auto start = Clock::now();
    std::vector<GpuHealth> health = monitor->Check(milliseconds(5000));
    EXPECT_LT(Since(start), milliseconds(4000));  // the loss ended the wait
    ASSERT_EQ(2u, health.size());
    EXPECT_FALSE(health[0].healthy);
    EXPECT_NE(std::string::npos, health[0].reason.find("GPU is lost")) << health[0].reason;
    EXPECT_FALSE(health[0].uuid.empty());  // known from before the loss
    EXPECT_TRUE(health[1].healthy);
    EXPECT_TRUE(ExitedCleanly(other.Wait()));

    // The other GPU is still watched.
    ASSERT_EQ(abi::NVML_SUCCESS, simgpuInjectXid(1, 94));
    health = monitor->Check(milliseconds(2000));
    EXPECT_FALSE(health[1].healthy);
    EXPECT_EQ("XID 94 (contained ECC error)", health[1].reason);

    // A GPU back from the bus still needs a reset as far as the monitor knows.
    ASSERT_EQ(abi::NVML_SUCCESS, simgpuSetGpuLost(0, 0));
    health = monitor->Check(milliseconds(0));
    EXPECT_FALSE(health[0].healthy);
    EXPECT_NE(std::string::npos, health[0].reason.find("GPU is lost"));
  });
}

TEST_F(GpuHealthTest, GpuLostBeforeOpenIsReportedWithoutUuid) {
  RunInChild("2xL4", [] {
    ASSERT_EQ(abi::NVML_SUCCESS, simgpuSetGpuLost(1, 1));
    auto monitor = OpenMonitor();
    ASSERT_NE(nullptr, monitor);
    std::vector<GpuHealth> health = monitor->Check(milliseconds(0));
    ASSERT_EQ(2u, health.size());
    EXPECT_TRUE(health[0].healthy);
    EXPECT_FALSE(health[1].healthy);
    EXPECT_EQ(1u, health[1].index);
    EXPECT_EQ("", health[1].uuid);
    EXPECT_NE(std::string::npos, health[1].reason.find("GPU is lost")) << health[1].reason;
  });
}

}  // namespace
}  // namespace gpufrac::simgpu::testing
