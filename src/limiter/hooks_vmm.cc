// Virtual memory management (cuMemCreate and friends): physical memory is charged when created,
// and stays charged for as long as the driver keeps it, which is until the handle has been
// released (each retained reference too) and it is mapped nowhere. Releasing a handle while it is
// mapped — the usual pattern — therefore keeps the charge until the last cuMemUnmap.
#include "limiter/hooks.h"

using namespace gpufrac::abi;
using namespace gpufrac::limiter;

namespace {

// One reference to `handle` fewer; with the last one the driver frees the memory.
void DropReference(CUmemGenericAllocationHandle handle) {
  if (g_rt.handles.AddReferences(handle, -1) != 0) return;
  ChargeRecord charge;
  if (g_rt.handles.Take(handle, &charge)) Uncharge(charge.gpu, charge.bytes);
}

}  // namespace

extern "C" CUresult cuMemCreate(CUmemGenericAllocationHandle* handle, size_t bytes,
                                const CUmemAllocationProp* prop, unsigned long long flags) {
  auto real = Real_cuMemCreate();
  if (!Active()) return Bypass(real, handle, bytes, prop, flags);
  // Only device memory counts; host and host-NUMA locations pass through uncharged.
  if (!handle || !prop || bytes == 0 || prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE) {
    return real(handle, bytes, prop, flags);
  }
  int gpu = GpuForOrdinal(prop->location.id);
  if (gpu < 0) return real(handle, bytes, prop, flags);
  if (!Charge(gpu, bytes)) return CUDA_ERROR_OUT_OF_MEMORY;
  CUresult r = real(handle, bytes, prop, flags);
  if (r != CUDA_SUCCESS) {
    Uncharge(gpu, bytes);
    return r;
  }
  // One reference: the handle itself. Physical memory belongs to the process, not a context.
  g_rt.handles.Insert(*handle, ChargeRecord{bytes, gpu, 1});
  return r;
}

extern "C" CUresult cuMemRelease(CUmemGenericAllocationHandle handle) {
  auto real = Real_cuMemRelease();
  if (!Active()) return Bypass(real, handle);
  CUresult r = real(handle);
  if (r == CUDA_SUCCESS) DropReference(handle);
  return r;
}

extern "C" CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle* handle, void* addr) {
  auto real = Real_cuMemRetainAllocationHandle();
  if (!Active()) return Bypass(real, handle, addr);
  CUresult r = real(handle, addr);
  if (r == CUDA_SUCCESS && handle) g_rt.handles.AddReferences(*handle, 1);
  return r;
}

extern "C" CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset,
                             CUmemGenericAllocationHandle handle, unsigned long long flags) {
  auto real = Real_cuMemMap();
  if (!Active()) return Bypass(real, ptr, size, offset, handle, flags);
  CUresult r = real(ptr, size, offset, handle, flags);
  // Mappings of handles we never charged (host memory, unlimited GPUs) need no bookkeeping.
  if (r == CUDA_SUCCESS && g_rt.handles.AddReferences(handle, 1) > 0) {
    g_rt.mappings.Insert(ptr, ChargeRecord{size, 0, handle});
  }
  return r;
}

extern "C" CUresult cuMemUnmap(CUdeviceptr ptr, size_t size) {
  auto real = Real_cuMemUnmap();
  if (!Active()) return Bypass(real, ptr, size);
  // The range may cover several adjacent mappings; each holds a reference to its handle.
  constexpr int kMaxRanges = 64;
  CUdeviceptr starts[kMaxRanges];
  ChargeRecord ranges[kMaxRanges];
  int count = 0;
  for (CUdeviceptr at = ptr; at < ptr + size && count < kMaxRanges;) {
    if (!g_rt.mappings.Take(at, &ranges[count])) break;
    starts[count] = at;
    at += ranges[count++].bytes;
  }
  CUresult r = real(ptr, size);
  for (int i = 0; i < count; ++i) {
    if (r == CUDA_SUCCESS) {
      DropReference(ranges[i].owner);
    } else {
      g_rt.mappings.Insert(starts[i], ranges[i]);
    }
  }
  return r;
}
