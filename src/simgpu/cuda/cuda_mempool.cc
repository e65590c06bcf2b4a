// Driver entry points for the stream-ordered allocator: memory pools (device pools charge device
// memory, host pools do not) and asynchronous allocation and free. A free releases its charge
// when called, not when the stream reaches it, and pools keep no memory in reserve.
#include "simgpu/cuda/cuda_exports.h"
#include "simgpu/cuda/driver.h"

namespace {

namespace abi = gpufrac::abi;
namespace simgpu = gpufrac::simgpu;
using abi::CUresult;
using simgpu::Context;
using simgpu::Driver;
using simgpu::MemPool;

MemPool* DefaultPoolLocked(Driver* driver, int ordinal) {
  MemPool*& pool = driver->default_pools[ordinal];
  if (pool == nullptr) {
    pool = new MemPool{
        .location = abi::CU_MEM_LOCATION_TYPE_DEVICE, .ordinal = ordinal, .is_default = true};
    driver->pools.insert(pool);
  }
  return pool;
}

CUresult DevicePool(abi::CUmemoryPool* handle, abi::CUdevice ordinal) {
  Driver* driver;
  if (CUresult result = simgpu::GetDriver(&driver); result != abi::CUDA_SUCCESS) return result;
  if (handle == nullptr) return abi::CUDA_ERROR_INVALID_VALUE;
  if (!driver->ValidOrdinal(ordinal)) return abi::CUDA_ERROR_INVALID_DEVICE;
  std::lock_guard lock(driver->mu);
  *handle = simgpu::ToHandle(DefaultPoolLocked(driver, ordinal));
  return abi::CUDA_SUCCESS;
}

// Allocates from `pool`, or from the current device's pool when it is null.
CUresult AllocateAsync(abi::CUdeviceptr* base, std::size_t bytes, abi::CUmemoryPool pool_handle,
                       abi::CUstream stream, bool per_thread_default) {
  Driver* driver;
  Context* context;
  if (CUresult result = simgpu::GetDriverAndContext(&driver, &context);
      result != abi::CUDA_SUCCESS) {
    return result;
  }
  if (base == nullptr || bytes == 0) return abi::CUDA_ERROR_INVALID_VALUE;
  simgpu::StreamQueue queue;
  if (CUresult result = simgpu::ResolveStream(context, stream, per_thread_default, &queue);
      result != abi::CUDA_SUCCESS) {
    return result;
  }
  std::lock_guard lock(driver->mu);
  MemPool* pool = reinterpret_cast<MemPool*>(pool_handle);
  if (pool == nullptr) {
    pool = DefaultPoolLocked(driver, context->ordinal);
  } else if (driver->pools.count(pool) == 0) {
    return abi::CUDA_ERROR_INVALID_VALUE;
  }
  simgpu::Allocation spec{.size = bytes, .context = context};
  if (pool->location == abi::CU_MEM_LOCATION_TYPE_DEVICE) {
    spec.charged = bytes;
    spec.ordinal = pool->ordinal;
    spec.kind = simgpu::AllocationKind::kStreamOrdered;
  } else {
    spec.kind = simgpu::AllocationKind::kHostPool;
  }
  return driver->AllocateLocked(spec, base);
}

CUresult FreeAsync(abi::CUdeviceptr base, abi::CUstream stream, bool per_thread_default) {
  Driver* driver;
  Context* context;
  if (CUresult result = simgpu::GetDriverAndContext(&driver, &context);
      result != abi::CUDA_SUCCESS) {
    return result;
  }
  simgpu::StreamQueue queue;
  if (CUresult result = simgpu::ResolveStream(context, stream, per_thread_default, &queue);
      result != abi::CUDA_SUCCESS) {
    return result;
  }
  std::lock_guard lock(driver->mu);
  return driver->FreeLocked(base);
}

}  // namespace

extern "C" {

CUresult cuDeviceGetDefaultMemPool(abi::CUmemoryPool* pool, abi::CUdevice ordinal) {
  return DevicePool(pool, ordinal);
}

// cuDeviceSetMemPool is not simulated, so a device's current pool is its default pool.
CUresult cuDeviceGetMemPool(abi::CUmemoryPool* pool, abi::CUdevice ordinal) {
  return DevicePool(pool, ordinal);
}

CUresult cuMemPoolCreate(abi::CUmemoryPool* handle, const abi::CUmemPoolProps* props) {
  Driver* driver;
  if (CUresult result = simgpu::GetDriver(&driver); result != abi::CUDA_SUCCESS) return result;
  if (handle == nullptr || props == nullptr ||
      props->allocType != abi::CU_MEM_ALLOCATION_TYPE_PINNED) {
    return abi::CUDA_ERROR_INVALID_VALUE;
  }
  auto* pool = new MemPool{.location = props->location.type};
  switch (props->location.type) {
    case abi::CU_MEM_LOCATION_TYPE_DEVICE:
      if (!driver->ValidOrdinal(props->location.id)) {
        delete pool;
        return abi::CUDA_ERROR_INVALID_VALUE;
      }
      pool->ordinal = props->location.id;
      break;
    case abi::CU_MEM_LOCATION_TYPE_HOST:
    case abi::CU_MEM_LOCATION_TYPE_HOST_NUMA:
    case abi::CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT:
      break;
    default:
      delete pool;
      return abi::CUDA_ERROR_INVALID_VALUE;
  }
  std::lock_guard lock(driver->mu);
  driver->pools.insert(pool);
  *handle = simgpu::ToHandle(pool);
  return abi::CUDA_SUCCESS;
}

// Allocations still outstanding stay valid until freed (the real driver defers the pool's
// destruction the same way). The pool object is kept so stale handles fail cleanly.
CUresult cuMemPoolDestroy(abi::CUmemoryPool handle) {
  Driver* driver;
  if (CUresult result = simgpu::GetDriver(&driver); result != abi::CUDA_SUCCESS) return result;
  MemPool* pool = reinterpret_cast<MemPool*>(handle);
  std::lock_guard lock(driver->mu);
  if (pool == nullptr || driver->pools.count(pool) == 0 || pool->is_default) {
    return abi::CUDA_ERROR_INVALID_VALUE;
  }
  driver->pools.erase(pool);
  driver->destroyed_pools.push_back(pool);
  pool->magic = 0;
  return abi::CUDA_SUCCESS;
}

CUresult cuMemAllocAsync(abi::CUdeviceptr* base, size_t bytes, abi::CUstream stream) {
  return AllocateAsync(base, bytes, nullptr, stream, /*per_thread_default=*/false);
}

CUresult cuMemAllocAsync_ptsz(abi::CUdeviceptr* base, size_t bytes, abi::CUstream stream) {
  return AllocateAsync(base, bytes, nullptr, stream, /*per_thread_default=*/true);
}

CUresult cuMemAllocFromPoolAsync(abi::CUdeviceptr* base, size_t bytes, abi::CUmemoryPool pool,
                                 abi::CUstream stream) {
  if (pool == nullptr) return abi::CUDA_ERROR_INVALID_VALUE;
  return AllocateAsync(base, bytes, pool, stream, /*per_thread_default=*/false);
}

CUresult cuMemAllocFromPoolAsync_ptsz(abi::CUdeviceptr* base, size_t bytes, abi::CUmemoryPool pool,
                                      abi::CUstream stream) {
  if (pool == nullptr) return abi::CUDA_ERROR_INVALID_VALUE;
  return AllocateAsync(base, bytes, pool, stream, /*per_thread_default=*/true);
}

CUresult cuMemFreeAsync(abi::CUdeviceptr base, abi::CUstream stream) {
  return FreeAsync(base, stream, /*per_thread_default=*/false);
}

CUresult cuMemFreeAsync_ptsz(abi::CUdeviceptr base, abi::CUstream stream) {
  return FreeAsync(base, stream, /*per_thread_default=*/true);
}

}  // extern "C"
