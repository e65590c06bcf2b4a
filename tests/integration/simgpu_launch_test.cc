// Simulated driver: modules, kernel launches that return at once, and synchronisation that waits
// for the simulated kernel time.
#include <chrono>
#include <cstdio>

#include "gpu/catalogue.h"
#include "simgpu/sim_time.h"
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

}  // namespace
}  // namespace gpufrac::simgpu::testing
