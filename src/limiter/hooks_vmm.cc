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
  // The mapping's reference is taken before the driver maps, so that a release racing with this
  // map cannot drop the charge of memory about to be mapped. Handles we never charged (host
  // memory, unlimited GPUs) are not in the table and need no bookkeeping.
  bool counted = g_rt.handles.AddReferences(handle, 1) > 0;
  CUresult r = real(ptr, size, offset, handle, flags);
  if (!counted) return r;
  if (r == CUDA_SUCCESS) {
    g_rt.mappings.Insert(ptr, ChargeRecord{size, 0, handle});
  } else {
    DropReference(handle);
  }
  return r;
}

extern "C" CUresult cuMemUnmap(CUdeviceptr ptr, size_t size) {
  auto real = Real_cuMemUnmap();
  if (!Active()) return Bypass(real, ptr, size);
  // The range may cover several mappings, each holding a reference to its handle. Their records
  // are taken before the driver unmaps (so that a new mapping at the same address cannot be
  // confused with them) and given back if it refuses. Mappings start on the allocation
  // granularity (2 MiB on every NVIDIA GPU so far): gaps are crossed in such steps.
  constexpr CUdeviceptr kGranularity = CUdeviceptr{2} << 20;
  constexpr int kBatch = 256;
  CUdeviceptr starts[kBatch];
  ChargeRecord ranges[kBatch];
  int count = 0;
  CUdeviceptr at = ptr;
  while (at < ptr + size && count < kBatch) {
    if (g_rt.mappings.Take(at, &ranges[count])) {
      starts[count] = at;
      at += ranges[count++].bytes;
    } else {
      at += kGranularity;
    }
  }
  CUresult r = real(ptr, size);
  for (int i = 0; i < count; ++i) {
    if (r == CUDA_SUCCESS) {
      DropReference(ranges[i].owner);
    } else {
      g_rt.mappings.Insert(starts[i], ranges[i]);
    }
  }
  // More mappings than one batch holds: the rest are looked up after the unmap.
  for (; r == CUDA_SUCCESS && at < ptr + size; at += kGranularity) {
    ChargeRecord mapping;
    if (g_rt.mappings.Take(at, &mapping)) DropReference(mapping.owner);
  }
  return r;
}
