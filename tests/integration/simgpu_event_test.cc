// Simulated driver: events (creation flags, recording, queries, synchronisation, elapsed time
// as the engine ran the work, waiting for them on other streams) and stream queries.
#include <chrono>
#include <cstdio>

#include "gpu/catalogue.h"
#include "simgpu/core/engine_truth.h"
#include "simgpu/core/sim_time.h"
#include "simgpu_test_util.h"

namespace gpufrac::simgpu::testing {
namespace {

using Clock = std::chrono::steady_clock;

constexpr char kPtx[] = R"(
.version 8.0
.target sm_90
.address_size 64
.visible .entry tick()
{
  ret;
}
)";

double MillisecondsSince(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

abi::CUfunction LoadKernel() {
  abi::CUmodule module = nullptr;
  EXPECT_CU(cuModuleLoadData(&module, kPtx));
  abi::CUfunction function = nullptr;
  EXPECT_CU(cuModuleGetFunction(&function, module, "tick"));
  return function;
}

// Launches a kernel of about `ms` on an H100 on `stream`.
void LaunchMs(abi::CUfunction kernel, double ms, abi::CUstream stream) {
  const double threads = (ms * 1000 - kKernelLaunchLatencyNs / 1000.0) *
                         gpu::FindModel("H100-80GB")->sm_count * kResidentThreadsPerSm;
  ASSERT_CU(cuLaunchKernel(kernel, static_cast<unsigned int>(threads / 1024), 1, 1, 1024, 1, 1, 0,
                           stream, nullptr, nullptr));
}

using SimGpuCudaEventTest = SimGpuTest;

TEST_F(SimGpuCudaEventTest, CreateDestroyAndTheirErrors) {
  RunInChild("1xH100-80GB", [] {
    abi::CUevent event = nullptr;
    EXPECT_EQ(abi::CUDA_ERROR_NOT_INITIALIZED, cuEventCreate(&event, 0));
    ASSERT_CU(cuInit(0));
    EXPECT_EQ(abi::CUDA_ERROR_INVALID_CONTEXT, cuEventCreate(&event, 0));
    InitAndUsePrimary();
    EXPECT_EQ(abi::CUDA_ERROR_INVALID_VALUE, cuEventCreate(nullptr, 0));
    EXPECT_EQ(abi::CUDA_ERROR_INVALID_VALUE, cuEventCreate(&event, 0x8));
    // Documented: an interprocess event must disable timing.
    EXPECT_EQ(abi::CUDA_ERROR_INVALID_VALUE, cuEventCreate(&event, abi::CU_EVENT_INTERPROCESS));
    ASSERT_CU(cuEventCreate(&event, abi::CU_EVENT_INTERPROCESS | abi::CU_EVENT_DISABLE_TIMING));
    EXPECT_CU(cuEventDestroy_v2(event));
    EXPECT_EQ(abi::CUDA_ERROR_INVALID_HANDLE, cuEventDestroy_v2(event));
    EXPECT_EQ(abi::CUDA_ERROR_INVALID_HANDLE, cuEventQuery(event));
    EXPECT_EQ(abi::CUDA_ERROR_INVALID_HANDLE, cuEventRecord(event, nullptr));
    ASSERT_CU(cuEventCreate(&event, abi::CU_EVENT_BLOCKING_SYNC));
    // Never recorded: complete, nothing to wait for, no time to tell.
    EXPECT_CU(cuEventQuery(event));
    EXPECT_CU(cuEventSynchronize(event));
    float ms = 0;
    EXPECT_EQ(abi::CUDA_ERROR_INVALID_HANDLE, cuEventElapsedTime_v2(&ms, event, event));
    EXPECT_EQ(abi::CUDA_ERROR_INVALID_VALUE, cuEventRecordWithFlags(event, nullptr, 0x2));
    EXPECT_CU(cuEventRecordWithFlags(event, nullptr, abi::CU_EVENT_RECORD_DEFAULT));
    EXPECT_CU(cuEventElapsedTime_v2(&ms, event, event));
    EXPECT_EQ(0.0f, ms);
    EXPECT_CU(cuEventDestroy(event));  // the pre-4.0 symbol
  });
}

TEST_F(SimGpuCudaEventTest, ElapsedTimeIsTheKernelTimeBetweenTwoRecords) {
  RunInChild("1xH100-80GB", [] {
    InitAndUsePrimary();
    abi::CUfunction kernel = LoadKernel();
    abi::CUevent start = nullptr;
    abi::CUevent end = nullptr;
    abi::CUevent untimed = nullptr;
    ASSERT_CU(cuEventCreate(&start, 0));
    ASSERT_CU(cuEventCreate(&end, 0));
    ASSERT_CU(cuEventCreate(&untimed, abi::CU_EVENT_DISABLE_TIMING));
    const Clock::time_point begun = Clock::now();
    ASSERT_CU(cuEventRecord(start, nullptr));
    LaunchMs(kernel, 20, nullptr);
    ASSERT_CU(cuEventRecord(end, nullptr));
    ASSERT_CU(cuEventRecord(untimed, nullptr));
    EXPECT_EQ(abi::CUDA_ERROR_NOT_READY, cuEventQuery(end));
    EXPECT_EQ(abi::CUDA_ERROR_NOT_READY, cuStreamQuery(nullptr));
    float ms = 0;
    EXPECT_EQ(abi::CUDA_ERROR_NOT_READY, cuEventElapsedTime_v2(&ms, start, end));
    ASSERT_CU(cuEventSynchronize(end));
    EXPECT_GE(MillisecondsSince(begun), 19.9);
    EXPECT_CU(cuEventQuery(end));
    EXPECT_CU(cuStreamQuery(nullptr));
    ASSERT_CU(cuEventElapsedTime_v2(&ms, start, end));
    // The kernel's 20 ms, plus the host's gap between recording `start` and launching (idle GPU
    // time counts, as on hardware): microseconds, unless the machine is loaded.
    EXPECT_NEAR(20.0, ms, 0.25);
    EXPECT_GE(ms, 19.99);
    ASSERT_CU(cuEventElapsedTime(&ms, end, start));  // the pre-12.8 symbol; order matters
    EXPECT_NEAR(-20.0, ms, 0.25);
    EXPECT_EQ(abi::CUDA_ERROR_INVALID_HANDLE, cuEventElapsedTime_v2(&ms, start, untimed));
    EXPECT_EQ(abi::CUDA_ERROR_INVALID_VALUE, cuEventElapsedTime_v2(nullptr, start, end));
  });
}

TEST_F(SimGpuCudaEventTest, ElapsedTimeIncludesWaitingForAnotherProcess) {
  RunInChild("1xH100-80GB", [] {
    Helper busy([](Helper& self) {
      InitAndUsePrimary();
      abi::CUfunction kernel = LoadKernel();
      for (int i = 0; i < 2000; ++i) LaunchMs(kernel, 1, nullptr);
      self.Send('R');
      self.Receive();
    });
    ASSERT_EQ('R', busy.Receive());
    const abi::CUcontext context = InitAndUsePrimary();
    abi::CUfunction kernel = LoadKernel();
    abi::CUevent start = nullptr;
    abi::CUevent end = nullptr;
    ASSERT_CU(cuEventCreate(&start, 0));
    ASSERT_CU(cuEventCreate(&end, 0));
    unsigned long long before = 0;
    ASSERT_CU(simgpuCtxGetEngineTime(context, &before));
    ASSERT_CU(cuEventRecord(start, nullptr));
    LaunchMs(kernel, 20, nullptr);
    ASSERT_CU(cuEventRecord(end, nullptr));
    ASSERT_CU(cuEventSynchronize(end));
    float ms = 0;
    ASSERT_CU(cuEventElapsedTime_v2(&ms, start, end));
    unsigned long long after = 0;
    ASSERT_CU(simgpuCtxGetEngineTime(context, &after));
    std::printf(
        "20 ms kernel next to a busy process: %.2f ms between the events, %.2f ms of "
        "engine time\n",
        ms, (after - before) / 1e6);
    EXPECT_NEAR(20.0, (after - before) / 1e6, 0.01);
    EXPECT_NEAR(40.0, ms, 3.0);  // half of the GPU
    busy.Send('Q');
  });
}

TEST_F(SimGpuCudaEventTest, StreamWaitEventOrdersAnotherStream) {
  RunInChild("1xH100-80GB", [] {
    InitAndUsePrimary();
    abi::CUfunction kernel = LoadKernel();
    abi::CUstream producer = nullptr;
    abi::CUstream consumer = nullptr;
    ASSERT_CU(cuStreamCreate(&producer, abi::CU_STREAM_NON_BLOCKING));
    ASSERT_CU(cuStreamCreate(&consumer, abi::CU_STREAM_NON_BLOCKING));
    abi::CUevent produced = nullptr;
    ASSERT_CU(cuEventCreate(&produced, abi::CU_EVENT_DISABLE_TIMING));
    // Not recorded yet: waiting for it is a no-op.
    EXPECT_CU(cuStreamWaitEvent(consumer, produced, 0));
    EXPECT_EQ(abi::CUDA_ERROR_INVALID_VALUE, cuStreamWaitEvent(consumer, produced, 0x4));
    EXPECT_EQ(abi::CUDA_ERROR_INVALID_HANDLE, cuStreamWaitEvent(consumer, nullptr, 0));

    Clock::time_point start = Clock::now();
    LaunchMs(kernel, 30, producer);
    ASSERT_CU(cuEventRecord(produced, producer));
    LaunchMs(kernel, 1, consumer);
    ASSERT_CU(cuStreamSynchronize(consumer));
    EXPECT_LT(MillisecondsSince(start), 20.0);  // independent streams overlap
    ASSERT_CU(cuStreamSynchronize(producer));

    start = Clock::now();
    LaunchMs(kernel, 30, producer);
    ASSERT_CU(cuEventRecord(produced, producer));
    ASSERT_CU(cuStreamWaitEvent(consumer, produced, 0));
    LaunchMs(kernel, 1, consumer);
    EXPECT_EQ(abi::CUDA_ERROR_NOT_READY, cuStreamQuery(consumer));
    ASSERT_CU(cuStreamSynchronize(consumer));
    EXPECT_GE(MillisecondsSince(start), 30.9);  // after the producer's kernel, then its own
    EXPECT_CU(cuStreamQuery(consumer));
    EXPECT_CU(cuStreamWaitEvent_ptsz(nullptr, produced, 0));
    EXPECT_CU(cuStreamQuery_ptsz(nullptr));
  });
}

TEST_F(SimGpuCudaEventTest, PerThreadDefaultStreamForms) {
  RunInChild("1xH100-80GB", [] {
    InitAndUsePrimary();
    abi::CUfunction kernel = LoadKernel();
    abi::CUevent event = nullptr;
    ASSERT_CU(cuEventCreate(&event, 0));
    const Clock::time_point start = Clock::now();
    ASSERT_CU(cuLaunchKernel_ptsz(kernel, 1, 1, 1, 32, 1, 1, 0, nullptr, nullptr, nullptr));
    LaunchMs(kernel, 20, abi::CU_STREAM_PER_THREAD);
    ASSERT_CU(cuEventRecord_ptsz(event, nullptr));  // NULL is the per-thread stream here
    EXPECT_CU(cuStreamQuery(nullptr));              // the legacy stream has nothing
    EXPECT_EQ(abi::CUDA_ERROR_NOT_READY, cuStreamQuery_ptsz(nullptr));
    ASSERT_CU(cuEventSynchronize(event));
    EXPECT_GE(MillisecondsSince(start), 19.9);
    ASSERT_CU(cuEventRecordWithFlags_ptsz(event, nullptr, 0));
    EXPECT_CU(cuEventQuery(event));
  });
}

}  // namespace
}  // namespace gpufrac::simgpu::testing
