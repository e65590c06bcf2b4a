// Simulated driver: cuGetProcAddress resolves base names by CUDA version and stream flavour, and
// agrees with the exported symbols for every row of the entry point table.
#include <dlfcn.h>

#include <string>

#include "simgpu_test_util.h"

namespace gpufrac::simgpu::testing {
namespace {

void* Exported(const std::string& symbol) {
  void* library = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  EXPECT_NE(nullptr, library);
  return library != nullptr ? ::dlsym(library, symbol.c_str()) : nullptr;
}

struct Lookup {
  abi::CUresult result;
  void* function;
  abi::CUdriverProcAddressQueryResult status;
};

Lookup Resolve(const char* base, int version,
               abi::cuuint64_t flags = abi::CU_GET_PROC_ADDRESS_DEFAULT) {
  Lookup lookup{abi::CUDA_ERROR_UNKNOWN, reinterpret_cast<void*>(1),
                static_cast<abi::CUdriverProcAddressQueryResult>(-1)};
  lookup.result = cuGetProcAddress_v2(base, &lookup.function, version, flags, &lookup.status);
  return lookup;
}

void ExpectResolves(const char* base, int version, const char* symbol,
                    abi::cuuint64_t flags = abi::CU_GET_PROC_ADDRESS_DEFAULT) {
  const Lookup lookup = Resolve(base, version, flags);
  EXPECT_EQ(abi::CUDA_SUCCESS, lookup.result) << base << "@" << version;
  EXPECT_EQ(abi::CU_GET_PROC_ADDRESS_SUCCESS, lookup.status) << base << "@" << version;
  EXPECT_EQ(Exported(symbol), lookup.function) << base << "@" << version << " -> " << symbol;
}

using SimGpuProcAddressTest = SimGpuTest;

TEST_F(SimGpuProcAddressTest, PicksTheNewestVariantForTheVersion) {
  RunInChild("1xH100-80GB", [] {
    ExpectResolves("cuMemAlloc", 3010, "cuMemAlloc");
    ExpectResolves("cuMemAlloc", 3020, "cuMemAlloc_v2");
    ExpectResolves("cuMemAlloc", 12000, "cuMemAlloc_v2");
    ExpectResolves("cuMemFree", 2000, "cuMemFree");
    ExpectResolves("cuMemGetInfo", 3000, "cuMemGetInfo");
    ExpectResolves("cuMemGetInfo", 12080, "cuMemGetInfo_v2");
    ExpectResolves("cuDeviceTotalMem", 3010, "cuDeviceTotalMem");
    ExpectResolves("cuDeviceTotalMem", 3020, "cuDeviceTotalMem_v2");
    ExpectResolves("cuMemAllocPitch", 3010, "cuMemAllocPitch");
    ExpectResolves("cuMemAllocPitch", 3020, "cuMemAllocPitch_v2");
    ExpectResolves("cuArrayCreate", 2000, "cuArrayCreate");
    ExpectResolves("cuArrayCreate", 3020, "cuArrayCreate_v2");
    ExpectResolves("cuArray3DCreate", 3010, "cuArray3DCreate");
    ExpectResolves("cuArray3DCreate", 12000, "cuArray3DCreate_v2");
    ExpectResolves("cuDeviceGetUuid", 11030, "cuDeviceGetUuid");
    ExpectResolves("cuDeviceGetUuid", 11040, "cuDeviceGetUuid_v2");
    ExpectResolves("cuCtxCreate", 3010, "cuCtxCreate");
    ExpectResolves("cuCtxCreate", 3020, "cuCtxCreate_v2");
    ExpectResolves("cuCtxCreate", 11040, "cuCtxCreate_v3");
    ExpectResolves("cuCtxCreate", 12040, "cuCtxCreate_v3");
    ExpectResolves("cuCtxCreate", 12050, "cuCtxCreate_v4");
    ExpectResolves("cuDevicePrimaryCtxRelease", 11000, "cuDevicePrimaryCtxRelease_v2");
    ExpectResolves("cuDevicePrimaryCtxReset", 12000, "cuDevicePrimaryCtxReset_v2");
    ExpectResolves("cuGetProcAddress", 11030, "cuGetProcAddress");
    ExpectResolves("cuGetProcAddress", 12000, "cuGetProcAddress_v2");
    ExpectResolves("cuMemCreate", 10020, "cuMemCreate");
    ExpectResolves("cuStreamDestroy", 4000, "cuStreamDestroy_v2");
    ExpectResolves("cuDeviceGet", 12000, "cuDeviceGet");
  });
}

TEST_F(SimGpuProcAddressTest, EventLaunchAndGraphEntryPoints) {
  RunInChild("1xH100-80GB", [] {
    constexpr auto kPerThread = abi::CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
    ExpectResolves("cuEventCreate", 2000, "cuEventCreate");
    ExpectResolves("cuEventDestroy", 3020, "cuEventDestroy");
    ExpectResolves("cuEventDestroy", 4000, "cuEventDestroy_v2");
    ExpectResolves("cuEventElapsedTime", 12070, "cuEventElapsedTime");
    ExpectResolves("cuEventElapsedTime", 12080, "cuEventElapsedTime_v2");
    ExpectResolves("cuEventRecord", 12000, "cuEventRecord");
    ExpectResolves("cuEventRecord", 12000, "cuEventRecord_ptsz", kPerThread);
    ExpectResolves("cuEventRecordWithFlags", 11010, "cuEventRecordWithFlags_ptsz", kPerThread);
    ExpectResolves("cuEventQuery", 2000, "cuEventQuery");
    ExpectResolves("cuEventSynchronize", 2000, "cuEventSynchronize");
    ExpectResolves("cuStreamQuery", 12000, "cuStreamQuery_ptsz", kPerThread);
    ExpectResolves("cuStreamWaitEvent", 3020, "cuStreamWaitEvent");
    ExpectResolves("cuLaunchKernelEx", 11060, "cuLaunchKernelEx");
    ExpectResolves("cuLaunchKernelEx", 12000, "cuLaunchKernelEx_ptsz", kPerThread);
    ExpectResolves("cuLaunchCooperativeKernel", 9000, "cuLaunchCooperativeKernel");
    ExpectResolves("cuGraphCreate", 10000, "cuGraphCreate");
    ExpectResolves("cuGraphAddKernelNode", 11080, "cuGraphAddKernelNode");
    ExpectResolves("cuGraphAddKernelNode", 12000, "cuGraphAddKernelNode_v2");
    ExpectResolves("cuStreamBeginCapture", 10000, "cuStreamBeginCapture");
    ExpectResolves("cuStreamBeginCapture", 10010, "cuStreamBeginCapture_v2");
    ExpectResolves("cuStreamBeginCapture", 12000, "cuStreamBeginCapture_v2_ptsz", kPerThread);
    ExpectResolves("cuStreamEndCapture", 10000, "cuStreamEndCapture");
    ExpectResolves("cuGraphInstantiateWithFlags", 11040, "cuGraphInstantiateWithFlags");
    ExpectResolves("cuGraphLaunch", 10000, "cuGraphLaunch_ptsz", kPerThread);
    ExpectResolves("cuGraphExecDestroy", 10000, "cuGraphExecDestroy");
    ExpectResolves("cuGraphDestroy", 10000, "cuGraphDestroy");
    EXPECT_EQ(abi::CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT,
              Resolve("cuLaunchKernelEx", 11050).status);
  });
}

TEST_F(SimGpuProcAddressTest, PerThreadStreamFlagPicksPtszVariants) {
  RunInChild("1xH100-80GB", [] {
    constexpr abi::cuuint64_t kPerThread = abi::CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
    constexpr abi::cuuint64_t kLegacy = abi::CU_GET_PROC_ADDRESS_LEGACY_STREAM;
    ExpectResolves("cuLaunchKernel", 12000, "cuLaunchKernel_ptsz", kPerThread);
    ExpectResolves("cuLaunchKernel", 12000, "cuLaunchKernel", kLegacy);
    ExpectResolves("cuLaunchKernel", 12000, "cuLaunchKernel");
    ExpectResolves("cuMemAllocAsync", 11020, "cuMemAllocAsync_ptsz", kPerThread);
    ExpectResolves("cuMemAllocFromPoolAsync", 12000, "cuMemAllocFromPoolAsync_ptsz", kPerThread);
    ExpectResolves("cuMemFreeAsync", 12000, "cuMemFreeAsync_ptsz", kPerThread);
    ExpectResolves("cuStreamSynchronize", 12000, "cuStreamSynchronize_ptsz", kPerThread);
    // Names without a per-thread variant resolve to the plain one.
    ExpectResolves("cuMemAlloc", 12000, "cuMemAlloc_v2", kPerThread);
  });
}

TEST_F(SimGpuProcAddressTest, ReportsMissingAndTooNewSymbols) {
  RunInChild("1xH100-80GB", [] {
    Lookup lookup = Resolve("cuMemAllocAsync", 11010);
    EXPECT_EQ(abi::CUDA_ERROR_NOT_FOUND, lookup.result);
    EXPECT_EQ(abi::CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT, lookup.status);
    EXPECT_EQ(nullptr, lookup.function);

    lookup = Resolve("cuMemCreate", 10010);  // introduced in CUDA 10.2
    EXPECT_EQ(abi::CUDA_ERROR_NOT_FOUND, lookup.result);
    EXPECT_EQ(abi::CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT, lookup.status);

    lookup = Resolve("cuNoSuchFunction", 12000);
    EXPECT_EQ(abi::CUDA_ERROR_NOT_FOUND, lookup.result);
    EXPECT_EQ(abi::CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND, lookup.status);
    EXPECT_EQ(nullptr, lookup.function);

    lookup = Resolve("cuMemAlloc_v2", 12000);  // takes base names only
    EXPECT_EQ(abi::CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND, lookup.status);

    // A CUDA version newer than the driver is an invalid argument.
    lookup = Resolve("cuMemAlloc", 12090);
    EXPECT_EQ(abi::CUDA_ERROR_INVALID_VALUE, lookup.result);
    EXPECT_EQ(nullptr, lookup.function);

    void* function = nullptr;
    EXPECT_EQ(abi::CUDA_ERROR_INVALID_VALUE,
              cuGetProcAddress_v2("cuInit", nullptr, 12000, 0, nullptr));
    EXPECT_EQ(abi::CUDA_ERROR_INVALID_VALUE,
              cuGetProcAddress_v2("cuInit", &function, 12000, 8, nullptr));
    // The CUDA 11.3 form, without the status.
    EXPECT_CU(cuGetProcAddress("cuInit", &function, 11030, 0));
    EXPECT_EQ(Exported("cuInit"), function);
    EXPECT_EQ(abi::CUDA_ERROR_NOT_FOUND, cuGetProcAddress("cuNothing", &function, 11030, 0));
    EXPECT_EQ(nullptr, function);
  });
}

TEST_F(SimGpuProcAddressTest, NewerDriverVersionAllowsNewerRequests) {
  RunInChild("1xH100-80GB", {{"SIMGPU_DRIVER_VERSION", "13000"}},
             [] { ExpectResolves("cuMemAlloc", 13000, "cuMemAlloc_v2"); });
}

// On a driver new enough for every row (CUDA 13.0: cuCtxSynchronize_v2).
TEST_F(SimGpuProcAddressTest, EveryTableRowIsExportedAndResolvable) {
  RunInChild("1xH100-80GB", {{"SIMGPU_DRIVER_VERSION", "13000"}}, [] {
    int rows = 0;
#define SIMGPU_ENTRY_POINT(base, symbol, version, ptsz)               \
  ++rows;                                                             \
  EXPECT_NE(nullptr, Exported(#symbol)) << #symbol;                   \
  ExpectResolves(#base, version, #symbol);                            \
  ExpectResolves(#base, version, ptsz ? #symbol "_ptsz" : #symbol,    \
                 abi::CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM); \
  EXPECT_EQ(reinterpret_cast<void*>(&symbol), Exported(#symbol)) << #symbol;
    GPUFRAC_CUDA_ENTRY_POINTS(SIMGPU_ENTRY_POINT)
#undef SIMGPU_ENTRY_POINT
    EXPECT_GT(rows, 50);
  });
}

}  // namespace
}  // namespace gpufrac::simgpu::testing
