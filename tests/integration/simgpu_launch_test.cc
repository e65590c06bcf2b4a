// Simulated driver: modules, kernel launches that return at once, and synchronisation that waits
// for the simulated kernel time.
#include <chrono>
#include <cstdio>

#include "gpu/catalogue.h"
#include "simgpu/core/sim_time.h"
#include "simgpu_test_util.h"

namespace gpufrac::simgpu::testing {
namespace {

using Clock = std::chrono::steady_clock;

constexpr char kPtx[] = R"(
.version 8.0
.target sm_90
.address_size 64
.visible .entry _Z6scalePfi(
  .param .u64 _Z6scalePfi_param_0,
  .param .u32 _Z6scalePfi_param_1
)
{
  ret;
}
.visible .entry fill(.param .u64 fill_param_0)
{
  ret;
}
)";

// Blocks of 1024 threads needed for a kernel of about `ms` on an H100 under the time model.
unsigned int BlocksFor(double ms) {
  const double threads_per_us = gpu::FindModel("H100-80GB")->sm_count * kResidentThreadsPerSm;
  return static_cast<unsigned int>(ms * 1000 * threads_per_us / 1024);
}

double MillisecondsSince(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

abi::CUfunction LoadKernel() {
  abi::CUmodule module = nullptr;
  EXPECT_CU(cuModuleLoadData(&module, kPtx));
  abi::CUfunction function = nullptr;
  EXPECT_CU(cuModuleGetFunction(&function, module, "fill"));
  return function;
}

using SimGpuLaunchTest = SimGpuTest;

TEST_F(SimGpuLaunchTest, ModulesKnowTheirEntries) {
  RunInChild("1xH100-80GB", [] {
    InitAndUsePrimary();
    abi::CUmodule module = nullptr;
    ASSERT_CU(cuModuleLoadData(&module, kPtx));
    abi::CUfunction scale = nullptr;
    abi::CUfunction fill = nullptr;
    EXPECT_CU(cuModuleGetFunction(&scale, module, "_Z6scalePfi"));
    EXPECT_CU(cuModuleGetFunction(&fill, module, "fill"));
    EXPECT_NE(scale, fill);
    abi::CUfunction missing = nullptr;
    EXPECT_EQ(abi::CUDA_ERROR_NOT_FOUND, cuModuleGetFunction(&missing, module, "fil"));
    EXPECT_EQ(abi::CUDA_ERROR_INVALID_VALUE, cuModuleGetFunction(&missing, module, nullptr));

    abi::CUmodule other = nullptr;
    EXPECT_EQ(abi::CUDA_ERROR_INVALID_PTX, cuModuleLoadData(&other, "not ptx at all"));
    const unsigned char elf[] = {0x7f, 'E', 'L', 'F', 2, 1, 1, 0};
    EXPECT_EQ(abi::CUDA_ERROR_NOT_SUPPORTED, cuModuleLoadData(&other, elf));
    EXPECT_EQ(abi::CUDA_ERROR_INVALID_VALUE, cuModuleLoadData(&other, nullptr));

    EXPECT_CU(cuModuleUnload(module));
    EXPECT_EQ(abi::CUDA_ERROR_INVALID_HANDLE, cuModuleUnload(module));
    EXPECT_EQ(abi::CUDA_ERROR_INVALID_HANDLE, cuModuleGetFunction(&missing, module, "fill"));
    EXPECT_EQ(abi::CUDA_ERROR_INVALID_HANDLE,
              cuLaunchKernel(fill, 1, 1, 1, 32, 1, 1, 0, nullptr, nullptr, nullptr));
  });
}

TEST_F(SimGpuLaunchTest, LaunchIsAsynchronousAndSynchronizeWaits) {
  RunInChild("1xH100-80GB", [] {
    InitAndUsePrimary();
    abi::CUfunction kernel = LoadKernel();
    const unsigned int blocks = BlocksFor(30);

    Clock::time_point start = Clock::now();
    ASSERT_CU(cuLaunchKernel(kernel, blocks, 1, 1, 1024, 1, 1, 0, nullptr, nullptr, nullptr));
    EXPECT_LT(MillisecondsSince(start), 5.0);
    ASSERT_CU(cuStreamSynchronize(nullptr));
    EXPECT_GE(MillisecondsSince(start), 29.0);

    // Two non-blocking streams run side by side; the context waits for both.
    abi::CUstream a = nullptr;
    abi::CUstream b = nullptr;
    ASSERT_CU(cuStreamCreate(&a, 1));
    ASSERT_CU(cuStreamCreate(&b, 1));
    start = Clock::now();
    ASSERT_CU(cuLaunchKernel(kernel, blocks, 1, 1, 1024, 1, 1, 0, a, nullptr, nullptr));
    ASSERT_CU(cuLaunchKernel(kernel, blocks, 1, 1, 1024, 1, 1, 0, b, nullptr, nullptr));
    ASSERT_CU(cuCtxSynchronize());
    const double both = MillisecondsSince(start);
    EXPECT_GE(both, 29.0);
    EXPECT_LT(both, 58.0);  // one after the other would take 60

    // Kernels on one stream run one after the other.
    start = Clock::now();
    ASSERT_CU(cuLaunchKernel(kernel, blocks, 1, 1, 1024, 1, 1, 0, a, nullptr, nullptr));
    ASSERT_CU(cuLaunchKernel(kernel, blocks, 1, 1, 1024, 1, 1, 0, a, nullptr, nullptr));
    ASSERT_CU(cuStreamSynchronize(a));
    EXPECT_GE(MillisecondsSince(start), 59.0);
    EXPECT_CU(cuStreamDestroy_v2(a));
    EXPECT_CU(cuStreamDestroy_v2(b));
    EXPECT_EQ(abi::CUDA_ERROR_INVALID_HANDLE, cuStreamDestroy_v2(b));
    EXPECT_EQ(abi::CUDA_ERROR_INVALID_HANDLE, cuStreamSynchronize(b));
  });
}

TEST_F(SimGpuLaunchTest, LegacyDefaultStreamWaitsForBlockingStreamsOnly) {
  RunInChild("1xH100-80GB", [] {
    InitAndUsePrimary();
    abi::CUfunction kernel = LoadKernel();
    abi::CUstream blocking = nullptr;
    ASSERT_CU(cuStreamCreate(&blocking, 0));
    const Clock::time_point start = Clock::now();
    ASSERT_CU(
        cuLaunchKernel(kernel, BlocksFor(30), 1, 1, 1024, 1, 1, 0, blocking, nullptr, nullptr));
    ASSERT_CU(cuLaunchKernel(kernel, 1, 1, 1, 32, 1, 1, 0, nullptr, nullptr, nullptr));
    ASSERT_CU(cuStreamSynchronize(nullptr));
    EXPECT_GE(MillisecondsSince(start), 29.0);

    // ... but not for non-blocking ones.
    abi::CUstream non_blocking = nullptr;
    ASSERT_CU(cuStreamCreate(&non_blocking, 1));
    const Clock::time_point again = Clock::now();
    ASSERT_CU(
        cuLaunchKernel(kernel, BlocksFor(30), 1, 1, 1024, 1, 1, 0, non_blocking, nullptr, nullptr));
    ASSERT_CU(cuLaunchKernel(kernel, 1, 1, 1, 32, 1, 1, 0, nullptr, nullptr, nullptr));
    ASSERT_CU(cuStreamSynchronize(nullptr));
    EXPECT_LT(MillisecondsSince(again), 20.0);
    ASSERT_CU(cuCtxSynchronize());
    EXPECT_GE(MillisecondsSince(again), 29.0);
  });
}

TEST_F(SimGpuLaunchTest, PerThreadDefaultStreamIsSeparate) {
  RunInChild("1xH100-80GB", [] {
    InitAndUsePrimary();
    abi::CUfunction kernel = LoadKernel();
    const Clock::time_point start = Clock::now();
    ASSERT_CU(
        cuLaunchKernel_ptsz(kernel, BlocksFor(30), 1, 1, 1024, 1, 1, 0, nullptr, nullptr, nullptr));
    // The legacy stream has nothing queued of its own.
    ASSERT_CU(cuStreamSynchronize(nullptr));
    EXPECT_LT(MillisecondsSince(start), 20.0);
    ASSERT_CU(cuStreamSynchronize_ptsz(nullptr));
    EXPECT_GE(MillisecondsSince(start), 29.0);
  });
}

TEST_F(SimGpuLaunchTest, LaunchValidatesItsArguments) {
  RunInChild("1xH100-80GB", [] {
    InitAndUsePrimary();
    abi::CUfunction kernel = LoadKernel();
    EXPECT_EQ(abi::CUDA_ERROR_INVALID_VALUE,
              cuLaunchKernel(kernel, 0, 1, 1, 32, 1, 1, 0, nullptr, nullptr, nullptr));
    EXPECT_EQ(abi::CUDA_ERROR_INVALID_VALUE,
              cuLaunchKernel(kernel, 1, 1, 1, 1025, 1, 1, 0, nullptr, nullptr, nullptr));
    EXPECT_EQ(abi::CUDA_ERROR_INVALID_VALUE,
              cuLaunchKernel(kernel, 1, 1, 1, 64, 32, 1, 0, nullptr, nullptr, nullptr));
    EXPECT_EQ(abi::CUDA_ERROR_INVALID_VALUE,
              cuLaunchKernel(kernel, 1, 70000, 1, 32, 1, 1, 0, nullptr, nullptr, nullptr));
    void* params[1] = {nullptr};
    void* extra[1] = {nullptr};
    EXPECT_EQ(abi::CUDA_ERROR_INVALID_VALUE,
              cuLaunchKernel(kernel, 1, 1, 1, 32, 1, 1, 0, nullptr, params, extra));
    EXPECT_EQ(abi::CUDA_ERROR_INVALID_HANDLE,
              cuLaunchKernel(nullptr, 1, 1, 1, 32, 1, 1, 0, nullptr, nullptr, nullptr));
    // A stream of another context.
    abi::CUcontext other = nullptr;
    ASSERT_CU(cuCtxCreate_v2(&other, 0, 0));
    abi::CUstream foreign = nullptr;
    ASSERT_CU(cuStreamCreate(&foreign, 0));
    ASSERT_CU(cuCtxPopCurrent_v2(nullptr));
    EXPECT_EQ(abi::CUDA_ERROR_INVALID_HANDLE,
              cuLaunchKernel(kernel, 1, 1, 1, 32, 1, 1, 0, foreign, nullptr, nullptr));
    EXPECT_CU(cuLaunchKernel(kernel, 2, 2, 2, 8, 8, 8, 0, nullptr, params, nullptr));
  });
}

TEST_F(SimGpuLaunchTest, LaunchIsCheap) {
  RunInChild("1xH100-80GB", [] {
    InitAndUsePrimary();
    abi::CUfunction kernel = LoadKernel();
    abi::CUstream stream = nullptr;
    ASSERT_CU(cuStreamCreate(&stream, 1));
    constexpr int kLaunches = 200000;
    const Clock::time_point start = Clock::now();
    for (int i = 0; i < kLaunches; ++i) {
      cuLaunchKernel(kernel, 1, 1, 1, 32, 1, 1, 0, stream, nullptr, nullptr);
    }
    const double ns = MillisecondsSince(start) * 1e6 / kLaunches;
    std::printf("cuLaunchKernel: %.1f ns per launch\n", ns);
    // Generous, for loaded or instrumented builds; typically well under 100 ns.
    EXPECT_LT(ns, 2000.0);
  });
}

TEST_F(SimGpuLaunchTest, LaunchKernelExTakesAConfigAndAttributes) {
  RunInChild("1xH100-80GB", [] {
    InitAndUsePrimary();
    abi::CUfunction kernel = LoadKernel();
    abi::CUstream stream = nullptr;
    ASSERT_CU(cuStreamCreate(&stream, abi::CU_STREAM_NON_BLOCKING));
    abi::CUlaunchAttribute attributes[2] = {};
    attributes[0].id = abi::CU_LAUNCH_ATTRIBUTE_PRIORITY;  // accepted, changes nothing here
    attributes[1].id = abi::CU_LAUNCH_ATTRIBUTE_IGNORE;
    abi::CUlaunchConfig config{};
    config.gridDimX = BlocksFor(30);
    config.gridDimY = config.gridDimZ = 1;
    config.blockDimX = 1024;
    config.blockDimY = config.blockDimZ = 1;
    config.hStream = stream;
    config.attrs = attributes;
    config.numAttrs = 2;
    const Clock::time_point start = Clock::now();
    ASSERT_CU(cuLaunchKernelEx(&config, kernel, nullptr, nullptr));
    EXPECT_LT(MillisecondsSince(start), 5.0);
    ASSERT_CU(cuStreamSynchronize(stream));
    EXPECT_GE(MillisecondsSince(start), 29.0);

    EXPECT_EQ(abi::CUDA_ERROR_INVALID_VALUE, cuLaunchKernelEx(nullptr, kernel, nullptr, nullptr));
    config.attrs = nullptr;
    EXPECT_EQ(abi::CUDA_ERROR_INVALID_VALUE, cuLaunchKernelEx(&config, kernel, nullptr, nullptr));
    config.attrs = attributes;
    attributes[1].id = static_cast<abi::CUlaunchAttributeID>(99);
    EXPECT_EQ(abi::CUDA_ERROR_INVALID_VALUE, cuLaunchKernelEx(&config, kernel, nullptr, nullptr));
    config.numAttrs = 0;
    config.blockDimX = 2048;
    EXPECT_EQ(abi::CUDA_ERROR_INVALID_VALUE, cuLaunchKernelEx(&config, kernel, nullptr, nullptr));
    config.blockDimX = 32;
    config.gridDimX = 1;
    config.hStream = nullptr;  // the per-thread default stream in the _ptsz form
    EXPECT_CU(cuLaunchKernelEx_ptsz(&config, kernel, nullptr, nullptr));
    EXPECT_EQ(abi::CUDA_ERROR_INVALID_HANDLE, cuLaunchKernelEx(&config, nullptr, nullptr, nullptr));
  });
}

TEST_F(SimGpuLaunchTest, CooperativeLaunchesMustFitOnTheGpuAtOnce) {
  RunInChild("1xH100-80GB,1xT4", [] {
    InitAndUsePrimary();
    abi::CUfunction kernel = LoadKernel();
    int cooperative = 0;
    int blocks_per_sm = 0;
    int sms = 0;
    ASSERT_CU(cuDeviceGetAttribute(&cooperative, abi::CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH, 0));
    ASSERT_CU(cuDeviceGetAttribute(&blocks_per_sm,
                                   abi::CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR, 0));
    ASSERT_CU(cuDeviceGetAttribute(&sms, abi::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, 0));
    EXPECT_EQ(1, cooperative);
    EXPECT_EQ(32, blocks_per_sm);  // Hopper
    int turing_blocks = 0;
    ASSERT_CU(cuDeviceGetAttribute(&turing_blocks,
                                   abi::CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR, 1));
    EXPECT_EQ(16, turing_blocks);

    // Small blocks: limited by blocks per SM. 1024-thread blocks: by 2048 threads per SM.
    const auto most = static_cast<unsigned int>(sms * blocks_per_sm);
    EXPECT_CU(cuLaunchCooperativeKernel(kernel, most, 1, 1, 32, 1, 1, 0, nullptr, nullptr));
    EXPECT_EQ(abi::CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE,
              cuLaunchCooperativeKernel(kernel, most + 1, 1, 1, 32, 1, 1, 0, nullptr, nullptr));
    const auto big = static_cast<unsigned int>(sms * 2);
    EXPECT_CU(cuLaunchCooperativeKernel_ptsz(kernel, big, 1, 1, 1024, 1, 1, 0, nullptr, nullptr));
    EXPECT_EQ(abi::CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE,
              cuLaunchCooperativeKernel(kernel, big, 2, 1, 1024, 1, 1, 0, nullptr, nullptr));

    // The same rule through cuLaunchKernelEx's cooperative attribute, and not without it.
    abi::CUlaunchAttribute attribute{};
    attribute.id = abi::CU_LAUNCH_ATTRIBUTE_COOPERATIVE;
    attribute.value.cooperative = 1;
    abi::CUlaunchConfig config{};
    config.gridDimX = most + 1;
    config.gridDimY = config.gridDimZ = 1;
    config.blockDimX = 32;
    config.blockDimY = config.blockDimZ = 1;
    config.attrs = &attribute;
    config.numAttrs = 1;
    EXPECT_EQ(abi::CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE,
              cuLaunchKernelEx(&config, kernel, nullptr, nullptr));
    attribute.value.cooperative = 0;
    EXPECT_CU(cuLaunchKernelEx(&config, kernel, nullptr, nullptr));
    ASSERT_CU(cuCtxSynchronize());
  });
}

}  // namespace
}  // namespace gpufrac::simgpu::testing
