// Simulated driver: the virtual memory management API. Reservations, mappings, access rights and
// handle retention, and above all the lifetime NVIDIA documents: a cuMemCreate allocation's
// device memory is returned only when every handle reference is released and nothing maps it.
#include <sys/wait.h>

#include "gpu/catalogue.h"
#include "simgpu_test_util.h"

namespace gpufrac::simgpu::testing {
namespace {

constexpr std::uint64_t kGranularity = 2 * kMiB;
const std::uint64_t kH100Context = gpu::FindModel("H100-80GB")->context_bytes;

abi::CUmemAllocationProp DeviceProp(int ordinal = 0) {
  abi::CUmemAllocationProp prop{};
  prop.type = abi::CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location = {abi::CU_MEM_LOCATION_TYPE_DEVICE, ordinal};
  return prop;
}

abi::CUmemGenericAllocationHandle Create(std::uint64_t bytes, int ordinal = 0) {
  const abi::CUmemAllocationProp prop = DeviceProp(ordinal);
  abi::CUmemGenericAllocationHandle handle = 0;
  EXPECT_CU(cuMemCreate(&handle, bytes, &prop, 0));
  return handle;
}

abi::CUdeviceptr Reserve(std::uint64_t bytes, std::uint64_t alignment = 0) {
  abi::CUdeviceptr base = 0;
  EXPECT_CU(cuMemAddressReserve(&base, bytes, alignment, 0, 0));
  return base;
}

std::uint64_t NvmlUsedBytes() {
  EXPECT_EQ(abi::NVML_SUCCESS, nvmlInit_v2());
  abi::nvmlDevice_t device = nullptr;
  EXPECT_EQ(abi::NVML_SUCCESS, nvmlDeviceGetHandleByIndex_v2(0, &device));
  abi::nvmlMemory_t memory{};
  EXPECT_EQ(abi::NVML_SUCCESS, nvmlDeviceGetMemoryInfo(device, &memory));
  EXPECT_EQ(abi::NVML_SUCCESS, nvmlShutdown());
  return memory.used;
}

using SimGpuVmmTest = SimGpuTest;

TEST_F(SimGpuVmmTest, CallsBeforeInitFail) {
  RunInChild("1xH100-80GB", [] {
    const abi::CUmemAllocationProp prop = DeviceProp();
    size_t granularity = 0;
    abi::CUdeviceptr base = 0;
    abi::CUmemGenericAllocationHandle handle = 0;
    const abi::CUmemAccessDesc access{{abi::CU_MEM_LOCATION_TYPE_DEVICE, 0},
                                      abi::CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    const abi::CUresult kNotInitialized = abi::CUDA_ERROR_NOT_INITIALIZED;
    EXPECT_EQ(kNotInitialized, cuMemGetAllocationGranularity(
                                   &granularity, &prop, abi::CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    EXPECT_EQ(kNotInitialized, cuMemAddressReserve(&base, kGranularity, 0, 0, 0));
    EXPECT_EQ(kNotInitialized, cuMemAddressFree(0x200000, kGranularity));
    EXPECT_EQ(kNotInitialized, cuMemMap(0x200000, kGranularity, 0, 1, 0));
    EXPECT_EQ(kNotInitialized, cuMemUnmap(0x200000, kGranularity));
    EXPECT_EQ(kNotInitialized, cuMemSetAccess(0x200000, kGranularity, &access, 1));
    EXPECT_EQ(kNotInitialized,
              cuMemRetainAllocationHandle(&handle, reinterpret_cast<void*>(0x200000)));
  });
}

TEST_F(SimGpuVmmTest, GranularityIsTwoMiB) {
  RunInChild("1xH100-80GB", [] {
    ASSERT_CU(cuInit(0));  // no context needed
    abi::CUmemAllocationProp prop = DeviceProp();
    for (auto option :
         {abi::CU_MEM_ALLOC_GRANULARITY_MINIMUM, abi::CU_MEM_ALLOC_GRANULARITY_RECOMMENDED}) {
      size_t granularity = 0;
      ASSERT_CU(cuMemGetAllocationGranularity(&granularity, &prop, option));
      EXPECT_EQ(kGranularity, granularity);
    }
    size_t granularity = 0;
    EXPECT_EQ(abi::CUDA_ERROR_INVALID_VALUE,
              cuMemGetAllocationGranularity(nullptr, &prop, abi::CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    EXPECT_EQ(abi::CUDA_ERROR_INVALID_VALUE,
              cuMemGetAllocationGranularity(&granularity, nullptr,
                                            abi::CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    EXPECT_EQ(abi::CUDA_ERROR_INVALID_VALUE,
              cuMemGetAllocationGranularity(
                  &granularity, &prop, static_cast<abi::CUmemAllocationGranularity_flags>(0xff)));

    // Sizes must be multiples of it, wherever the memory lives.
    abi::CUmemGenericAllocationHandle handle = 0;
    EXPECT_EQ(abi::CUDA_ERROR_INVALID_VALUE, cuMemCreate(&handle, 3 * kMiB, &prop, 0));
    EXPECT_EQ(abi::CUDA_ERROR_INVALID_VALUE, cuMemCreate(&handle, kGranularity + 4096, &prop, 0));
    prop.location = {abi::CU_MEM_LOCATION_TYPE_HOST, 0};
    EXPECT_EQ(abi::CUDA_ERROR_INVALID_VALUE, cuMemCreate(&handle, kMiB, &prop, 0));
    ASSERT_CU(cuMemCreate(&handle, kGranularity, &prop, 0));
    EXPECT_CU(cuMemRelease(handle));
  });
}

TEST_F(SimGpuVmmTest, ReserveMapUnmapFreeRoundTrip) {
  RunInChild("1xH100-80GB", [] {
    InitAndUsePrimary();
    const abi::CUdeviceptr base = Reserve(8 * kMiB);
    ASSERT_NE(0u, base);
    EXPECT_EQ(0u, base % kGranularity);
    EXPECT_EQ(kH100Context, UsedBytes()) << "a reservation is address space, not memory";
    const abi::CUdeviceptr aligned = Reserve(4 * kMiB, kGiB);
    EXPECT_EQ(0u, aligned % kGiB);

    // Neither collides with ordinary allocations.
    abi::CUdeviceptr plain = 0;
    ASSERT_CU(cuMemAlloc_v2(&plain, 16 * kMiB));
    EXPECT_TRUE(plain + 16 * kMiB <= base || plain >= base + 8 * kMiB);
    EXPECT_TRUE(plain + 16 * kMiB <= aligned || plain >= aligned + 4 * kMiB);
    EXPECT_CU(cuMemFree_v2(plain));

    const abi::CUmemGenericAllocationHandle handle = Create(4 * kMiB);
    EXPECT_EQ(kH100Context + 4 * kMiB, UsedBytes());
    ASSERT_CU(cuMemMap(base + 2 * kMiB, 4 * kMiB, 0, handle, 0));
    const abi::CUmemAccessDesc access{{abi::CU_MEM_LOCATION_TYPE_DEVICE, 0},
                                      abi::CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    EXPECT_CU(cuMemSetAccess(base + 2 * kMiB, 4 * kMiB, &access, 1));
    EXPECT_EQ(kH100Context + 4 * kMiB, UsedBytes()) << "mapping charges nothing more";

    // The address range of a mapped address is its mapping; reserved-only addresses have none.
    abi::CUdeviceptr range_base = 0;
    size_t range_size = 0;
    ASSERT_CU(cuMemGetAddressRange_v2(&range_base, &range_size, base + 3 * kMiB));
    EXPECT_EQ(base + 2 * kMiB, range_base);
    EXPECT_EQ(4 * kMiB, range_size);
    EXPECT_EQ(abi::CUDA_ERROR_NOT_FOUND, cuMemGetAddressRange_v2(&range_base, &range_size, base));
    // cuMemFree does not free reservations (nor what is mapped in them).
    EXPECT_EQ(abi::CUDA_ERROR_INVALID_VALUE, cuMemFree_v2(base));
    EXPECT_EQ(abi::CUDA_ERROR_INVALID_VALUE, cuMemFree_v2(base + 2 * kMiB));

    ASSERT_CU(cuMemUnmap(base + 2 * kMiB, 4 * kMiB));
    EXPECT_EQ(kH100Context + 4 * kMiB, UsedBytes()) << "the handle still holds the memory";
    // Unmapped, the range is a reservation again and can take the same memory elsewhere.
    ASSERT_CU(cuMemMap(base, 4 * kMiB, 0, handle, 0));
    ASSERT_CU(cuMemUnmap(base, 4 * kMiB));
    ASSERT_CU(cuMemRelease(handle));
    EXPECT_EQ(kH100Context, UsedBytes());

    EXPECT_CU(cuMemAddressFree(base, 8 * kMiB));
    EXPECT_CU(cuMemAddressFree(aligned, 4 * kMiB));
    EXPECT_EQ(abi::CUDA_ERROR_INVALID_VALUE, cuMemAddressFree(base, 8 * kMiB));
  });
}

TEST_F(SimGpuVmmTest, ReserveTakesAFreeHintAndIgnoresAnOccupiedOne) {
  RunInChild("1xH100-80GB", [] {
    ASSERT_CU(cuInit(0));
    const abi::CUdeviceptr first = Reserve(4 * kMiB);
    ASSERT_CU(cuMemAddressFree(first, 4 * kMiB));
    abi::CUdeviceptr again = 0;
    ASSERT_CU(cuMemAddressReserve(&again, 4 * kMiB, 0, first, 0));
    EXPECT_EQ(first, again);
    abi::CUdeviceptr other = 0;
    ASSERT_CU(cuMemAddressReserve(&other, 4 * kMiB, 0, first, 0));
    EXPECT_NE(first, other);
    EXPECT_TRUE(other + 4 * kMiB <= first || other >= first + 4 * kMiB);
    EXPECT_CU(cuMemAddressFree(again, 4 * kMiB));
    EXPECT_CU(cuMemAddressFree(other, 4 * kMiB));
  });
}

// The point of NVIDIA's documented lifetime: cuMemRelease of a mapped allocation keeps its
// memory, in cuMemGetInfo and in NVML, until the last mapping goes.
TEST_F(SimGpuVmmTest, ReleaseWhileMappedKeepsTheMemoryUntilUnmap) {
  RunInChild("1xH100-80GB", [] {
    InitAndUsePrimary();
    const abi::CUdeviceptr first = Reserve(64 * kMiB);
    const abi::CUdeviceptr second = Reserve(64 * kMiB);
    const abi::CUmemGenericAllocationHandle handle = Create(64 * kMiB);
    ASSERT_CU(cuMemMap(first, 64 * kMiB, 0, handle, 0));
    ASSERT_CU(cuMemMap(second, 64 * kMiB, 0, handle, 0));
    ASSERT_CU(cuMemRelease(handle));
    EXPECT_EQ(kH100Context + 64 * kMiB, UsedBytes());
    EXPECT_EQ(kH100Context + 64 * kMiB, NvmlUsedBytes());

    // The handle itself is gone: it can be neither released again nor mapped anew.
    EXPECT_EQ(abi::CUDA_ERROR_INVALID_VALUE, cuMemRelease(handle));
    const abi::CUdeviceptr third = Reserve(64 * kMiB);
    EXPECT_EQ(abi::CUDA_ERROR_INVALID_VALUE, cuMemMap(third, 64 * kMiB, 0, handle, 0));

    ASSERT_CU(cuMemUnmap(first, 64 * kMiB));
    EXPECT_EQ(kH100Context + 64 * kMiB, UsedBytes()) << "still mapped at `second`";
    ASSERT_CU(cuMemUnmap(second, 64 * kMiB));
    EXPECT_EQ(kH100Context, UsedBytes());
    EXPECT_EQ(kH100Context, NvmlUsedBytes());

    for (abi::CUdeviceptr base : {first, second, third}) {
      EXPECT_CU(cuMemAddressFree(base, 64 * kMiB));
    }
  });
}

TEST_F(SimGpuVmmTest, RetainedHandlesNeedTheirOwnRelease) {
  RunInChild("1xH100-80GB", [] {
    InitAndUsePrimary();
    const abi::CUdeviceptr base = Reserve(32 * kMiB);
    const abi::CUmemGenericAllocationHandle handle = Create(32 * kMiB);
    ASSERT_CU(cuMemMap(base, 32 * kMiB, 0, handle, 0));

    // Any address inside the mapping finds the handle the memory was mapped with.
    abi::CUmemGenericAllocationHandle retained = 0;
    ASSERT_CU(
        cuMemRetainAllocationHandle(&retained, reinterpret_cast<void*>(base + 17 * kMiB + 5)));
    EXPECT_EQ(handle, retained);
    ASSERT_CU(cuMemRelease(handle));
    ASSERT_CU(cuMemUnmap(base, 32 * kMiB));
    EXPECT_EQ(kH100Context + 32 * kMiB, UsedBytes()) << "the retained reference holds it";
    ASSERT_CU(cuMemRelease(retained));
    EXPECT_EQ(kH100Context, UsedBytes());
    EXPECT_EQ(abi::CUDA_ERROR_INVALID_VALUE, cuMemRelease(retained));

    // Retaining revives a handle released while mapped (how NCCL frees what it mapped).
    const abi::CUmemGenericAllocationHandle again = Create(32 * kMiB);
    ASSERT_CU(cuMemMap(base, 32 * kMiB, 0, again, 0));
    ASSERT_CU(cuMemRelease(again));
    ASSERT_CU(cuMemRetainAllocationHandle(&retained, reinterpret_cast<void*>(base)));
    EXPECT_EQ(again, retained);
    ASSERT_CU(cuMemRelease(retained));
    EXPECT_EQ(kH100Context + 32 * kMiB, UsedBytes()) << "still mapped";
    size_t size = 0;
    ASSERT_CU(cuMemGetAddressRange_v2(nullptr, &size, base));
    ASSERT_CU(cuMemUnmap(base, size));
    EXPECT_EQ(kH100Context, UsedBytes());

    // Each retain is one more reference.
    const abi::CUmemGenericAllocationHandle third = Create(32 * kMiB);
    ASSERT_CU(cuMemMap(base, 32 * kMiB, 0, third, 0));
    ASSERT_CU(cuMemRetainAllocationHandle(&retained, reinterpret_cast<void*>(base)));
    ASSERT_CU(cuMemRetainAllocationHandle(&retained, reinterpret_cast<void*>(base)));
    ASSERT_CU(cuMemUnmap(base, 32 * kMiB));
    for (int i = 0; i < 3; ++i) {
      EXPECT_EQ(kH100Context + 32 * kMiB, UsedBytes()) << i << " releases";
      ASSERT_CU(cuMemRelease(third));
    }
    EXPECT_EQ(kH100Context, UsedBytes());
    EXPECT_CU(cuMemAddressFree(base, 32 * kMiB));
  });
}

TEST_F(SimGpuVmmTest, UnmapMayCoverSeveralWholeMappings) {
  RunInChild("1xH100-80GB", [] {
    InitAndUsePrimary();
    const abi::CUdeviceptr base = Reserve(8 * kMiB);
    const abi::CUmemGenericAllocationHandle low = Create(2 * kMiB);
    const abi::CUmemGenericAllocationHandle high = Create(4 * kMiB);
    ASSERT_CU(cuMemMap(base, 2 * kMiB, 0, low, 0));
    ASSERT_CU(cuMemMap(base + 2 * kMiB, 4 * kMiB, 0, high, 0));
    ASSERT_CU(cuMemRelease(low));
    ASSERT_CU(cuMemRelease(high));
    const abi::CUmemAccessDesc access{{abi::CU_MEM_LOCATION_TYPE_DEVICE, 0},
                                      abi::CU_MEM_ACCESS_FLAGS_PROT_READ};
    EXPECT_CU(cuMemSetAccess(base, 6 * kMiB, &access, 1));
    // Not past the mapped part, not half of a mapping.
    EXPECT_EQ(abi::CUDA_ERROR_INVALID_VALUE, cuMemUnmap(base, 8 * kMiB));
    EXPECT_EQ(abi::CUDA_ERROR_INVALID_VALUE, cuMemUnmap(base, 4 * kMiB));
    EXPECT_EQ(kH100Context + 6 * kMiB, UsedBytes());
    ASSERT_CU(cuMemUnmap(base, 6 * kMiB));
    EXPECT_EQ(kH100Context, UsedBytes());
    EXPECT_CU(cuMemAddressFree(base, 8 * kMiB));
  });
}

TEST_F(SimGpuVmmTest, MappingErrors) {
  RunInChild("1xH100-80GB", [] {
    InitAndUsePrimary();
    const abi::CUdeviceptr base = Reserve(8 * kMiB);
    const abi::CUmemGenericAllocationHandle handle = Create(4 * kMiB);
    const abi::CUmemGenericAllocationHandle other = Create(4 * kMiB);
    const abi::CUresult kInvalid = abi::CUDA_ERROR_INVALID_VALUE;

    EXPECT_EQ(kInvalid, cuMemMap(0, 4 * kMiB, 0, handle, 0));
    EXPECT_EQ(kInvalid, cuMemMap(base, 0, 0, handle, 0));
    EXPECT_EQ(kInvalid, cuMemMap(base, 4 * kMiB, 0, handle, 1));             // flags
    EXPECT_EQ(kInvalid, cuMemMap(base, 2 * kMiB, 2 * kMiB, handle, 0));      // offset
    EXPECT_EQ(kInvalid, cuMemMap(base, 2 * kMiB, 0, handle, 0));             // part of it
    EXPECT_EQ(kInvalid, cuMemMap(base, 4 * kMiB + 4096, 0, handle, 0));      // misaligned
    EXPECT_EQ(kInvalid, cuMemMap(base + 4096, 4 * kMiB, 0, handle, 0));      // misaligned
    EXPECT_EQ(kInvalid, cuMemMap(base + 6 * kMiB, 4 * kMiB, 0, handle, 0));  // sticks out
    EXPECT_EQ(kInvalid, cuMemMap(base, 4 * kMiB, 0, 0xdeadbeef, 0));         // no handle
    abi::CUdeviceptr plain = 0;
    ASSERT_CU(cuMemAlloc_v2(&plain, 8 * kMiB));
    EXPECT_EQ(kInvalid, cuMemMap(plain & ~(kGranularity - 1), 4 * kMiB, 0, handle, 0));
    EXPECT_CU(cuMemFree_v2(plain));

    ASSERT_CU(cuMemMap(base + 2 * kMiB, 4 * kMiB, 0, handle, 0));
    // Double mapping: the same range, or any overlap, even with another handle.
    EXPECT_EQ(kInvalid, cuMemMap(base + 2 * kMiB, 4 * kMiB, 0, handle, 0));
    EXPECT_EQ(kInvalid, cuMemMap(base, 4 * kMiB, 0, other, 0));
    EXPECT_EQ(kInvalid, cuMemMap(base + 4 * kMiB, 4 * kMiB, 0, other, 0));

    // Unmapping must name whole mappings.
    EXPECT_EQ(kInvalid, cuMemUnmap(0, 4 * kMiB));
    EXPECT_EQ(kInvalid, cuMemUnmap(base + 2 * kMiB, 0));
    EXPECT_EQ(kInvalid, cuMemUnmap(base, 2 * kMiB));             // never mapped
    EXPECT_EQ(kInvalid, cuMemUnmap(base + 2 * kMiB, 2 * kMiB));  // half a mapping
    EXPECT_EQ(kInvalid, cuMemUnmap(base + 4 * kMiB, 2 * kMiB));  // the other half
    EXPECT_EQ(kInvalid, cuMemUnmap(base, 6 * kMiB));             // with unmapped space

    // A reservation with something mapped in it cannot be freed, nor freed by another size.
    EXPECT_EQ(kInvalid, cuMemAddressFree(base, 8 * kMiB));
    EXPECT_EQ(kInvalid, cuMemAddressFree(base, 4 * kMiB));
    EXPECT_EQ(kInvalid, cuMemAddressFree(base + 2 * kMiB, 4 * kMiB));
    EXPECT_EQ(kInvalid, cuMemAddressFree(0, 8 * kMiB));

    // Retaining needs a mapped address.
    abi::CUmemGenericAllocationHandle retained = 0;
    EXPECT_EQ(kInvalid, cuMemRetainAllocationHandle(&retained, reinterpret_cast<void*>(base)));
    EXPECT_EQ(kInvalid,
              cuMemRetainAllocationHandle(&retained, reinterpret_cast<void*>(base + 6 * kMiB)));
    EXPECT_EQ(kInvalid, cuMemRetainAllocationHandle(&retained, nullptr));
    EXPECT_EQ(kInvalid,
              cuMemRetainAllocationHandle(nullptr, reinterpret_cast<void*>(base + 2 * kMiB)));

    // Nothing above changed the state: the mapping is still there and unmaps once.
    ASSERT_CU(cuMemUnmap(base + 2 * kMiB, 4 * kMiB));
    EXPECT_EQ(kInvalid, cuMemUnmap(base + 2 * kMiB, 4 * kMiB));
    EXPECT_CU(cuMemAddressFree(base, 8 * kMiB));
    EXPECT_CU(cuMemRelease(handle));
    EXPECT_CU(cuMemRelease(other));
    EXPECT_EQ(kH100Context, UsedBytes());
  });
}

TEST_F(SimGpuVmmTest, ReservationErrors) {
  RunInChild("1xH100-80GB", [] {
    ASSERT_CU(cuInit(0));
    abi::CUdeviceptr base = 0;
    const abi::CUresult kInvalid = abi::CUDA_ERROR_INVALID_VALUE;
    EXPECT_EQ(kInvalid, cuMemAddressReserve(nullptr, kGranularity, 0, 0, 0));
    EXPECT_EQ(kInvalid, cuMemAddressReserve(&base, 0, 0, 0, 0));
    EXPECT_EQ(kInvalid, cuMemAddressReserve(&base, kGranularity - 1, 0, 0, 0));  // not pages
    EXPECT_EQ(kInvalid, cuMemAddressReserve(&base, kGranularity, 3, 0, 0));      // not 2^n
    EXPECT_EQ(kInvalid, cuMemAddressReserve(&base, kGranularity, 0, 0, 1));      // flags
    EXPECT_EQ(kInvalid, cuMemAddressReserve(&base, kGranularity, 0, 0x200001, 0));
    // More address space than the simulated device region holds.
    EXPECT_EQ(abi::CUDA_ERROR_OUT_OF_MEMORY,
              cuMemAddressReserve(&base, std::uint64_t{1} << 62, 0, 0, 0));
    // Small alignments are honoured by the granularity alignment every reservation has.
    ASSERT_CU(cuMemAddressReserve(&base, kGranularity, 2, 0, 0));
    EXPECT_EQ(0u, base % kGranularity);
    EXPECT_CU(cuMemAddressFree(base, kGranularity));
  });
}

TEST_F(SimGpuVmmTest, SetAccessErrors) {
  RunInChild("2xH100-80GB", [] {
    InitAndUsePrimary();
    const abi::CUdeviceptr base = Reserve(8 * kMiB);
    const abi::CUmemGenericAllocationHandle handle = Create(4 * kMiB);
    ASSERT_CU(cuMemMap(base, 4 * kMiB, 0, handle, 0));
    abi::CUmemAccessDesc access{{abi::CU_MEM_LOCATION_TYPE_DEVICE, 0},
                                abi::CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    const abi::CUresult kInvalid = abi::CUDA_ERROR_INVALID_VALUE;
    EXPECT_CU(cuMemSetAccess(base, 4 * kMiB, &access, 1));
    EXPECT_EQ(kInvalid, cuMemSetAccess(0, 4 * kMiB, &access, 1));
    EXPECT_EQ(kInvalid, cuMemSetAccess(base, 0, &access, 1));
    EXPECT_EQ(kInvalid, cuMemSetAccess(base, 4 * kMiB, nullptr, 1));
    EXPECT_EQ(kInvalid, cuMemSetAccess(base, 4 * kMiB, &access, 0));
    EXPECT_EQ(kInvalid, cuMemSetAccess(base, 2 * kMiB, &access, 1));  // part of a mapping
    EXPECT_EQ(kInvalid, cuMemSetAccess(base, 8 * kMiB, &access, 1));  // unmapped tail
    EXPECT_EQ(kInvalid, cuMemSetAccess(base + 4 * kMiB, 4 * kMiB, &access, 1));

    // Both devices may be granted access; an unknown one, a bad flag or the host may not.
    abi::CUmemAccessDesc both[2] = {access, access};
    both[1].location.id = 1;
    EXPECT_CU(cuMemSetAccess(base, 4 * kMiB, both, 2));
    access.location.id = 2;
    EXPECT_EQ(kInvalid, cuMemSetAccess(base, 4 * kMiB, &access, 1));
    access.location.id = 0;
    access.flags = static_cast<abi::CUmemAccess_flags>(0x2);
    EXPECT_EQ(kInvalid, cuMemSetAccess(base, 4 * kMiB, &access, 1));
    access.flags = abi::CU_MEM_ACCESS_FLAGS_PROT_NONE;
    EXPECT_CU(cuMemSetAccess(base, 4 * kMiB, &access, 1));
    access.location = {abi::CU_MEM_LOCATION_TYPE_HOST, 0};
    EXPECT_EQ(kInvalid, cuMemSetAccess(base, 4 * kMiB, &access, 1));
    access.location = {abi::CU_MEM_LOCATION_TYPE_INVALID, 0};
    EXPECT_EQ(kInvalid, cuMemSetAccess(base, 4 * kMiB, &access, 1));

    // Host memory mapped into the device address space may be opened to the host as well.
    abi::CUmemAllocationProp host_prop = DeviceProp();
    host_prop.location = {abi::CU_MEM_LOCATION_TYPE_HOST, 0};
    abi::CUmemGenericAllocationHandle host = 0;
    ASSERT_CU(cuMemCreate(&host, 4 * kMiB, &host_prop, 0));
    ASSERT_CU(cuMemMap(base + 4 * kMiB, 4 * kMiB, 0, host, 0));
    access.location = {abi::CU_MEM_LOCATION_TYPE_HOST, 0};
    access.flags = abi::CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    EXPECT_CU(cuMemSetAccess(base + 4 * kMiB, 4 * kMiB, &access, 1));
    EXPECT_EQ(kInvalid, cuMemSetAccess(base, 8 * kMiB, &access, 1));  // includes device memory

    ASSERT_CU(cuMemUnmap(base, 8 * kMiB));
    EXPECT_CU(cuMemRelease(handle));
    EXPECT_CU(cuMemRelease(host));
    EXPECT_CU(cuMemAddressFree(base, 8 * kMiB));
  });
}

TEST_F(SimGpuVmmTest, MappedMemoryOfAnExitedProcessIsReturned) {
  RunInChild("1xH100-80GB", [] {
    InitAndUsePrimary();
    {
      Helper holder([](Helper& self) {
        ASSERT_CU(cuInit(0));
        abi::CUdeviceptr base = Reserve(64 * kMiB);
        ASSERT_CU(cuMemMap(base, 64 * kMiB, 0, Create(64 * kMiB), 0));
        abi::CUmemGenericAllocationHandle handle = 0;
        ASSERT_CU(cuMemRetainAllocationHandle(&handle, reinterpret_cast<void*>(base)));
        ASSERT_CU(cuMemRelease(handle));
        ASSERT_CU(cuMemRelease(handle));  // released, mapped, never unmapped
        self.Send('R');
        self.Receive();
      });
      ASSERT_EQ('R', holder.Receive());
      EXPECT_EQ(kH100Context + 64 * kMiB, UsedBytes());
      holder.Send('Q');
      const int status = holder.Wait();
      EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    }
    EXPECT_EQ(kH100Context, UsedBytes());
  });
}

TEST_F(SimGpuVmmTest, ProcAddressKnowsTheIntroducingVersions) {
  RunInChild("1xH100-80GB", [] {
    for (const char* name : {"cuMemAddressReserve", "cuMemAddressFree", "cuMemMap", "cuMemUnmap",
                             "cuMemSetAccess", "cuMemGetAllocationGranularity"}) {
      void* function = nullptr;
      abi::CUdriverProcAddressQueryResult status{};
      EXPECT_CU(cuGetProcAddress_v2(name, &function, 10020, 0, &status)) << name;
      EXPECT_NE(nullptr, function) << name;
      EXPECT_EQ(abi::CUDA_ERROR_NOT_FOUND, cuGetProcAddress_v2(name, &function, 10010, 0, &status));
      EXPECT_EQ(abi::CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT, status) << name;
    }
    void* function = nullptr;
    abi::CUdriverProcAddressQueryResult status{};
    EXPECT_EQ(abi::CUDA_ERROR_NOT_FOUND,
              cuGetProcAddress_v2("cuMemRetainAllocationHandle", &function, 10020, 0, &status));
    EXPECT_EQ(abi::CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT, status);
    EXPECT_CU(cuGetProcAddress_v2("cuMemRetainAllocationHandle", &function, 11000, 0, &status));
    EXPECT_NE(nullptr, function);
  });
}

}  // namespace
}  // namespace gpufrac::simgpu::testing
