// Simulated driver: device memory accounting for every allocation kind, out-of-memory, context
// memory and the context stack.
#include <climits>
#include <cstring>
#include <thread>
#include <vector>

#include "gpu/catalogue.h"
#include "simgpu_test_util.h"

namespace gpufrac::simgpu::testing {
namespace {

const std::uint64_t kH100Context = gpu::FindModel("H100-80GB")->context_bytes;
const std::uint64_t kT4Context = gpu::FindModel("T4")->context_bytes;
const std::uint64_t kT4Memory = gpu::FindModel("T4")->memory_bytes;

using SimGpuMemoryTest = SimGpuTest;

TEST_F(SimGpuMemoryTest, AllocFreeAndOutOfMemory) {
  RunInChild("1xT4", [] {
    InitAndUsePrimary();
    size_t free = 0;
    size_t total = 0;
    ASSERT_CU(cuMemGetInfo_v2(&free, &total));
    EXPECT_EQ(kT4Memory, total);
    EXPECT_EQ(kT4Memory - kT4Context, free);

    abi::CUdeviceptr pointer = 0;
    ASSERT_CU(cuMemAlloc_v2(&pointer, kGiB));
    EXPECT_NE(0u, pointer);
    EXPECT_EQ(0u, pointer % 256);
    EXPECT_EQ(kT4Context + kGiB, UsedBytes());

    abi::CUdeviceptr base = 0;
    size_t size = 0;
    EXPECT_CU(cuMemGetAddressRange_v2(&base, &size, pointer + 12345));
    EXPECT_EQ(pointer, base);
    EXPECT_EQ(kGiB, size);
    EXPECT_EQ(abi::CUDA_ERROR_NOT_FOUND, cuMemGetAddressRange_v2(&base, &size, pointer + kGiB));

    EXPECT_EQ(abi::CUDA_ERROR_INVALID_VALUE, cuMemFree_v2(pointer + 1));
    EXPECT_CU(cuMemFree_v2(pointer));
    EXPECT_EQ(abi::CUDA_ERROR_INVALID_VALUE, cuMemFree_v2(pointer));
    EXPECT_EQ(kT4Context, UsedBytes());

    EXPECT_EQ(abi::CUDA_ERROR_INVALID_VALUE, cuMemAlloc_v2(&pointer, 0));
    EXPECT_EQ(abi::CUDA_ERROR_INVALID_VALUE, cuMemAlloc_v2(nullptr, 1024));
    EXPECT_EQ(abi::CUDA_ERROR_INVALID_VALUE, cuMemGetInfo_v2(nullptr, &total));

    // Exactly what is free fits; one byte more does not.
    const std::uint64_t available = kT4Memory - kT4Context;
    EXPECT_EQ(abi::CUDA_ERROR_OUT_OF_MEMORY, cuMemAlloc_v2(&pointer, available + 1));
    ASSERT_CU(cuMemAlloc_v2(&pointer, available));
    abi::CUdeviceptr another = 0;
    EXPECT_EQ(abi::CUDA_ERROR_OUT_OF_MEMORY, cuMemAlloc_v2(&another, 1));
    ASSERT_CU(cuMemGetInfo_v2(&free, &total));
    EXPECT_EQ(0u, free);
    EXPECT_CU(cuMemFree_v2(pointer));
  });
}

TEST_F(SimGpuMemoryTest, MemoryCallsNeedACurrentContext) {
  RunInChild("1xT4", [] {
    ASSERT_CU(cuInit(0));
    abi::CUdeviceptr pointer = 0;
    size_t free = 0;
    size_t total = 0;
    EXPECT_EQ(abi::CUDA_ERROR_INVALID_CONTEXT, cuMemAlloc_v2(&pointer, 1024));
    EXPECT_EQ(abi::CUDA_ERROR_INVALID_CONTEXT, cuMemGetInfo_v2(&free, &total));
    EXPECT_EQ(abi::CUDA_ERROR_INVALID_CONTEXT, cuMemAllocManaged(&pointer, 1024, 1));
    abi::CUstream stream = nullptr;
    EXPECT_EQ(abi::CUDA_ERROR_INVALID_CONTEXT, cuStreamCreate(&stream, 0));
    abi::CUdevice device = 0;
    EXPECT_EQ(abi::CUDA_ERROR_INVALID_CONTEXT, cuCtxGetDevice(&device));
    EXPECT_EQ(abi::CUDA_ERROR_INVALID_CONTEXT, cuCtxSynchronize());
  });
}

TEST_F(SimGpuMemoryTest, ContextsChargeTheirMemory) {
  RunInChild("1xH100-80GB", [] {
    ASSERT_CU(cuInit(0));
    abi::CUcontext first = nullptr;
    abi::CUcontext second = nullptr;
    ASSERT_CU(cuCtxCreate_v2(&first, 0, 0));
    EXPECT_EQ(kH100Context, UsedBytes());
    ASSERT_CU(cuCtxCreate_v3(&second, nullptr, 0, 0, 0));
    EXPECT_EQ(2 * kH100Context, UsedBytes());
    abi::CUcontext current = nullptr;
    EXPECT_CU(cuCtxGetCurrent(&current));
    EXPECT_EQ(second, current);

    // Destroying a context frees what was allocated in it, and pops it.
    abi::CUdeviceptr pointer = 0;
    ASSERT_CU(cuMemAlloc_v2(&pointer, 3 * kGiB));
    EXPECT_EQ(2 * kH100Context + 3 * kGiB, UsedBytes());
    EXPECT_CU(cuCtxDestroy_v2(second));
    EXPECT_CU(cuCtxGetCurrent(&current));
    EXPECT_EQ(first, current);
    EXPECT_EQ(kH100Context, UsedBytes());
    EXPECT_EQ(abi::CUDA_ERROR_INVALID_VALUE, cuMemFree_v2(pointer));
    EXPECT_EQ(abi::CUDA_ERROR_INVALID_CONTEXT, cuCtxDestroy_v2(second));
    EXPECT_EQ(abi::CUDA_ERROR_INVALID_VALUE, cuCtxDestroy_v2(nullptr));

    abi::CUcontext third = nullptr;
    EXPECT_CU(cuCtxCreate_v4(&third, nullptr, 0, 0));
    EXPECT_EQ(2 * kH100Context, UsedBytes());
    EXPECT_CU(cuCtxDestroy_v2(third));
    EXPECT_CU(cuCtxDestroy_v2(first));
    EXPECT_EQ(abi::CUDA_ERROR_INVALID_DEVICE, cuCtxCreate_v2(&third, 0, 1));
    EXPECT_EQ(abi::CUDA_ERROR_INVALID_VALUE, cuCtxCreate_v2(&third, 0x100, 0));
    EXPECT_EQ(abi::CUDA_ERROR_INVALID_VALUE, cuCtxCreate_v2(nullptr, 0, 0));
  });
}

TEST_F(SimGpuMemoryTest, PrimaryContextIsRefcounted) {
  RunInChild("1xH100-80GB", [] {
    ASSERT_CU(cuInit(0));
    abi::CUcontext a = nullptr;
    abi::CUcontext b = nullptr;
    ASSERT_CU(cuDevicePrimaryCtxRetain(&a, 0));
    ASSERT_CU(cuDevicePrimaryCtxRetain(&b, 0));
    EXPECT_EQ(a, b);
    ASSERT_CU(cuCtxSetCurrent(a));
    EXPECT_EQ(kH100Context, UsedBytes());
    EXPECT_EQ(abi::CUDA_ERROR_INVALID_CONTEXT, cuCtxDestroy_v2(a));

    abi::CUdeviceptr pointer = 0;
    ASSERT_CU(cuMemAlloc_v2(&pointer, kGiB));
    EXPECT_CU(cuDevicePrimaryCtxRelease_v2(0));
    EXPECT_EQ(kH100Context + kGiB, UsedBytes());

    // Reset frees everything but keeps the reference: the next use brings the context back.
    EXPECT_CU(cuDevicePrimaryCtxReset_v2(0));
    EXPECT_EQ(abi::CUDA_ERROR_INVALID_VALUE, cuMemFree_v2(pointer));
    EXPECT_EQ(kH100Context, UsedBytes());  // cuMemGetInfo revived it
    ASSERT_CU(cuMemAlloc_v2(&pointer, kGiB));
    EXPECT_EQ(kH100Context + kGiB, UsedBytes());

    // The last release frees everything; the context stays current but is unusable.
    EXPECT_CU(cuDevicePrimaryCtxRelease_v2(0));
    EXPECT_EQ(abi::CUDA_ERROR_INVALID_CONTEXT, cuDevicePrimaryCtxRelease_v2(0));
    size_t free = 0;
    size_t total = 0;
    EXPECT_EQ(abi::CUDA_ERROR_INVALID_CONTEXT, cuMemGetInfo_v2(&free, &total));
    ASSERT_CU(cuDevicePrimaryCtxRetain(&a, 0));
    EXPECT_EQ(kH100Context, UsedBytes());
    EXPECT_EQ(abi::CUDA_ERROR_INVALID_DEVICE, cuDevicePrimaryCtxRetain(&a, 1));
    EXPECT_EQ(abi::CUDA_ERROR_INVALID_DEVICE, cuDevicePrimaryCtxRelease_v2(1));
  });
}

TEST_F(SimGpuMemoryTest, ContextStackIsPerThread) {
  RunInChild("2xL4", [] {
    ASSERT_CU(cuInit(0));
    abi::CUcontext on_zero = nullptr;
    abi::CUcontext on_one = nullptr;
    ASSERT_CU(cuCtxCreate_v2(&on_zero, 0, 0));
    ASSERT_CU(cuCtxCreate_v2(&on_one, 0, 1));
    abi::CUdevice device = -1;
    EXPECT_CU(cuCtxGetDevice(&device));
    EXPECT_EQ(1, device);
    abi::CUcontext popped = nullptr;
    EXPECT_CU(cuCtxPopCurrent_v2(&popped));
    EXPECT_EQ(on_one, popped);
    EXPECT_CU(cuCtxGetDevice(&device));
    EXPECT_EQ(0, device);
    EXPECT_CU(cuCtxPushCurrent_v2(on_one));
    EXPECT_CU(cuCtxSetCurrent(nullptr));  // pops
    abi::CUcontext current = nullptr;
    EXPECT_CU(cuCtxGetCurrent(&current));
    EXPECT_EQ(on_zero, current);

    std::thread other([&] {
      abi::CUcontext seen = on_zero;
      EXPECT_CU(cuCtxGetCurrent(&seen));
      EXPECT_EQ(nullptr, seen);
      abi::CUdeviceptr pointer = 0;
      EXPECT_EQ(abi::CUDA_ERROR_INVALID_CONTEXT, cuMemAlloc_v2(&pointer, 64));
      EXPECT_EQ(abi::CUDA_ERROR_INVALID_CONTEXT, cuCtxPopCurrent_v2(&seen));
      EXPECT_CU(cuCtxSetCurrent(on_one));
      EXPECT_CU(cuMemAlloc_v2(&pointer, 64));
      EXPECT_CU(cuMemFree_v2(pointer));
    });
    other.join();
    EXPECT_CU(cuCtxGetCurrent(&current));
    EXPECT_EQ(on_zero, current);
    EXPECT_CU(cuCtxPopCurrent_v2(nullptr));
    EXPECT_EQ(abi::CUDA_ERROR_INVALID_CONTEXT, cuCtxPopCurrent_v2(&popped));
    EXPECT_EQ(abi::CUDA_ERROR_INVALID_VALUE, cuCtxPushCurrent_v2(nullptr));
  });
}

TEST_F(SimGpuMemoryTest, PitchedAllocationsArePadded) {
  RunInChild("1xH100-80GB", [] {
    InitAndUsePrimary();
    abi::CUdeviceptr pointer = 0;
    size_t pitch = 0;
    ASSERT_CU(cuMemAllocPitch_v2(&pointer, &pitch, 1000, 10, 4));
    EXPECT_EQ(1024u, pitch);
    EXPECT_EQ(kH100Context + 10240, UsedBytes());
    EXPECT_CU(cuMemFree_v2(pointer));
    ASSERT_CU(cuMemAllocPitch_v2(&pointer, &pitch, 512, 3, 16));
    EXPECT_EQ(512u, pitch);
    EXPECT_CU(cuMemFree_v2(pointer));
    EXPECT_EQ(abi::CUDA_ERROR_INVALID_VALUE, cuMemAllocPitch_v2(&pointer, &pitch, 100, 10, 3));
    EXPECT_EQ(abi::CUDA_ERROR_INVALID_VALUE, cuMemAllocPitch_v2(&pointer, &pitch, 0, 10, 4));
    EXPECT_EQ(abi::CUDA_ERROR_INVALID_VALUE, cuMemAllocPitch_v2(&pointer, nullptr, 100, 10, 4));
    EXPECT_EQ(kH100Context, UsedBytes());
  });
}

TEST_F(SimGpuMemoryTest, ManagedMemoryIsHostAccessibleAndCharged) {
  RunInChild("1xH100-80GB", [] {
    InitAndUsePrimary();
    abi::CUdeviceptr pointer = 0;
    ASSERT_CU(cuMemAllocManaged(&pointer, 4 * kMiB, 1));
    EXPECT_EQ(kH100Context + 4 * kMiB, UsedBytes());
    std::memset(reinterpret_cast<void*>(pointer), 0x5a, 4 * kMiB);
    EXPECT_CU(cuMemFree_v2(pointer));
    EXPECT_EQ(kH100Context, UsedBytes());
    EXPECT_EQ(abi::CUDA_ERROR_INVALID_VALUE, cuMemAllocManaged(&pointer, 1024, 4));
    EXPECT_EQ(abi::CUDA_ERROR_INVALID_VALUE, cuMemAllocManaged(&pointer, 0, 1));
  });
}

TEST_F(SimGpuMemoryTest, LegacyEntryPointsUse32BitPointers) {
  RunInChild("1xH100-80GB", [] {
    InitAndUsePrimary();
    abi::CUdeviceptr_v1 pointer = 0;
    ASSERT_CU(cuMemAlloc(&pointer, 64 * kMiB));
    EXPECT_NE(0u, pointer);
    EXPECT_EQ(kH100Context + 64 * kMiB, UsedBytes());
    abi::CUdeviceptr_v1 second = 0;
    ASSERT_CU(cuMemAlloc(&second, 1024));
    EXPECT_NE(pointer, second);
    unsigned int free = 0;
    unsigned int total = 0;
    EXPECT_CU(cuMemGetInfo(&free, &total));
    EXPECT_EQ(UINT_MAX, total);  // 80 GB does not fit 32 bits
    EXPECT_CU(cuMemFree(pointer));
    EXPECT_CU(cuMemFree(second));
    EXPECT_EQ(abi::CUDA_ERROR_INVALID_VALUE, cuMemFree(second));
    EXPECT_EQ(kH100Context, UsedBytes());
    // Beyond what 32-bit addresses can reach.
    EXPECT_EQ(abi::CUDA_ERROR_OUT_OF_MEMORY, cuMemAlloc(&pointer, 4000u * 1024 * 1024));
  });
}

// The other pre-3.2 entry points allocate what their _v2 forms do, with 32-bit pointers, pitches
// and extents: a context, pitched memory, arrays; cuDeviceTotalMem clamps as cuMemGetInfo does.
TEST_F(SimGpuMemoryTest, LegacyEntryPointsAllocateLikeTheirV2Forms) {
  RunInChild("1xH100-80GB", [] {
    InitAndUsePrimary();
    abi::CUdeviceptr_v1 pointer = 0;
    unsigned int pitch = 0;
    ASSERT_CU(cuMemAllocPitch(&pointer, &pitch, 1000, 1024, 4));
    EXPECT_EQ(1024u, pitch);
    EXPECT_NE(0u, pointer);
    EXPECT_EQ(kH100Context + kMiB, UsedBytes());
    EXPECT_CU(cuMemFree(pointer));
    EXPECT_EQ(abi::CUDA_ERROR_INVALID_VALUE, cuMemAllocPitch(&pointer, &pitch, 1000, 1024, 3));
    EXPECT_EQ(abi::CUDA_ERROR_INVALID_VALUE, cuMemAllocPitch(&pointer, nullptr, 1000, 1024, 4));

    const abi::CUDA_ARRAY_DESCRIPTOR_v1 flat{1024, 256, abi::CU_AD_FORMAT_FLOAT, 1};
    abi::CUarray array = nullptr;
    ASSERT_CU(cuArrayCreate(&array, &flat));
    EXPECT_EQ(kH100Context + kMiB, UsedBytes());
    EXPECT_CU(cuArrayDestroy(array));
    const abi::CUDA_ARRAY3D_DESCRIPTOR_v1 cube{64, 64, 64, abi::CU_AD_FORMAT_UNSIGNED_INT8, 4, 0};
    ASSERT_CU(cuArray3DCreate(&array, &cube));
    EXPECT_EQ(kH100Context + kMiB, UsedBytes());
    EXPECT_CU(cuArrayDestroy(array));
    EXPECT_EQ(abi::CUDA_ERROR_INVALID_VALUE, cuArrayCreate(&array, nullptr));
    EXPECT_EQ(kH100Context, UsedBytes());

    abi::CUcontext created = nullptr;
    ASSERT_CU(cuCtxCreate(&created, 0, 0));
    EXPECT_EQ(2 * kH100Context, UsedBytes());
    EXPECT_CU(cuCtxDestroy_v2(created));

    unsigned int total = 0;
    EXPECT_CU(cuDeviceTotalMem(&total, 0));
    EXPECT_EQ(UINT_MAX, total);  // 80 GB does not fit 32 bits
    EXPECT_EQ(abi::CUDA_ERROR_INVALID_DEVICE, cuDeviceTotalMem(&total, 1));
    EXPECT_EQ(abi::CUDA_ERROR_INVALID_VALUE, cuDeviceTotalMem(nullptr, 0));
  });
}

TEST_F(SimGpuMemoryTest, StreamOrderedAllocationsAndPools) {
  RunInChild("2xA100-40GB", [] {
    InitAndUsePrimary();
    abi::CUdeviceptr pointer = 0;
    ASSERT_CU(cuMemAllocAsync(&pointer, 8 * kMiB, nullptr));
    const std::uint64_t context = gpu::FindModel("A100-40GB")->context_bytes;
    EXPECT_EQ(context + 8 * kMiB, UsedBytes());
    EXPECT_CU(cuMemFreeAsync(pointer, nullptr));  // released at the call
    EXPECT_EQ(context, UsedBytes());
    ASSERT_CU(cuMemAllocAsync_ptsz(&pointer, kMiB, nullptr));
    EXPECT_CU(cuMemFreeAsync_ptsz(pointer, nullptr));

    abi::CUmemoryPool default_pool = nullptr;
    abi::CUmemoryPool current_pool = nullptr;
    EXPECT_CU(cuDeviceGetDefaultMemPool(&default_pool, 0));
    EXPECT_CU(cuDeviceGetMemPool(&current_pool, 0));
    EXPECT_EQ(default_pool, current_pool);
    EXPECT_EQ(abi::CUDA_ERROR_INVALID_VALUE, cuMemPoolDestroy(default_pool));

    abi::CUmemPoolProps props{};
    props.allocType = abi::CU_MEM_ALLOCATION_TYPE_PINNED;
    props.location = {abi::CU_MEM_LOCATION_TYPE_DEVICE, 0};
    abi::CUmemoryPool device_pool = nullptr;
    ASSERT_CU(cuMemPoolCreate(&device_pool, &props));
    ASSERT_CU(cuMemAllocFromPoolAsync(&pointer, 16 * kMiB, device_pool, nullptr));
    EXPECT_EQ(context + 16 * kMiB, UsedBytes());
    EXPECT_CU(cuMemFree_v2(pointer));  // cuMemFree accepts stream-ordered memory too

    props.location = {abi::CU_MEM_LOCATION_TYPE_HOST, 0};
    abi::CUmemoryPool host_pool = nullptr;
    ASSERT_CU(cuMemPoolCreate(&host_pool, &props));
    ASSERT_CU(cuMemAllocFromPoolAsync_ptsz(&pointer, 16 * kMiB, host_pool, nullptr));
    EXPECT_EQ(context, UsedBytes());
    std::memset(reinterpret_cast<void*>(pointer), 1, 16 * kMiB);
    EXPECT_CU(cuMemFreeAsync(pointer, nullptr));
    EXPECT_CU(cuMemPoolDestroy(host_pool));
    EXPECT_CU(cuMemPoolDestroy(device_pool));
    EXPECT_EQ(abi::CUDA_ERROR_INVALID_VALUE, cuMemPoolDestroy(device_pool));
    EXPECT_EQ(abi::CUDA_ERROR_INVALID_VALUE,
              cuMemAllocFromPoolAsync(&pointer, kMiB, device_pool, nullptr));

    props.location = {abi::CU_MEM_LOCATION_TYPE_DEVICE, 5};
    EXPECT_EQ(abi::CUDA_ERROR_INVALID_VALUE, cuMemPoolCreate(&device_pool, &props));
    EXPECT_EQ(abi::CUDA_ERROR_INVALID_VALUE, cuMemAllocAsync(&pointer, 0, nullptr));
    EXPECT_EQ(abi::CUDA_ERROR_INVALID_HANDLE,
              cuMemAllocAsync(&pointer, kMiB, reinterpret_cast<abi::CUstream>(&props)));
  });
}

TEST_F(SimGpuMemoryTest, PhysicalAllocationsChargeOnlyDeviceLocations) {
  RunInChild("1xH200-141GB", [] {
    ASSERT_CU(cuInit(0));  // cuMemCreate needs no context
    abi::CUmemAllocationProp prop{};
    prop.type = abi::CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location = {abi::CU_MEM_LOCATION_TYPE_DEVICE, 0};
    abi::CUmemGenericAllocationHandle device_memory = 0;
    ASSERT_CU(cuMemCreate(&device_memory, 64 * kMiB, &prop, 0));
    EXPECT_EQ(abi::CUDA_ERROR_INVALID_VALUE, cuMemCreate(&device_memory, kMiB, &prop, 0));

    abi::CUmemGenericAllocationHandle host_memory = 0;
    for (auto type : {abi::CU_MEM_LOCATION_TYPE_HOST, abi::CU_MEM_LOCATION_TYPE_HOST_NUMA,
                      abi::CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT}) {
      prop.location = {type, 0};
      ASSERT_CU(cuMemCreate(&host_memory, 64 * kMiB, &prop, 0));
      EXPECT_CU(cuMemRelease(host_memory));
    }
    prop.location = {abi::CU_MEM_LOCATION_TYPE_DEVICE, 1};
    EXPECT_EQ(abi::CUDA_ERROR_INVALID_DEVICE, cuMemCreate(&host_memory, 2 * kMiB, &prop, 0));

    InitAndUsePrimary();
    const std::uint64_t context = gpu::FindModel("H200-141GB")->context_bytes;
    EXPECT_EQ(context + 64 * kMiB, UsedBytes());
    EXPECT_CU(cuMemRelease(device_memory));
    EXPECT_EQ(context, UsedBytes());
    EXPECT_EQ(abi::CUDA_ERROR_INVALID_VALUE, cuMemRelease(device_memory));
  });
}

TEST_F(SimGpuMemoryTest, ArraysChargeTheirTexels) {
  RunInChild("1xH100-80GB", [] {
    InitAndUsePrimary();
    abi::CUDA_ARRAY_DESCRIPTOR flat{100, 50, abi::CU_AD_FORMAT_FLOAT, 4};
    abi::CUarray array2d = nullptr;
    ASSERT_CU(cuArrayCreate_v2(&array2d, &flat));
    EXPECT_EQ(kH100Context + 100 * 50 * 16, UsedBytes());

    abi::CUDA_ARRAY_DESCRIPTOR line{64, 0, abi::CU_AD_FORMAT_UNSIGNED_INT8, 1};
    abi::CUarray array1d = nullptr;
    ASSERT_CU(cuArrayCreate_v2(&array1d, &line));
    EXPECT_EQ(kH100Context + 100 * 50 * 16 + 64, UsedBytes());

    abi::CUDA_ARRAY3D_DESCRIPTOR cube{8, 8, 8, abi::CU_AD_FORMAT_HALF, 2, 0};
    abi::CUarray array3d = nullptr;
    ASSERT_CU(cuArray3DCreate_v2(&array3d, &cube));
    EXPECT_EQ(kH100Context + 100 * 50 * 16 + 64 + 8 * 8 * 8 * 4, UsedBytes());
    EXPECT_CU(cuArrayDestroy(array2d));
    EXPECT_CU(cuArrayDestroy(array1d));
    EXPECT_CU(cuArrayDestroy(array3d));
    EXPECT_EQ(abi::CUDA_ERROR_INVALID_HANDLE, cuArrayDestroy(array3d));
    EXPECT_EQ(kH100Context, UsedBytes());

    // Levels of 16x16, 8x8 and 4x4 floats.
    abi::CUDA_ARRAY3D_DESCRIPTOR square{16, 16, 0, abi::CU_AD_FORMAT_FLOAT, 1, 0};
    abi::CUmipmappedArray mipmapped = nullptr;
    ASSERT_CU(cuMipmappedArrayCreate(&mipmapped, &square, 3));
    EXPECT_EQ(kH100Context + 1024 + 256 + 64, UsedBytes());
    EXPECT_EQ(abi::CUDA_ERROR_INVALID_HANDLE,
              cuArrayDestroy(reinterpret_cast<abi::CUarray>(mipmapped)));
    EXPECT_CU(cuMipmappedArrayDestroy(mipmapped));
    EXPECT_EQ(kH100Context, UsedBytes());
    EXPECT_EQ(abi::CUDA_ERROR_INVALID_VALUE, cuMipmappedArrayCreate(&mipmapped, &square, 6));
    EXPECT_EQ(abi::CUDA_ERROR_INVALID_VALUE, cuMipmappedArrayCreate(&mipmapped, &square, 0));

    abi::CUDA_ARRAY_DESCRIPTOR bad{16, 16, abi::CU_AD_FORMAT_FLOAT, 3};
    EXPECT_EQ(abi::CUDA_ERROR_INVALID_VALUE, cuArrayCreate_v2(&array2d, &bad));
    bad = {0, 16, abi::CU_AD_FORMAT_FLOAT, 1};
    EXPECT_EQ(abi::CUDA_ERROR_INVALID_VALUE, cuArrayCreate_v2(&array2d, &bad));
    EXPECT_EQ(abi::CUDA_ERROR_INVALID_VALUE, cuArrayCreate_v2(&array2d, nullptr));
  });
}

TEST_F(SimGpuMemoryTest, ConcurrentAllocationsBalance) {
  RunInChild("1xL4", [] {
    InitAndUsePrimary();
    const std::uint64_t before = UsedBytes();
    abi::CUcontext context = nullptr;
    ASSERT_CU(cuCtxGetCurrent(&context));
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t) {
      threads.emplace_back([context] {
        ASSERT_CU(cuCtxSetCurrent(context));
        std::vector<abi::CUdeviceptr> pointers(64);
        for (int round = 0; round < 50; ++round) {
          for (auto& pointer : pointers) ASSERT_CU(cuMemAlloc_v2(&pointer, 4096 + round));
          for (auto pointer : pointers) ASSERT_CU(cuMemFree_v2(pointer));
        }
      });
    }
    for (auto& thread : threads) thread.join();
    EXPECT_EQ(before, UsedBytes());
  });
}

}  // namespace
}  // namespace gpufrac::simgpu::testing
